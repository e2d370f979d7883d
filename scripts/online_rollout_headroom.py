"""Online headroom: the rollout on the best JCT heuristic beside that heuristic, on held-out windows.

``python scripts/online_rollout_headroom.py`` plays, on each ``--ids`` online task (default
``OnlinePlacement-v2`` and ``OnlinePlacement-Bursty-v2``), ``--windows`` evaluation windows (the
held-out part of the traces, ``split="eval"``; reset seeds 10^9, 10^9 + 1, ...):

* the four JCT heuristics of :data:`crop_gym.baselines.online.JCT_HEURISTICS` (the best of them
  by mean JCT on these windows is the reference, as ``crop-gym eval`` reports it);
* the rollout on ``--base`` (:func:`crop_gym.baselines.online.rollout_policy`: the base's own
  action, the next ``--top`` view jobs in its order and *wait* tried, each completed by the base
  on a copy of the environment; ``--depth`` truncates the completions), once per ``--top`` value.

It prints, per task and setting, the rollout's mean JCT over the best heuristic's with a 95 %
paired bootstrap interval over the windows (:func:`crop_gym.agents.stats.ratio_bootstrap`, 2000
resamples, seed 0), the wall-clock seconds per window, and how often the rollout left the base
policy's action; and writes every per-window record to ``--out`` (default
``docs/results/online_rollout.json``, rewritten after each window).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HELD_OUT = 10**9
DEFAULT_IDS = ("crop_gym/OnlinePlacement-v2", "crop_gym/OnlinePlacement-Bursty-v2")


def _summary(records: list[dict[str, Any]], setting: str) -> dict[str, Any]:
    """Ratio of the rollout ``setting`` to the best heuristic on ``records`` (one task)."""
    import numpy as np

    from crop_gym.agents.stats import ratio_bootstrap
    from crop_gym.baselines.online import JCT_HEURISTICS

    heur = {n: float(np.mean([r["heuristics"][n] for r in records])) for n in JCT_HEURISTICS}
    best = min(JCT_HEURISTICS, key=heur.__getitem__)
    ref = np.array([r["heuristics"][best] for r in records])
    pol = np.array([r["rollouts"][setting]["mean_jct_h"] for r in records])
    boot = ratio_bootstrap(pol[None, :], ref, reps=2000, seed=0)
    secs = [r["rollouts"][setting]["seconds"] for r in records]
    return {
        "windows": len(records),
        "best_heuristic": best,
        "heuristic_mean_jct_h": heur,
        "rollout_mean_jct_h": float(pol.mean()),
        "ratio_to_best_heuristic": boot["ratio_of_means"],
        "ratio_to_best_heuristic_ci": boot["ratio_of_means_ci95"],
        "windows_better": int((pol < ref - 1e-9).sum()),
        "windows_worse": int((pol > ref + 1e-9).sum()),
        "seconds_per_window": float(np.mean(secs)),
        "seconds_per_window_max": float(np.max(secs)),
        "deviations_per_window": float(
            np.mean([r["rollouts"][setting]["deviations"] for r in records])
        ),
        "waits_chosen_per_window": float(
            np.mean([r["rollouts"][setting]["waits_chosen"] for r in records])
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ids", nargs="+", default=list(DEFAULT_IDS), help="online task IDs")
    p.add_argument("--windows", type=int, default=20, help="held-out windows per task")
    p.add_argument("--base", default="srsf-crop", help="base heuristic of the rollout")
    p.add_argument(
        "--top", type=int, nargs="+", default=[3], help="placements tried besides the base's"
    )
    p.add_argument(
        "--depth", type=int, default=None, help="steps per completion (default: to the end)"
    )
    p.add_argument("--no-wait", action="store_true", help="do not try waiting")
    p.add_argument("--out", default=str(ROOT / "docs" / "results" / "online_rollout.json"))
    a = p.parse_args(argv)
    if a.windows < 1 or any(t < 0 for t in a.top) or (a.depth is not None and a.depth < 1):
        print("--windows and --depth must be >= 1, --top >= 0", file=sys.stderr)
        return 2

    import gymnasium as gym

    import crop_gym  # noqa: F401  (registers the IDs)
    from crop_gym.baselines.online import JCT_HEURISTICS, make_online_policy, play, rollout_policy
    from crop_gym.envs.registration import ENV_IDS, with_split
    from crop_gym.errors import CropGymError
    from crop_gym.io import atomic_write, check_outputs

    try:
        check_outputs({"--out": a.out})
        for i in a.ids:
            if i not in ENV_IDS or "Online" not in i:
                raise CropGymError(f"--ids: {i!r} is not a registered online task")
        rollout_policy(a.base)  # an unknown base fails before any window
    except (CropGymError, KeyError) as exc:
        print(f"online_rollout_headroom: {str(exc).strip(chr(39))}", file=sys.stderr)
        return 2

    settings = {
        f"top{t}"
        + ("" if a.depth is None else f"-depth{a.depth}")
        + ("-nowait" if a.no_wait else ""): t
        for t in a.top
    }
    report: dict[str, Any] = {
        "command": " ".join(["python scripts/online_rollout_headroom.py", *(argv or sys.argv[1:])]),
        "base": a.base,
        "depth": a.depth,
        "consider_wait": not a.no_wait,
        "first_seed": HELD_OUT,
        "split": "eval",
        "tasks": {},
    }
    for env_id in a.ids:
        env = gym.make(env_id, **with_split(env_id, {}, "eval"))
        records: list[dict[str, Any]] = []
        task: dict[str, Any] = {"records": records, "summary": {}}
        report["tasks"][env_id] = task
        for w in range(a.windows):
            seed = HELD_OUT + w
            rec: dict[str, Any] = {"seed": seed, "heuristics": {}, "rollouts": {}}
            for name in JCT_HEURISTICS:
                rec["heuristics"][name] = play(env, make_online_policy(name), seed).mean_jct_h
            rec["trace"] = env.unwrapped.window_trace  # type: ignore[attr-defined]
            for setting, top in settings.items():
                pol = rollout_policy(a.base, top=top, consider_wait=not a.no_wait, depth=a.depth)
                t0 = time.perf_counter()
                ep = play(env, pol, seed)
                rec["rollouts"][setting] = {
                    "mean_jct_h": ep.mean_jct_h,
                    "seconds": time.perf_counter() - t0,
                    "decisions": pol.stats.decisions,
                    "completions": pol.stats.completions,
                    "deviations": pol.stats.deviations,
                    "waits_chosen": pol.stats.waits_chosen,
                }
            records.append(rec)
            task["summary"] = {s: _summary(records, s) for s in settings}
            atomic_write(Path(a.out), json.dumps(report, indent=2) + "\n")
            base_h = rec["heuristics"][a.base]
            line = ", ".join(
                f"{s} {r['mean_jct_h']:.3f} h ({r['mean_jct_h'] / base_h:.4f} x {a.base}, "
                f"{r['seconds']:.0f} s)"
                for s, r in rec["rollouts"].items()
            )
            print(f"{env_id} window {seed}: {a.base} {base_h:.3f} h; {line}", flush=True)
        env.close()
        for s, summ in task["summary"].items():
            lo, hi = summ["ratio_to_best_heuristic_ci"]
            print(
                f"{env_id} {s}: {summ['rollout_mean_jct_h']:.3f} h vs {summ['best_heuristic']} "
                f"{summ['heuristic_mean_jct_h'][summ['best_heuristic']]:.3f} h: ratio "
                f"{summ['ratio_to_best_heuristic']:.4f} [{lo:.4f}, {hi:.4f}] over "
                f"{summ['windows']} windows ({summ['windows_better']} better, "
                f"{summ['windows_worse']} worse); {summ['seconds_per_window']:.1f} s per window "
                f"(max {summ['seconds_per_window_max']:.0f})",
                flush=True,
            )
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
