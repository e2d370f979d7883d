"""Speed of the candidate generator: one :func:`candidate_sets` call for the sizes of a view.

Run: ``python benchmarks/bench_candidates.py``. Prints figures; asserts nothing.
Targets (issue 11): the distinct sizes of a typical view (~5) on the default scenario (64 GPUs)
<= 120 µs per call; on the ``n128g8`` scenario (1,024 GPUs, 200 queued jobs) <= 600 µs.

Each call follows a change of the state (a job placed on one of its candidates, or removed again),
as in an environment step, so a generator that caches per state version starts cold. With
``--against MODULE`` the same calls are timed with another module of the same API (for example an
older generator importable as ``MODULE``), in the same process, and the ratio is printed.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import time
from types import ModuleType

import numpy as np

import crop_gym.candidates as candidates
from crop_gym.envs.base import DEFAULT_QUEUE_VIEW
from crop_gym.jobs import Job
from crop_gym.objective import ClusterState
from crop_gym.scenario import ScenarioSampler


def _case(scenario: str, seed: int) -> tuple[ClusterState, list[int]]:
    """A sampled instance of ``scenario`` and the distinct sizes of its queue view that fit."""
    inst = ScenarioSampler(scenario).sample(np.random.default_rng(seed))
    view = inst.queue[: min(len(inst.queue), DEFAULT_QUEUE_VIEW)]
    sizes = sorted({j.num_gpus for j in view if j.num_gpus <= inst.state.num_free})
    return inst.state, sizes


def _time(mod: ModuleType, st: ClusterState, sizes: list[int], n: int, seed: int) -> float:
    """Mean seconds of ``mod.candidate_sets(st, sizes)`` right after a state change."""
    rng = np.random.default_rng(seed)
    total = 0.0
    gc.collect()
    for t in range(n):
        # Alternately place a small job on a candidate and remove it: a new state version.
        job_id = f"bench{t}"
        k = int(rng.choice(sizes))
        cs = candidates.candidate_placements(st, k)
        st.add(Job(job_id, "resnet50", k, 64), cs.gpus[rng.integers(len(cs))], validate=False)
        t0 = time.perf_counter()
        mod.candidate_sets(st, sizes)
        total += time.perf_counter() - t0
        st.remove(job_id)
        t0 = time.perf_counter()
        mod.candidate_sets(st, sizes)
        total += time.perf_counter() - t0
    return total / (2 * n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="timed calls per case (default 2000)")
    ap.add_argument("--against", default=None, help="module to compare with (same API)")
    args = ap.parse_args()
    if args.calls < 1:
        ap.error("--calls must be >= 1")
    other = importlib.import_module(args.against) if args.against else None
    for scenario, target in (("default", 120.0), ("n128g8", 600.0)):
        st, sizes = _case(scenario, 0)
        n = max(1, args.calls // 2)
        new = _time(candidates, st, sizes, n, 1)
        line = (
            f"{scenario}: {st.topology.num_gpus} GPUs, {len(sizes)} sizes {sizes}: "
            f"{new * 1e6:.1f} µs per call (target <= {target:.0f} µs)"
        )
        if other is not None:
            old = _time(other, st, sizes, n, 1)
            line += f"; {args.against}: {old * 1e6:.1f} µs, ratio {old / new:.2f}"
        print(line)


if __name__ == "__main__":
    main()
