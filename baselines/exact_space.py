"""The placement space of the exact search, and its size guard.

Free usable GPUs split into interchangeable groups (:func:`gpu_groups`); a job's options are its
per-group GPU counts (:func:`count_vectors`). :func:`search_space` counts ``∏ (options_j + 1)``
over the jobs, and :func:`guard_space` refuses a space above :data:`EXACT_LIMITS` in one line,
before any search runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.model.candidates import candidate_placements
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.policy import pending_jobs

__all__ = [
    "EXACT_LIMITS",
    "ExactLimits",
    "count_vectors",
    "gpu_groups",
    "guard_space",
    "search_space",
]


@dataclass(frozen=True)
class ExactLimits:
    """Size limits of the exact solvers, measured on a 2-core machine (``benchmarks/bench_crop.py``;
    docs/CROP.md has the figures): instances within them finish in about a minute or less.

    Attributes:
        log10_all: Largest ``log10 ∏ (options_j + 1)`` accepted in ``space="all"`` (16-GPU trees with
            8 jobs, about 10^16, take under 15 s).
        log10_candidates: Largest ``log10 ∏ (candidates_j + 1)`` accepted in ``space="candidates"``
            (about 6 jobs x 8 candidates; 8 jobs on 64 GPUs take minutes).
        max_nodes: Most search nodes expanded before giving up (about a minute).
        max_options: Most placement options of one job in ``space="all"``.
        milp_vars: Most MILP variables (job x per-server count vector).
    """

    log10_all: float = 18.0
    log10_candidates: float = 5.5
    max_nodes: int = 200_000
    max_options: int = 20_000
    milp_vars: int = 50_000

    def log10_limit(self, space: str) -> float:
        """The search-space limit of ``space``."""
        return self.log10_all if space == "all" else self.log10_candidates


#: Default limits.
EXACT_LIMITS = ExactLimits()


# ---------------------------------------------------------------------------- GPU groups
def gpu_groups(state: ClusterState) -> list[NDArray[np.int32]]:
    """Free usable GPUs split into interchangeable groups (same server, health, speed and GPU link).

    Returns:
        One sorted ``int32`` array per group, groups ordered by their first GPU.
    """
    topo, h = state.topology, state.health
    free = np.flatnonzero(state.free_mask)
    node = topo.gpu_node[free]
    keys = np.stack(
        [
            topo.gpu_server[free].astype(np.float64),
            h.gpu_slowdown[free],
            h.gpu_fail_prob[free],
            topo.gpu_speed[free],
            topo.link_bw[node],
            topo.link_lat[node],
            h.link_degradation[node],
            h.link_fail_prob[node],
        ],
        axis=1,
    )
    groups: dict[tuple[float, ...], list[int]] = {}
    for g, key in zip(free.tolist(), map(tuple, keys.tolist()), strict=True):
        groups.setdefault(key, []).append(g)
    return sorted((np.array(v, dtype=np.int32) for v in groups.values()), key=lambda a: int(a[0]))


def count_vectors(caps: Sequence[int], k: int, limit: int) -> list[tuple[int, ...]]:
    """All vectors ``v`` with ``0 <= v_i <= caps[i]`` and ``Σ v = k`` (at most ``limit``)."""
    out: list[tuple[int, ...]] = []
    n = len(caps)
    suffix = np.concatenate([np.cumsum(np.asarray(caps[::-1], dtype=np.int64))[::-1], [0]]).tolist()

    def rec(i: int, left: int, acc: list[int]) -> None:
        if len(out) > limit:
            return
        if i == n:
            if left == 0:
                out.append(tuple(acc))
            return
        lo = max(0, left - suffix[i + 1])
        for v in range(min(caps[i], left), lo - 1, -1):
            acc.append(v)
            rec(i + 1, left - v, acc)
            acc.pop()

    rec(0, k, [])
    return out


# ---------------------------------------------------------------------------- search space
def search_space(
    state: ClusterState, queue: Sequence[Job], *, space: str = "all", max_candidates: int = 32
) -> tuple[float, dict[str, int]]:
    """Size of the branch-and-bound search space.

    Returns:
        ``log10 ∏ (options_j + 1)`` and the options of each job (count vectors for ``"all"``,
        candidates in the initial state for ``"candidates"``).

    Raises:
        ConfigError: For an unknown space, or a job with more than ``EXACT_LIMITS.max_options``
            options in ``space="all"``.
    """
    jobs = pending_jobs(state, queue)
    opts: dict[str, int] = {}
    if space == "all":
        caps = [len(g) for g in gpu_groups(state)]
        cache: dict[int, int] = {}
        for job in jobs:
            k = job.num_gpus
            if k not in cache:
                n = len(count_vectors(caps, k, EXACT_LIMITS.max_options)) if k <= sum(caps) else 0
                if n > EXACT_LIMITS.max_options:
                    raise ConfigError(
                        f"exact search (space='all') refuses this instance: a job of {k} GPUs has more than "
                        f"{EXACT_LIMITS.max_options} placements on {sum(caps)} free GPUs in {len(caps)} groups; "
                        "use space='candidates' or a smaller cluster"
                    )
                cache[k] = n
            opts[job.job_id] = cache[k]
    elif space == "candidates":
        for job in jobs:
            if job.num_gpus > state.topology.num_gpus:
                opts[job.job_id] = 0
                continue
            opts[job.job_id] = len(
                candidate_placements(state, job.num_gpus, max_candidates=max_candidates)
            )
    else:
        raise ConfigError(f"unknown search space {space!r}; use 'all' or 'candidates'")
    log10 = float(sum(math.log10(n + 1) for n in opts.values()))
    return log10, opts


def guard_space(log10: float, opts: dict[str, int], space: str, limit: float) -> None:
    """Refuse (one-line :class:`ConfigError`) a search space of ``10^log10`` above ``10^limit``."""
    if log10 > limit:
        sizes = ", ".join(f"{j}:{n}" for j, n in opts.items())
        raise ConfigError(
            f"exact search (space={space!r}) refuses this instance: its search space is 10^{log10:.1f} "
            f"combinations ({len(opts)} jobs x options per job [{sizes}]), above the limit of 10^{limit:g} "
            f"(about a minute on 2 cores); use fewer jobs or a smaller cluster"
        )
