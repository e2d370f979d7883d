"""Train the shipped online policy on several seeds, evaluate them on held-out windows, ship one.

``python scripts/train_default_online.py`` (see ``--help``):

1. trains one run per training seed (``--seeds``, default 1..5, all < 10^6) with
   ``crop_gym.agents.training.train``: behaviour cloning of the config's teacher (``bc.teacher`` in
   ``agents/configs/maskable_ppo.yml``: *sjf-crop*, :mod:`crop_gym.baselines.online`) on ``--bc-demos``
   training windows, one DAgger round, then MaskablePPO fine-tuning for the config's
   ``n_timesteps``; each run keeps its best validation model (windows from 5·10^8);
2. evaluates every run's ``best_model.zip`` on ``--windows`` held-out windows (reset seeds 10^9,
   10^9 + 1, ...; on the *eval part* of the traces: training played ``split="train"``, docs/ENVS.md
   *Honest splits*) beside CROP and the teacher played through the same environment on the same
   windows (:func:`crop_gym.agents.evaluation.evaluate_online`);
3. summarises in the style of rliable (Agarwal et al., 2021): per seed the mean JCT and its ratio
   to CROP's and to the teacher's; over seeds × windows the IQM of the per-window ratio; 95 %
   stratified bootstrap intervals (windows resampled, then the seeds within each window);
4. writes ``docs/results/online_rl.{json,csv}`` and, with ``--ship``, exports the run of the first
   seed (fixed in advance, not the best one) as ``agents/checkpoints/default-online.zip``.

Run it under ``nice``; ``--jobs`` processes train at once (each on one torch thread).
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

#: First held-out window (crop_gym.agents.config.EVAL_SEED_BASE).
HELD_OUT = 10**9


def _eval_one(job: dict[str, Any]) -> dict[str, Any]:
    import torch as th

    th.set_num_threads(1)
    from crop_gym.agents.checkpoint import load_checkpoint
    from crop_gym.agents.evaluation import PolicyAgent, evaluate_online

    model, meta = load_checkpoint(job["model"])
    t = time.process_time()
    rep = evaluate_online(
        PolicyAgent(model),
        job["env_id"],
        episodes=job["windows"],
        first_seed=HELD_OUT,
        env_kwargs=meta.get("env_kwargs") or {},
        baselines=(),
        references=tuple(job["references"]),
    )
    return {
        "seed": job["seed"],
        "policy": [r["policy"]["mean_jct_h"] for r in rep["per_episode"]],
        "references": {
            n: [r["references"][n] for r in rep["per_episode"]] for n in job["references"]
        },
        "cpu_s": time.process_time() - t,
    }


def bootstrap(
    policy: np.ndarray, ref: np.ndarray, *, reps: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """:func:`crop_gym.agents.stats.ratio_bootstrap` of the mean JCT, with ``improvement`` (1 − the ratio
    of means, lower JCT is better) and its interval."""
    from crop_gym.agents.stats import ratio_bootstrap

    out = ratio_bootstrap(policy, ref, reps=reps, seed=seed)
    lo, hi = out["ratio_of_means_ci95"]
    return {
        "ratio_of_means": out["ratio_of_means"],
        "ratio_of_means_ci95": [lo, hi],
        "improvement": 1 - out["ratio_of_means"],
        "improvement_ci95": [1 - hi, 1 - lo],
        "iqm_ratio": out["iqm_ratio"],
        "iqm_ratio_ci95": out["iqm_ratio_ci95"],
        "bootstrap_reps": reps,
    }


def summarise(env_id: str, trained: list[dict[str, Any]], evals: list[dict[str, Any]]) -> dict:
    """The report of docs/results/online_rl.json."""
    evals = sorted(evals, key=lambda e: e["seed"])
    refs = next(e["references"] for e in evals if e["references"])
    P = np.array([e["policy"] for e in evals])
    crop = np.array(refs["crop"])
    teacher = np.array(refs["sjf-crop"])
    per_seed = []
    for e, t in zip(evals, sorted(trained, key=lambda x: x["seed"]), strict=True):
        p = np.array(e["policy"])
        per_seed.append(
            {
                "seed": e["seed"],
                "mean_jct_h": float(p.mean()),
                "ratio_to_crop": float(p.mean() / crop.mean()),
                "ratio_to_teacher": float(p.mean() / teacher.mean()),
                "train_cpu_s": t["cpu_s"],
                "train_wall_s": t["wall_s"],
                "bc": t["bc"],
                "best_validation": t["best_validation"],
            }
        )
    return {
        "env_id": env_id,
        "teacher": "sjf-crop",
        "windows": int(P.shape[1]),
        "held_out_seeds": [HELD_OUT, HELD_OUT + int(P.shape[1]) - 1],
        "training_seeds": [e["seed"] for e in evals],
        "crop_mean_jct_h": float(crop.mean()),
        "teacher_mean_jct_h": float(teacher.mean()),
        "policy_mean_jct_h": float(P.mean()),
        "vs_crop": bootstrap(P, crop),
        "vs_teacher": bootstrap(P, teacher),
        "per_seed": per_seed,
        "per_window": {
            "crop": crop.tolist(),
            "teacher": teacher.tolist(),
            "policy": P.tolist(),
        },
    }


def _csv(rep: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        [
            "env_id",
            "train_seed",
            "window_seed",
            "policy_mean_jct_h",
            "crop_mean_jct_h",
            "teacher_mean_jct_h",
        ]
    )
    pw = rep["per_window"]
    for i, s in enumerate(rep["training_seeds"]):
        for j in range(rep["windows"]):
            w.writerow(
                [
                    rep["env_id"],
                    s,
                    HELD_OUT + j,
                    f"{pw['policy'][i][j]:.6f}",
                    f"{pw['crop'][j]:.6f}",
                    f"{pw['teacher'][j]:.6f}",
                ]
            )
    return buf.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="crop_gym/OnlinePlacement-Bursty-v2")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--bc-demos", type=int, default=100, help="teacher windows (default 100)")
    p.add_argument("--steps", type=int, default=None, help="RL steps (default: the config's)")
    p.add_argument("--dagger", type=int, default=None, help="DAgger rounds (default: the config's)")
    p.add_argument("--windows", type=int, default=30, help="held-out windows (default 30)")
    p.add_argument("--jobs", type=int, default=2, help="processes at once (default 2)")
    p.add_argument("--runs", default="runs/online", help="directory of the training runs")
    p.add_argument("--results", default="docs/results/online_rl", help="OUT.json and OUT.csv")
    p.add_argument(
        "--ship", action="store_true", help="export the first seed's run as default-online"
    )
    p.add_argument("--skip-train", action="store_true", help="evaluate existing runs only")
    a = p.parse_args(argv)
    from crop_gym.agents.config import TRAIN_SEED_LIMIT
    from crop_gym.agents.seed_runs import run_summary, train_seed

    if not a.seeds or any(not 0 <= s < TRAIN_SEED_LIMIT for s in a.seeds):
        print(f"--seeds must be in [0, {TRAIN_SEED_LIMIT})", file=sys.stderr)
        return 2
    if a.windows < 2 or a.jobs < 1 or a.bc_demos < 1:
        print("--windows must be >= 2, --jobs and --bc-demos >= 1", file=sys.stderr)
        return 2
    runs = Path(a.runs) / a.env.split("/")[-1]
    tag = a.env.split("/")[-1]
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
    ctx = get_context("fork")
    t0 = time.perf_counter()
    with ctx.Pool(min(a.jobs, len(jobs))) as pool:
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
                "model": str(Path(j["out"]) / "best_model.zip"),
                "windows": a.windows,
                "references": ("crop", "sjf-crop") if i == 0 else (),
            }
            for i, j in enumerate(jobs)
        ]
        evals = pool.map(_eval_one, ev_jobs)
    rep = summarise(a.env, trained, evals)
    rep["command"] = " ".join(["python scripts/train_default_online.py", *(argv or sys.argv[1:])])
    rep["bc_demos"] = a.bc_demos
    rep["wall_s"] = time.perf_counter() - t0
    out = Path(a.results)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.name == "online_rl":
        out = out.with_name(f"online_rl_{tag}") if tag != "OnlinePlacement-Bursty-v1" else out
    out.with_suffix(".json").write_text(json.dumps(rep, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".csv").write_text(_csv(rep), encoding="utf-8")
    v = rep["vs_crop"]
    print(
        f"{a.env}: policy {rep['policy_mean_jct_h']:.2f} h, CROP {rep['crop_mean_jct_h']:.2f} h, "
        f"teacher {rep['teacher_mean_jct_h']:.2f} h; improvement over CROP {100 * v['improvement']:.1f} % "
        f"[{100 * v['improvement_ci95'][0]:.1f}, {100 * v['improvement_ci95'][1]:.1f}], IQM ratio "
        f"{v['iqm_ratio']:.3f} [{v['iqm_ratio_ci95'][0]:.3f}, {v['iqm_ratio_ci95'][1]:.3f}]; "
        f"ratio to teacher {rep['vs_teacher']['ratio_of_means']:.3f} "
        f"[{rep['vs_teacher']['ratio_of_means_ci95'][0]:.3f}, {rep['vs_teacher']['ratio_of_means_ci95'][1]:.3f}]"
    )
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.csv')}")
    if a.ship:
        from crop_gym.agents.checkpoint import default_checkpoint, export_checkpoint

        first = rep["per_seed"][0]
        dest = export_checkpoint(
            Path(jobs[0]["out"]) / "best_model.zip",
            default_checkpoint("default-online"),
            source=f"scripts/train_default_online.py, training seed {first['seed']}",
            held_out_evaluation={
                "windows": rep["windows"],
                "mean_jct_h": first["mean_jct_h"],
                "ratio_to_crop": first["ratio_to_crop"],
                "ratio_to_teacher": first["ratio_to_teacher"],
            },
        )
        print(f"shipped {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
