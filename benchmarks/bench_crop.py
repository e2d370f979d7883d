"""CROP speed, lazy-over-plain speed-up, the exact solver's size limit and CROP's ratio to the optimum.

Run from the repository root (after ``pip install -e .``, or with ``PYTHONPATH=.``)::

    python benchmarks/bench_crop.py                  # speed, speed-up, exact limit (a few minutes)
    python benchmarks/bench_crop.py --only speed     # just the CROP timings
    python benchmarks/bench_crop.py --only ratios    # CROP / optimum, 200 instances per cluster x profile

Budgets (2-core machine): CROP on 1,024 GPUs (n128g8) with 200 pending jobs <= 1 s; on 8,192 GPUs
(fattree-8192) with 1,000 pending jobs <= 15 s; the exact solver's guard must refuse what would not
finish within 60 s.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from crop_gym.baselines.crop import crop_greedy
from crop_gym.baselines.exact import EXACT_LIMITS, branch_and_bound, search_space
from crop_gym.baselines.instances import small_instance
from crop_gym.errors import ConfigError
from crop_gym.model.health import get_profile
from crop_gym.model.topology import make_topology
from crop_gym.policy import apply
from crop_gym.scenario import SCENARIOS, Scenario, ScenarioSampler

T = TypeVar("T")

BIG = Scenario(
    name="fattree-8192",
    cluster="fattree-8192",
    workload="elasticflow:cluster04",
    queue_size=1000,
    max_job_gpus=64,
)


def best_of(repeat: int, fn: Callable[[], T]) -> tuple[float, T]:
    """Best wall time of ``repeat`` calls in seconds, and the last result."""
    best, result = math.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    assert result is not None
    return best, result


def bench_speed(repeat: int) -> None:
    print(f"CROP speed (best of {repeat}; rule=best runs two greedy passes)")
    for sc, budget in ((SCENARIOS["n128g8"], 1.0), (BIG, 15.0)):
        t0 = time.perf_counter()
        inst = ScenarioSampler(sc).sample(np.random.default_rng(0))
        sample_s = time.perf_counter() - t0
        for rule in ("best", "gain"):
            secs, res = best_of(
                repeat, lambda inst=inst, rule=rule: crop_greedy(inst.state, inst.queue, rule=rule)
            )
            st = res.stats
            print(
                f"  {sc.cluster:13s} {inst.state.topology.num_gpus:5d} GPUs, {len(inst.queue):4d} jobs, rule={rule:5s}: "
                f"{secs:6.2f} s (budget {budget:g} s) | placed {len(res.placements)}, gain evals {st.gain_evals}, "
                f"list refreshes {st.refreshes}, heap pops {st.heap_pops} | sampling the instance {sample_s:.2f} s"
            )


def bench_speedup() -> None:
    print("Lazy over plain greedy (same placements)")
    severe = SCENARIOS["n128g8"].replace(name="n128g8-severe", abnormal=get_profile("severe"))
    cases = [
        ("n128g8, 200 jobs", ScenarioSampler("n128g8").sample(np.random.default_rng(0))),
        ("n128g8 severe", ScenarioSampler(severe).sample(np.random.default_rng(0))),
        ("n64g8, 64 jobs", ScenarioSampler("n64g8").sample(np.random.default_rng(0))),
        ("default, 16 jobs", ScenarioSampler("default").sample(np.random.default_rng(0))),
    ]
    for label, inst in cases:
        for rule in ("gain", "density"):
            tl, lazy = best_of(
                1, lambda inst=inst, rule=rule: crop_greedy(inst.state, inst.queue, rule=rule)
            )
            tp, plain = best_of(
                1,
                lambda inst=inst, rule=rule: crop_greedy(
                    inst.state, inst.queue, rule=rule, lazy=False
                ),
            )
            same = [p.key() for p in lazy.placements] == [p.key() for p in plain.placements]
            print(
                f"  {label:16s} rule={rule:7s}: lazy {tl:7.3f} s ({lazy.stats.gain_evals:6d} gain evals), plain {tp:7.3f} s "
                f"({plain.stats.gain_evals:7d} gain evals): speed-up x{tp / tl:5.1f} in time, "
                f"x{plain.stats.gain_evals / max(lazy.stats.gain_evals, 1):6.1f} in evaluations; same placements: {same}"
            )


def bench_exact(budget_s: float) -> None:
    print(
        f"Exact solver: time against search-space size (limits: 10^{EXACT_LIMITS.log10_all:g} every placement, "
        f"10^{EXACT_LIMITS.log10_candidates:g} candidate space, {EXACT_LIMITS.max_nodes} nodes)"
    )
    rows = []
    cases = [("all", "tiny-16", n) for n in (4, 5, 6, 7, 8)] + [
        ("all", "flat-16", n) for n in (6, 7, 8)
    ]
    cases += [("candidates", "leafspine-64", n) for n in (4, 5, 6, 7, 8)]
    for space, cluster, n in cases:
        worst, sizes, nodes, refused = 0.0, [], [], 0
        for seed in range(5):
            c = make_topology(cluster) if cluster == "leafspine-64" else cluster
            big = cluster == "leafspine-64"
            state, queue = small_instance(
                np.random.default_rng(seed),
                cluster=c,
                profile="severe",
                n_jobs=n,
                sizes=(2, 4, 6, 8, 12, 16, 24) if big else (1, 2, 2, 3, 4, 4, 6, 8),
                background=4 if big else 1,
            )
            try:
                log10, _ = search_space(state, queue, space=space)
            except ConfigError:
                refused += 1
                continue
            sizes.append(log10)
            t0 = time.perf_counter()
            try:
                res = branch_and_bound(state, queue, space=space, log10_limit=99)
            except ConfigError:  # over the node limit
                rows.append((space, log10, math.inf))
                print(
                    f"    {cluster} {n} jobs seed {seed}: 10^{log10:.1f}, over {EXACT_LIMITS.max_nodes} nodes ({time.perf_counter() - t0:.0f} s)"
                )
                break
            dt = time.perf_counter() - t0
            worst = max(worst, dt)
            nodes.append(res.nodes)
            rows.append((space, log10, dt))
            if dt > budget_s:
                break
        if sizes:
            print(
                f"  space={space:10s} {cluster:12s} {n} jobs: search space 10^{min(sizes):.1f}..10^{max(sizes):.1f}, "
                f"worst {worst:7.2f} s, nodes max {max(nodes) if nodes else 0}"
                + (f" ({refused} refused by the option cap)" if refused else "")
            )
    for space in ("all", "candidates"):
        ok = [s for sp, s, t in rows if sp == space and t <= budget_s]
        slow = [s for sp, s, t in rows if sp == space and t > budget_s]
        if ok:
            print(
                f"  space={space}: largest search space solved within {budget_s:g} s: 10^{max(ok):.1f}"
                + (f"; smallest that took longer: 10^{min(slow):.1f}" if slow else "")
            )


def bench_ratios(n: int) -> None:
    print(
        f"CROP / optimum (every placement, exact) over {n} instances per cluster x profile, 3-6 jobs"
    )
    for cluster in ("testbed-8", "tiny-16", "flat-16"):
        for profile in ("none", "mild", "testbed", "severe"):
            ratios, skipped, t0 = [], 0, time.perf_counter()
            for seed in range(n):
                state, queue = small_instance(
                    np.random.default_rng(seed), cluster=cluster, profile=profile, n_jobs=(3, 6)
                )
                crop = state.copy()
                apply(crop, crop_greedy(state, queue).placements)
                try:
                    opt = branch_and_bound(state, queue, space="all", log10_limit=99)
                except ConfigError:
                    skipped += 1
                    continue
                ratios.append(crop.F / opt.F if opt.F > 0 else 1.0)
            r = np.asarray(ratios)
            print(
                f"  {cluster:9s} {profile:8s}: n={len(r):4d} worst {r.min():.4f} mean {r.mean():.4f} "
                f"share optimal {np.mean(r > 1 - 1e-9):.2f} ({skipped} over the node limit, {time.perf_counter() - t0:.0f} s)"
            )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only", choices=("speed", "speedup", "exact", "ratios"), help="run one section"
    )
    ap.add_argument(
        "--repeat", type=int, default=2, help="repetitions of the speed runs (best is kept)"
    )
    ap.add_argument(
        "--exact-budget", type=float, default=60.0, help="seconds an exact solve may take"
    )
    ap.add_argument(
        "--ratios",
        type=int,
        default=0,
        metavar="N",
        help="also measure CROP / optimum on N instances each",
    )
    args = ap.parse_args()
    if args.only in (None, "speed"):
        bench_speed(args.repeat)
    if args.only in (None, "speedup"):
        bench_speedup()
    if args.only in (None, "exact"):
        bench_exact(args.exact_budget)
    if args.ratios or args.only == "ratios":
        bench_ratios(args.ratios or 200)


if __name__ == "__main__":
    main()
