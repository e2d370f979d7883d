"""Small random placement instances for tests, benchmarks and the measured approximation ratios.

The bundled scenarios are 64 GPUs or more, too large for the exact solvers; :func:`small_instance`
draws problems on tiny trees (8 to 16 GPUs) with the same model: a topology, device health from an
abnormality profile, optional background jobs and a queue of pending jobs from the model zoo.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from crop_gym.model.candidates import candidate_placements
from crop_gym.model.health import AbnormalityProfile, get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import PerfConfig
from crop_gym.model.topology import Topology, build_tree, default_link_params, make_topology

__all__ = ["SMALL_CLUSTERS", "small_instance", "small_topology"]

#: Tiny clusters for exact comparisons: name → description.
SMALL_CLUSTERS: dict[str, str] = {
    "testbed-8": "the paper's testbed: 2 servers x 4 GPUs under one switch",
    "tiny-16": "2 ToRs x 2 servers x 4 GPUs, 2:1 oversubscribed ToR uplinks (contention matters)",
    "flat-16": "4 servers x 4 GPUs under one switch",
}

_MODELS = ("resnet50", "vgg16", "inception3", "bert", "gpt2", "deepspeech2")


def small_topology(name: str) -> Topology:
    """A tiny cluster of :data:`SMALL_CLUSTERS` (``testbed-8`` is the preset)."""
    if name == "testbed-8":
        return make_topology(name)
    lp = default_link_params()
    inter, intra = lp["inter_bandwidth"], lp["intra_bandwidth"]
    if name == "tiny-16":
        return build_tree([2, 2, 4], [2 * inter / 2.0, inter, intra], name=name)
    if name == "flat-16":
        return build_tree([4, 4], [inter, intra], name=name)
    raise ValueError(f"unknown small cluster {name!r}; choose from {', '.join(SMALL_CLUSTERS)}")


def small_instance(
    rng: np.random.Generator,
    *,
    cluster: str | Topology = "tiny-16",
    profile: str | AbnormalityProfile = "severe",
    n_jobs: int | tuple[int, int] = (3, 6),
    sizes: Sequence[int] = (1, 2, 2, 3, 4, 4, 6, 8),
    background: int = 1,
    perf: PerfConfig | None = None,
) -> tuple[ClusterState, list[Job]]:
    """Draw a small placement problem.

    Args:
        rng: Random generator.
        cluster: A name of :data:`SMALL_CLUSTERS` or a topology.
        profile: Abnormality profile (name or object).
        n_jobs: Queue length, or an inclusive ``(low, high)`` range.
        sizes: Job sizes (GPUs) drawn uniformly (those larger than the cluster are dropped).
        background: Background jobs of 1 to 4 GPUs placed first on random candidates.
        perf: Iteration-time options.

    Returns:
        The state (with background jobs) and the queue.
    """
    topo = cluster if isinstance(cluster, Topology) else small_topology(cluster)
    prof = profile if isinstance(profile, AbnormalityProfile) else get_profile(profile)
    health = prof.sample(topo, rng)
    state = ClusterState(topo, health, perf)
    for b in range(background):
        k = int(rng.integers(1, 5))
        if k > state.num_free:
            break
        cands = candidate_placements(state, k, robust=False, max_candidates=64)
        if len(cands):
            state.add(_job(rng, f"bg{b}", k), cands.gpus[rng.integers(len(cands))])
    n = n_jobs if isinstance(n_jobs, int) else int(rng.integers(n_jobs[0], n_jobs[1] + 1))
    allowed = [s for s in sizes if s <= topo.num_gpus]
    queue = [_job(rng, f"q{i}", int(rng.choice(allowed))) for i in range(n)]
    return state, queue


def _job(rng: np.random.Generator, job_id: str, k: int) -> Job:
    model = str(rng.choice(_MODELS))
    local = int(rng.choice([16, 32, 64]))
    return Job(job_id, model, k, local * k)
