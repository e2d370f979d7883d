"""Helpers shared by the baselines: health-blind views, free GPUs per server, all-reduce time, atomic writes."""

from __future__ import annotations

import weakref

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.facts import placement_facts
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState

__all__ = ["blind_health", "blind_state", "free_per_server", "own_comm_times"]


#: Per health (immutable, compared by identity) its blind view; dropped with the health.
_BLIND: weakref.WeakKeyDictionary[Health, Health] = weakref.WeakKeyDictionary()


def blind_health(health: Health) -> Health:
    """What a health-blind scheduler believes: every device healthy, but failed GPUs still failed.

    A dead GPU is not ambiguous (the node agent reports it), so even the non-robust policies never
    use one; stragglers (σ), failure-prone devices (π) and degraded links (ρ) are invisible.
    The same ``health`` object always gives the same blind object (a pure function of an
    immutable input, kept while ``health`` lives), so what is memoised per health (placement
    facts, CROP's candidate pool) carries over between the decisions of a health-blind policy.
    """
    blind = _BLIND.get(health)
    if blind is None:
        g, n = len(health.gpu_slowdown), len(health.link_degradation)
        blind = Health(np.ones(g), health.gpu_failed, np.zeros(g), np.ones(n), np.zeros(n))
        _BLIND[health] = blind
    return blind


def blind_state(state: ClusterState) -> ClusterState:
    """A copy of ``state`` re-evaluated under :func:`blind_health` (the input is not changed)."""
    view = state.copy()
    view.set_health(blind_health(state.health))
    return view


def free_per_server(
    state: ClusterState, free: NDArray[np.bool_] | None = None
) -> NDArray[np.int64]:
    """Free usable GPUs of every server (``int64[S]``).

    Args:
        state: The cluster.
        free: A free mask to count instead of ``state.free_mask``.
    """
    topo = state.topology
    f = state.free_mask if free is None else free
    cs = np.concatenate([[0], np.cumsum(f, dtype=np.int64)])
    out: NDArray[np.int64] = cs[topo.server_gpu_hi] - cs[topo.server_gpu_lo]
    return out


def own_comm_times(state: ClusterState, job: Job, gpus: NDArray[np.int32]) -> NDArray[np.float64]:
    """All-reduce time of ``job`` on each placement row of ``gpus`` (``int[R, k]``), with the current
    link loads plus the job itself: the ``C`` that :meth:`ClusterState.gains` uses for the new job.
    """
    facts = placement_facts(state.topology, state.health, gpus)
    out: NDArray[np.float64] = state.gains(job, facts).comm
    return out
