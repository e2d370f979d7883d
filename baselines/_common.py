"""Helpers shared by the baselines: health-blind views, free GPUs per server, all-reduce time."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.facts import placement_facts
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState

__all__ = ["blind_state", "free_per_server", "own_comm_times"]


def blind_state(state: ClusterState) -> ClusterState:
    """A copy of ``state`` re-evaluated under the blind conditions of its health
    (:attr:`Conditions.blind <crop_gym.model.conditions.Conditions>`: what a health-blind scheduler
    believes; the input is not changed)."""
    view = state.copy()
    view.set_health(state.conditions.blind)
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
