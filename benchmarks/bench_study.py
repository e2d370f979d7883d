"""CPU time of a study, estimated from a timed sample: every run of one seed on a prefix of its trace.

Run from the repository root (after ``pip install -e .``, or with ``PYTHONPATH=.``)::

    python benchmarks/bench_study.py                        # docs/studies/elasticflow_full.yaml, 10 %
    python benchmarks/bench_study.py --fraction 0.05 --workers 2 --json est.json

How the estimate is made: every run of the study with seed 0 (for the full study: 10 traces x 9
policies x 3 abnormality profiles = 270 runs) is executed exactly as ``crop-gym study`` executes it
(:func:`crop_gym.study.worker.execute_run`) but on the first ``max(min_jobs, fraction x n)`` jobs of
its ``n``-job trace (the whole trace if that is more). Its CPU time (``time.process_time`` of the
worker, trace loading included) is scaled by ``n / jobs simulated``: the jobs of ElasticFlow's
traces arrive at a roughly steady rate, so a prefix of the jobs covers the same share of the
simulated time, of the arrivals and of the health events. The estimate of one seed is the sum over
its runs; other seeds cost the same (the seed only changes the health timeline). CPU time, not wall
time, so that other work on the machine inflates the figure less; the scaling is checked by running
one trace in full (``--check TRACE:POLICY:PROFILE``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def timed_run(run: Any) -> tuple[str, float, float]:
    """Execute ``run``; return its id, process CPU seconds and wall seconds."""
    from crop_gym.study.worker import execute_run

    c0, t0 = time.process_time(), time.perf_counter()
    execute_run(run)
    return run.run_id, time.process_time() - c0, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="docs/studies/elasticflow_full.yaml")
    ap.add_argument("--fraction", type=float, default=0.1, help="share of each trace simulated")
    ap.add_argument("--min-jobs", type=int, default=300, help="simulate at least this many jobs")
    ap.add_argument("--workers", type=int, default=1, help="processes (each run is timed alone)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", default=None, help="also run TRACE:POLICY:PROFILE in full")
    ap.add_argument("--json", default=None, help="write the per-run figures as JSON")
    args = ap.parse_args()

    from crop_gym.study.grid import expand
    from crop_gym.study.runner import estimated_jobs
    from crop_gym.study.spec import load_study

    spec = load_study(args.study)
    runs = [r for r in expand(spec) if r.seed == spec.seeds[0]]
    runs = [dataclasses.replace(r, seed=args.seed) for r in runs]
    sample, scale = [], {}
    for r in runs:
        n = estimated_jobs(r)
        m = min(n, max(args.min_jobs, math.ceil(args.fraction * n)))
        s = dataclasses.replace(r, jobs=m)
        sample.append(s)
        scale[s.run_id] = (r, n / m, m)
    if args.check:
        trace, policy, profile = args.check.split(":")
        full = [
            r for r in runs if trace in r.trace and r.policy == policy and r.abnormal == profile
        ]
        sample += full
        for r in full:
            scale[r.run_id] = (r, 1.0, estimated_jobs(r))
    print(
        f"{len(runs)} runs per seed; timing {len(sample)} sample runs with {args.workers} worker(s)"
    )
    t0 = time.perf_counter()
    results: dict[str, tuple[float, float]] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        for rid, cpu, wall in pool.map(timed_run, sample):
            results[rid] = (cpu, wall)
            r, factor, m = scale[rid]
            print(
                f"  {r.trace.split(':')[-1]:<10} {r.policy:<15} {r.abnormal:<7} jobs {m:>6}: "
                f"{cpu:7.1f} s CPU x {factor:5.2f} = {cpu * factor:7.1f} s",
                flush=True,
            )
    by: dict[str, float] = {}
    total = 0.0
    rows = []
    for s in sample[: len(runs)]:
        r, factor, m = scale[s.run_id]
        est = results[s.run_id][0] * factor
        total += est
        for key in (
            f"trace {r.trace.split(':')[-1]}",
            f"policy {r.policy}",
            f"profile {r.abnormal}",
        ):
            by[key] = by.get(key, 0.0) + est
        rows.append(
            {
                "trace": r.trace,
                "policy": r.policy,
                "abnormal": r.abnormal,
                "jobs_sampled": m,
                "cpu_s": results[s.run_id][0],
                "estimated_full_cpu_s": est,
            }
        )
    print(f"\nsample: {time.perf_counter() - t0:.0f} s wall")
    for key in sorted(by):
        print(f"  {key:<28} {by[key] / 3600:6.3f} CPU-h")
    print(f"estimated CPU time of one seed: {total / 3600:.2f} CPU-hours ({len(runs)} runs)")
    if args.check:
        for r in sample[len(runs) :]:
            pre = next(s for s in sample[: len(runs)] if scale[s.run_id][0] == r)
            est = results[pre.run_id][0] * scale[pre.run_id][1]
            full = results[r.run_id][0]
            print(f"check {args.check}: full run {full:.1f} s CPU, estimated {est:.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cpu_hours_per_seed": total / 3600, "runs": rows}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
