"""Training runs: optional imitation of CROP, then RL, with validation, checkpoints and resume.

:func:`train` is what ``crop-gym train`` calls. A run writes into its output directory::

    run.json             metadata: command, algorithm, environment, seeds, resolved config,
                         phases (demonstrations, cloning, RL) with timings, throughput, the
                         learning curve's summary, time to reach 0.98 x CROP; rewritten atomically
    config.yml           the resolved hyperparameters
    demos.npz            CROP's demonstrations (with --bc-demos)
    bc_model.zip         the model right after behaviour cloning (and DAgger)
    checkpoints/         periodic checkpoints (model_<steps>_steps.zip), used by --resume
    best_model.zip       the checkpoint with the best validation ratio to CROP
    final_model.zip      the model at the end of training
    curve.json           validation ratio to CROP versus environment steps
    learning_curve.png   its plot
    tb/                  TensorBoard logs (bc/*, eval/*, and SB3's rollout/* and train/*)

Every checkpoint carries the run's metadata (:mod:`agents.checkpoint`), so
``crop-gym eval --model DIR`` knows the environment, the algorithm and the seed.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml

from agents._io import atomic_write, atomic_write_json, read_json, versions
from agents.checkpoint import algo_class, checkpoint_metadata, load_checkpoint, save_checkpoint
from agents.config import (
    EVAL_SEED_BASE,
    TRAIN_SEED_LIMIT,
    VALIDATION_SEED_BASE,
    RunConfig,
    load_config,
    train_seed,
)
from agents.envs import is_online, make_vec_env

__all__ = ["TARGET_RATIO", "plot_curve", "policy_spec", "train"]

#: The ratio to CROP whose first crossing is reported as "time to target".
TARGET_RATIO = 0.98

#: Gain-ratio thresholds whose first crossing is also reported.
GAIN_THRESHOLDS = (0.95, 0.98, 0.99, 0.995, 0.999)

_POLICY_NAMES = {"CandidateScorer", "MultiInputPolicy"}


def time_to_target(curve: list[dict[str, Any]]) -> dict[str, Any]:
    """Steps and wall seconds of the first validation reaching the targets.

    Args:
        curve: Validation rows (``steps``, ``wall_s``, ``phase``, ``ratio_to_crop``,
            ``gain_ratio_to_crop``).

    Returns:
        ``{"target": 0.98, "ratio_to_crop": hit, "gain_ratio_to_crop": hit, "gain_thresholds":
        {threshold: hit}}`` with ``hit = {"steps", "wall_s", "phase"}`` or ``None``.
    """

    def first(key: str, level: float) -> dict[str, Any] | None:
        hit = next((r for r in curve if (r.get(key) or 0.0) >= level), None)
        return (
            None
            if hit is None
            else {"steps": hit["steps"], "wall_s": hit["wall_s"], "phase": hit["phase"]}
        )

    return {
        "target": TARGET_RATIO,
        "ratio_to_crop": first("ratio_to_crop", TARGET_RATIO),
        "gain_ratio_to_crop": first("gain_ratio_to_crop", TARGET_RATIO),
        "gain_thresholds": {str(t): first("gain_ratio_to_crop", t) for t in GAIN_THRESHOLDS},
    }


def policy_spec(
    algo: str, policy: str, policy_kwargs: Mapping[str, Any] | None, env: gym.Env[Any, Any]
) -> tuple[Any, dict[str, Any]]:
    """The SB3 policy (class or name) and its kwargs for ``algo`` on ``env``.

    ``CandidateScorer`` maps to :class:`~agents.policies.MaskableScorerPolicy` (MaskablePPO),
    :class:`~agents.policies.ScorerPolicy` (PPO) or :class:`~agents.policies.ScorerDQNPolicy` (DQN);
    the scorer's observation spec is read from ``env``. ``MultiInputPolicy`` is SB3's default.
    """
    from agents.networks import ObsSpec
    from agents.policies import MaskableScorerPolicy, ScorerDQNPolicy, ScorerPolicy

    if policy not in _POLICY_NAMES:
        raise ValueError(f"policy={policy!r} must be one of {sorted(_POLICY_NAMES)}")
    kw = dict(policy_kwargs or {})
    if policy == "MultiInputPolicy":
        kw.pop("scorer", None)
        return "MultiInputPolicy", kw
    scorer = dict(kw.pop("scorer", {}) or {})
    scorer["spec"] = ObsSpec.from_env(env).to_dict()
    kw["scorer"] = scorer
    cls = {"maskable_ppo": MaskableScorerPolicy, "ppo": ScorerPolicy, "dqn": ScorerDQNPolicy}[algo]
    return cls, kw


def plot_curve(curve: list[dict[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """Plot the validation ratio to CROP versus environment steps (matplotlib, Agg backend).

    Args:
        curve: Rows with ``steps``, ``ratio_to_crop`` and optionally ``gain_ratio_to_crop`` and
            ``random_gain_ratio``.
        path: Destination PNG (written atomically).
        title: Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["steps"] for r in curve]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    if curve and curve[0].get("kind") == "online":
        ax.plot(
            steps,
            [r.get("jct_ratio_to_crop") for r in curve],
            "o-",
            label="mean JCT / CROP's (lower is better)",
        )
        ax.plot(
            steps,
            [r.get("ratio_to_crop") for r in curve],
            "s-",
            label="effective GPU-hours / CROP's",
        )
    else:
        ax.plot(
            steps, [r.get("ratio_to_crop") for r in curve], "o-", label="mean F / CROP's mean F"
        )
        ax.plot(
            steps, [r.get("gain_ratio_to_crop") for r in curve], "s-", label="mean F gain / CROP's"
        )
        ref = [r.get("random_gain_ratio") for r in curve if r.get("random_gain_ratio") is not None]
        if ref:
            ax.axhline(
                float(np.mean(ref)), color="grey", ls=":", label="random valid actions (gain)"
            )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(TARGET_RATIO, color="r", ls="--", lw=0.8, label=f"{TARGET_RATIO} x CROP")
    ax.set_xlabel("environment steps (RL)")
    ax.set_ylabel("ratio to CROP (validation seeds)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()

    def write(tmp: Path) -> None:
        fig.savefig(tmp, dpi=110, format="png")

    dest = atomic_write(path, write)
    plt.close(fig)
    return dest


def _callbacks_module() -> Any:
    """The callback classes (defined lazily: they subclass SB3's BaseCallback)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class ProgressCallback(BaseCallback):  # type: ignore[misc]
        """A tqdm bar over environment steps, with the latest validation ratio."""

        def __init__(self, total: int, run: _Run) -> None:
            super().__init__()
            self.total = int(total)
            self.run = run
            self.bar: Any = None

        def _on_training_start(self) -> None:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=self.total,
                initial=int(self.num_timesteps),
                unit="step",
                desc=f"{self.run.algo}",
                dynamic_ncols=True,
            )

        def _on_step(self) -> bool:
            if self.bar is not None:
                self.bar.n = min(int(self.num_timesteps), self.total)
                if self.n_calls % 16 == 0:
                    last = self.run.curve[-1] if self.run.curve else {}
                    if "ratio_to_crop" in last and last["ratio_to_crop"] is not None:
                        self.bar.set_postfix(
                            ratio_to_crop=f"{last['ratio_to_crop']:.4f}", refresh=False
                        )
                    self.bar.refresh()
            return True

        def _on_training_end(self) -> None:
            if self.bar is not None:
                self.bar.n = min(int(self.num_timesteps), self.total)
                self.bar.close()

    class RunCallback(BaseCallback):  # type: ignore[misc]
        """Periodic validation (learning curve, best model) and checkpoints."""

        def __init__(self, run: _Run) -> None:
            super().__init__()
            self.run = run
            self.last_eval = -1
            self.last_ckpt = -1

        def _on_training_start(self) -> None:
            self.last_eval = self.run.curve[-1]["steps"] if self.run.curve else -1
            self.last_ckpt = int(self.num_timesteps)
            if self.last_eval < int(self.num_timesteps):
                self._validate()

        def _on_step(self) -> bool:
            n = int(self.num_timesteps)
            if n - self.last_eval >= self.run.eval_freq:
                self._validate()
            if n - self.last_ckpt >= self.run.checkpoint_freq:
                self.run.save_periodic(self.model)
                self.last_ckpt = n
            return True

        def _validate(self) -> None:
            row = self.run.validate(self.model, int(self.num_timesteps))
            self.last_eval = int(self.num_timesteps)
            for k in (
                "ratio_to_crop",
                "gain_ratio_to_crop",
                "jct_ratio_to_crop",
                "policy_mean_gain",
            ):
                if row.get(k) is not None:
                    self.logger.record(f"eval/{k}", row[k])
            self.logger.dump(int(self.num_timesteps))

    return ProgressCallback, RunCallback


class _Run:
    """State of one training run (paths, metadata, curve, validation)."""

    def __init__(
        self,
        *,
        algo: str,
        env_id: str,
        steps: int,
        seed: int,
        out: Path,
        cfg: RunConfig,
        bc_demos: int,
        progress: bool,
        argv: list[str],
    ) -> None:
        self.algo = algo
        self.env_id = env_id
        self.steps = int(steps)
        self.seed = int(seed)
        self.out = out
        self.cfg = cfg
        self.bc_demos = int(bc_demos)
        self.progress = progress
        self.env_kwargs = dict(cfg.run["env_kwargs"] or {})
        self.eval_freq = int(cfg.run["eval_freq"])
        self.eval_episodes = int(cfg.run["eval_episodes"])
        self.checkpoint_freq = int(cfg.run["checkpoint_freq"])
        self.curve: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()
        self.elapsed_before = 0.0  # wall time of earlier sessions (resume)
        self.eval_seconds = 0.0
        self.best: float | None = None
        self.meta: dict[str, Any] = {
            "command": argv,
            "algo": algo,
            "policy": cfg.run["policy"],
            "env_id": env_id,
            "env_kwargs": self.env_kwargs,
            "seed": self.seed,
            "steps": self.steps,
            "bc_demos": self.bc_demos,
            "config_source": cfg.source,
            "config": cfg.to_dict(),
            "seeds": {
                "model_seed": self.seed,
                "train_env_seeds": [self.seed + i for i in range(int(cfg.run["n_envs"]))],
                "train_seed_limit": TRAIN_SEED_LIMIT,
                "demo_seeds": None,
                "validation_first_seed": VALIDATION_SEED_BASE,
                "validation_episodes": self.eval_episodes,
                "test_seed_base": EVAL_SEED_BASE,
                "note": "training instances come from seeds < 10^6; validation (learning curve, best model) "
                "from 5*10^8; crop-gym eval reports on held-out seeds from 10^9",
            },
            "status": "running",
            "phases": {},
            "versions": versions(),
        }

    # ----------------------------------------------------------------- paths/meta
    @property
    def wall(self) -> float:
        """Wall seconds of the run so far (all sessions)."""
        return self.elapsed_before + time.perf_counter() - self.t0

    def write_meta(self) -> None:
        """Rewrite run.json (atomically)."""
        self.meta["wall_s"] = self.wall
        self.meta["curve"] = self.curve
        self.meta["time_to_target"] = self.time_to_target()
        atomic_write_json(self.out / "run.json", self.meta)

    def time_to_target(self) -> dict[str, Any]:
        """First validation at or above :data:`TARGET_RATIO` (F ratio and gain ratio), and the
        first at or above each of :data:`GAIN_THRESHOLDS` (gain ratio)."""
        return time_to_target(self.curve)

    def checkpoint_meta(self, model: Any, **extra: Any) -> dict[str, Any]:
        """Metadata stored inside a checkpoint."""
        from agents.policies import scorer_of

        scorer = scorer_of(model)
        return checkpoint_metadata(
            algo=self.algo,
            policy=self.cfg.run["policy"],
            env_id=self.env_id,
            env_kwargs=self.env_kwargs,
            seed=self.seed,
            num_timesteps=int(model.num_timesteps),
            bc_demos=self.bc_demos,
            scorer=None if scorer is None else scorer.config.to_dict(),
            reward_scale=self.cfg.run["reward_scale"],
            validation=self.curve[-1] if self.curve else None,
            seeds=self.meta["seeds"],
            **extra,
        )

    def save_periodic(self, model: Any) -> Path:
        """A checkpoint in checkpoints/ (the two newest are kept)."""
        d = self.out / "checkpoints"
        path = save_checkpoint(
            model, d / f"model_{int(model.num_timesteps)}_steps.zip", self.checkpoint_meta(model)
        )
        for old in _checkpoints(d)[:-2]:
            old.unlink()
        self.write_meta()
        return path

    # ------------------------------------------------------------------ validation
    def validate(self, model: Any, steps: int, phase: str = "rl") -> dict[str, Any]:
        """Evaluate on the validation seeds, extend the curve, keep the best model."""
        from agents.evaluation import PolicyAgent, evaluate

        t = time.perf_counter()
        rep = evaluate(
            PolicyAgent(model),
            self.env_id,
            episodes=self.eval_episodes,
            first_seed=VALIDATION_SEED_BASE,
            env_kwargs=self.env_kwargs,
            baselines=("crop",),
        )
        dt = time.perf_counter() - t
        self.eval_seconds += dt
        row: dict[str, Any] = {
            "steps": int(steps),
            "phase": phase,
            "wall_s": self.wall,
            "kind": rep["kind"],
        }
        if rep["kind"] == "static":
            row.update(
                ratio_to_crop=rep.get("ratio_to_crop"),
                gain_ratio_to_crop=rep.get("gain_ratio_to_crop"),
                policy_mean_gain=rep["policy_mean_gain"],
                crop_mean_gain=rep.get("crop_mean_gain"),
                random_gain_ratio=(
                    rep["baselines"].get("random-valid-action", {}).get("mean_gain") or 0.0
                )
                / rep["crop_mean_gain"]
                if rep.get("crop_mean_gain")
                else None,
            )
            score = row["ratio_to_crop"]
        else:
            row.update(
                ratio_to_crop=rep.get("ratio_to_crop"),
                jct_ratio_to_crop=rep.get("jct_ratio_to_crop"),
                time_in_system_ratio_to_crop=rep.get("time_in_system_ratio_to_crop"),
                policy_mean_jct_s=rep.get("policy_mean_jct_s"),
                crop_mean_jct_s=rep.get("crop_mean_jct_s"),
            )
            j = rep.get("time_in_system_ratio_to_crop")
            score = None if j is None else -j
        row["eval_seconds"] = dt
        self.curve = [r for r in self.curve if r["steps"] < steps or r["phase"] != phase] + [row]
        atomic_write_json(self.out / "curve.json", self.curve)
        if score is not None and (self.best is None or score > self.best):
            self.best = score
            save_checkpoint(
                model,
                self.out / "best_model.zip",
                self.checkpoint_meta(model, selected_by="validation"),
            )
            self.meta["best_validation"] = row
        self.write_meta()
        return row


def _checkpoints(d: Path) -> list[Path]:
    def steps(p: Path) -> int:
        m = re.search(r"model_(\d+)_steps", p.name)
        return int(m.group(1)) if m else -1

    return sorted(d.glob("model_*_steps.zip"), key=steps) if d.exists() else []


def _latest_checkpoint(out: Path) -> Path | None:
    """The checkpoint of ``out`` with the most environment steps (periodic ones and the final one)."""
    from agents.checkpoint import read_metadata

    found = [*_checkpoints(out / "checkpoints")]
    if (out / "final_model.zip").exists():
        found.append(out / "final_model.zip")
    if not found:
        return None
    return max(found, key=lambda p: int(read_metadata(p).get("num_timesteps") or -1))


def _hyperparam_overrides(items: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--hyperparams expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = yaml.safe_load(v)
    return out


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
) -> dict[str, Any]:
    """Train an agent (optionally cloning CROP first) and return the run's metadata.

    Args:
        algo: ``maskable_ppo`` (default), ``ppo`` or ``dqn``.
        env_id: Environment ID.
        steps: RL environment steps (default: the config's ``n_timesteps``; 0 = clone only).
        seed: Run seed (< 10^6): model initialisation, training environments (``seed + i``),
            demonstration and DAgger seeds.
        out: Output directory.
        bc_demos: Expert episodes for behaviour cloning before RL (0 = from scratch).
        resume: Continue from the newest checkpoint in ``out`` (or from the cloned model).
        config: A YAML file to read instead of ``agents/configs/<algo>.yml``.
        policy: ``CandidateScorer`` or ``MultiInputPolicy`` (default: the config's).
        n_envs: Parallel environments (default: the config's).
        vec_env: ``dummy`` or ``subproc`` (default: the config's).
        eval_freq: Steps between validations (default: the config's).
        eval_episodes: Validation episodes (default: the config's).
        dagger: DAgger rounds after cloning (default: the config's ``bc.dagger_iterations``).
        hyperparams: ``KEY=VALUE`` overrides of the config entry (values parsed as YAML).
        progress: Show progress bars.
        verbose: SB3 verbosity.
        argv: The command line, recorded in run.json.

    Returns:
        The run metadata (also in ``out/run.json``).
    """
    import torch as th

    if not 0 <= int(seed) < TRAIN_SEED_LIMIT:
        raise ValueError(
            f"--seed must be in [0, {TRAIN_SEED_LIMIT}) (the training seed range), got {seed}"
        )
    cfg = load_config(algo, env_id, config)
    over = _hyperparam_overrides(hyperparams)
    for k, v in over.items():
        if k in cfg.run:
            cfg.run[k] = v
        else:
            cfg.algo_kwargs[k] = v
    if policy is not None:
        cfg.run["policy"] = policy
    if n_envs is not None:
        cfg.run["n_envs"] = int(n_envs)
    if vec_env is not None:
        cfg.run["vec_env"] = vec_env
    if eval_freq is not None:
        cfg.run["eval_freq"] = int(eval_freq)
    if eval_episodes is not None:
        cfg.run["eval_episodes"] = int(eval_episodes)
    total = int(cfg.run["n_timesteps"] if steps is None else steps)
    th.set_num_threads(int(cfg.run["torch_threads"]))
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    run = _Run(
        algo=algo,
        env_id=env_id,
        steps=total,
        seed=seed,
        out=outdir,
        cfg=cfg,
        bc_demos=bc_demos,
        progress=progress,
        argv=list(argv if argv is not None else sys.argv),
    )
    prev_meta = (
        read_json(outdir / "run.json") if (resume and (outdir / "run.json").exists()) else None
    )
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
                else -(b.get("jct_ratio_to_crop") or 0.0)
            )
        run.meta["resumed_from"] = {
            "wall_s": run.elapsed_before,
            "sessions": int(prev_meta.get("sessions", 1)),
        }
    run.meta["sessions"] = int((prev_meta or {}).get("sessions", 0)) + 1
    atomic_write(
        outdir / "config.yml",
        lambda p: p.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8"),
    )
    run.write_meta()

    reward_scale = float(cfg.run["reward_scale"])
    venv = make_vec_env(
        env_id,
        n_envs=int(cfg.run["n_envs"]),
        seed=seed,
        env_kwargs=run.env_kwargs,
        reward_scale=reward_scale,
        vec_env=str(cfg.run["vec_env"]),
    )
    tb = str(outdir / "tb")
    cls = algo_class(algo)
    probe = gym.make(env_id, **run.env_kwargs)
    pol, pol_kwargs = policy_spec(
        algo, str(cfg.run["policy"]), cfg.algo_kwargs.get("policy_kwargs"), probe
    )
    finetune = bc_demos > 0
    algo_kwargs = cfg.algo_arguments(finetune=finetune)
    algo_kwargs["policy_kwargs"] = pol_kwargs

    latest = _latest_checkpoint(outdir) if resume else None
    model: Any = None
    if latest is not None:
        model, _ = load_checkpoint(latest, env=venv, tensorboard_log=tb)
        run.meta["resumed_from"] = {**run.meta.get("resumed_from", {}), "checkpoint": str(latest)}
    elif resume and (outdir / "bc_model.zip").exists() and finetune:
        model, _ = load_checkpoint(outdir / "bc_model.zip", env=venv, tensorboard_log=tb)
        run.meta["resumed_from"] = {
            **run.meta.get("resumed_from", {}),
            "checkpoint": str(outdir / "bc_model.zip"),
        }
    else:
        model = cls(pol, venv, seed=seed, tensorboard_log=tb, verbose=verbose, **algo_kwargs)
        if finetune:
            _imitate(
                run, model, probe, bc_demos, dagger, reward_scale, algo_kwargs, progress, resume
            )
    probe.close()
    run.curve = [r for r in run.curve if r["steps"] <= int(model.num_timesteps)]

    remaining = max(0, total - int(model.num_timesteps))
    rl_t0 = time.perf_counter()
    eval_before = run.eval_seconds
    steps_before = int(model.num_timesteps)
    if remaining > 0:
        Progress, RunCb = _callbacks_module()
        cbs = [RunCb(run)]
        if progress:
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
    venv.close()
    if run.curve:
        label = f"{algo} on {env_id}" + (
            f", BC on {bc_demos} CROP episodes" if bc_demos else ", from scratch"
        )
        plot_curve(run.curve, outdir / "learning_curve.png", title=label)
    run.meta["status"] = "done"
    run.meta["final_validation"] = run.curve[-1] if run.curve else None
    run.write_meta()
    return run.meta


def _imitate(
    run: _Run,
    model: Any,
    env: gym.Env[Any, Any],
    episodes: int,
    dagger_rounds: int | None,
    reward_scale: float,
    algo_kwargs: Mapping[str, Any],
    progress: bool,
    resume: bool,
) -> None:
    """Demonstrations, behaviour cloning (and DAgger) on ``model.policy``; saves bc_model.zip."""
    from stable_baselines3.common.logger import configure

    from agents.imitation import (
        BCConfig,
        Demonstrations,
        behaviour_cloning,
        dagger,
        equivalent_agreement,
        record_demonstrations,
    )

    if is_online(env):
        raise ValueError(
            "behaviour cloning needs the static placement environment (CROP's expert wrapper)"
        )
    bc_cfg = BCConfig.from_dict(run.cfg.run.get("bc"))
    bc_cfg.reward_scale = reward_scale
    bc_cfg.gamma = float(algo_kwargs.get("gamma", 1.0))
    if dagger_rounds is not None:
        bc_cfg.dagger_iterations = int(dagger_rounds)
    seeds = [train_seed(run.seed, 0, i) for i in range(episodes)]
    run.meta["seeds"]["demo_seeds"] = {
        "first": seeds[0],
        "count": len(seeds),
        "rule": "train_seed(seed, 0, i)",
    }
    demo_path = run.out / "demos.npz"
    t = time.perf_counter()
    demos: Demonstrations | None = None
    if resume and demo_path.exists():
        demos = Demonstrations.load(demo_path)
        if demos.seeds != seeds:
            demos = None
    if demos is None:
        demos = record_demonstrations(env, seeds, gamma=bc_cfg.gamma, progress=progress)
        demos.save(demo_path)
    run.meta["phases"]["demos"] = {
        "episodes": demos.num_episodes,
        "states": len(demos),
        "wall_s": time.perf_counter() - t,
    }
    run.write_meta()
    logger = configure(str(run.out / "tb" / "bc"), ["tensorboard"])
    t = time.perf_counter()
    hist = behaviour_cloning(
        model.policy, demos, bc_cfg, seed=run.seed, logger=logger, progress=progress
    )
    phase: dict[str, Any] = {
        "config": bc_cfg.to_dict(),
        "epochs": bc_cfg.epochs,
        "final_cross_entropy": hist["ce"][-1] if hist["ce"] else None,
        "train_agreement": hist["train_agreement"],
        "val_agreement": hist["val_agreement"],
        "train_states": hist["train_states"],
        "val_states": hist["val_states"],
    }
    if hist["val_episodes"]:
        # Agreement counting CROP-equivalent choices (CROP keeps the better of two greedy passes,
        # so exact agreement is capped below 1 on instances where the passes differ).
        eq = equivalent_agreement(model.policy, env, demos.subset(hist["val_episodes"]))
        phase["val_equivalent_agreement"] = eq["equivalent"]
    if bc_cfg.dagger_iterations > 0:
        demos, rounds = dagger(
            model.policy,
            env,
            demos,
            bc_cfg,
            lambda r, e: train_seed(run.seed, r, e),
            seed=run.seed,
            logger=logger,
            progress=progress,
        )
        phase["dagger"] = [
            {k: v for k, v in r.items() if k not in ("loss", "ce", "value_loss")} for r in rounds
        ]
    phase["wall_s"] = time.perf_counter() - t
    logger.close()
    if hasattr(model, "q_net_target"):  # DQN: start the target network from the cloned Q-network
        model.q_net_target.load_state_dict(model.q_net.state_dict())
    run.meta["phases"]["bc"] = phase
    run.validate(model, 0, phase="bc")
    save_checkpoint(model, run.out / "bc_model.zip", run.checkpoint_meta(model, phase="bc"))
    run.write_meta()
