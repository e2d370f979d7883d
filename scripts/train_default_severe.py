"""Train the shipped static policy that beats CROP, on several seeds; evaluate; ship one.

``python scripts/train_default_severe.py`` (see ``--help``):

1. trains one run per training seed (``--seeds``, default 1..5, all < 10^6) with
   ``crop_gym.agents.training.train`` on ``crop_gym/Placement-Severe-v0``: behaviour cloning of the
   config's teacher (``bc.teacher`` of that ID in ``agents/configs/maskable_ppo.yml``:
   *crop-rollout*, CROP with one step of lookahead, :mod:`crop_gym.baselines.rollout_expert`) on
   ``--bc-demos`` training instances, then the config's DAgger rounds (states the policy visits,
   labelled by the teacher); ``--steps`` RL steps after that (default 0: the cloned policy);
2. evaluates every run's final model greedily on ``--episodes`` held-out instances (reset seeds
   10^9, 10^9 + 1, ...) beside CROP on the same instances (:func:`crop_gym.agents.evaluation.evaluate_static`);
3. summarises in the style of rliable: per seed the mean F and its ratio to CROP's; over seeds ×
   instances the ratio of means and the IQM of the per-instance ratios, with 95 % stratified
   bootstrap intervals (:mod:`crop_gym.agents.stats`);
4. writes ``docs/results/static_rl_<ID>.{json,csv}`` and, with ``--ship``, exports the run of the
   first seed (fixed in advance, not the best one) as ``agents/checkpoints/default-severe.zip``
   (``crop-gym eval --model default-severe``).

The teacher costs about a second per episode, so training is CPU-bound (about 7 minutes per
seed on one core); ``--jobs`` processes train at once (each on one torch thread).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from collections.abc import Sequence
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: First held-out instance (crop_gym.agents.config.EVAL_SEED_BASE).
HELD_OUT = 10**9


def _eval_one(job: dict[str, Any]) -> dict[str, Any]:
    import torch as th

    th.set_num_threads(1)
    from crop_gym.agents.checkpoint import load_checkpoint
    from crop_gym.agents.evaluation import PolicyAgent, evaluate_static

    model, meta = load_checkpoint(job["model"])
    t = time.process_time()
    rep = evaluate_static(
        PolicyAgent(model),
        job["env_id"],
        episodes=job["episodes"],
        first_seed=HELD_OUT,
        env_kwargs=meta.get("env_kwargs") or {},
        baselines=("crop",),
        random_reference=False,
    )
    return {
        "seed": job["seed"],
        "policy": [r["policy"]["F"] for r in rep["per_episode"]],
        "crop": [r["baselines"]["crop"]["F"] for r in rep["per_episode"]],
        "cpu_s": time.process_time() - t,
    }


def summarise(env_id: str, trained: list[dict[str, Any]], evals: list[dict[str, Any]]) -> dict:
    """The report of docs/results/static_rl_<ID>.json."""
    from crop_gym.agents.stats import ratio_bootstrap

    evals = sorted(evals, key=lambda e: e["seed"])
    trained = sorted(trained, key=lambda t: t["seed"])
    crop = np.array(evals[0]["crop"])
    if any(not np.allclose(e["crop"], crop, rtol=0, atol=1e-9) for e in evals):
        raise RuntimeError("CROP's F differs between evaluations of the same instances")
    P = np.array([e["policy"] for e in evals])
    per_seed = [
        {
            "seed": e["seed"],
            "mean_F": float(np.mean(e["policy"])),
            "ratio_to_crop": float(np.mean(e["policy"]) / crop.mean()),
            "instances_below_crop": int(np.sum(np.array(e["policy"]) < crop - 1e-9)),
            "train_cpu_s": t["cpu_s"],
            "train_wall_s": t["wall_s"],
            "teacher": t["teacher"],
            "bc": t["bc"],
        }
        for e, t in zip(evals, trained, strict=True)
    ]
    return {
        "env_id": env_id,
        "teacher": trained[0]["teacher"],
        "episodes": int(P.shape[1]),
        "held_out_seeds": [HELD_OUT, HELD_OUT + int(P.shape[1]) - 1],
        "training_seeds": [e["seed"] for e in evals],
        "crop_mean_F": float(crop.mean()),
        "policy_mean_F": float(P.mean()),
        "vs_crop": ratio_bootstrap(P, crop),
        "per_seed": per_seed,
        "per_episode": {"crop": crop.tolist(), "policy": P.tolist()},
    }


def _csv(rep: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["env_id", "train_seed", "instance_seed", "policy_F", "crop_F"])
    pe = rep["per_episode"]
    for i, s in enumerate(rep["training_seeds"]):
        for j in range(rep["episodes"]):
            w.writerow(
                [
                    rep["env_id"],
                    s,
                    HELD_OUT + j,
                    f"{pe['policy'][i][j]:.6f}",
                    f"{pe['crop'][j]:.6f}",
                ]
            )
    return buf.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="crop_gym/Placement-Severe-v0")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--bc-demos", type=int, default=200, help="teacher episodes (default 200)")
    p.add_argument("--steps", type=int, default=0, help="RL steps after cloning (default 0)")
    p.add_argument("--dagger", type=int, default=None, help="DAgger rounds (default: the config's)")
    p.add_argument("--episodes", type=int, default=100, help="held-out instances (default 100)")
    p.add_argument("--jobs", type=int, default=1, help="processes at once (default 1)")
    p.add_argument("--runs", default="runs/static", help="directory of the training runs")
    p.add_argument("--results", default=None, help="OUT (.json and .csv are added)")
    p.add_argument("--ship", action="store_true", help="export the first seed as default-severe")
    p.add_argument("--skip-train", action="store_true", help="evaluate existing runs only")
    a = p.parse_args(argv)
    from crop_gym.agents.config import TRAIN_SEED_LIMIT
    from crop_gym.agents.seed_runs import run_summary, train_seed

    if not a.seeds or any(not 0 <= s < TRAIN_SEED_LIMIT for s in a.seeds):
        print(f"--seeds must be in [0, {TRAIN_SEED_LIMIT})", file=sys.stderr)
        return 2
    if a.episodes < 2 or a.jobs < 1 or a.bc_demos < 1 or a.steps < 0:
        print("--episodes must be >= 2, --jobs and --bc-demos >= 1, --steps >= 0", file=sys.stderr)
        return 2
    tag = a.env.split("/")[-1]
    runs = Path(a.runs) / tag
    jobs = [
        {
            "env_id": a.env,
            "steps": a.steps,
            "seed": s,
            "out": str(runs / f"seed{s}"),
            "bc_demos": a.bc_demos,
            "dagger": a.dagger,
        }
        for s in a.seeds
    ]
    t0 = time.perf_counter()
    with get_context("fork").Pool(min(a.jobs, len(jobs))) as pool:
        if a.skip_train:
            trained = [run_summary(j["out"]) for j in jobs]
        else:
            trained = pool.map(train_seed, jobs)
            for t in trained:
                print(f"seed {t['seed']}: {t['cpu_s']:.0f} CPU s, {t['wall_s']:.0f} s", flush=True)
        ev_jobs = [
            {
                "env_id": a.env,
                "seed": j["seed"],
                "model": str(Path(j["out"]) / "final_model.zip"),
                "episodes": a.episodes,
            }
            for j in jobs
        ]
        evals = pool.map(_eval_one, ev_jobs)
    rep = summarise(a.env, trained, evals)
    rep["command"] = " ".join(["python scripts/train_default_severe.py", *(argv or sys.argv[1:])])
    rep["bc_demos"] = a.bc_demos
    rep["rl_steps"] = a.steps
    rep["wall_s"] = time.perf_counter() - t0
    out = Path(a.results) if a.results else ROOT / "docs" / "results" / f"static_rl_{tag}"
    out.parent.mkdir(parents=True, exist_ok=True)
    from crop_gym.io import atomic_write_text

    atomic_write_text(out.with_suffix(".json"), json.dumps(rep, indent=2) + "\n")
    atomic_write_text(out.with_suffix(".csv"), _csv(rep))
    v = rep["vs_crop"]
    print(
        f"{a.env}: policy mean F {rep['policy_mean_F']:.3f}, CROP {rep['crop_mean_F']:.3f}; "
        f"ratio to CROP {v['ratio_of_means']:.4f} [{v['ratio_of_means_ci95'][0]:.4f}, "
        f"{v['ratio_of_means_ci95'][1]:.4f}], IQM ratio {v['iqm_ratio']:.4f} "
        f"[{v['iqm_ratio_ci95'][0]:.4f}, {v['iqm_ratio_ci95'][1]:.4f}]; per seed "
        + ", ".join(f"{s['seed']}: {s['ratio_to_crop']:.4f}" for s in rep["per_seed"])
    )
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.csv')}")
    if a.ship:
        from crop_gym.agents.checkpoint import default_checkpoint, export_checkpoint

        first = rep["per_seed"][0]
        dest = export_checkpoint(
            Path(jobs[0]["out"]) / "final_model.zip",
            default_checkpoint("default-severe"),
            source=f"scripts/train_default_severe.py, training seed {first['seed']}",
            held_out_evaluation={
                "episodes": rep["episodes"],
                "first_seed": HELD_OUT,
                "mean_F": first["mean_F"],
                "crop_mean_F": rep["crop_mean_F"],
                "ratio_to_crop": first["ratio_to_crop"],
            },
        )
        print(f"shipped {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
