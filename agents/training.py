"""Training runs: optional imitation of CROP, then RL, with validation, checkpoints and resume.

:func:`train` is what ``crop-gym train`` calls. A run writes into its output directory::

    run.json             metadata: command, algorithm, environment, seeds, resolved config,
                         phases (demonstrations, cloning, RL) with timings, throughput, the
                         learning curve's summary, time to reach 0.98 x CROP; rewritten atomically
    config.yml           the resolved hyperparameters
    demos.npz            the teacher's demonstrations (with --bc-demos)
    demos-<i>.npz        those of the i-th ID of bc.also_on
    bc_model.zip         the model right after behaviour cloning (and DAgger)
    checkpoints/         periodic checkpoints (model_<steps>_steps.zip), used by --resume
    best_model.zip       the checkpoint with the best validation ratio to CROP
    final_model.zip      the model at the end of training
    curve.json           validation ratio to CROP versus environment steps
    learning_curve.png   its plot
    tb/                  TensorBoard logs (bc/*, eval/*, and SB3's rollout/* and train/*)

Every checkpoint carries the run's metadata (:mod:`crop_gym.agents.checkpoint`), so
``crop-gym eval --model DIR`` knows the environment, the algorithm and the seed.

Everything the run is told is checked before anything is written (config keys, types and ranges,
the environment ID and arguments, the output directory, the model's construction); a run that fails
or is interrupted afterwards leaves ``run.json`` with ``"status": "failed"`` or ``"interrupted"``.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import yaml

from crop_gym.agents.algorithms import algo_class, policy_class
from crop_gym.agents.checkpoint import load_checkpoint, save_checkpoint
from crop_gym.agents.config import (
    TRAIN_SEED_LIMIT,
    RunConfig,
    check_env_id,
    load_config,
    parse_hyperparams,
)
from crop_gym.agents.envs import is_online_id, make_vec_env, with_split
from crop_gym.agents.imitation_phase import check_also_on, demo_file, imitate
from crop_gym.agents.runstate import (
    GAIN_THRESHOLDS,
    TARGET_RATIO,
    RunState,
    callbacks,
    latest_checkpoint,
    plot_curve,
    time_to_target,
)
from crop_gym.errors import ConfigError
from crop_gym.io import atomic_write_with, check_outputs

__all__ = [
    "GAIN_THRESHOLDS",
    "RUN_FILES",
    "TARGET_RATIO",
    "plan_steps",
    "plot_curve",
    "policy_spec",
    "time_to_target",
    "train",
]

#: Files a run writes directly in its output directory (checked before the run starts).
RUN_FILES = (
    "run.json",
    "config.yml",
    "curve.json",
    "demos.npz",
    "bc_model.zip",
    "best_model.zip",
    "final_model.zip",
    "learning_curve.png",
)


def policy_spec(
    algo: str, policy: str, policy_kwargs: Mapping[str, Any] | None, env: gym.Env[Any, Any]
) -> tuple[Any, dict[str, Any]]:
    """The SB3 policy (class or name) and its kwargs for ``algo`` on ``env``.

    ``CandidateScorer`` maps to the scorer policy of ``algo`` (:func:`crop_gym.agents.algorithms.policy_class`);
    the scorer's observation spec is read from ``env``. ``MultiInputPolicy`` is SB3's default.
    """
    from crop_gym.agents.networks import ObsSpec

    cls = policy_class(algo, policy)
    kw = dict(policy_kwargs or {})
    if policy == "MultiInputPolicy":
        kw.pop("scorer", None)
        return cls, kw
    scorer = dict(kw.pop("scorer", {}) or {})
    scorer["spec"] = ObsSpec.from_env(env).to_dict()
    kw["scorer"] = scorer
    return cls, kw


def plan_steps(model: Any, total: int, *, n_envs: int | None = None) -> int:
    """The step count ``model.learn`` reaches when asked for ``total`` steps in all.

    On-policy algorithms collect whole rollouts of ``n_steps x n_envs`` steps, DQN chunks of
    ``train_freq x n_envs`` steps (``train_freq`` in steps); the count rounds up to a whole number
    of them, counted from the model's current step count.
    """
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    start = int(model.num_timesteps)
    if total <= start:
        return start
    n_envs = int(model.n_envs if n_envs is None else n_envs)
    chunk = None
    if isinstance(model, OnPolicyAlgorithm):
        chunk = int(model.n_steps) * n_envs
    else:
        tf = getattr(model, "train_freq", None)
        unit = getattr(getattr(tf, "unit", None), "value", None)
        if unit == "step":
            chunk = int(tf.frequency) * n_envs
    if not chunk:
        return total
    return start + math.ceil((total - start) / chunk) * chunk


def _also_on_demos(cfg: RunConfig) -> tuple[str, ...]:
    """The demonstration files of ``bc.also_on``'s environments (``demos-1.npz``, ...)."""
    n = len((cfg.run.get("bc") or {}).get("also_on") or ())
    return tuple(demo_file(g) for g in range(1, n + 1))


def _check_out_dir(out: Path, inputs: list[str | Path | None], extra: tuple[str, ...] = ()) -> None:
    """Refuse an --out that is a file, or whose run files would replace an input."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is not a directory")
    anc = out
    while not anc.exists():
        anc = anc.parent
    if not anc.is_dir():
        raise ConfigError(f"--out {out}: {anc} is not a directory")
    import os

    if not os.access(anc, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: {anc} is not writable")
    if out.exists():
        files = {f"--out {out / name}": out / name for name in (*RUN_FILES, *extra)}
        check_outputs(files, inputs=[i for i in inputs if i is not None])


def _build_model(
    cls: Any, pol: Any, venv: Any, seed: int, tb: str, verbose: int, kw: dict[str, Any], src: str
) -> Any:
    try:
        return cls(pol, venv, seed=seed, tensorboard_log=tb, verbose=verbose, **kw)
    except (TypeError, ValueError, AssertionError, KeyError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{src}: the algorithm refused its arguments ({msg})") from None


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


def train(
    *,
    algo: str = "maskable_ppo",
    env_id: str = "crop_gym/Placement-v0",
    steps: int | None = None,
    seed: int = 0,
    out: str | Path,
    bc_demos: int = 0,
    resume: bool = False,
    config: str | Path | None = None,
    policy: str | None = None,
    n_envs: int | None = None,
    vec_env: str | None = None,
    eval_freq: int | None = None,
    eval_episodes: int | None = None,
    dagger: int | None = None,
    hyperparams: list[str] | None = None,
    progress: bool = True,
    verbose: int = 0,
    argv: list[str] | None = None,
    trust_checkpoint: bool = False,
    dry_run: bool = False,
    log: Callable[[str], None] | None = _stderr,
) -> dict[str, Any]:
    """Train an agent (optionally cloning CROP first) and return the run's metadata.

    Args:
        algo: ``maskable_ppo`` (default), ``ppo`` or ``dqn``.
        env_id: Environment ID.
        steps: RL environment steps (default: the config's ``n_timesteps``; 0 = clone only).
            On-policy algorithms run whole rollouts, so the count rounds up to a multiple of
            ``n_steps x n_envs`` (see :func:`plan_steps`); ``log`` is told when it does, and
            run.json records both (``steps_requested``, ``steps``).
        seed: Run seed (< 10^6): model initialisation, training environments (``seed + i``),
            demonstration and DAgger seeds.
        out: Output directory.
        bc_demos: Expert episodes for behaviour cloning before RL (0 = from scratch).
        resume: Continue from the newest checkpoint in ``out`` (or from the cloned model).
        config: A YAML file to read instead of ``agents/configs/<algo>.yml``.
        policy: ``CandidateScorer`` or ``MultiInputPolicy`` (default: the config's).
        n_envs: Parallel environments (default: the config's).
        vec_env: ``dummy``, ``subproc`` or ``batched`` (default: the config's).
        eval_freq: Steps between validations (default: the config's).
        eval_episodes: Validation episodes (default: the config's).
        dagger: DAgger rounds after cloning (default: the config's ``bc.dagger_iterations``).
        hyperparams: ``KEY=VALUE`` overrides of the config entry (values parsed as YAML).
        progress: Show progress bars.
        verbose: SB3 verbosity.
        argv: The command line, recorded in run.json.
        trust_checkpoint: With ``resume``, load the run's checkpoint with SB3's unpickling loader
            (see :func:`crop_gym.agents.checkpoint.load_checkpoint`).
        dry_run: Check everything and build the model, then return without writing anything.
        log: Where one-line notes go (default: stderr; ``None``: nowhere).

    Returns:
        The run metadata (also in ``out/run.json``); with ``dry_run``, the resolved config.

    Raises:
        ConfigError: One line, before anything is written, on a bad argument, config file or key,
            environment ID or arguments, or output directory.
    """
    import torch as th

    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < TRAIN_SEED_LIMIT:
        raise ConfigError(
            f"--seed must be in [0, {TRAIN_SEED_LIMIT}) (the training seed range), got {seed}"
        )
    if steps is not None and not 0 <= int(steps) <= 10**10:
        raise ConfigError(f"--steps={steps} is outside its allowed range [0, 1e+10]")
    if not 0 <= int(bc_demos) <= 10**6:
        raise ConfigError(f"--bc-demos={bc_demos} is outside its allowed range [0, 1e+06]")
    check_env_id(env_id)
    cfg = load_config(algo, env_id, config)
    cfg = cfg.with_overrides(parse_hyperparams(hyperparams), "--hyperparams")
    given = {
        "policy": policy,
        "n_envs": n_envs,
        "vec_env": vec_env,
        "eval_freq": eval_freq,
        "eval_episodes": eval_episodes,
    }
    cfg = cfg.with_overrides({k: v for k, v in given.items() if v is not None}, "arguments")
    if dagger is not None and not 0 <= int(dagger) <= 100:
        raise ConfigError(f"--dagger={dagger} is outside its allowed range [0, 100]")
    total = int(cfg.run["n_timesteps"] if steps is None else steps)
    outdir = Path(out)
    _check_out_dir(outdir, [config], extra=_also_on_demos(cfg))
    env_kwargs = dict(cfg.run["env_kwargs"] or {})
    if is_online_id(env_id):
        if env_kwargs.get("split", "train") != "train":
            raise ConfigError(
                f"{cfg.source}: env_kwargs split={env_kwargs['split']!r}: training plays the "
                "train part of the traces only (split='train'; crop-gym eval plays 'eval')"
            )
        env_kwargs = with_split(env_id, env_kwargs, "train")
        cfg = cfg.with_overrides({"env_kwargs": env_kwargs}, "the training split")
    try:
        probe = gym.make(env_id, **env_kwargs)
    except Exception as e:  # (any constructor error of the user's arguments)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(
            f"{cfg.source}: env_kwargs {env_kwargs} refused by {env_id} ({msg})"
        ) from None
    finetune = bc_demos > 0
    if finetune:
        from crop_gym.agents.teachers import teacher_of

        bc = cfg.run.get("bc") or {}
        teacher = str(bc.get("teacher", "crop"))
        own = (bc.get("per_id") or {}).get(env_id) or {}
        try:
            probe.reset(seed=0)
            teacher_of(probe, str(own.get("teacher", teacher)))
        except ValueError as e:
            probe.close()
            raise ConfigError(f"{cfg.source}: bc: {e} ({env_id})") from None
        try:
            check_also_on(cfg, probe, teacher)
        except ConfigError:
            probe.close()
            raise
    try:
        pol, pol_kwargs = policy_spec(
            algo, str(cfg.run["policy"]), cfg.algo_kwargs.get("policy_kwargs"), probe
        )
    except (TypeError, ValueError) as e:
        probe.close()
        raise ConfigError(f"{cfg.source}: policy_kwargs: {e}") from None
    algo_kwargs = cfg.algo_arguments(finetune=finetune)
    algo_kwargs["policy_kwargs"] = pol_kwargs
    cls = algo_class(algo)
    tb = str(outdir / "tb")
    th.set_num_threads(int(cfg.run["torch_threads"]))
    reward_scale = float(cfg.run["reward_scale"])

    # Resume: the checkpoint to continue from (read, never unpickled unless trusted).
    latest = latest_checkpoint(outdir) if resume else None
    if latest is None and resume and finetune and (outdir / "bc_model.zip").exists():
        latest = outdir / "bc_model.zip"
    n_envs_run = int(cfg.run["n_envs"])
    venv = make_vec_env(  # a dry run builds the model on one environment in this process
        env_id,
        n_envs=1 if dry_run else n_envs_run,
        seed=seed,
        env_kwargs=env_kwargs,
        reward_scale=reward_scale,
        vec_env="dummy" if dry_run else str(cfg.run["vec_env"]),
    )
    try:
        model: Any
        if latest is not None:
            model, ck_meta = load_checkpoint(
                latest, env=venv, trust=trust_checkpoint, tensorboard_log=tb
            )
            if ck_meta.get("env_id") not in (None, env_id):
                raise ConfigError(
                    f"--resume: {latest} was trained on {ck_meta['env_id']}, not {env_id}"
                )
        else:
            model = _build_model(cls, pol, venv, seed, tb, verbose, algo_kwargs, cfg.source)
    except BaseException:
        venv.close()
        probe.close()
        raise
    planned = plan_steps(model, total, n_envs=n_envs_run)
    if dry_run:
        venv.close()
        probe.close()
        return {
            "status": "checked",
            "algo": algo,
            "env_id": env_id,
            "seed": seed,
            "steps_requested": total,
            "steps": planned,
            "config_source": cfg.source,
            "config": cfg.to_dict(),
        }
    if planned != total and log is not None and total > int(model.num_timesteps):
        log(f"note: --steps {total} runs {planned} steps ({_chunk_text(model, n_envs_run)})")

    outdir.mkdir(parents=True, exist_ok=True)
    run = RunState(
        algo=algo,
        env_id=env_id,
        steps=planned,
        seed=seed,
        out=outdir,
        cfg=cfg,
        bc_demos=bc_demos,
        progress=progress,
        argv=list(argv if argv is not None else sys.argv),
    )
    run.meta["steps_requested"] = total
    run.hyperparameters = _json_hyperparameters(cfg, finetune)
    try:
        _run(run, model, venv, probe, latest, resume, dagger, reward_scale, algo_kwargs, planned)
    except BaseException as e:
        run.meta["status"] = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        if not isinstance(e, KeyboardInterrupt):
            run.meta["error"] = (str(e).strip().splitlines() or [type(e).__name__])[0]
        run.write_meta()
        raise
    finally:
        venv.close()
        probe.close()
    return run.meta


def _chunk_text(model: Any, n_envs: int) -> str:
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    if isinstance(model, OnPolicyAlgorithm):
        n = int(model.n_steps) * n_envs
        return f"it collects whole rollouts of n_steps x n_envs = {n} steps"
    n = int(model.train_freq.frequency) * n_envs
    return f"it collects whole chunks of train_freq x n_envs = {n} steps"


def _json_hyperparameters(cfg: RunConfig, finetune: bool) -> dict[str, Any]:
    """The constructor arguments to store in checkpoints (JSON, schedules as ``lin_X``)."""
    kw = cfg.hyperparameters(finetune=finetune)
    kw.pop("policy_kwargs", None)
    return kw


def _run(
    run: RunState,
    model: Any,
    venv: Any,
    probe: gym.Env[Any, Any],
    latest: Path | None,
    resume: bool,
    dagger: int | None,
    reward_scale: float,
    algo_kwargs: dict[str, Any],
    total: int,
) -> None:
    """The run itself, once everything is checked: metadata, imitation, RL, final files."""
    from crop_gym.agents._io import read_json

    outdir, cfg, algo = run.out, run.cfg, run.algo
    prev_meta = None
    if resume and (outdir / "run.json").exists():
        try:
            prev_meta = read_json(outdir / "run.json")
        except (ValueError, OSError) as e:
            raise ConfigError(f"{outdir / 'run.json'}: cannot resume from it ({e})") from None
        if not isinstance(prev_meta, dict):
            raise ConfigError(f"{outdir / 'run.json'}: cannot resume from it (not a JSON object)")
    if prev_meta is not None:
        run.curve = list(prev_meta.get("curve") or [])
        run.elapsed_before = float(prev_meta.get("wall_s") or 0.0)
        run.meta["phases"] = dict(prev_meta.get("phases") or {})
        run.meta["seeds"]["demo_seeds"] = prev_meta.get("seeds", {}).get("demo_seeds")
        if prev_meta.get("best_validation"):
            run.meta["best_validation"] = prev_meta["best_validation"]
            b = prev_meta["best_validation"]
            run.best = (
                b.get("ratio_to_crop")
                if b.get("kind") == "static"
                else -(
                    b.get("mean_jct_ratio_to_crop") or b.get("time_in_system_ratio_to_crop") or 0.0
                )
            )
        run.meta["resumed_from"] = {
            "wall_s": run.elapsed_before,
            "sessions": int(prev_meta.get("sessions", 1)),
        }
    run.meta["sessions"] = int((prev_meta or {}).get("sessions", 0)) + 1
    atomic_write_with(
        outdir / "config.yml",
        lambda p: p.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8"),
    )
    run.write_meta()

    if latest is not None:
        run.meta["resumed_from"] = {**run.meta.get("resumed_from", {}), "checkpoint": str(latest)}
    elif run.bc_demos > 0:
        imitate(
            run, model, probe, run.bc_demos, dagger, reward_scale, algo_kwargs, run.progress, resume
        )
    run.curve = [r for r in run.curve if r["steps"] <= int(model.num_timesteps)]

    remaining = max(0, total - int(model.num_timesteps))
    rl_t0 = time.perf_counter()
    eval_before = run.eval_seconds
    steps_before = int(model.num_timesteps)
    if remaining > 0:
        Progress, RunCb = callbacks()
        cbs = [RunCb(run)]
        if run.progress:
            cbs.append(Progress(total, run))
        model.learn(
            total_timesteps=remaining,
            callback=cbs,
            reset_num_timesteps=False,
            tb_log_name=algo,
            progress_bar=False,
        )
    rl_wall = time.perf_counter() - rl_t0
    rl_eval = run.eval_seconds - eval_before
    done_steps = int(model.num_timesteps) - steps_before
    if not run.curve or run.curve[-1]["steps"] != int(model.num_timesteps):
        run.validate(model, int(model.num_timesteps))
    rl = dict(run.meta["phases"].get("rl") or {})
    rl_sessions = list(rl.get("sessions") or [])
    rl_sessions.append(
        {
            "steps": done_steps,
            "wall_s": rl_wall,
            "eval_s": rl_eval,
            "steps_per_s": done_steps / rl_wall if rl_wall > 0 else None,
            "steps_per_s_excluding_eval": done_steps / (rl_wall - rl_eval)
            if rl_wall - rl_eval > 0
            else None,
        }
    )
    tot_steps = sum(s["steps"] for s in rl_sessions)
    tot_wall = sum(s["wall_s"] for s in rl_sessions)
    tot_eval = sum(s["eval_s"] for s in rl_sessions)
    run.meta["phases"]["rl"] = {
        "steps": tot_steps,
        "wall_s": tot_wall,
        "eval_s": tot_eval,
        "steps_per_s": tot_steps / tot_wall if tot_wall > 0 else None,
        "steps_per_s_excluding_eval": tot_steps / (tot_wall - tot_eval)
        if tot_wall - tot_eval > 0
        else None,
        "n_envs": int(cfg.run["n_envs"]),
        "vec_env": cfg.run["vec_env"],
        "sessions": rl_sessions,
    }
    save_checkpoint(model, outdir / "final_model.zip", run.checkpoint_meta(model))
    if run.curve:
        label = f"{algo} on {run.env_id}" + (
            f", BC on {run.bc_demos} {(cfg.run.get('bc') or {}).get('teacher', 'crop')} episodes"
            if run.bc_demos
            else ", from scratch"
        )
        plot_curve(run.curve, outdir / "learning_curve.png", title=label)
    run.meta["status"] = "done"
    run.meta["final_validation"] = run.curve[-1] if run.curve else None
    run.write_meta()
