"""The ``crop-gym train`` and ``crop-gym eval`` commands.

Usage::

    crop-gym train [--algo maskable_ppo|ppo|dqn] [--env ID] [--steps N] [--seed S] --out DIR
        [--bc-demos N] [--dagger R] [--resume] [--policy CandidateScorer|MultiInputPolicy]
        [--n-envs N] [--vec-env dummy|subproc|batched] [--config YML] [--hyperparams KEY=VALUE ...]
        [--dry-run] [--trust-checkpoint]
    crop-gym eval [--model PATH|DIR|default|default-online|default-severe] [--env ID] [--episodes N] [--seed S] [--json PATH|-]
        [--baselines all|crop|NAME,NAME] [--safe-stop positive_gain|exhausted] [--predict]
        [--trust-checkpoint]

Importing this module is cheap and needs neither torch nor Stable-Baselines3; they are imported when
a command runs (install them with ``pip install 'crop-gym[rl]'``).

Bad input (a config key, an environment ID, a checkpoint file, an output path) gets one line on
stderr and exit status 2; Ctrl-C gets one line and status 130. Results are written atomically.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any, TextIO

from crop_gym.agents.config import VEC_ENVS
from crop_gym.cli import int_at_least, report_stream

__all__ = ["register"]

_RL_HINT = "needs the rl extra: pip install 'crop-gym[rl]' (torch, stable-baselines3, sb3-contrib)"


def _require_rl() -> None:
    import importlib.util

    missing = [
        m
        for m in ("torch", "stable_baselines3", "sb3_contrib")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise ValueError(f"{', '.join(missing)} missing; this command {_RL_HINT}")


_TRUST_HELP = (
    "load the checkpoint with SB3's own loader, which unpickles objects stored in the file and so "
    "runs any code a crafted file holds; only for files you trust (default: weights and JSON only)"
)


_nonneg_int = int_at_least(0)
_pos_int = int_at_least(1)


def register(subparsers: Any) -> None:
    """Add ``train`` and ``eval`` to the ``crop-gym`` parser."""
    from crop_gym.agents.algorithms import ALGOS
    from crop_gym.agents.config import EVAL_SEED_BASE

    t = subparsers.add_parser(
        "train",
        help="train an RL agent (MaskablePPO, PPO or DQN), optionally cloning CROP first",
        description=(
            "Train an agent on a crop_gym environment with Stable-Baselines3, configured by "
            "agents/configs/<algo>.yml (rl-baselines3-zoo style, keyed by env ID). With --bc-demos N "
            "the policy first imitates CROP on N expert episodes (behaviour cloning on its own "
            "logits, optional DAgger), then RL fine-tunes it. Writes run.json, checkpoints, "
            f"TensorBoard logs and a learning curve into --out. {_RL_HINT}."
        ),
    )
    t.add_argument(
        "--algo", choices=ALGOS, default="maskable_ppo", help="algorithm (default: maskable_ppo)"
    )
    t.add_argument(
        "--env",
        default="crop_gym/Placement-v0",
        help="environment ID (default: crop_gym/Placement-v0)",
    )
    t.add_argument(
        "--steps",
        type=_nonneg_int,
        default=None,
        help="RL environment steps (default: the config's n_timesteps; 0: clone only); rounded up "
        "to whole rollouts of n_steps x n_envs (DQN: train_freq x n_envs), with a one-line note",
    )
    t.add_argument("--seed", type=_nonneg_int, default=0, help="run seed, < 10^6 (default 0)")
    t.add_argument("--out", required=True, help="output directory")
    t.add_argument(
        "--bc-demos",
        type=_nonneg_int,
        default=0,
        metavar="N",
        help="CROP demonstration episodes for behaviour cloning before RL (default 0: from scratch)",
    )
    t.add_argument(
        "--dagger",
        type=_nonneg_int,
        default=None,
        metavar="R",
        help="DAgger rounds after cloning (default: the config's)",
    )
    t.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its newest checkpoint"
    )
    t.add_argument(
        "--policy",
        choices=("CandidateScorer", "MultiInputPolicy"),
        default=None,
        help="policy network (default: the config's, CandidateScorer)",
    )
    t.add_argument(
        "--n-envs",
        type=_pos_int,
        default=None,
        help="parallel environments (default: the config's)",
    )
    t.add_argument(
        "--vec-env",
        choices=VEC_ENVS,
        default=None,
        help="vector environment kind (batched: the candidate-mode envs stepped as one batch)",
    )
    t.add_argument(
        "--eval-freq", type=_pos_int, default=None, help="steps between validation evaluations"
    )
    t.add_argument("--eval-episodes", type=_pos_int, default=None, help="validation episodes")
    t.add_argument(
        "--config", default=None, help="hyperparameter YAML to use instead of the bundled one"
    )
    t.add_argument(
        "--hyperparams",
        nargs="*",
        default=None,
        metavar="KEY=VALUE",
        help="override config entries (values parsed as YAML)",
    )
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    t.add_argument("--verbose", type=_nonneg_int, default=0, help="SB3 verbosity (default 0)")
    t.add_argument(
        "--dry-run",
        action="store_true",
        help="check the config, environment, outputs and model, print the resolved config, exit",
    )
    t.add_argument("--trust-checkpoint", action="store_true", help=f"with --resume: {_TRUST_HELP}")
    t.set_defaults(func=_train)

    e = subparsers.add_parser(
        "eval",
        help="evaluate a trained agent against CROP and the baselines on held-out seeds",
        description=(
            "Play a trained agent greedily on --episodes instances (reset seeds --seed, --seed+1, ...; "
            f"default {EVAL_SEED_BASE}, the held-out range), run CROP and the baselines on the same "
            "instances, and report mean F and ratio_to_crop (policy mean F / CROP mean F). Without "
            "--env the environment the checkpoint was trained on is used; a candidate-scorer policy "
            f"also runs on environments of other sizes. {_RL_HINT}."
        ),
    )
    e.add_argument(
        "--model",
        default="default",
        help="checkpoint .zip, training run directory, 'default' (the shipped static checkpoint) "
        "'default-online' (the shipped online one) or 'default-severe' (the shipped policy that "
        "beats CROP on Placement-Severe-v0)",
    )
    e.add_argument("--env", default=None, help="environment ID (default: the checkpoint's)")
    e.add_argument(
        "--episodes", type=_pos_int, default=20, help="evaluation instances (default 20)"
    )
    e.add_argument(
        "--seed",
        type=_nonneg_int,
        default=EVAL_SEED_BASE,
        help=f"first evaluation seed (default {EVAL_SEED_BASE})",
    )
    e.add_argument(
        "--json",
        default=None,
        help="write the full report (per-episode records included) to this JSON file ('-': stdout,"
        " the summary then goes to stderr)",
    )
    e.add_argument(
        "--baselines",
        default="all",
        help="'all' (default), 'crop', 'none' or a comma-separated list of policy names; static "
        "IDs also take 'crop-rollout' (CROP with one step of lookahead, played through the env), "
        "online IDs 'srsf-crop-rollout' (srsf-crop with one step of lookahead, clairvoyant: slow)",
    )
    e.add_argument(
        "--algo",
        choices=ALGOS,
        default=None,
        help="algorithm of a plain SB3 zip without crop_gym metadata",
    )
    e.add_argument(
        "--predict",
        action="store_true",
        help="use model.predict instead of running the scorer module directly",
    )
    e.add_argument(
        "--safe-stop",
        choices=("positive_gain", "exhausted"),
        default=None,
        help="play the agent under crop_gym.wrappers.SafeStop (static envs): stop is masked while "
        "a placement gains (positive_gain) or while any is valid (exhausted); default: the env's stop",
    )
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.add_argument("--trust-checkpoint", action="store_true", help=_TRUST_HELP)
    e.set_defaults(func=_eval)


def _train(args: argparse.Namespace) -> int:
    _require_rl()
    from crop_gym.agents.training import train

    meta = train(
        algo=args.algo,
        env_id=args.env,
        steps=args.steps,
        seed=args.seed,
        out=args.out,
        bc_demos=args.bc_demos,
        resume=args.resume,
        config=args.config,
        policy=args.policy,
        n_envs=args.n_envs,
        vec_env=args.vec_env,
        eval_freq=args.eval_freq,
        eval_episodes=args.eval_episodes,
        dagger=args.dagger,
        hyperparams=args.hyperparams,
        progress=not args.no_progress,
        verbose=args.verbose,
        argv=["crop-gym", *sys.argv[1:]],
        trust_checkpoint=args.trust_checkpoint,
        dry_run=args.dry_run,
        log=lambda msg: print(f"crop-gym train: {msg}", file=report_stream("-")),
    )
    out = report_stream()
    if args.dry_run:
        import yaml

        print(
            f"ok: {meta['algo']} on {meta['env_id']} ({meta['config_source']}), "
            f"{meta['steps']} steps; resolved config:",
            file=out,
        )
        print(yaml.safe_dump(meta["config"], sort_keys=False), end="", file=out)
        return 0
    fin = meta.get("final_validation") or {}
    best = meta.get("best_validation") or {}
    rl = (meta.get("phases") or {}).get("rl") or {}
    print(f"run: {args.out}  ({meta['algo']} on {meta['env_id']}, seed {meta['seed']})", file=out)
    if "bc" in meta.get("phases", {}):
        bc = meta["phases"]["bc"]
        line = f"behaviour cloning: agreement with CROP {bc['train_agreement']:.3f} (train)"
        if bc.get("val_agreement") is not None:
            line += f", {bc['val_agreement']:.3f} (held-out episodes)"
        if bc.get("val_equivalent_agreement") is not None:
            line += f", {bc['val_equivalent_agreement']:.3f} counting CROP-equivalent choices"
        print(line, file=out)
    if rl.get("steps_per_s"):
        print(
            f"RL: {rl['steps']} steps, {rl['steps_per_s']:.1f} steps/s ({rl['steps_per_s_excluding_eval']:.1f} excluding validation)",
            file=out,
        )
    for label, row in (("final", fin), ("best", best)):
        if row.get("ratio_to_crop") is not None:
            extra = (
                f", gain ratio {row['gain_ratio_to_crop']:.4f}"
                if row.get("gain_ratio_to_crop") is not None
                else ""
            )
            print(
                f"{label} validation (steps {row['steps']}): ratio to CROP {row['ratio_to_crop']:.4f}{extra}",
                file=out,
            )
    ttt = meta.get("time_to_target") or {}
    hit = ttt.get("ratio_to_crop")
    if hit:
        print(
            f"reached {ttt['target']} x CROP (mean F) at step {hit['steps']} ({hit['phase']}), {hit['wall_s']:.0f} s into the run",
            file=out,
        )
    return 0


def _baseline_list(text: str) -> tuple[str, ...] | None:
    from crop_gym.agents.evaluation import DEFAULT_BASELINES

    if text == "all":
        return DEFAULT_BASELINES
    if text == "none":
        return ()
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    return names


def _eval(args: argparse.Namespace) -> int:
    _require_rl()
    import torch as th

    from crop_gym.agents._io import atomic_write_json, versions
    from crop_gym.agents.checkpoint import load_checkpoint, resolve_model_path
    from crop_gym.agents.config import TRAIN_SEED_LIMIT, check_env_id
    from crop_gym.agents.evaluation import PolicyAgent, evaluate
    from crop_gym.errors import ConfigError
    from crop_gym.io import check_outputs

    th.set_num_threads(1)
    path = resolve_model_path(args.model)
    folders = check_outputs({"--json": args.json}, inputs=[path])
    if args.env is not None:
        check_env_id(args.env)
    model, meta = load_checkpoint(path, algo=args.algo, trust=args.trust_checkpoint)
    env_id = args.env or meta.get("env_id")
    if not env_id:
        raise ConfigError(f"{path}: the checkpoint does not name its environment; pass --env")
    check_env_id(env_id, where=f"{path}: env_id")
    env_kwargs = meta.get("env_kwargs") if env_id == meta.get("env_id") else {}
    if args.seed < TRAIN_SEED_LIMIT:
        warnings.warn(
            f"--seed {args.seed} is in the training seed range [0, {TRAIN_SEED_LIMIT}); use "
            ">= 10^9 for held-out results",
            stacklevel=1,
        )
    agent = PolicyAgent(model, direct=False if args.predict else None)
    baselines = _baseline_list(args.baselines)
    kwargs: dict[str, Any] = {
        "episodes": args.episodes,
        "first_seed": args.seed,
        "env_kwargs": env_kwargs,
        "progress": not args.no_progress,
    }
    if args.safe_stop is not None:
        kwargs["safe_stop"] = args.safe_stop
    if baselines is not None:
        kwargs["baselines"] = baselines
    rep = evaluate(agent, env_id, **kwargs)
    report = {
        "model": meta.get("path"),
        "algo": meta.get("algo"),
        "policy": meta.get("policy"),
        "agent": agent.name,
        "trained_on": meta.get("env_id"),
        "train_seed": meta.get("seed"),
        "train_steps": meta.get("num_timesteps"),
        "bc_demos": meta.get("bc_demos"),
        "eval_seed": args.seed,
        **rep,
        "versions": versions(),
    }
    if args.json == "-":
        import json

        from crop_gym.agents._io import to_jsonable

        _print_report(report, report_stream(args.json))
        print(json.dumps(to_jsonable(report), indent=2))
        return 0
    out = report_stream(args.json)
    _print_report(report, out)
    if args.json:
        atomic_write_json(args.json, report, folder=folders[args.json])
        print(f"wrote {args.json}", file=out)
    return 0


def _print_report(rep: dict[str, Any], out: TextIO) -> None:
    print(
        f"{rep['agent']} trained on {rep['trained_on']} (seed {rep['train_seed']}), evaluated on {rep['env_id']}, "
        f"{rep['episodes']} episodes, seeds {rep['first_seed']}..{rep['first_seed'] + rep['episodes'] - 1}",
        file=out,
    )
    if rep["kind"] == "static":
        print(
            f"  {'policy':<22} mean F {rep['policy_mean_F']:9.3f}   mean gain {rep['policy_mean_gain']:8.3f}",
            file=out,
        )
        for name, b in rep["baselines"].items():
            print(
                f"  {name:<22} mean F {b['mean_F']:9.3f}   mean gain {b['mean_gain']:8.3f}   "
                f"policy/it: F {b['ratio']:.4f}, gain {b['gain_ratio'] if b['gain_ratio'] is None else round(b['gain_ratio'], 4)}",
                file=out,
            )
        if rep.get("ratio_to_crop") is not None:
            print(
                f"  ratio_to_crop {rep['ratio_to_crop']:.4f}   gain_ratio_to_crop {rep['gain_ratio_to_crop']:.4f}   episodes vs CROP {rep['episodes_vs_crop']}",
                file=out,
            )
    else:

        def h(v: float | None) -> float:
            return v / 3600 if v else float("nan")

        rows = [
            (
                "policy",
                rep["policy_mean_jct_s"],
                rep["policy_mean_time_in_system_s"],
                rep["policy_completed"],
                rep["policy_effective_gpu_hours"],
            )
        ]
        rows += [
            (
                n,
                b["mean_jct_s"],
                b["mean_time_in_system_s"],
                b["completed"],
                b["effective_gpu_hours"],
            )
            for n, b in rep["baselines"].items()
        ]
        for name, j, t, c, e in rows:
            print(
                f"  {name:<18} mean JCT {h(j):7.3f} h   time in system {h(t):7.3f} h   "
                f"completed {c:5d}   effective GPU-h {e:9.2f}",
                file=out,
            )
        for name, m in (rep.get("reference_mean_jct_h") or {}).items():
            print(
                f"  {name:<18} mean JCT {m:7.3f} h (time in system, same env and windows)   "
                f"policy/it {rep['mean_jct_ratio_to'][name]:.4f}",
                file=out,
            )
        if rep.get("mean_jct_ratio_to_crop") is not None:
            lo, hi = rep["mean_jct_ratio_to_crop_ci"]
            print(
                f"  policy mean JCT {rep['policy_mean_jct_h']:.3f} h   "
                f"mean_jct_ratio_to_crop {rep['mean_jct_ratio_to_crop']:.4f} [{lo:.4f}, {hi:.4f}] "
                "(< 1: faster than CROP)",
                file=out,
            )
        if rep.get("best_heuristic") is not None:
            lo, hi = rep["mean_jct_ratio_to_best_heuristic_ci"]
            print(
                f"  best heuristic {rep['best_heuristic']}   mean_jct_ratio_to_best_heuristic "
                f"{rep['mean_jct_ratio_to_best_heuristic']:.4f} [{lo:.4f}, {hi:.4f}] (95 % bootstrap)",
                file=out,
            )
        if rep.get("split") is not None:
            sp = rep["split"]
            print(
                f"  split: {sp['part']} part (train_fraction {sp['train_fraction']}) of "
                f"{', '.join(sp['traces'])}; held out: {', '.join(sp['held_out_traces']) or 'none'}",
                file=out,
            )
        if rep.get("jct_ratio_to_crop") is not None:
            print(
                f"  time_in_system_ratio_to_crop {rep['time_in_system_ratio_to_crop']:.4f}   "
                f"jct_ratio_to_crop {rep['jct_ratio_to_crop']:.4f} (< 1: faster than CROP)   "
                f"ratio_to_crop (GPU-h) {rep['ratio_to_crop']:.4f}",
                file=out,
            )
