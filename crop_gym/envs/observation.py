"""The observation of every placement environment: per-GPU, per-candidate, per-queued-job and
summary tables, computed vectorised from the state and its action table.

:class:`ObservationBuilder` returns a ``Dict`` of bounded ``float32`` boxes. The candidate rows
describe the rows of an :class:`~crop_gym.envs.actions.ActionTable` (action ``q * C + c`` is row
``q * C + c``), so every environment exposes the same interface. Columns are listed, in order, in
:data:`GPU_FEATURES`, :data:`CANDIDATE_FEATURES`, :data:`JOB_FEATURES` and
:data:`SUMMARY_FEATURES`; every value is in ``[0, 1]``, except the privileged ``gain`` key, which
is in ``[-1, 1]``. docs/ENVS.md explains each column.

What the agent sees of the devices is the *observed* health (a noisy reading drawn once per
episode, :meth:`~crop_gym.model.health.Health.observe`, or the true health; :class:`ObservedHealth`
holds its columns, computed once per episode): the per-GPU health columns, the health-dependent
candidate columns (slowdown, survival, η, bandwidth) and the abnormal-GPU shares use it. What the
agent sees of the jobs (free and busy GPUs, link loads, the placed jobs' η, F) is the true state.
The privileged ``gain`` is the true ΔF of each row.

:meth:`ObservationBuilder.build` observes any number of episodes of one state at once (its regions,
:meth:`~crop_gym.model.topology.Topology.replicated`), every table computed for all of them
together; a single environment is the batch of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.envs.actions import ActionTable, PendingQueue
from crop_gym.envs.job_features import job_columns
from crop_gym.errors import ConfigError
from crop_gym.model import kernels
from crop_gym.model.conditions import Conditions
from crop_gym.model.facts import PlacementFacts
from crop_gym.model.state import ClusterState, RegionMetrics
from crop_gym.model.timing import PerfConfig, inter_bandwidth, times_of
from crop_gym.model.topology import Topology

__all__ = [
    "CANDIDATE_FEATURES",
    "GPU_FEATURES",
    "JOB_FEATURES",
    "SUMMARY_FEATURES",
    "ObservationBuilder",
    "ObservedHealth",
    "job_columns",
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

_SERVERS_SCALE, _SWITCHES_SCALE, _COPIES_SCALE = 32.0, 8.0, 16.0
_ETA = CANDIDATE_FEATURES.index("eta")
_BEST_ETA = JOB_FEATURES.index("best_eta")


@dataclass(frozen=True, eq=False)
class _TreeColumns:
    """What the features read of a topology (a pure function of it, kept per topology).

    ``switch_weight`` counts the switches above a multi-server placement's servers as a sum over
    its spanned inter-server links: when every server hangs from a switch at one depth (not the
    root), a placement on servers under several switches spans each of their links, and one under
    a single switch spans none (hence ``max(sum, 1)``); when every server hangs from the root, the
    count is 1. Other trees (``switch_weight`` ``None``) count distinct switches per row from
    ``server_switch``.
    """

    uplink: NDArray[np.intp]  # the link above each GPU's server
    bw_ref: float  # fastest intra-server (GPU) link
    switch_weight: FloatArray | None  # per link: 1 for a switch above servers (see above)
    server_switch: NDArray[np.int64]  # per link: the parent of a server link, -1 otherwise
    speed: NDArray[np.float32]  # per GPU: relative speed / fastest GPU


@lru_cache(maxsize=64)
def _tree_columns(topology: Topology) -> _TreeColumns:
    parents = np.unique(topology.parent[topology.server_node])
    weight: FloatArray | None = None
    if len(np.unique(topology.depth[parents])) == 1:
        weight = np.zeros(topology.num_nodes)
        weight[parents] = 1.0
        weight[0] = 0.0  # the root is never spanned; all servers under it -> max(0, 1) = 1
    return _TreeColumns(
        uplink=topology.server_node[topology.gpu_server].astype(np.intp),
        bw_ref=float(topology.link_bw[topology.gpu_node].max()),
        switch_weight=weight,
        server_switch=np.where(topology.kind == 1, topology.parent, -1).astype(np.int64),
        speed=(topology.gpu_speed / float(topology.gpu_speed.max())).astype(np.float32),
    )


_NO_FLAGS = np.zeros((0, 2))
_NO_FLOATS = np.zeros(0)

#: Where :meth:`ObservedHealth.of` keeps the true health's columns in the conditions' cache.
_OBSERVED_KEY = "observation.observed_health"


@dataclass(frozen=True, eq=False)
class ObservedHealth:
    """What the agent observes of the devices of every region of a state, computed once per
    episode (:meth:`of`) and read by every observation of it.

    Attributes:
        conditions: The observed health on the state's topology (the true conditions when the
            reading has no noise).
        noisy: Whether it differs from the true health (the candidate columns are then
            re-evaluated under it).
        gpu: ``float32[G, 10]`` the health columns of :data:`GPU_FEATURES` (failed, slowness,
            failure probability, speed, uplink degradation), zeros elsewhere.
        flags: ``float64[G, 2]`` 1 where σ > 1, 1 where π > 0 (``None`` if neither anywhere).
        failed_frac: ``float64[R]`` share of failed GPUs of each region.
        abnormal_frac: ``float64[R]`` share of slow, failed or failure-prone GPUs of each region.
    """

    conditions: Conditions
    noisy: bool
    gpu: NDArray[np.float32]
    flags: FloatArray | None
    failed_frac: FloatArray
    abnormal_frac: FloatArray

    @classmethod
    def of(cls, conditions: Conditions, true: Conditions | None = None) -> ObservedHealth:
        """The columns of the observed ``conditions`` (``true``: the state's, if different).

        Without ``true`` (the agent sees the true health) they are kept in the conditions'
        :attr:`~crop_gym.model.conditions.Conditions.cache`: a pure function of them."""
        if true is None or true is conditions:
            hit: ObservedHealth | None = conditions.cache.get(_OBSERVED_KEY)
            if hit is None:
                hit = conditions.cache[_OBSERVED_KEY] = cls._of(conditions, None)
            return hit
        return cls._of(conditions, true)

    @classmethod
    def _of(cls, conditions: Conditions, true: Conditions | None) -> ObservedHealth:
        topology, health = conditions.topology, conditions.health
        tc = _tree_columns(topology)
        gpu = np.zeros((topology.num_gpus, len(GPU_FEATURES)), dtype=np.float32)
        gpu[:, 2] = health.gpu_failed
        gpu[:, 3] = 1.0 - 1.0 / health.gpu_slowdown
        gpu[:, 4] = np.clip(health.gpu_fail_prob, 0.0, 1.0)
        gpu[:, 5] = tc.speed
        gpu[:, 7] = 1.0 - health.link_degradation[tc.uplink]
        gpu.setflags(write=False)
        flags = np.stack([health.gpu_slowdown > 1.0, health.gpu_fail_prob > 0.0], axis=1)
        R = topology.regions
        return cls(
            conditions=conditions,
            noisy=true is not None and true is not conditions,
            gpu=gpu,
            flags=flags.astype(np.float64) if flags.any() else None,
            failed_frac=health.gpu_failed.reshape(R, -1).mean(axis=1),
            abnormal_frac=health.is_abnormal_gpu.reshape(R, -1).mean(axis=1),
        )


class ObservationBuilder:
    """Builds the observation dicts of a placement environment.

    Keys (all ``float32``): tables ``"gpus"`` ``(G, len(gpu_features))``, ``"candidates"``
    ``(Q * C, 17)``, ``"queue"`` ``(Q, 8)`` — flattened row-major to 1-D unless
    ``table_layout=True`` (:meth:`rows` gives the 2-D view in either layout) — the vector
    ``"summary"`` ``(10,)``, and with ``privileged=True`` also ``"gain"`` ``(Q * C,)``: the exact ΔF
    of each row divided by ``max_job_gpus`` (clipped to ``[-1, 1]``; 0 on padding).

    Args:
        topology: The cluster of one episode (``G`` is its GPUs).
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
        observation_space: The ``spaces.Dict`` of one episode's observation.
        gpu_features: ``(*GPU_FEATURES, *gpu_extra)``.
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
        """The ``(rows, columns)`` view of table ``key`` of one episode's ``obs``, in either
        layout."""
        return obs[key].reshape(self._shapes[key])

    # ------------------------------------------------------------------ build
    def build(
        self,
        state: ClusterState,
        observed: ObservedHealth,
        tables: Sequence[ActionTable],
        queues: Sequence[PendingQueue],
        steps: Sequence[int],
        max_steps: int,
        metrics: RegionMetrics | None = None,
        *,
        extra: NDArray[Any] | None = None,
    ) -> dict[str, NDArray[np.float32]]:
        """The observations of the episodes of ``tables`` (one per region of ``state``).

        Args:
            state: The cluster state (every region of it).
            observed: The health the agent observes (:meth:`ObservedHealth.of`).
            tables: The action table of each episode to observe (its region is
                :attr:`ActionTable.region`).
            queues: The pending queue of each of those episodes (its tables' view).
            steps: Steps taken in each episode (for the ``steps`` summary feature).
            max_steps: The episodes' step cap.
            metrics: :meth:`ClusterState.region_metrics` of ``state`` if the caller has it.
            extra: ``float[n, G, len(gpu_extra)]`` values of the extra per-GPU columns (``None``:
                zeros).

        Returns:
            A fresh dict of fresh arrays, each with a leading axis of one row per table.

        Raises:
            ConfigError: If a table's shape is not the builder's, or ``extra`` has the wrong
                shape.
        """
        n = len(tables)
        for table in tables:
            if (table.num_slots, table.max_candidates) != (self.num_slots, self.max_candidates):
                raise ConfigError(
                    f"action table of {table.num_slots}x{table.max_candidates} rows; the builder "
                    f"expects {self.num_slots}x{self.max_candidates}"
                )
        m = state.region_metrics() if metrics is None else metrics
        regions = np.array([t.region for t in tables], dtype=np.int64)
        pending = [len(q) for q in queues]
        out: dict[str, NDArray[np.float32]] = {}
        if self.with_candidates and state.compiled:
            out["gpus"], out["candidates"], out["queue"], out["summary"] = self._compiled(
                state, observed, m, tables, queues, regions, pending, steps, max_steps, extra
            )
        else:
            slots = self._slot_columns(tables)
            gpu, free = self._gpus(state, observed, regions, extra)
            out["gpus"] = gpu
            cand: NDArray[np.float32] | None = None
            if self.with_candidates:
                cand = self._candidates(state, observed, tables, slots)
                out["candidates"] = cand
            out["queue"] = self._queue(tables, slots, cand)
            out["summary"] = self._summary(
                observed,
                m,
                regions,
                free,
                tables,
                np.asarray(pending),
                np.asarray(steps),
                max_steps,
            )
        if self.privileged and self.with_candidates:
            QC = self.num_slots * self.max_candidates
            gain = np.zeros((n, QC), dtype=np.float32)
            for i, table in enumerate(tables):
                gain[i, table.row_action] = np.clip(
                    table.gains.total / self.max_job_gpus, -1.0, 1.0
                )
            out["gain"] = gain
        if not self.table_layout:
            for key in ("gpus", "candidates", "queue"):
                if key in out:
                    out[key] = out[key].reshape(n, -1)
        return out

    def _compiled(
        self,
        state: ClusterState,
        observed: ObservedHealth,
        m: RegionMetrics,
        tables: Sequence[ActionTable],
        queues: Sequence[PendingQueue],
        regions: NDArray[np.int64],
        pending: Sequence[int],
        steps: Sequence[int],
        max_steps: int,
        extra: NDArray[Any] | None,
    ) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.float32], NDArray[np.float32]]:
        """The GPU, candidate, queue and summary tables by the compiled kernel
        (:func:`crop_gym.model.kernels.observation_tables`; the same numbers as
        :meth:`_gpus`, :meth:`_candidates`, :meth:`_queue` and :meth:`_summary`)."""
        n, G = len(tables), self.topology.num_gpus
        n_extra = len(self.gpu_features) - len(GPU_FEATURES)
        if extra is not None and np.shape(extra) != (n, G, n_extra):
            raise ConfigError(
                f"extra GPU columns of shape {np.shape(extra)}; expected {(n, G, n_extra)}"
            )
        facts, eta, b_inter = self._row_estimates(state, observed, tables)
        tc = _tree_columns(state.topology)
        placed = state.placed
        table_rows = np.fromiter(
            accumulate((len(t.row_slot) for t in tables), initial=0), np.int64, n + 1
        )
        table_slots = np.fromiter(
            accumulate((len(t.jobs) for t in tables), initial=0), np.int64, n + 1
        )
        if n == 1:
            (t0,) = tables
            (q0,) = queues
            row_slot, row_cand, copies = t0.row_slot, t0.row_cand, t0.copies
            slot_k = q0.num_gpus[t0.queue_index]
            slot_cols = q0.columns[t0.queue_index]
            flat, lo, hi = t0.row_gpus
        else:
            row_slot = np.concatenate([t.row_slot for t in tables])
            row_cand = np.concatenate([t.row_cand for t in tables])
            slot_k = np.concatenate(
                [q.num_gpus[t.queue_index] for t, q in zip(tables, queues, strict=True)]
            )
            slot_cols = np.concatenate(
                [q.columns[t.queue_index] for t, q in zip(tables, queues, strict=True)]
            )
            copies = np.stack([t.copies for t in tables])
            parts = [t.row_gpus for t in tables]
            sizes = np.cumsum([0] + [len(p[0]) for p in parts[:-1]])
            flat = np.concatenate([p[0] for p in parts])
            lo = np.concatenate([p[1] + s for p, s in zip(parts, sizes, strict=True)])
            hi = np.concatenate([p[2] + s for p, s in zip(parts, sizes, strict=True)])
        flags = observed.flags if observed.flags is not None else _NO_FLAGS
        weight = tc.switch_weight if tc.switch_weight is not None else _NO_FLOATS
        gpu, cand, queue, summary = kernels.observation_tables(
            state.gpu_owner, state.conditions.usable, placed.eta, placed.k, state.link_load,
            observed.gpu, flags, tc.uplink, weight, tc.server_switch, tc.bw_ref,
            self.max_job_gpus, regions, G, table_rows, table_slots, slot_k, slot_cols, row_slot,
            row_cand, facts.values, facts.inter_links, eta, b_inter, flat, lo, hi,
            copies.reshape(n, -1), self.num_slots, self.max_candidates,
            np.asarray(pending, dtype=np.int64),
            np.array([t.in_view for t in tables], dtype=np.int64),
            np.array([t.pending_gpus for t in tables], dtype=np.int64),
            np.asarray(steps, dtype=np.int64), max_steps, self.queue_size, m.F,
            m.utilization, m.comm_overhead, observed.failed_frac, observed.abnormal_frac,
        )  # fmt: skip
        if n_extra:
            wide = np.empty((n, G, len(self.gpu_features)), dtype=np.float32)
            wide[:, :, : len(GPU_FEATURES)] = gpu
            wide[:, :, len(GPU_FEATURES) :] = 0.0 if extra is None else extra
            gpu = wide
        return gpu, cand, queue, summary

    def _row_estimates(
        self, state: ClusterState, observed: ObservedHealth, tables: Sequence[ActionTable]
    ) -> tuple[PlacementFacts, FloatArray, FloatArray]:
        """The facts, η and bottleneck share of every row of ``tables`` (in order) as the agent
        can estimate them: the tables' own under the true health, else re-evaluated under the
        observed one."""
        if observed.noisy:
            keys = [key for t in tables for cs in t.distinct for key in cs.keys]
            distinct = observed.conditions.facts(keys)
            off = np.cumsum([0] + [sum(len(cs) for cs in t.distinct) for t in tables])[:-1]
            src = np.concatenate([t.row_src + o for t, o in zip(tables, off, strict=True)])
            facts = distinct.take(src)
            links = facts.inter_links
            b_inter = inter_bandwidth(observed.conditions.eff_bw, state.link_load[links] + 1, links)
            const = np.concatenate([t.const[t.row_slot] for t in tables])
            return facts, times_of(self.perf, const, facts, b_inter).eta, b_inter
        if len(tables) == 1:
            t0 = tables[0]
            return t0.facts, t0.gains.eta, t0.gains.b_inter
        return (
            PlacementFacts.concat([t.facts for t in tables]),
            np.concatenate([t.gains.eta for t in tables]),
            np.concatenate([t.gains.b_inter for t in tables]),
        )

    def _slot_columns(self, tables: Sequence[ActionTable]) -> list[FloatArray]:
        """Per table ``float64[n_q, 17]``: per filled slot, the candidate columns that follow
        from its job and position (valid, job_gpus, grad_size, compute_time, queue_pos, weight;
        the others 0). Its columns 1-3 and 16 are also the queue table's."""
        out = []
        scale = max(self.num_slots - 1, 1)
        for table in tables:
            n = len(table.jobs)
            cols = np.zeros((n, len(CANDIDATE_FEATURES)))
            if n:
                jc = np.array([job_columns(j, self.max_job_gpus) for j in table.jobs])
                cols[:, 0] = 1.0
                cols[:, 1:4] = jc[:, :3]
                cols[:, 15] = np.arange(n) / scale
                cols[:, 16] = jc[:, 3]
            out.append(cols)
        return out

    def _gpus(
        self,
        state: ClusterState,
        observed: ObservedHealth,
        regions: NDArray[np.int64],
        extra: NDArray[Any] | None,
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """The per-GPU tables ``float32[n, G, F]`` (the observed health columns, then what holds
        each GPU) and the free GPUs of each."""
        n_extra = len(self.gpu_features) - len(GPU_FEATURES)
        n, G = len(regions), self.topology.num_gpus
        if extra is not None and np.shape(extra) != (n, G, n_extra):
            raise ConfigError(
                f"extra GPU columns of shape {np.shape(extra)}; expected {(n, G, n_extra)}"
            )
        topo = state.topology
        every = n == topo.regions and (n == 1 or bool((regions == np.arange(n)).all()))
        gidx: Any = slice(None) if every else (regions[:, None] * G + np.arange(G)).ravel()
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
        row = state.gpu_owner[gidx] - ~state.conditions.usable[gidx]
        base = held.take(row, axis=0)
        base += observed.gpu[gidx]
        load = state.link_load[_tree_columns(topo).uplink[gidx]]
        base[:, 6] = load / (load + 1.0)
        free = np.count_nonzero((row == -1).reshape(n, G), axis=1)
        if not n_extra:
            return base.reshape(n, G, -1), free
        gpu = np.empty((n, G, len(self.gpu_features)), dtype=np.float32)
        gpu[:, :, : len(GPU_FEATURES)] = base.reshape(n, G, -1)
        gpu[:, :, len(GPU_FEATURES) :] = 0.0 if extra is None else extra
        return gpu, free

    def _candidates(
        self,
        state: ClusterState,
        observed: ObservedHealth,
        tables: Sequence[ActionTable],
        slots: list[FloatArray],
    ) -> NDArray[np.float32]:
        """The candidate tables ``(n, Q * C, 17)``: one row per valid action row, zeros elsewhere."""
        QC = self.num_slots * self.max_candidates
        cand = np.zeros((len(tables), QC, len(CANDIDATE_FEATURES)), np.float32)
        counts = [len(t.row_slot) for t in tables]
        if not sum(counts):
            return cand
        # Every table's rows together.
        one = len(tables) == 1
        facts, eta, b_inter = self._row_estimates(state, observed, tables)
        links = facts.inter_links
        load = state.link_load
        k, s = facts.k, facts.s
        tc = _tree_columns(state.topology)
        # The job's and the slot's columns (valid, job_gpus, grad_size, compute_time, ..,
        # queue_pos, weight), then the placement's.
        d = (
            slots[0].take(tables[0].row_slot, axis=0)
            if one
            else np.concatenate(
                [sl.take(t.row_slot, axis=0) for sl, t in zip(slots, tables, strict=True)]
            )
        )
        d[:, 4] = s / _SERVERS_SCALE
        d[:, 5] = (s - 1.0) / np.maximum(k - 1.0, 1.0)
        d[:, 6] = _switches(tc, links) / _SWITCHES_SCALE
        if observed.flags is not None:
            # Slow and failure-prone GPUs of each distinct candidate, then of each row.
            flags = observed.flags
            per = [
                np.concatenate([flags.take(cs.gpus, axis=0).sum(axis=1) for cs in t.distinct])[
                    t.row_src
                ]
                for t in tables
                if len(t.row_src)
            ]
            d[:, 7:9] = np.concatenate(per) / k[:, None]
        d[:, 9] = 1.0 - 1.0 / facts.slowdown
        d[:, 10] = facts.survival
        d[:, 11] = eta
        d[:, 12] = eta * facts.survival
        if links.shape[1]:
            most = load[links].max(axis=1)
            d[:, 13] = most / (most + 1.0)
        bw_ref = tc.bw_ref
        d[:, 14] = np.minimum(np.minimum(facts.b_intra, b_inter), bw_ref) / bw_ref
        np.minimum(np.maximum(d, 0.0, out=d), 1.0, out=d)
        which = np.repeat(np.arange(len(tables)), counts)
        actions = (
            np.concatenate([t.row_action for t in tables]) if not one else tables[0].row_action
        )
        cand[which, actions] = d
        return cand

    def _queue(
        self,
        tables: Sequence[ActionTable],
        slots: list[FloatArray],
        cand: NDArray[np.float32] | None,
    ) -> NDArray[np.float32]:
        """The queue tables ``(n, Q, 8)``: one row per filled view slot, zeros elsewhere."""
        C = self.max_candidates
        queue = np.zeros((len(tables), self.num_slots, len(JOB_FEATURES)), dtype=np.float32)
        for i, (table, sl) in enumerate(zip(tables, slots, strict=True)):
            n = len(table.jobs)
            if n == 0:
                continue
            q = queue[i]
            q[:n, 0] = 1.0
            q[:n, 1:4] = sl[:, 1:4]
            q[:n, 4] = sl[:, 16]
            q[:n, 5] = np.bincount(table.row_slot, minlength=n) / C
            q[:n, 7] = np.minimum(table.copies[:n] / _COPIES_SCALE, 1.0)
            if cand is not None:
                # Best η over the slot's rows (padding rows hold 0 <= every η), from the float32
                # column: the cast is monotonic, so this is the cast of the float64 maximum.
                q[:n, _BEST_ETA] = cand[i, : n * C, _ETA].reshape(n, C).max(axis=1)
        return queue

    def _summary(
        self,
        observed: ObservedHealth,
        m: RegionMetrics,
        regions: NDArray[np.int64],
        free: NDArray[np.int64],
        tables: Sequence[ActionTable],
        pending: NDArray[np.int64],
        steps: NDArray[np.int64],
        max_steps: int,
    ) -> NDArray[np.float32]:
        """The summary vectors ``(n, 10)``."""
        G = self.topology.num_gpus
        K = self.queue_size
        in_view = np.array([t.in_view for t in tables])
        pending_gpus = np.array([t.pending_gpus for t in tables])
        out = np.empty((len(tables), len(SUMMARY_FEATURES)), dtype=np.float32)
        out[:, 0] = np.minimum(pending / K, 1.0)
        out[:, 1] = np.minimum(np.maximum(pending - in_view, 0) / K, 1.0)
        out[:, 2] = np.minimum(pending_gpus / G, 1.0)
        out[:, 3] = free / G
        out[:, 4] = np.minimum(np.maximum(m.F[regions] / G, 0.0), 1.0)
        out[:, 5] = m.utilization[regions]
        out[:, 6] = np.minimum(np.maximum(m.comm_overhead[regions], 0.0), 1.0)
        out[:, 7] = observed.failed_frac[regions]
        out[:, 8] = observed.abnormal_frac[regions]
        out[:, 9] = np.minimum(steps / max(max_steps, 1), 1.0)
        return out


def _switches(tc: _TreeColumns, links: NDArray[np.int32]) -> FloatArray:
    """Distinct switches above the servers of each row of spanned inter-server ``links`` (1 on
    one server; see :class:`_TreeColumns`)."""
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
