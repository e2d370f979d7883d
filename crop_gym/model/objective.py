"""The objective F: the cluster's expected effective GPUs.

For every placed job ``j``:

* ideal time ``T*_j`` (:func:`~crop_gym.model.timing.ideal_time`): the same job on a compact placement
  of healthy reference GPUs in an empty cluster;
* normalised throughput ``η_j = min(1, T*_j / T_j)`` (:func:`~crop_gym.model.timing.job_times`);
* survival ``s_j = Π_{g∈P_j} (1-π_g) · Π_{e∈spanned(P_j)} (1-π_e)``
  (:func:`~crop_gym.model.facts.placement_facts`);
* value ``v_j = w_j · k_j · η_j · s_j`` (GPU units, :func:`job_value`) and ``F = Σ_j v_j``.

:func:`evaluate_from_scratch` computes all of it from the jobs and their placements alone; it is the
reference that :class:`~crop_gym.model.state.ClusterState`'s incremental updates are tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.facts import placement_facts
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.timing import (
    JobTimes,
    PerfConfig,
    inter_bandwidth,
    job_constants,
    times_of,
)
from crop_gym.model.topology import Topology

__all__ = ["ClusterMetrics", "Evaluation", "evaluate_from_scratch", "job_value"]


def job_value(weight: Any, k: Any, survival: Any, eta: Any) -> Any:
    """``v = w · k · s · η``, a job's expected effective GPUs (vectorised)."""
    return weight * k * survival * eta


@dataclass(frozen=True)
class ClusterMetrics:
    """Summary of a cluster state.

    Attributes:
        F: Expected effective GPUs.
        jobs_placed: Number of placed jobs.
        gpus_busy: GPUs held by jobs.
        utilization: ``gpus_busy`` / number of GPUs.
        comm_overhead: GPU-weighted share of iteration time spent communicating,
            ``Σ k_j C_j / T_j / Σ k_j`` (0 with no job).
    """

    F: float
    jobs_placed: int
    gpus_busy: int
    utilization: float
    comm_overhead: float


def comm_share(k: NDArray[np.float64], C: NDArray[np.float64], T: NDArray[np.float64]) -> float:
    """``Σ k C/T / Σ k``: the GPU-weighted communication share (0 with no job)."""
    ksum = float(k.sum())
    return float((k * C / T).sum() / ksum) if ksum > 0 else 0.0


@dataclass(frozen=True)
class Evaluation:
    """Every placed job's model outputs, one element per job in the order given.

    Attributes:
        F: The objective.
        times: ``T``, ``C`` and ``η`` per job.
        survival: ``float64[J]`` survival per job.
        value: ``float64[J]`` value per job.
        tstar: ``float64[J]`` ideal time per job.
        link_load: ``int32[N]`` jobs crossing each inter-server link.
    """

    F: float
    times: JobTimes
    survival: NDArray[np.float64]
    value: NDArray[np.float64]
    tstar: NDArray[np.float64]
    link_load: NDArray[np.int32]


def evaluate_from_scratch(
    topology: Topology,
    health: Health,
    perf: PerfConfig,
    jobs: Sequence[Job],
    placements: Sequence[NDArray[np.integer[Any]]],
) -> Evaluation:
    """Evaluate F of ``jobs`` placed on ``placements`` with nothing precomputed.

    Args:
        topology: The cluster.
        health: Device health.
        perf: Model options.
        jobs: The placed jobs.
        placements: Each job's GPUs.
    """
    facts = placement_facts(topology, health, placements)
    links = facts.inter_links
    load = np.bincount(links.ravel(), minlength=topology.num_nodes).astype(np.int32)
    load[0] = 0
    eff_bw = topology.link_bw * health.link_degradation
    b_inter = inter_bandwidth(eff_bw, load, links)
    const = job_constants(topology, perf, jobs)
    times = times_of(perf, const, facts, b_inter)
    value = job_value(const[:, 3], facts.k, facts.survival, times.eta)
    return Evaluation(
        F=float(value.sum()),
        times=times,
        survival=facts.survival,
        value=value,
        tstar=const[:, 2],
        link_load=load,
    )
