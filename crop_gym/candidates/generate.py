"""The entry points: :func:`candidate_placements` and :func:`candidate_sets`.

They serve candidate sets from the state's per-version cache and otherwise make, once per version,
the per-version data of the generator the cluster's size calls for (:func:`_shared`):
:class:`~crop_gym.candidates.small._Small` or :class:`~crop_gym.candidates.vectorised._Shared`.
"""

from __future__ import annotations

from collections.abc import Iterable

from crop_gym.candidates.candidate_set import CandidateSet
from crop_gym.candidates.data import _HealthData, _topo_data
from crop_gym.candidates.small import _Small
from crop_gym.candidates.vectorised import _Shared
from crop_gym.errors import check_range
from crop_gym.objective import ClusterState

# TRANSITIONAL (replaced by the single generator of the core rebuild): the per-state caches the
# old generators expect.
import weakref
from typing import Any


class _VersionedCache:
    def __init__(self) -> None:
        self.version = -1
        self.sets: dict[Any, Any] = {}
        self.shared: dict[Any, Any] = {}
        self.health: dict[Any, Any] = {}

    def reset(self, version: int) -> None:
        self.version = version
        self.sets = {}
        self.shared = {}


_CACHES: weakref.WeakKeyDictionary[Any, _VersionedCache] = weakref.WeakKeyDictionary()


def _cache_of(state: Any) -> _VersionedCache:
    c = _CACHES.get(state)
    if c is None:
        c = _CACHES[state] = _VersionedCache()
    return c


def candidate_placements(
    state: ClusterState, k: int, *, robust: bool = True, max_candidates: int = 8
) -> CandidateSet:
    """Compact candidate placements of ``k`` GPUs in the current state.

    Args:
        state: The cluster state (free GPUs and health).
        k: GPUs of the job (>= 1).
        robust: Whether device health steers the choice.
        max_candidates: Cap on the number of candidates returned (>= 1).

    Returns:
        Up to ``max_candidates`` distinct candidates, best first; empty if fewer than ``k`` GPUs are
        free.
    """
    cache = _cache_of(state)
    if cache.version != state.version:
        cache.reset(state.version)
    key = (k, robust, max_candidates)
    hit = cache.sets.get(key)
    if hit is None:  # (a cached key was checked when computed)
        shared = cache.shared.get(robust) or _shared(state, robust)
        if not 1 <= k <= shared.td.G:
            check_range("k", k, 1, shared.td.G)
        if max_candidates < 1:
            check_range("max_candidates", max_candidates, 1)
        hit = cache.sets[key] = shared.compute(int(k), int(max_candidates))
    return hit


def candidate_sets(
    state: ClusterState, sizes: Iterable[int], *, robust: bool = True, max_candidates: int = 8
) -> list[CandidateSet]:
    """:func:`candidate_placements` of each size in ``sizes``, in one call (which saves the
    per-call lookups when a caller needs several sizes of one state version).

    Args:
        state: The cluster state (free GPUs and health).
        sizes: GPUs of the jobs (each >= 1).
        robust: Whether device health steers the choice.
        max_candidates: Cap on the number of candidates returned per size (>= 1).

    Returns:
        The candidate set of each size, in the order of ``sizes``.
    """
    cache = _cache_of(state)
    if cache.version != state.version:
        cache.reset(state.version)
    sets = cache.sets
    shared: _Small | _Shared | None = None
    out: list[CandidateSet] = []
    for k in sizes:
        key = (k, robust, max_candidates)
        hit = sets.get(key)
        if hit is None:  # (a cached key was checked when computed)
            if shared is None:
                shared = cache.shared.get(robust) or _shared(state, robust)
                if max_candidates < 1:
                    check_range("max_candidates", max_candidates, 1)
            if not 1 <= k <= shared.td.G:
                check_range("k", k, 1, shared.td.G)
            hit = sets[key] = shared.compute(int(k), int(max_candidates))
        out.append(hit)
    return out


def _shared(state: ClusterState, robust: bool) -> _Small | _Shared:
    """The per-version data of ``state`` (made and cached; its version's cache is current)."""
    cache = _cache_of(state)
    health = state.health
    entry = cache.health.get(robust)
    if entry is None or entry[0] is not health:
        hd = _HealthData(state, robust, _topo_data(state.topology))
        entry = cache.health[robust] = (health, hd)
    hd = entry[1]
    shared = cache.shared[robust] = (_Small if hd.td.small else _Shared)(state, hd)
    return shared
