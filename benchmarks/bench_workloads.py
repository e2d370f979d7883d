"""Load time of every bundled trace, plus the numpy view and the synthetic generator.

Run from the repository root (after ``pip install -e .``, or with ``PYTHONPATH=.``)::

    python benchmarks/bench_workloads.py [--repeat 3]

Each figure is the best of ``--repeat`` runs, in milliseconds. The budget is 1 s for the largest trace
(cluster04, 15,802 jobs) on a 2-core machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import numpy as np

from crop_gym.workloads import (
    SyntheticConfig,
    Workload,
    bundled_names,
    generate_synthetic,
    load_workload,
)

T = TypeVar("T")


def best_of(repeat: int, fn: Callable[[], T]) -> tuple[float, T]:
    """Best wall time of ``repeat`` calls of ``fn`` in seconds, and the last result."""
    best = float("inf")
    result: T | None = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    assert result is not None
    return best, result


def main() -> None:
    """Print one line per bundled trace, then the synthetic generator."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    args = parser.parse_args()

    print(f"{'trace':<24}{'jobs':>8}{'load ms':>10}{'arrays ms':>11}{'jobs/s':>12}")
    total = 0.0
    for name in bundled_names():
        load_s, workload = best_of(args.repeat, partial(load_workload, name))
        arrays_s = float("inf")
        for _ in range(args.repeat):
            fresh = load_workload(name)  # .arrays is cached: time it on a fresh workload
            start = time.perf_counter()
            _ = fresh.arrays
            arrays_s = min(arrays_s, time.perf_counter() - start)
        total += load_s
        print(
            f"{name:<24}{len(workload):>8,}{load_s * 1e3:>10.1f}{arrays_s * 1e3:>11.1f}"
            f"{len(workload) / load_s:>12,.0f}"
        )
    print(f"{'all bundled traces':<24}{'':>8}{total * 1e3:>10.1f}")

    for n in (1_000, 10_000):
        gen_s, _ = best_of(args.repeat, partial(_synthetic, n))
        print(f"{f'synthetic {n:,} jobs':<24}{n:>8,}{gen_s * 1e3:>10.1f}")


def _synthetic(n: int) -> Workload:
    return generate_synthetic(SyntheticConfig(num_jobs=n), np.random.default_rng(0))


if __name__ == "__main__":
    main()
