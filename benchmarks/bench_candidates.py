"""Speed of the candidate generator: one :func:`candidate_sets` call for the sizes of a view.

Run: ``python benchmarks/bench_candidates.py``. Prints figures; asserts nothing.
Targets (issue 11): the distinct sizes of a typical view (~5) on the default scenario (64 GPUs)
<= 120 µs per call; on the ``n128g8`` scenario (1,024 GPUs, 200 queued jobs) <= 600 µs.

Each call follows a change of the state (a job placed on one of its candidates, or removed again),
as in an environment step, so a generator that caches per state version starts cold. With
``--against MODULE`` the same calls are timed with another module of the same API (for example an
older generator importable as ``MODULE``), interleaved in the same process, and the ratio is
printed. Medians include the host's noise; the fastest call is the code's own cost.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import time
from types import ModuleType

import numpy as np

import crop_gym.model.candidates as candidates
from crop_gym.envs.checks import DEFAULT_QUEUE_VIEW
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.scenario import ScenarioSampler


def _case(scenario: str, seed: int) -> tuple[ClusterState, list[int]]:
    """A sampled instance of ``scenario`` and the distinct sizes of its queue view that fit."""
    inst = ScenarioSampler(scenario).sample(np.random.default_rng(seed))
    view = inst.queue[: min(len(inst.queue), DEFAULT_QUEUE_VIEW)]
    sizes = sorted({j.num_gpus for j in view if j.num_gpus <= inst.state.num_free})
    return inst.state, sizes


def _time(mods: list[ModuleType], scenario: str, calls: int) -> list[list[float]]:
    """Seconds of each ``mod.candidate_sets(state, sizes)`` call, right after a state change.

    Four sampled instances take turns; on each, a job is placed on one of its candidates and
    removed again, and every module is timed once after each change (interleaved, so that the
    host's noise falls on all alike).
    """
    cases = [_case(scenario, seed) for seed in range(4)]
    rng = np.random.default_rng(1)
    times: list[list[float]] = [[] for _ in mods]
    gc.collect()
    for t in range(max(1, calls // 2)):
        st, sizes = cases[t % len(cases)]
        job_id = f"bench{t}"
        k = int(rng.choice(sizes))
        cs = candidates.candidate_placements(st, k)
        for change in ("add", "remove"):
            if change == "add":
                st.add(Job(job_id, "resnet50", k, 64), cs.gpus[rng.integers(len(cs))])
            else:
                st.remove(job_id)
            for mod, out in zip(mods, times, strict=True):
                t0 = time.perf_counter()
                mod.candidate_sets(st, sizes)
                out.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=4000, help="timed calls per case (default 4000)")
    ap.add_argument("--against", default=None, help="module to compare with (same API)")
    args = ap.parse_args()
    if args.calls < 1:
        ap.error("--calls must be >= 1")
    mods = [candidates]
    if args.against:
        mods.append(importlib.import_module(args.against))
    for scenario, target in (("default", 120.0), ("n128g8", 600.0)):
        sizes = [len(_case(scenario, seed)[1]) for seed in range(4)]
        times = _time(mods, scenario, args.calls)
        med = [float(np.median(x)) * 1e6 for x in times]
        low = [float(np.min(x)) * 1e6 for x in times]
        line = (
            f"{scenario}: {candidates_gpus(scenario)} GPUs, {min(sizes)}-{max(sizes)} sizes: "
            f"median {med[0]:.1f} µs, fastest {low[0]:.1f} µs per call (target <= {target:.0f} µs)"
        )
        if len(mods) > 1:
            line += (
                f"; {args.against}: median {med[1]:.1f} µs, fastest {low[1]:.1f} µs, "
                f"ratio of medians {med[1] / med[0]:.2f}"
            )
        print(line)


def candidates_gpus(scenario: str) -> int:
    """GPUs of the scenario's cluster."""
    return ScenarioSampler(scenario).topology.num_gpus


if __name__ == "__main__":
    main()
