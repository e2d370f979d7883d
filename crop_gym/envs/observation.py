"""PLACEHOLDER of the observation builder (branch ``env-cls`` only; replaced at merge).

The real :mod:`crop_gym.envs.observation` is written on branch ``env-obs`` against the contract in
``crop_gym/envs/INTERFACE.md``. This placeholder implements that exact API (constructor, spaces,
``build(state, observed, pending, table, step, max_steps, extra=...)``, ``rows``, ``last_metrics``)
with the right keys and shapes, so the environments can be built and tested, but fills the tables
with zeros except the ``valid`` / ``present`` flags, the extra GPU columns and the privileged
``gain``. At merge, take ``env-obs``'s file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.devices import Health
from crop_gym.envs.view import ActionTable
from crop_gym.errors import ConfigError
from crop_gym.jobs import Job
from crop_gym.model.objective import ClusterMetrics
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import PerfConfig
from crop_gym.topology import Topology

__all__ = [
    "CANDIDATE_FEATURES",
    "GPU_FEATURES",
    "JOB_FEATURES",
    "PLACEHOLDER",
    "SUMMARY_FEATURES",
    "ObservationBuilder",
]

#: This module is the placeholder (the real one has no such name).
PLACEHOLDER = True

#: Per-GPU feature columns (key ``"gpus"``, shape ``(G, len(GPU_FEATURES))``).
GPU_FEATURES: tuple[str, ...] = (
    "free",  # 1 if free and usable
    "busy",  # 1 if held by a placed job
    "failed",  # 1 if failed (never usable)
    "slow",  # 1 - 1/σ (0 = healthy, 0.5 = twice as slow)
    "fail_prob",  # π, probability of failing within the horizon
    "speed",  # relative speed / fastest GPU in the cluster
    "uplink_load",  # n/(n+1), n = jobs whose rings cross the server's uplink
    "uplink_degradation",  # 1 - ρ of the server's uplink
    "job_eta",  # η of the job holding the GPU (0 if free)
    "job_gpus",  # k of the job holding the GPU / max job size (0 if free)
)

#: Per-candidate feature columns (key ``"candidates"``, shape ``(M, len(CANDIDATE_FEATURES))``).
CANDIDATE_FEATURES: tuple[str, ...] = (
    "valid",  # 1 for a real (job, candidate) row, 0 for padding
    "job_gpus",  # k / max job size
    "grad_size",  # (log10(M bytes) - 6) / 4
    "compute_time",  # t_c / (t_c + 0.25 s)
    "servers",  # servers spanned / 32
    "spread",  # (servers - 1) / (k - 1); 0 = one server
    "switches",  # distinct switches above the servers spanned / 8
    "slow_frac",  # fraction of its GPUs with σ > 1
    "failprone_frac",  # fraction of its GPUs with π > 0
    "slowdown",  # 1 - 1/max(σ/speed)
    "survival",  # s: probability that no GPU or spanned link fails
    "eta",  # estimated η under the current contention (its own rings added)
    "value_per_gpu",  # η · s
    "contention",  # n/(n+1), n = most jobs already crossing one of its inter-server links
    "bandwidth",  # bottleneck bandwidth share / fastest intra-server link
    "queue_pos",  # view position q / (num_jobs - 1)
    "weight",  # w / (1 + w)
)

#: Per-queued-job feature columns (key ``"queue"``, shape ``(num_jobs, len(JOB_FEATURES))``).
JOB_FEATURES: tuple[str, ...] = (
    "present",  # 1 if a pending job occupies this view slot
    "job_gpus",
    "grad_size",
    "compute_time",
    "weight",
    "candidates",  # its number of candidates / max_candidates
    "best_eta",  # best estimated η over its candidates (0 if none)
    "copies",  # identical pending jobs this slot stands for / 16 (clipped)
)

#: Summary feature columns (key ``"summary"``, shape ``(len(SUMMARY_FEATURES),)``).
SUMMARY_FEATURES: tuple[str, ...] = (
    "pending",  # pending jobs / queue size
    "hidden",  # pending jobs the view does not stand for (not placeable now, or beyond it) / queue size
    "pending_gpus",  # GPUs requested by pending jobs / G (clipped)
    "free_gpus",  # free usable GPUs / G
    "F",  # F / G
    "utilization",  # busy GPUs / G
    "comm_overhead",  # GPU-weighted communication share of iteration time
    "failed_gpus",  # failed GPUs / G
    "abnormal_gpus",  # slow, failed or failure-prone GPUs / G
    "steps",  # steps taken / step cap
)


class ObservationBuilder:
    """The observation tables of a placement environment (placeholder: see the module docstring)."""

    def __init__(
        self,
        topology: Topology,
        perf: PerfConfig,
        *,
        num_slots: int,
        max_candidates: int,
        queue_size: int,
        max_job_gpus: int,
        privileged: bool = False,
        with_candidates: bool = True,
        table_layout: bool = False,
        gpu_extra: Sequence[str] = (),
    ) -> None:
        self.topology = topology
        self.perf = perf
        self.num_slots = int(num_slots)
        self.max_candidates = int(max_candidates)
        self.queue_size = max(1, int(queue_size))
        self.max_job_gpus = max(1, int(max_job_gpus))
        self.privileged = bool(privileged)
        self.with_candidates = bool(with_candidates)
        self.table_layout = bool(table_layout)
        self.gpu_features = (*GPU_FEATURES, *gpu_extra)
        self.last_metrics: ClusterMetrics | None = None
        G, M = topology.num_gpus, self.num_slots * self.max_candidates
        self._shapes: dict[str, tuple[int, ...]] = {"gpus": (G, len(self.gpu_features))}
        if self.with_candidates:
            self._shapes["candidates"] = (M, len(CANDIDATE_FEATURES))
        self._shapes["queue"] = (self.num_slots, len(JOB_FEATURES))
        self._shapes["summary"] = (len(SUMMARY_FEATURES),)
        if self.privileged and self.with_candidates:
            self._shapes["gain"] = (M,)
        flat = {"gpus", "candidates", "queue"}
        self.observation_space = spaces.Dict(
            {
                k: spaces.Box(
                    -1.0 if k == "gain" else 0.0,
                    1.0,
                    s if self.table_layout or k not in flat else (int(np.prod(s)),),
                    np.float32,
                )
                for k, s in self._shapes.items()
            }
        )

    def rows(self, obs: dict[str, NDArray[np.float32]], key: str) -> NDArray[np.float32]:
        """The ``(rows, columns)`` view of table ``key`` of ``obs`` (either layout)."""
        return obs[key].reshape(self._shapes[key])

    def build(
        self,
        state: ClusterState,
        observed: Health,
        pending: Sequence[Job],
        table: ActionTable,
        step: int = 0,
        max_steps: int = 1,
        *,
        extra: NDArray[Any] | None = None,
    ) -> dict[str, NDArray[np.float32]]:
        """The observation of ``state`` (placeholder values; fresh arrays)."""
        del observed, pending, step, max_steps
        self.last_metrics = state.metrics()
        out = {k: np.zeros(s, dtype=np.float32) for k, s in self._shapes.items()}
        n_extra = len(self.gpu_features) - len(GPU_FEATURES)
        if extra is not None:
            if np.shape(extra) != (self.topology.num_gpus, n_extra):
                want = (self.topology.num_gpus, n_extra)
                raise ConfigError(f"extra has shape {np.shape(extra)}, expected {want}")
            out["gpus"][:, len(GPU_FEATURES) :] = np.clip(extra, 0.0, 1.0)
        if self.with_candidates:
            out["candidates"][table.row_action, 0] = 1.0
        out["queue"][: len(table.jobs), 0] = 1.0
        if "gain" in out:
            gain = np.clip(table.gains.total / self.max_job_gpus, -1.0, 1.0)
            out["gain"][table.row_action] = gain
        if not self.table_layout:
            for k in ("gpus", "candidates", "queue"):
                if k in out:
                    out[k] = out[k].reshape(-1)
        return out
