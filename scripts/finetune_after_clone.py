"""Does RL fine-tuning improve on its own clone? A paired comparison on held-out instances.

``python scripts/finetune_after_clone.py --env crop_gym/Placement-Severe-v0 --steps 16384``
(see ``--help``; issue 32 item 4):

1. trains one run with :func:`crop_gym.agents.training.train`: behaviour cloning of the config's
   teacher on ``--bc-demos`` training instances, ``--dagger`` rounds, then ``--steps`` MaskablePPO
   steps with the config's ``finetune`` block (``--hyperparams KEY=VALUE`` overrides entries,
   e.g. ``finetune={learning_rate: 5.0e-5, ent_coef: 0.0, clip_range: 0.1, target_kl: 0.02}``);
   ``--skip-train`` evaluates an existing run directory instead; ``--from-checkpoint PATH``
   fine-tunes an existing clone (e.g. ``agents/checkpoints/default-severe.zip``) instead of
   cloning: it is copied into the run directory as ``bc_model.zip`` and the run resumes from it
   (the hyperparameters stored in the checkpoint apply, ``--hyperparams`` does not);
2. plays the run's ``bc_model.zip`` (the clone, RL step 0), ``best_model.zip`` (kept by
   validation on seeds from 5·10^8) and ``final_model.zip`` (the last RL step) greedily on the
   same ``--episodes`` held-out instances (reset seeds 10^9, 10^9 + 1, ...), beside CROP;
3. reports each model's mean F, its ratio to CROP's, and the *paired* ratio of the fine-tuned
   models' mean F to the clone's, with 95 % bootstrap intervals over the instances (the same
   resampled instances for numerator and denominator: :func:`crop_gym.agents.stats.ratio_bootstrap`
   with one training seed);
4. writes ``--results`` (``.json``; default ``docs/results/finetune_<ID>_seed<S>.json``).

The run's validation curve and the step of the kept model come from its run.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: First held-out instance (crop_gym.agents.config.EVAL_SEED_BASE).
HELD_OUT = 10**9

#: The run's models compared, in order: the clone first (the reference of the paired ratios).
MODELS = ("bc_model", "best_model", "final_model")


def held_out_F(model_path: Path, env_id: str, episodes: int) -> tuple[list[float], list[float]]:
    """Per-instance F of the model (greedy) and of CROP on held-out seeds 10^9 ...."""
    from crop_gym.agents.checkpoint import load_checkpoint
    from crop_gym.agents.evaluation import PolicyAgent, evaluate_static

    model, meta = load_checkpoint(model_path)
    rep = evaluate_static(
        PolicyAgent(model),
        env_id,
        episodes=episodes,
        first_seed=HELD_OUT,
        env_kwargs=meta.get("env_kwargs") or {},
        baselines=("crop",),
        random_reference=False,
    )
    return (
        [r["policy"]["F"] for r in rep["per_episode"]],
        [r["baselines"]["crop"]["F"] for r in rep["per_episode"]],
    )


def paired(policy: np.ndarray, ref: np.ndarray) -> dict[str, Any]:
    """Ratio of mean F to the reference's on the same instances, 95 % bootstrap interval."""
    from crop_gym.agents.stats import ratio_bootstrap

    b = ratio_bootstrap(policy[None, :], ref)
    return {
        "ratio_of_means": b["ratio_of_means"],
        "ratio_of_means_ci95": b["ratio_of_means_ci95"],
        "instances_above": int(np.sum(policy > ref + 1e-9)),
        "instances_below": int(np.sum(policy < ref - 1e-9)),
        "bootstrap_reps": b["bootstrap_reps"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="crop_gym/Placement-Severe-v0")
    p.add_argument("--seed", type=int, default=11, help="training seed (< 10^6)")
    p.add_argument("--bc-demos", type=int, default=40)
    p.add_argument("--dagger", type=int, default=1)
    p.add_argument("--steps", type=int, default=16384, help="RL steps after cloning")
    p.add_argument("--eval-freq", type=int, default=4096)
    p.add_argument(
        "--eval-episodes", type=int, default=None, help="validation episodes (default: config's)"
    )
    p.add_argument("--hyperparams", nargs="*", default=[], help="KEY=VALUE config overrides")
    p.add_argument("--episodes", type=int, default=100, help="held-out instances (default 100)")
    p.add_argument("--out", default=None, help="run directory (default runs/finetune/<ID>_seedS)")
    p.add_argument("--results", default=None, help="report JSON")
    p.add_argument("--skip-train", action="store_true", help="evaluate an existing run only")
    p.add_argument("--from-checkpoint", default=None, help="fine-tune this clone (no cloning)")
    a = p.parse_args(argv)
    from crop_gym.agents.config import TRAIN_SEED_LIMIT

    if not 0 <= a.seed < TRAIN_SEED_LIMIT:
        print(f"--seed must be in [0, {TRAIN_SEED_LIMIT})", file=sys.stderr)
        return 2
    if a.episodes < 2 or a.bc_demos < 1 or a.steps < 1:
        print("--episodes must be >= 2, --bc-demos and --steps >= 1", file=sys.stderr)
        return 2
    import torch as th

    th.set_num_threads(1)
    tag = a.env.split("/")[-1]
    out = Path(a.out) if a.out else ROOT / "runs" / "finetune" / f"{tag}_seed{a.seed}"
    t0 = time.perf_counter()
    if a.from_checkpoint and not a.skip_train:
        import shutil

        from crop_gym.agents.training import train

        if out.exists():
            print(f"--out {out}: exists; --from-checkpoint starts a new run", file=sys.stderr)
            return 2
        out.mkdir(parents=True)
        shutil.copyfile(a.from_checkpoint, out / "bc_model.zip")
        train(  # resumes from bc_model.zip (no periodic checkpoint yet): RL only
            env_id=a.env,
            steps=a.steps,
            seed=a.seed,
            out=out,
            bc_demos=1,
            resume=True,
            eval_freq=a.eval_freq,
            eval_episodes=a.eval_episodes,
            progress=False,
        )
    elif not a.skip_train:
        from crop_gym.agents.training import train

        train(
            env_id=a.env,
            steps=a.steps,
            seed=a.seed,
            out=out,
            bc_demos=a.bc_demos,
            dagger=a.dagger,
            eval_freq=a.eval_freq,
            eval_episodes=a.eval_episodes,
            hyperparams=a.hyperparams,
            progress=False,
        )
    train_wall = time.perf_counter() - t0
    from crop_gym.agents._io import read_json

    run = read_json(out / "run.json")
    F: dict[str, np.ndarray] = {}
    crop: np.ndarray | None = None
    for name in MODELS:
        pol, c = held_out_F(out / f"{name}.zip", a.env, a.episodes)
        F[name] = np.asarray(pol)
        if crop is not None and not np.allclose(c, crop, rtol=0, atol=1e-9):
            raise RuntimeError("CROP's F differs between evaluations of the same instances")
        crop = np.asarray(c)
    assert crop is not None
    clone = F["bc_model"]
    rep: dict[str, Any] = {
        "command": " ".join(["python scripts/finetune_after_clone.py", *(argv or sys.argv[1:])]),
        "env_id": a.env,
        "train_seed": a.seed,
        "from_checkpoint": a.from_checkpoint,
        "bc_demos": a.bc_demos,
        "dagger": a.dagger,
        "rl_steps": a.steps,
        "hyperparams": a.hyperparams,
        "finetune": (run.get("config") or {}).get("finetune"),
        "held_out_seeds": [HELD_OUT, HELD_OUT + a.episodes - 1],
        "validation": {
            "first_seed": run["seeds"]["validation_first_seed"],
            "episodes": run["seeds"]["validation_episodes"],
            "curve": [
                {k: r.get(k) for k in ("steps", "phase", "ratio_to_crop")} for r in run["curve"]
            ],
            "best_steps": (run.get("best_validation") or {}).get("steps"),
        },
        "crop_mean_F": float(crop.mean()),
        "models": {
            name: {
                "mean_F": float(F[name].mean()),
                "vs_crop": paired(F[name], crop),
                "vs_clone": None if name == "bc_model" else paired(F[name], clone),
            }
            for name in MODELS
        },
        "per_episode": {"crop": crop.tolist(), **{n: F[n].tolist() for n in MODELS}},
        "train_wall_s": train_wall,
        "wall_s": time.perf_counter() - t0,
    }
    dest = (
        Path(a.results) if a.results else ROOT / "docs" / "results" / f"finetune_{tag}_seed{a.seed}"
    )
    dest = dest.with_suffix(".json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    from crop_gym.io import atomic_write_text

    atomic_write_text(dest, json.dumps(rep, indent=2) + "\n")
    curve = ", ".join(f"{r['steps']}: {r['ratio_to_crop']:.4f}" for r in rep["validation"]["curve"])
    print(f"{a.env} seed {a.seed}: validation {curve}; kept step {rep['validation']['best_steps']}")
    for name in MODELS:
        m = rep["models"][name]
        line = f"  {name}: mean F {m['mean_F']:.3f}, x CROP {_ci(m['vs_crop'])}"
        if m["vs_clone"] is not None:
            line += f", x clone {_ci(m['vs_clone'])}"
        print(line)
    print(f"  -> {dest} ({rep['wall_s']:.0f} s)")
    return 0


def _ci(d: dict[str, Any]) -> str:
    lo, hi = d["ratio_of_means_ci95"]
    return f"{d['ratio_of_means']:.4f} [{lo:.4f}, {hi:.4f}]"


if __name__ == "__main__":
    raise SystemExit(main())
