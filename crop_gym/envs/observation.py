"""The observation of every placement environment: per-GPU, per-candidate, per-queued-job and
summary tables, computed vectorised from the state and its action table.

:class:`ObservationBuilder` returns a ``Dict`` of bounded ``float32`` boxes. The candidate rows
describe the rows of an :class:`~crop_gym.envs.actions.ActionTable` (action ``q * C + c`` is row
``q * C + c``), so every environment exposes the same interface. Columns are listed, in order, in
:data:`GPU_FEATURES`, :data:`CANDIDATE_FEATURES`, :data:`JOB_FEATURES` and
:data:`SUMMARY_FEATURES`; every value is in ``[0, 1]``, except the privileged ``gain`` key, which
is in ``[-1, 1]``. docs/ENVS.md explains each column.

What the agent sees of the devices is the *observed* health (a noisy reading drawn once per
episode, :meth:`~crop_gym.model.health.Health.observe`, or the true health): the per-GPU health
columns, the health-dependent candidate columns (slowdown, survival, η, bandwidth) and the
abnormal-GPU shares use it. What the agent sees of the jobs (free and busy GPUs, link loads, the
placed jobs' η, F) is the true state. The privileged ``gain`` is the true ΔF of each row.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.envs.actions import ActionTable
from crop_gym.errors import ConfigError
from crop_gym.model.facts import placement_facts
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.objective import ClusterMetrics
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import PerfConfig, inter_bandwidth, times_of
from crop_gym.model.topology import Topology

__all__ = [
    "CANDIDATE_FEATURES",
    "GPU_FEATURES",
    "JOB_FEATURES",
    "SUMMARY_FEATURES",
    "ObservationBuilder",
]

FloatArray = NDArray[np.float64]

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

#: Per-candidate feature columns (key ``"candidates"``, shape ``(Q * C, len(CANDIDATE_FEATURES))``).
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
    "queue_pos",  # view position q / (num_slots - 1)
    "weight",  # w / (1 + w)
)

#: Per-queued-job feature columns (key ``"queue"``, shape ``(Q, len(JOB_FEATURES))``).
JOB_FEATURES: tuple[str, ...] = (
    "present",  # 1 if a pending job occupies this view slot
    "job_gpus",
    "grad_size",
    "compute_time",
    "weight",
    "candidates",  # its number of candidates / max_candidates
    "best_eta",  # best estimated η over its candidates (0 if none, or without candidate features)
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

_GRAD_LOG_LO, _GRAD_LOG_SPAN = 6.0, 4.0
_COMPUTE_SCALE = 0.25
_SERVERS_SCALE, _SWITCHES_SCALE, _COPIES_SCALE = 32.0, 8.0, 16.0
_ETA = CANDIDATE_FEATURES.index("eta")
_BEST_ETA = JOB_FEATURES.index("best_eta")


def job_columns(job: Job, max_job_gpus: int) -> tuple[float, float, float, float]:
    """A job's ``(job_gpus, grad_size, compute_time, weight)`` feature values (in ``[0, 1]``)."""
    return _job_columns(job.model, job.num_gpus, job.batch_size, job.weight, max_job_gpus)


@lru_cache(maxsize=1 << 12)
def _job_columns(
    model: str, k: int, batch: int, weight: float, max_job_gpus: int
) -> tuple[float, float, float, float]:
    """:func:`job_columns` by job class (memoised: a pure function of immutable values)."""
    job = Job("", model, k, batch, weight=weight)
    grad = (np.log10(max(job.grad_bytes, 1.0)) - _GRAD_LOG_LO) / _GRAD_LOG_SPAN
    t = job.compute_time
    return (
        min(k / max_job_gpus, 1.0),
        float(np.clip(grad, 0.0, 1.0)),
        t / (t + _COMPUTE_SCALE),
        weight / (1.0 + weight),
    )


@dataclass(frozen=True, eq=False)
class _Columns:
    """What the features read of one observed health on one topology (both immutable).

    ``switch_weight`` counts the switches above a multi-server placement's servers as a sum over
    its spanned inter-server links: when every server hangs from a switch at one depth (not the
    root), a placement on servers under several switches spans each of their links, and one under
    a single switch spans none (hence ``max(sum, 1)``); when every server hangs from the root, the
    count is 1. Other trees (``switch_weight`` ``None``) count distinct switches per row from
    ``server_switch``.
    """

    topology: Topology
    uplink: NDArray[np.intp]  # the link above each GPU's server
    bw_ref: float  # fastest intra-server (GPU) link
    switch_weight: FloatArray | None  # per link: 1 for a switch above servers (see above)
    server_switch: NDArray[np.int64]  # per link: the parent of a server link, -1 otherwise
    gpu: NDArray[np.float32]  # [G, 10]: the health columns of GPU_FEATURES, zeros elsewhere
    flags: FloatArray | None  # [G, 2]: 1 where σ > 1, 1 where π > 0 (None if neither anywhere)
    failed: NDArray[np.int32] | None  # [G]: 1 where failed (None if none)
    failed_frac: float
    abnormal_frac: float

    @classmethod
    def of(cls, topology: Topology, health: Health) -> _Columns:
        parents = np.unique(topology.parent[topology.server_node])
        weight: FloatArray | None = None
        if len(np.unique(topology.depth[parents])) == 1:
            weight = np.zeros(topology.num_nodes)
            weight[parents] = 1.0
            weight[0] = 0.0  # the root is never spanned; all servers under it -> max(0, 1) = 1
        uplink = topology.server_node[topology.gpu_server].astype(np.intp)
        gpu = np.zeros((topology.num_gpus, len(GPU_FEATURES)), dtype=np.float32)
        gpu[:, 2] = health.gpu_failed
        gpu[:, 3] = 1.0 - 1.0 / health.gpu_slowdown
        gpu[:, 4] = np.clip(health.gpu_fail_prob, 0.0, 1.0)
        gpu[:, 5] = topology.gpu_speed / float(topology.gpu_speed.max())
        gpu[:, 7] = 1.0 - health.link_degradation[uplink]
        gpu.setflags(write=False)
        flags = np.stack([health.gpu_slowdown > 1.0, health.gpu_fail_prob > 0.0], axis=1)
        return cls(
            topology=topology,
            uplink=uplink,
            bw_ref=float(topology.link_bw[topology.gpu_node].max()),
            switch_weight=weight,
            server_switch=np.where(topology.kind == 1, topology.parent, -1).astype(np.int64),
            gpu=gpu,
            flags=flags.astype(np.float64) if flags.any() else None,
            failed=health.gpu_failed.astype(np.int32) if health.gpu_failed.any() else None,
            failed_frac=float(health.gpu_failed.mean()),
            abnormal_frac=float(health.is_abnormal_gpu.mean()),
        )


# Per Health object (immutable, hashed by identity), kept while the object lives: a pure
# function of immutable inputs. Weak keys, so that many environments in one process never evict
# each other's entries and a finished episode's health is forgotten with it.
_COLUMNS: weakref.WeakKeyDictionary[Health, _Columns] = weakref.WeakKeyDictionary()


def _columns(topology: Topology, health: Health) -> _Columns:
    hit = _COLUMNS.get(health)
    if hit is None or hit.topology is not topology:
        hit = _COLUMNS[health] = _Columns.of(topology, health)
    return hit


class ObservationBuilder:
    """Builds the observation dict of a placement environment.

    Keys (all ``float32``): tables ``"gpus"`` ``(G, len(gpu_features))``, ``"candidates"``
    ``(Q * C, 17)``, ``"queue"`` ``(Q, 8)`` — flattened row-major to 1-D unless
    ``table_layout=True`` (:meth:`rows` gives the 2-D view in either layout) — the vector
    ``"summary"`` ``(10,)``, and with ``privileged=True`` also ``"gain"`` ``(Q * C,)``: the exact ΔF
    of each row divided by ``max_job_gpus`` (clipped to ``[-1, 1]``; 0 on padding).

    Args:
        topology: The cluster.
        perf: The iteration-time options (for the η estimate under a noisy health).
        num_slots: View slots ``Q`` of the action tables.
        max_candidates: Rows per slot ``C``.
        queue_size: Normaliser of the pending-job counts.
        max_job_gpus: Normaliser of job sizes and of the gain.
        privileged: Whether to add the exact marginal gain ``"gain"``.
        with_candidates: Whether to include the ``"candidates"`` key (and ``"gain"``); without it
            the queue's ``best_eta`` is 0.
        table_layout: Return tables as 2-D arrays instead of flattening them row-major to 1-D (the
            default, which SB3's checker and ``MultiInputPolicy`` expect).
        gpu_extra: Names of extra per-GPU columns appended after :data:`GPU_FEATURES`; their
            values (in ``[0, 1]``) are passed to :meth:`build`.

    Attributes:
        observation_space: The ``spaces.Dict`` of the keys above.
        gpu_features: ``(*GPU_FEATURES, *gpu_extra)``.
        last_metrics: The :class:`~crop_gym.model.objective.ClusterMetrics` of the state of the
            last :meth:`build` (``None`` before).
    """

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
        if num_slots < 1 or max_candidates < 1:
            raise ConfigError(
                f"num_slots={num_slots} and max_candidates={max_candidates} must be >= 1"
            )
        self.topology = topology
        self.perf = perf
        self.num_slots = int(num_slots)
        self.max_candidates = int(max_candidates)
        self.queue_size = max(1, int(queue_size))
        self.max_job_gpus = max(1, int(max_job_gpus))
        self.privileged = bool(privileged)
        self.with_candidates = bool(with_candidates)
        self.table_layout = bool(table_layout)
        self.gpu_features: tuple[str, ...] = (*GPU_FEATURES, *gpu_extra)
        self.last_metrics: ClusterMetrics | None = None
        G, Q, C = topology.num_gpus, self.num_slots, self.max_candidates
        self._shapes: dict[str, tuple[int, ...]] = {"gpus": (G, len(self.gpu_features))}
        if self.with_candidates:
            self._shapes["candidates"] = (Q * C, len(CANDIDATE_FEATURES))
        self._shapes["queue"] = (Q, len(JOB_FEATURES))
        self._shapes["summary"] = (len(SUMMARY_FEATURES),)
        if self.privileged and self.with_candidates:
            self._shapes["gain"] = (Q * C,)

        def box(key: str) -> spaces.Box:
            shape = self._shapes[key]
            flat = shape if self.table_layout else (int(np.prod(shape)),)
            return spaces.Box(-1.0 if key == "gain" else 0.0, 1.0, flat, np.float32)

        self.observation_space = spaces.Dict({key: box(key) for key in self._shapes})

    def rows(self, obs: dict[str, NDArray[np.float32]], key: str) -> NDArray[np.float32]:
        """The ``(rows, columns)`` view of table ``key`` of ``obs``, in either layout."""
        return obs[key].reshape(self._shapes[key])

    # ------------------------------------------------------------------ build
    def build(
        self,
        state: ClusterState,
        observed: Health,
        pending: Sized,
        table: ActionTable,
        step: int = 0,
        max_steps: int = 1,
        *,
        extra: NDArray[Any] | None = None,
    ) -> dict[str, NDArray[np.float32]]:
        """The observation of ``state`` with ``pending`` jobs and their action table.

        Args:
            state: The cluster state.
            observed: The health the agent observes (``state.health`` or a noisy reading of it).
            pending: Pending jobs in queue order.
            table: :func:`~crop_gym.envs.actions.build_action_table` of this state and ``pending``.
            step: Steps taken in the episode (for the ``steps`` summary feature).
            max_steps: The episode's step cap.
            extra: ``float[G, len(gpu_extra)]`` values of the extra per-GPU columns (``None``:
                zeros).

        Returns:
            A fresh dict of fresh arrays (safe to keep).

        Raises:
            ConfigError: If the table's shape is not the builder's, or ``extra`` has the wrong
                shape.
        """
        if (table.num_slots, table.max_candidates) != (self.num_slots, self.max_candidates):
            raise ConfigError(
                f"action table of {table.num_slots}x{table.max_candidates} rows; the builder "
                f"expects {self.num_slots}x{self.max_candidates}"
            )
        health = _columns(self.topology, observed)
        gpu, free = self._gpus(state, health, extra)
        out: dict[str, NDArray[np.float32]] = {"gpus": gpu}
        slots = self._slot_columns(table)
        cand: NDArray[np.float32] | None = None
        if self.with_candidates:
            cand = self._candidates(state, observed, health, table, slots)
            out["candidates"] = cand
        out["queue"] = self._queue(table, slots, cand)
        out["summary"] = self._summary(state, health, free, pending, table, step, max_steps)
        if self.privileged and self.with_candidates:
            gain = np.zeros(self.num_slots * self.max_candidates, dtype=np.float32)
            gain[table.row_action] = np.clip(table.gains.total / self.max_job_gpus, -1.0, 1.0)
            out["gain"] = gain
        if not self.table_layout:
            for key in ("gpus", "candidates", "queue"):
                if key in out:
                    out[key] = out[key].reshape(-1)
        return out

    def _slot_columns(self, table: ActionTable) -> FloatArray:
        """``float64[n, 17]`` per filled slot, the candidate columns that follow from its job and
        position (valid, job_gpus, grad_size, compute_time, queue_pos, weight; the others 0).
        Its columns 1-3 and 16 are also the queue table's."""
        n = len(table.jobs)
        cols = np.zeros((n, len(CANDIDATE_FEATURES)))
        if n:
            jobs = [job_columns(j, self.max_job_gpus) for j in table.jobs]
            jc = np.fromiter(chain.from_iterable(jobs), np.float64, 4 * n).reshape(n, 4)
            cols[:, 0] = 1.0
            cols[:, 1:4] = jc[:, :3]
            cols[:, 15] = np.arange(n) / max(self.num_slots - 1, 1)
            cols[:, 16] = jc[:, 3]
        return cols

    def _gpus(
        self, state: ClusterState, health: _Columns, extra: NDArray[Any] | None
    ) -> tuple[NDArray[np.float32], int]:
        """The per-GPU table (the observed health columns, then what holds each GPU) and the
        number of free GPUs."""
        n_extra = len(self.gpu_features) - len(GPU_FEATURES)
        G = self.topology.num_gpus
        if extra is not None and np.shape(extra) != (G, n_extra):
            raise ConfigError(
                f"extra GPU columns of shape {np.shape(extra)}; expected {(G, n_extra)}"
            )
        # Each GPU's row is its observed-health row plus the row of what holds it (a placed
        # job's slot: busy, η, size; or the free row, last; or the failed row, before it): the
        # two have disjoint non-zero columns.
        placed = state.placed
        S = len(placed.eta)
        held = np.zeros((S + 2, len(GPU_FEATURES)), dtype=np.float32)
        held[:S, 1] = 1.0
        held[:S, 8] = placed.eta
        held[:S, 9] = np.minimum(placed.k / self.max_job_gpus, 1.0)
        held[S + 1, 0] = 1.0
        # (Unused slots hold stale values; no GPU points at them.) Owner -1: free; failed GPUs
        # (never held) point one row lower.
        owner = state.gpu_owner
        failed = _columns(self.topology, state.health).failed
        row = owner if failed is None else owner - failed
        base = held.take(row, axis=0)
        base += health.gpu
        n = state.link_load[health.uplink]
        base[:, 6] = n / (n + 1.0)
        free = int(np.count_nonzero(row == -1))
        if not n_extra:
            return base, free
        gpu = np.empty((G, len(self.gpu_features)), dtype=np.float32)
        gpu[:, : len(GPU_FEATURES)] = base
        gpu[:, len(GPU_FEATURES) :] = 0.0 if extra is None else extra
        return gpu, free

    def _candidates(
        self,
        state: ClusterState,
        observed: Health,
        health: _Columns,
        table: ActionTable,
        slots: FloatArray,
    ) -> NDArray[np.float32]:
        """The candidate table ``(Q * C, 17)``: one row per valid action row, zeros elsewhere."""
        cand = np.zeros((self.num_slots * self.max_candidates, len(CANDIDATE_FEATURES)), np.float32)
        if len(table.row_slot) == 0:
            return cand
        load = state.link_load
        links = table.facts.inter_links
        if observed is state.health:
            facts, eta, b_inter = table.facts, table.gains.eta, table.gains.b_inter
        else:
            # The health-dependent facts and η as the agent can estimate them.
            facts = placement_facts(self.topology, observed, [s.gpus for s in table.distinct])
            facts = facts.take(table.row_src)
            eff = self.topology.link_bw * observed.link_degradation
            b_inter = inter_bandwidth(eff, load[links] + 1, links)
            eta = times_of(self.perf, table.const[table.row_slot], facts, b_inter).eta
        k, s = facts.k, facts.s
        # The job's and the slot's columns (valid, job_gpus, grad_size, compute_time, ..,
        # queue_pos, weight), then the placement's.
        d = slots.take(table.row_slot, axis=0)
        d[:, 4] = s / _SERVERS_SCALE
        d[:, 5] = (s - 1.0) / np.maximum(k - 1.0, 1.0)
        d[:, 6] = _switches(health, links) / _SWITCHES_SCALE
        if health.flags is not None:
            # Slow and failure-prone GPUs of each distinct candidate, then of each row.
            flags = [health.flags.take(cs.gpus, axis=0).sum(axis=1) for cs in table.distinct]
            d[:, 7:9] = np.concatenate(flags).take(table.row_src, axis=0) / k[:, None]
        d[:, 9] = 1.0 - 1.0 / facts.slowdown
        d[:, 10] = facts.survival
        d[:, 11] = eta
        d[:, 12] = eta * facts.survival
        if links.shape[1]:
            most = load[links].max(axis=1)
            d[:, 13] = most / (most + 1.0)
        bw_ref = health.bw_ref
        d[:, 14] = np.minimum(np.minimum(facts.b_intra, b_inter), bw_ref) / bw_ref
        np.minimum(np.maximum(d, 0.0, out=d), 1.0, out=d)
        cand[table.row_action] = d
        return cand

    def _queue(
        self, table: ActionTable, slots: FloatArray, cand: NDArray[np.float32] | None
    ) -> NDArray[np.float32]:
        """The queue table ``(Q, 8)``: one row per filled view slot, zeros elsewhere."""
        C = self.max_candidates
        queue = np.zeros((self.num_slots, len(JOB_FEATURES)), dtype=np.float32)
        n = len(table.jobs)
        if n == 0:
            return queue
        queue[:n, 0] = 1.0
        queue[:n, 1:4] = slots[:, 1:4]
        queue[:n, 4] = slots[:, 16]
        queue[:n, 5] = np.bincount(table.row_slot, minlength=n) / C
        queue[:n, 7] = np.minimum(table.copies[:n] / _COPIES_SCALE, 1.0)
        if cand is not None:
            # Best η over the slot's rows (padding rows hold 0 <= every η), from the float32
            # column: the cast is monotonic, so this is the cast of the float64 maximum.
            queue[:n, _BEST_ETA] = cand[: n * C, _ETA].reshape(n, C).max(axis=1)
        return queue

    def _summary(
        self,
        state: ClusterState,
        health: _Columns,
        free: int,
        pending: Sized,
        table: ActionTable,
        step: int,
        max_steps: int,
    ) -> NDArray[np.float32]:
        """The summary vector; also sets :attr:`last_metrics`."""
        G = self.topology.num_gpus
        m = self.last_metrics = state.metrics()
        n = len(pending)
        return np.array(
            (
                min(n / self.queue_size, 1.0),
                min(max(n - table.in_view, 0) / self.queue_size, 1.0),
                min(table.pending_gpus / G, 1.0),
                free / G,
                min(max(m.F / G, 0.0), 1.0),
                m.utilization,
                min(max(m.comm_overhead, 0.0), 1.0),
                health.failed_frac,
                health.abnormal_frac,
                min(step / max(max_steps, 1), 1.0),
            ),
            dtype=np.float32,
        )


def _switches(tc: _Columns, links: NDArray[np.int32]) -> FloatArray:
    """Distinct switches above the servers of each row of spanned inter-server ``links`` (1 on
    one server; see :class:`_Columns`)."""
    if links.shape[1] == 0:
        return np.ones(len(links))
    if tc.switch_weight is not None:
        out: FloatArray = np.maximum(tc.switch_weight[links].sum(axis=1), 1.0)
        return out
    # A multi-server placement spans the uplink of every server it uses: count the distinct
    # switches above those uplinks (-1 marks the other links).
    v = np.sort(tc.server_switch[links], axis=1)
    first = v >= 0
    first[:, 1:] &= v[:, 1:] != v[:, :-1]
    out = np.maximum(first.sum(axis=1), 1).astype(np.float64)
    return out
