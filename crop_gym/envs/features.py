"""The observation builder shared by every placement environment.

:class:`ObservationBuilder` writes a flat ``Dict`` of bounded ``float32`` boxes (per-GPU,
per-candidate, per-queued-job and summary features); every call returns fresh arrays, built from
cached rows and preallocated buffers. It is driven by a :class:`~crop_gym.objective.ClusterState`,
a sequence of pending :class:`~crop_gym.jobs.Job` and the
:class:`~crop_gym.envs.actions.CandidateActions` table whose rows the candidate features describe,
so that the static environments and the online environment expose the same interface.

Feature columns are listed, in order, in :data:`GPU_FEATURES`, :data:`CANDIDATE_FEATURES`,
:data:`JOB_FEATURES` and :data:`SUMMARY_FEATURES`; every value is clipped to ``[0, 1]``, except the
privileged ``gain`` key, which is in ``[-1, 1]``. docs/ENVS.md explains each column.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym._numeric import np_sum_sparse
from crop_gym.devices import Health
from crop_gym.envs.actions import CandidateActions
from crop_gym.jobs import Job
from crop_gym.objective import ClusterState, ideal_time
from crop_gym.perf import PerfConfig
from crop_gym.topology import Topology

__all__ = [
    "CANDIDATE_FEATURES",
    "GPU_FEATURES",
    "JOB_FEATURES",
    "SUMMARY_FEATURES",
    "ObservationBuilder",
]

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

_GRAD_LOG_LO, _GRAD_LOG_SPAN = 6.0, 4.0
# float32 bytes of 2 and 7 values (numpy's native float32; the same float64 -> float32 cast).
_PACK1 = struct.Struct("=f").pack
_PACK2 = struct.Struct("=2f").pack
_PACK6 = struct.Struct("=6f").pack
_PACK_ROW = struct.Struct(f"={len(JOB_FEATURES)}f").pack
# What _new_row computes for new candidate rows: columns (float32 bytes), time-model terms and
# log-survivals.
_NewRows = tuple[list[tuple[bytes, bytes, bytes]], list[tuple[float, ...]], list[float]]
# Candidate rows kept per health before they are all forgotten (multi-server candidates get a new
# row at every change of the link loads).
_MAX_ROWS = 1 << 16
_COMPUTE_SCALE = 0.25


def _clip01(x: float) -> float:
    """``x`` clipped to ``[0, 1]``, as ``np.clip(x, 0.0, 1.0)``."""
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def _grad_feature(grad_bytes: Any) -> Any:
    return np.clip(
        (np.log10(np.maximum(grad_bytes, 1.0)) - _GRAD_LOG_LO) / _GRAD_LOG_SPAN, 0.0, 1.0
    )


def _compute_feature(t: Any) -> Any:
    return t / (t + _COMPUTE_SCALE)


def _common(values: list[float]) -> tuple[float, set[int]]:
    """The most common of ``values`` and the indices of the others."""
    common = Counter(values).most_common(1)[0][0]
    return common, {i for i, v in enumerate(values) if v != common}


class ObservationBuilder:
    """Builds the observation dict of a placement environment into preallocated buffers.

    Keys (all ``float32``): tables ``"gpus"`` ``(G, 10)``, ``"candidates"`` ``(M, 17)``,
    ``"queue"`` ``(Q, 8)`` — flattened row-major to 1-D unless ``table_layout=True``, so
    ``obs["candidates"].reshape(M, len(CANDIDATE_FEATURES))`` recovers the rows — the vector
    ``"summary"`` ``(10,)``, and with ``privileged=True`` also ``"gain"`` ``(M,)`` —
    the exact ΔF of each row divided by ``max_job_gpus`` (clipped to ``[-1, 1]``; 0 on padding).
    Add ``gpu_extra`` columns (filled by the caller through :attr:`gpu_buffer`) for env-specific
    per-GPU flags; with ``with_candidates=False`` the candidate key is left out.

    Args:
        topology: The cluster.
        actions: The action table whose rows the candidate features describe.
        perf: The iteration-time options (for the η estimate).
        queue_size: Normaliser of the pending-job counts.
        max_job_gpus: Normaliser of job sizes.
        privileged: Whether to add the exact marginal gain ``"gain"``.
        gpu_extra: Names of extra per-GPU columns appended after :data:`GPU_FEATURES`.
        with_candidates: Whether to include the ``"candidates"`` key (and ``"gain"``).
        table_layout: Return tables as 2-D arrays (``(rows, columns)``) instead of flattening
            them row-major to 1-D (the default, which SB3's checker and ``MultiInputPolicy`` expect).
    """

    def __init__(
        self,
        topology: Topology,
        actions: CandidateActions,
        perf: PerfConfig,
        *,
        queue_size: int,
        max_job_gpus: int,
        privileged: bool = False,
        gpu_extra: Sequence[str] = (),
        with_candidates: bool = True,
        table_layout: bool = False,
    ) -> None:
        self.topology = topology
        self.actions = actions
        self.perf = perf
        self.queue_size = max(1, int(queue_size))
        self.max_job_gpus = max(1, int(max_job_gpus))
        self.privileged = bool(privileged)
        self.with_candidates = bool(with_candidates)
        self.gpu_features = (*GPU_FEATURES, *gpu_extra)
        G, Q, C = topology.num_gpus, actions.num_jobs, actions.max_candidates
        M = Q * C
        self._gpu = np.zeros((G, len(self.gpu_features)), dtype=np.float32)
        self._cand = np.zeros((M, len(CANDIDATE_FEATURES)), dtype=np.float32)  # (zeros)
        self._queue = np.zeros((Q, len(JOB_FEATURES)), dtype=np.float32)
        self._queue_shape = self._queue.shape
        self._summary = np.zeros(len(SUMMARY_FEATURES), dtype=np.float32)  # (shape only)
        self._gain = np.zeros(M, dtype=np.float32)
        self._tstar: dict[tuple[str, int, float], float] = {}
        self._facts: dict[int, tuple[Job, tuple[float, float, float, float, float]]] = {}
        # Per job class (CandidateActions.view_classes): its queue-table columns (size, gradient
        # size, compute time, weight).
        self._cls_cols: dict[int, tuple[float, float, float, float]] = {}
        # Queue-table rows (float32 bytes, best η 0) by job class, candidates and copies.
        self._queue_rows: dict[tuple[int, int, int], bytes] = {}
        self.last_metrics: Any = None
        # Static topology arrays used on the hot path.
        self._server_uplink = topology.server_node[
            topology.gpu_server
        ]  # link above each GPU's server
        self._srv_parent = topology.parent[topology.server_node]
        self._speed_norm = topology.gpu_speed / float(topology.gpu_speed.max())
        intra = topology.link_bw[topology.gpu_node]
        self._bw_ref = float(intra.max())
        self._queue_pos = (np.arange(Q, dtype=np.float64) / max(Q - 1, 1)).astype(np.float32)
        # Plain-Python copies of the topology for the per-candidate stats.
        self._t_links: list[tuple[int, ...]] = [tuple(r) for r in topology.gpu_links.tolist()]
        self._t_lo: list[int] = topology.node_gpu_lo.tolist()
        self._t_hi: list[int] = topology.node_gpu_hi.tolist()
        self._t_server: list[int] = topology.gpu_server.tolist()
        self._t_srv_parent: list[int] = self._srv_parent.tolist()
        self._t_srv_hi: list[int] = topology.server_gpu_hi.tolist()
        self._t_lat: list[float] = topology.link_lat.tolist()
        self._lat_common = _common(topology.link_lat[topology.gpu_node].tolist())
        # Per candidate (GPU set) seen under the current health (and, for multi-server ones, the
        # current link loads), a row (see _store_rows): its feature columns as float32 bytes and
        # its time-model terms; per job class, the finished table row of each (row, class) pair
        # (see _pair_rows). A row's values never change: when the link loads change, the
        # multi-server candidates get new rows (see _drop_multi), so no cached pair goes stale.
        self._ring = perf.allreduce == "ring"
        self._h0 = len(CANDIDATE_FEATURES)
        # The load-dependent time-model term (b_intra/b_inter bottleneck with ring all-reduce,
        # b_inter with hierarchical): its index in a row's terms.
        self._h_load = 1 if self._ring else 3
        # Topology facts of multi-server candidates (see _span), kept across health changes.
        self._spans: dict[tuple[int, ...], Any] = {}
        self._depth = topology.gpu_links.shape[1] - 1
        # The constant columns of single-GPU candidates (valid and size as float32 bytes;
        # servers, spread, switches; contention and bandwidth as float32 bytes) and their
        # time-model terms but the slowdown (see _new_row).
        self._single_cols = (
            _PACK2(1.0, _clip01(1 / self.max_job_gpus)),
            _clip01(1.0 / 32.0),
            _clip01(0.0 / 1.0),
            _clip01(1.0 / 8.0),
            _PACK2(0.0, _clip01(min(np.inf, self._bw_ref) / self._bw_ref)),
        )
        self._single_h = (
            (0.0 / 1, np.inf, 0.0 * 0.0)
            if self._ring
            else (0.0 / 1.0, 0.0 / 1.0, np.inf, np.inf, 0.0 * 0.0, 0.0 * 0.0)
        )
        # Per job class: its grad_size and compute_time columns (float32 bytes), its queue_pos and
        # weight columns per view slot (the last two columns of a table row; float32 bytes), and
        # its M, t_c and T* (see _job_of).
        self._jobs: dict[int, tuple[bytes, list[bytes], float, float, float]] = {}
        # The zero bytes of 0..C padding rows.
        self._pads = [bytes(4 * self._h0 * m) for m in range(C + 1)]
        # Per-GPU table parts (see _gpu_features): the health/load columns, the per-slot rows, and
        # what they were last computed from.
        self._gpu_base = np.zeros((G, len(GPU_FEATURES)), dtype=np.float32)
        self._load_key = b""
        self._slot_tab = np.zeros((0, len(GPU_FEATURES)), dtype=np.float32)
        # Per job slot, the facts its size column was computed from (see _gpu_features).
        self._slot_facts: list[tuple[Any, ...] | None] = []
        self._usable_ref: NDArray[np.bool_] | None = None
        # (See _reset_rows.)
        self._clean_common: tuple[float, ...] = ()
        self._rowdata: dict[int, tuple[bytes, bytes, bytes, tuple[float, ...], float]] = {}
        self._unusable: NDArray[np.int32] | None = None
        self.set_health(Health.healthy(topology))
        self.table_layout = bool(table_layout)

        def box(arr: NDArray[np.float32], low: float = 0.0) -> spaces.Box:
            shape = arr.shape if self.table_layout else (arr.size,)
            return spaces.Box(low, 1.0, shape, np.float32)

        spaces_dict: dict[str, spaces.Space[Any]] = {"gpus": box(self._gpu)}
        if self.with_candidates:
            spaces_dict["candidates"] = box(self._cand)
        spaces_dict["queue"] = box(self._queue)
        spaces_dict["summary"] = box(self._summary)
        if self.privileged and self.with_candidates:
            spaces_dict["gain"] = box(self._gain, -1.0)
        self.observation_space = spaces.Dict(spaces_dict)

    @property
    def gpu_buffer(self) -> NDArray[np.float32]:
        """The per-GPU buffer; callers write their ``gpu_extra`` columns here before :meth:`build`."""
        return self._gpu

    @property
    def queue_buffer(self) -> NDArray[np.float32]:
        """The per-queued-job buffer ``(Q, len(JOB_FEATURES))`` of the last :meth:`build`."""
        return self._queue.reshape(self._queue_shape)

    # ------------------------------------------------------------------ health
    def set_health(self, health: Health) -> None:
        """Set the (possibly noisy) health the agent observes; call at reset and when it changes."""
        topo = self.topology
        self.health = health
        self._eff_bw = topo.link_bw * health.link_degradation
        self._link_logok = np.log1p(-health.link_fail_prob)
        gl = topo.gpu_node
        # Per-GPU static columns: slow?, failure-prone?, σ/speed, log(1-π_g), log(1-π) of its GPU
        # link, ρ·B of its GPU link, latency of its GPU link.
        self._gpu_static = np.stack(
            [
                (health.gpu_slowdown > 1.0).astype(np.float64),
                (health.gpu_fail_prob > 0).astype(np.float64),
                health.gpu_slowdown / topo.gpu_speed,
                np.log1p(-health.gpu_fail_prob),
                self._link_logok[gl],
                self._eff_bw[gl],
                topo.link_lat[gl],
            ],
            axis=1,
        )
        # The same columns as plain-Python lists, and per-link lists, for the per-candidate stats.
        (
            self._h_slow,
            self._h_failprone,
            self._h_slowdown,
            self._h_log_gpu,
            self._h_log_gpu_link,
            self._h_bw_gpu_link,
            self._h_lat_gpu_link,
        ) = self._gpu_static.T.tolist()
        self._h_eff_bw: list[float] = self._eff_bw.tolist()
        self._h_link_logok: list[float] = self._link_logok.tolist()
        # GPUs whose log-survival terms are not all zero (most GPUs never fail).
        self._h_log_nz = {
            g
            for g, (a, b) in enumerate(zip(self._h_log_gpu, self._h_log_gpu_link, strict=True))
            if a or b
        }
        self._h_slow_set = {g for g, v in enumerate(self._h_slow) if v}
        self._h_failprone_set = {g for g, v in enumerate(self._h_failprone) if v}
        # Per GPU column that _new_row reduces over a candidate's GPUs (σ/speed, ρ·B and
        # latency of the GPU link): its most common value and the GPUs that differ from it. A
        # candidate without such a GPU reduces to the common value.
        self._h_common = [_common(c) for c in (self._h_slowdown, self._h_bw_gpu_link)]
        self._h_common.append(self._lat_common)
        # GPUs where some per-GPU value _new_row reads is not the common one (see _add_row).
        self._h_odd = frozenset().union(
            self._h_log_nz,
            self._h_slow_set,
            self._h_failprone_set,
            *(odd for _, odd in self._h_common),
        )
        self._reset_rows()
        self._failed = health.gpu_failed.astype(np.float32)
        self._failed_frac = float(self._failed.mean())
        self._abnormal_frac = float(health.is_abnormal_gpu.mean())
        # The health columns of the per-GPU rows (see _gpu_features); the others are zero but
        # the uplink load.
        g = self._gpu_base
        g[:, 2] = self._failed
        g[:, 3] = 1.0 - 1.0 / health.gpu_slowdown
        g[:, 4] = np.clip(health.gpu_fail_prob, 0.0, 1.0)
        g[:, 5] = self._speed_norm
        g[:, 7] = 1.0 - health.link_degradation[self._server_uplink]

    def _reset_rows(self) -> None:
        """Forget every candidate row (see :meth:`_candidate_features`) but the clean rows (see
        :meth:`_add_row`), which are kept, with their pairs, while the common per-GPU values
        they follow from are the same."""
        common = tuple(c for c, _ in self._h_common)
        if common != self._clean_common:
            self._clean_common = common
            # The ids of the clean rows (row -k for size k).
            self._clean: set[int] = set()
            # Per job class, the pairs of the clean rows (see _pair_rows).
            self._clean_pairs: dict[int, dict[int, bytes]] = {}
        old = self._rowdata
        # Candidate key -> its row, under the current health and, for multi-server candidates,
        # the link loads _rows_load.
        self._rows: dict[tuple[int, ...], int] = {}
        self._rows_load = b""
        self._n_rows = 0
        # Per row: its columns 0-1, 4-10 and 13-14 (float32 bytes), its time-model terms (see
        # _new_row) and its survival.
        self._rowdata = {i: old[i] for i in self._clean}
        # Per multi-server row: its spanned inter-server links and b_intra. The multi-server
        # candidates of _rows (key -> row), and those whose rows are for other link loads.
        self._multi: dict[int, tuple[list[int], float]] = {}
        self._multi_keys: dict[tuple[int, ...], int] = {}
        self._stale: dict[tuple[int, ...], int] = {}
        # Per job class: per row, the row's columns 0-14 for that job (see _pair_rows; the
        # pairs of clean rows are copied in from _clean_pairs when the class is first seen),
        # and the class's columns 15-16 per view slot (see _job_of).
        self._pairs: dict[int, tuple[dict[int, bytes], list[bytes]]] = {}

    # --------------------------------------------------------------- features
    def job_facts(self, job: Job) -> tuple[float, float, float, float, float]:
        """``(k, M, t_c, w, T*)`` of a job (cached per job object; :meth:`clear_jobs` empties it)."""
        hit = self._facts.get(id(job))
        if hit is not None and hit[0] is job:
            return hit[1]
        facts = (float(job.num_gpus), job.grad_bytes, job.compute_time, job.weight, self.tstar(job))
        self._facts[id(job)] = (job, facts)
        return facts

    def _class_columns(self, cls: int, job: Job) -> tuple[float, float, float, float]:
        """A job's feature values ``(size, gradient size, compute time, weight)``, cached per job
        class ``cls`` (they depend on its model, size, batch and weight only)."""
        hit = self._cls_cols.get(cls)
        if hit is not None:
            return hit
        k, grad, tc, w, _ = self.job_facts(job)
        cols = (
            min(k / self.max_job_gpus, 1.0),
            float(_grad_feature(grad)),
            _compute_feature(tc),
            w / (1.0 + w),
        )
        self._cls_cols[cls] = cols
        return cols

    def clear_jobs(self) -> None:
        """Forget the cached job facts (call at reset; the ideal-time and per-class caches are
        kept)."""
        self._facts.clear()

    def tstar(self, job: Job) -> float:
        """Ideal iteration time ``T*`` of a job (cached by model, size and batch)."""
        key = (job.model, job.num_gpus, float(job.batch_size))
        v = self._tstar.get(key)
        if v is None:
            v = ideal_time(self.topology, job, self.perf)
            self._tstar[key] = v
        return v

    def _new_row(self, key: Sequence[int], new: _NewRows) -> int:
        """Compute the job-independent values of one candidate (its sorted GPUs ``key``).

        Returns its row index and appends to the lists ``new`` its feature columns as float32
        bytes (columns 0-1, 4-9 and 13-14; empty for the load-dependent 13-14 of a multi-server
        candidate), its time-model terms and its log-survival: the caller stores the new rows
        with their survivals (``exp`` of all new log-survivals in one numpy call, see
        :meth:`_store_rows`). The time-model terms are
        ``(A, B, C, slowdown)`` with ring all-reduce (communication time ``A·(M/B) + C``) and
        ``(A_intra, A_inter, B_intra, B_inter, C_intra, C_inter, slowdown)`` with hierarchical
        all-reduce (``(A_intra·(M/B_intra) + C_intra) + (A_inter·(M/B_inter) + C_inter)``), the
        terms of :func:`~crop_gym.perf.comm_time`.

        Single-server candidates need only per-GPU values; multi-server ones also walk their
        inter-server links, and their load-dependent values are set by :meth:`_load_terms`. Every value is computed with the same floating-point operations
        as the vectorised formulas (sums in numpy's pairwise order).
        """
        k = len(key)
        i = self._n_rows
        self._n_rows = i + 1
        bw_ref = self._bw_ref
        new_cols, new_h, new_logs = new
        if k == 1:
            g0 = key[0]
            sd = self._h_slowdown[g0]
            new_logs.append(self._h_log_gpu[g0])
            # s = g = switches = 1, b_intra = inf, a_intra = a_inter = 0: the constant columns
            # (_single_cols, _single_h) follow from them; no contention (no inter-server link).
            c0_1, c4, c5, c6, c13_14 = self._single_cols
            new_h.append((*self._single_h, sd))
            new_cols.append(
                (
                    c0_1,
                    _PACK6(
                        c4,
                        c5,
                        c6,
                        _clip01(self._h_slow[g0] / 1),
                        _clip01(self._h_failprone[g0] / 1),
                        _clip01(1.0 - 1.0 / sd),
                    ),
                    c13_14,
                )
            )
            return i
        (sd0, sd_odd), (bw0, bw_odd), (lat0, lat_odd) = self._h_common
        sd = sd0 if sd_odd.isdisjoint(key) else max(itemgetter(*key)(self._h_slowdown))
        b_intra = bw0 if bw_odd.isdisjoint(key) else min(itemgetter(*key)(self._h_bw_gpu_link))
        a_intra = lat0 if lat_odd.isdisjoint(key) else max(itemgetter(*key)(self._h_lat_gpu_link))
        # The flags are 0/1, so their sums are the counts.
        slow, fp = self._h_slow_set, self._h_failprone_set
        slow_f = 0.0 if slow.isdisjoint(key) else float(len(slow.intersection(key))) / k
        fp_f = 0.0 if fp.isdisjoint(key) else float(len(fp.intersection(key))) / k
        # log-survival of the GPUs and their links, summed GPU by GPU (g, its link) as numpy
        # sums the (k, 2) block; almost all terms are zero.
        nz = self._h_log_nz
        items: list[tuple[int, float]] = []
        if not nz.isdisjoint(key):
            for j in [j for j, g in enumerate(key) if g in nz]:
                g = key[j]
                a, b = self._h_log_gpu[g], self._h_log_gpu_link[g]
                if a:
                    items.append((2 * j, a))
                if b:
                    items.append((2 * j + 1, b))
        logs = np_sum_sparse(2 * k, items)
        srv = self._t_server
        if srv[key[0]] == srv[key[-1]]:
            # One server: s = switches = 1, g = k, a_inter = 0.
            s_, g_, a_inter = 1.0, float(k), 0.0
            c4, c5, c6 = self._single_cols[1:4]
            c13_14 = _PACK2(0.0, min(b_intra, bw_ref) / bw_ref)
        else:
            # Multi-server: find where each server's GPUs start; the topology facts follow.
            srv_hi = self._t_srv_hi
            runs: list[int] = []
            j = 0
            while j < k:
                sv = srv[key[j]]
                runs += (sv, j)
                j = bisect_left(key, srv_hi[sv], j + 1)
            runs.append(k)
            skey = tuple(runs)
            span = self._spans.get(skey)
            if span is None:
                span = self._span(key)
                if len(self._spans) >= 65536:
                    self._spans.clear()
                self._spans[skey] = span
            s_, g_, a_inter, c4, c5, c6, spanned, firsts = span
            # Inter-server log-survival: only the first GPU of each server meets the links above
            # its server for the first time; the others add zeros to the (k, depth) block that
            # numpy sums.
            logok = self._h_link_logok
            inter = [(pos, logok[a]) for pos, a in firsts if logok[a]]
            logs += np_sum_sparse(k * self._depth, inter)
            self._multi[i] = (spanned, b_intra)
            c13_14 = b""  # (load-dependent: see _load_terms)
        new_logs.append(logs)
        if self._ring:
            steps = 2.0 * (k - 1.0)
            h: tuple[float, ...] = (steps / k, b_intra, steps * max(a_intra, a_inter), sd)
        else:
            h = (
                2.0 * (g_ - 1.0) / g_,
                2.0 * (s_ - 1.0) / s_,
                b_intra,
                np.inf,
                2.0 * (g_ - 1.0) * a_intra,
                2.0 * (s_ - 1.0) * a_inter,
                sd,
            )
        # Feature columns are in [0, 1] (as np.clip would clip the table): fractions of GPUs and
        # the bandwidth ratio min(b, ref) / ref (b > 0) are in range already; the others are
        # clipped here, once.
        new_h.append(h)
        new_cols.append(
            (
                _PACK2(1.0, _clip01(k / self.max_job_gpus)),
                _PACK6(c4, c5, c6, slow_f, fp_f, _clip01(1.0 - 1.0 / sd)),
                c13_14,
            )
        )
        return i

    def _span(
        self, key: Sequence[int]
    ) -> tuple[float, float, float, float, float, float, list[int], tuple[tuple[int, int], ...]]:
        """Topology facts of a multi-server candidate: servers ``s``, most GPUs on one server
        ``g``, a_inter, the (clipped) servers, spread and switches columns, the spanned
        inter-server links, and the ``(position, link)`` pairs where the ``(k, depth)`` block of
        links above the GPUs meets a spanned link for the first time.

        They depend only on the servers spanned and where each server's GPUs start in ``key``,
        which is how :meth:`_new_row` caches them.
        """
        links, lo, hi = self._t_links, self._t_lo, self._t_hi
        srv, par, srv_hi = self._t_server, self._t_srv_parent, self._t_srv_hi
        p0, p_last = key[0], key[-1]
        k = len(key)
        depth = self._depth
        firsts: list[tuple[int, int]] = []
        spanned: dict[int, None] = {}
        s_count, g_max, switches = 0, 0, 1
        prev_s, prev_g, j = -1, -1, 0
        while j < k:
            g = key[j]
            sv = srv[g]
            end = bisect_left(key, srv_hi[sv], j + 1)
            if prev_s >= 0 and par[sv] != par[prev_s]:
                switches += 1
            s_count += 1
            g_max = max(g_max, end - j)
            pos = j * depth
            for a in links[g][1:]:
                if a > 0 and (lo[a] > p0 or hi[a] <= p_last):
                    spanned[a] = None
                    if prev_g < lo[a]:
                        firsts.append((pos, a))
                pos += 1
            prev_s, prev_g, j = sv, key[end - 1], end
        lat = self._t_lat
        s_ = float(s_count)
        return (
            s_,
            float(g_max),
            max([lat[a] for a in spanned], default=0.0),
            _clip01(s_ / 32.0),
            _clip01((s_ - 1.0) / max(k - 1.0, 1.0)),
            _clip01(float(switches) / 8.0),
            list(spanned),
            tuple(firsts),
        )

    def _job_of(self, cls: int, job: Job) -> tuple[bytes, list[bytes], float, float, float]:
        """The candidate-table values of job class ``cls`` (see :attr:`_jobs`), cached."""
        hit = self._jobs.get(cls)
        if hit is not None:
            return hit
        _, gf, cf, wf = self._class_columns(cls, job)
        _, grad, tc, _, tstar = self.job_facts(job)
        # (+ 0.0: the table is written as sums with zeros, which turn -0.0 into 0.0.)
        w = _clip01(wf) + 0.0
        tails = [_PACK2(qp + 0.0, w) for qp in self._queue_pos.tolist()]
        hit = (_PACK2(_clip01(gf) + 0.0, _clip01(cf) + 0.0), tails, grad, tc, tstar)
        self._jobs[cls] = hit
        return hit

    def _candidate_features(
        self, state: ClusterState, view: Sequence[Job], load_key: bytes
    ) -> NDArray[np.float32] | None:
        """The candidate table, flat (a fresh array), or ``None`` with an empty view.

        Also sets the gains when privileged.

        The table is the concatenation of the float32 bytes of its rows: per view slot, its
        candidates' rows (each the cached row of its (candidate, job class) pair, see
        :meth:`_pair_rows`, then the slot's queue_pos and weight columns) and zero padding rows.
        Only the pairs not seen before (under the current health and link loads) are computed.
        """
        acts = self.actions
        if not acts.view:
            if self.privileged:
                self._gain.fill(0.0)
            return None
        if load_key != self._rows_load:
            self._drop_multi(load_key)
        if self._n_rows > _MAX_ROWS:
            self._reset_rows()
        C = acts.max_candidates
        cache = self._rows
        new: _NewRows = ([], [], [])
        fresh: list[int] = []  # the rows of ``new``
        # Per candidate set (group), its candidates' rows.
        load = state.link_load.item
        group_rows: list[list[int]] = []
        for cs in acts.groups:
            # A candidate's key: its sorted GPUs as a tuple (the generator makes them anyway;
            # its numpy arrays are built only when read).
            keys = cs.row_keys()
            ids: list[int | None] = list(map(cache.get, keys))
            if None in ids:
                for j, key in enumerate(keys):
                    if ids[j] is None:
                        ids[j] = cache[key] = self._add_row(key, new, fresh, load)
            group_rows.append(ids)  # type: ignore[arg-type]  # (no None left)
        if fresh:
            self._store_rows(fresh, *new, load)
        pairs, pads = self._pairs, self._pads
        pieces: list[bytes] = []
        for q, (g, cls) in enumerate(zip(acts.slot_groups, acts.view_classes)):
            rows = group_rows[g]
            hit = pairs.get(cls)
            if hit is None:
                hit = pairs[cls] = (
                    dict(self._clean_pairs.get(cls, {})),
                    self._job_of(cls, view[q])[1],
                )
            done, tails = hit
            heads = list(map(done.get, rows))
            if None in heads:
                self._pair_rows(rows, self._jobs[cls], done, heads, cls)
            # Each row: its pair's columns 0-14, then the slot's columns 15-16.
            tail = tails[q]
            pieces += (tail.join(heads), tail, pads[C - len(rows)])  # type: ignore[arg-type]
        pieces.append(bytes(len(pads[1]) * C * (acts.num_jobs - len(acts.slot_groups))))
        F = np.frombuffer(bytearray().join(pieces), dtype=np.float32)
        if self.privileged:
            self._gains(state, view)
        return F

    def _add_row(
        self,
        key: tuple[int, ...],
        new: _NewRows,
        fresh: list[int],
        load: Any,
    ) -> int:
        """The row of a candidate missing from :attr:`_rows`: a copy of its row under other link
        loads with the load-dependent values updated (see :meth:`_drop_multi`), the row shared
        by the clean candidates of its size, or a new row (see :meth:`_new_row`; added to
        ``fresh``, stored by :meth:`_store_rows`).

        A single-server candidate without odd GPUs (:attr:`_h_odd`) is clean: every value
        :meth:`_new_row` computes for it depends on its size only (its GPUs have the common
        slowdown, GPU-link bandwidth and latency, no failure or slow flags and zero
        log-survival terms; one server spans no inter-server link), so all clean candidates of
        a size share one row (row ``-k`` for size ``k``), and its pairs (see :meth:`_pair_rows`).
        """
        old = self._stale.pop(key, None)
        if old is None:
            srv = self._t_server
            if srv[key[0]] == srv[key[-1]] and self._h_odd.isdisjoint(key):
                i = -len(key)
                if i not in self._clean:
                    self._clean.add(i)
                    self._new_row(key, new)  # (stored as row i; the id it takes stays unused)
                    fresh.append(i)
                return i
            i = self._new_row(key, new)
            fresh.append(i)
        else:
            i = self._n_rows
            self._n_rows = i + 1
            self._multi[i] = self._multi[old]
            c0_1, c4_10, _, h, s = self._rowdata[old]
            self._rowdata[i] = (c0_1, c4_10, *self._load_terms(i, h, load), s)
        if i in self._multi:
            self._multi_keys[key] = i
        return i

    def _store_rows(
        self,
        rows: list[int],
        cols: list[tuple[bytes, bytes, bytes]],
        hs: list[tuple[float, ...]],
        logs: list[float],
        load: Any,
    ) -> None:
        """Store the new ``rows`` from their values (see :meth:`_new_row`), with their survival
        ``exp(logs)`` (numpy's, which Python's may differ from in the last bit) and, for
        multi-server rows, their load-dependent values."""
        surv = np.exp(logs).tolist() if any(logs) else [1.0] * len(logs)
        rowdata, multi = self._rowdata, self._multi
        for i, (c0_1, c4_9, c13_14), h, s in zip(rows, cols, hs, surv, strict=True):
            c4_10 = c4_9 + _PACK1(s)
            if i in multi:
                rowdata[i] = (c0_1, c4_10, *self._load_terms(i, h, load), s)
            else:
                rowdata[i] = (c0_1, c4_10, c13_14, h, s)

    def _load_terms(
        self, i: int, h: tuple[float, ...], load: Any
    ) -> tuple[bytes, tuple[float, ...]]:
        """The load-dependent values of multi-server row ``i`` under the link loads ``load``
        (``ClusterState.link_load.item``: per spanned link, cheaper on large clusters than the
        whole array as a list): its contention and bandwidth columns (float32 bytes), and its
        time-model terms ``h`` with the bottleneck bandwidth set."""
        spanned, b_intra = self._multi[i]
        eff, bw_ref = self._h_eff_bw, self._bw_ref
        lds = list(map(load, spanned))
        ml = max(lds)
        b_inter = min([eff[a] / (ld + 1.0) for a, ld in zip(spanned, lds, strict=True)])
        cols = _PACK2(
            _clip01(ml / (ml + 1.0)) + 0.0, _clip01(min(min(b_intra, b_inter), bw_ref) / bw_ref)
        )
        hl = list(h)
        hl[self._h_load] = min(b_intra, b_inter) if self._ring else b_inter
        return cols, tuple(hl)

    def _drop_multi(self, load_key: bytes) -> None:
        """Make the multi-server rows of :attr:`_rows` stale (the link loads, now ``load_key``,
        changed): their candidates get new rows when next seen (see :meth:`_add_row`)."""
        rows = self._rows
        for key in self._multi_keys:
            del rows[key]
        self._stale.update(self._multi_keys)
        self._multi_keys.clear()
        self._rows_load = load_key

    def _pair_rows(
        self,
        rows: list[int],
        job: tuple[bytes, list[bytes], float, float, float],
        done: dict[int, bytes],
        heads: list[bytes | None],
        cls: int,
    ) -> None:
        """Fill in ``heads``, the columns 0-14 (float32 bytes) of each of ``rows`` for the job
        class ``cls`` (its values ``job``, see :meth:`_job_of`), where ``None``: the pairs missing
        from ``done`` (where they are stored; those of clean rows also in :attr:`_clean_pairs`).

        η is the time model term by term as comm_time and iteration_time compute it (the
        operations of the vectorised formulas, on Python floats).
        """
        jcols, _, grad, tc, tstar = job
        rowdata, ring, phi = self._rowdata, self._ring, self.perf.overlap
        for j, r in enumerate(rows):
            if heads[j] is not None:
                continue
            c0_1, c4_10, c13_14, h, s = rowdata[r]
            if ring:
                a, b, c, sd = h
                comm = a * (grad / b) + c
            else:
                a0, a1, b0, b1, c0, c1, sd = h
                comm = ((grad / b0) * a0 + c0) + ((grad / b1) * a1 + c1)
            ct = tc * sd
            if phi == 0.0:
                T = ct + comm
            else:
                T = (1.0 - phi) * (ct + comm) + phi * float(np.maximum(ct, comm))
            # (numpy's division, where Python's would raise.)
            x = tstar / T if T else float(np.divide(tstar, T))
            # η = min(1, T*/T) (as np.minimum: NaN propagates); in [0, 1], so no clip.
            eta = 1.0 if x >= 1.0 else x
            done[r] = heads[j] = b"".join((c0_1, jcols, c4_10, _PACK2(eta, eta * s), c13_14))
            if r < 0:
                self._clean_pairs.setdefault(cls, {})[r] = done[r]

    def _gains(self, state: ClusterState, view: Sequence[Job]) -> None:
        """Exact ΔF of every row (privileged feature)."""
        gain = self._gain
        gain.fill(0.0)
        C = self.actions.max_candidates
        stats_cache: dict[tuple[int, int], Any] = {}
        for q in range(len(view)):
            cs = self.actions.sets[q]
            assert cs is not None
            job = view[q]
            for c in range(len(cs)):
                key = (id(cs), c)
                st = stats_cache.get(key)
                if st is None:
                    st = state.stats_for(cs.gpus[c])
                    stats_cache[key] = st
                gain[q * C + c] = state.gain(job, stats=st)
        np.clip(gain / self.max_job_gpus, -1.0, 1.0, out=gain)

    def _gpu_features(self, state: ClusterState, load_key: bytes) -> NDArray[np.float32]:
        """The per-GPU table ``(G, len(self.gpu_features))`` (a fresh array).

        With ``gpu_extra`` columns it is a copy of :attr:`gpu_buffer`, whose first columns are
        written here (the callers' extra columns are kept); without, the buffer is not used.

        Each GPU's row is its health/load row (``_gpu_base``: slow, fail_prob, ... and the uplink
        load) plus the row of what holds it (``_slot_tab``: a placed job's busy flag, η and size
        feature; or the free or the failed row). The two have disjoint non-zero columns, so the
        float32 sum only places them.
        """
        # The uplink-load column changes only when the link loads (``load_key``) do.
        if load_key != self._load_key:
            n = state.link_load[self._server_uplink]
            self._gpu_base[:, 6] = n / (n + 1.0)
            self._load_key = load_key
        eta = state._eta
        S = len(eta)
        tab = self._slot_tab
        if len(tab) != S + 2:
            # Rows: one per job slot (busy = 1), then the failed row (zeros; index -2) and the
            # free row (free = 1; index -1, the owner of a free GPU).
            tab = self._slot_tab = np.zeros((S + 2, 10), dtype=np.float32)
            tab[:S, 1] = 1.0
            tab[S + 1, 0] = 1.0
            self._slot_facts = [None] * S
        tab[:S, 8] = eta
        # The size column min(k / max_job_gpus, 1) of a placed job's slot changes only when the
        # slot gets a new job, that is new plain-Python facts (ClusterState._slot_py, whose k is
        # _k; a tuple, never changed in place): refresh the slots whose facts are not the ones
        # last seen (kept here, so alive). Unused slots keep stale rows, which no GPU points at.
        facts, seen = state._slot_py, self._slot_facts
        m = self.max_job_gpus
        for s in state.jobs.values():
            py = facts[s]
            if py is not seen[s]:
                seen[s] = py
                tab[s, 9] = min(py[1] / m, 1.0)  # type: ignore[index]
        # Unplaced GPUs have owner -1: usable ones pick the free row, failed ones the row before
        # (a placed job never holds a failed GPU: ClusterState rejects it).
        usable = state._usable
        if usable is not self._usable_ref:
            self._usable_ref = usable
            self._unusable = None if usable.all() else (~usable).astype(np.int32)
        owner = state.gpu_owner
        if self._unusable is not None:
            owner = owner - self._unusable
        table = tab.take(owner, axis=0)
        if len(self.gpu_features) == len(GPU_FEATURES):
            table += self._gpu_base
            return table
        np.add(table, self._gpu_base, out=self._gpu[:, : len(GPU_FEATURES)])
        return self._gpu.copy()

    def _queue_features(
        self, view: Sequence[Job], cand: NDArray[np.float32] | None
    ) -> NDArray[np.float32]:
        """The queue table, flat (a fresh array, also :attr:`queue_buffer`), given the candidate
        table ``cand`` (flat; ``None`` when there is none, then the best η are 0)."""
        acts = self.actions
        Q = acts.num_jobs
        rows = self._queue_rows
        # Per slot: its row but the best η (cached by job class, candidates and copies), then
        # zero rows.
        lens = [len(cs) for cs in acts.groups]
        pieces: list[bytes] = []
        # (zip stops at the view's end: the arrays cover every slot.)
        for q, (c, g, cp) in enumerate(zip(acts.view_classes, acts.slot_groups, acts.view_copies)):
            key = (c, lens[g], cp)
            row = rows.get(key)
            if row is None:
                row = self._queue_row(key, view[q])
            pieces.append(row)
        n = len(pieces)
        width = len(JOB_FEATURES)
        pieces.append(bytes(4 * width * (Q - n)))
        table = np.frombuffer(bytearray().join(pieces), dtype=np.float32)
        if cand is not None and n:
            # The best η of each of the n slots (empty rows have η = 0 <= every real η; no clip:
            # η is in [0, 1]), from the float32 η column of the candidate table: the float32
            # cast is monotonic, so its max is the cast of the float64 max. (The η column of the
            # slots' rows as a strided 1-D view reshaped: cheaper than slicing the 2-D table.)
            h0 = self._h0
            etas = cand[11 : n * acts.max_candidates * h0 : h0].reshape(n, -1)
            np.maximum.reduce(etas, axis=1, out=table[6 : n * width : width])
        self._queue = table
        return table

    def _queue_row(self, key: tuple[int, int, int], job: Job) -> bytes:
        """The queue-table row (float32 bytes, best η 0) of a slot of job ``job``, job class,
        candidates and copies ``key``."""
        cls, n, cp = key
        row = _PACK_ROW(
            1.0,
            *self._class_columns(cls, job),
            n / self.actions.max_candidates,
            0.0,
            min(cp / 16.0, 1.0),
        )
        if len(self._queue_rows) >= 4096:
            self._queue_rows.clear()
        self._queue_rows[key] = row
        return row

    def _summary_features(
        self, state: ClusterState, pending: Sequence[Job], step: int, max_steps: int
    ) -> NDArray[np.float32]:
        """The summary vector (a fresh array); also sets :attr:`last_metrics`."""
        G = self.topology.num_gpus
        m = self.last_metrics = state.metrics()
        return np.array(
            (
                min(len(pending) / self.queue_size, 1.0),
                min(max(len(pending) - self.actions.in_view, 0) / self.queue_size, 1.0),
                min(self.actions.pending_gpus / G, 1.0),
                state.num_free / G,
                min(max(m.F / G, 0.0), 1.0),
                m.utilization,
                min(max(m.comm_overhead, 0.0), 1.0),
                self._failed_frac,
                self._abnormal_frac,
                min(step / max(max_steps, 1), 1.0),
            ),
            dtype=np.float32,
        )

    def build(
        self,
        state: ClusterState,
        pending: Sequence[Job],
        *,
        step: int = 0,
        max_steps: int = 1,
    ) -> dict[str, NDArray[np.float32]]:
        """The observation for ``state`` and ``pending``; call :meth:`CandidateActions.build` first.

        Args:
            state: The cluster state.
            pending: Pending jobs in queue order (the view is the table's :attr:`~CandidateActions.view`).
            step: Steps taken in the episode (for the ``steps`` summary feature).
            max_steps: The episode's step cap.

        Returns:
            A fresh dict of fresh arrays (safe to keep).
        """
        view = self.actions.view
        load_key = state.link_load.tobytes()
        gpus = self._gpu_features(state, load_key)
        cand = None
        if self.with_candidates:
            cand = self._candidate_features(state, view, load_key)
        queue = self._queue_features(view, cand)
        summary = self._summary_features(state, pending, step, max_steps)
        obs = {"gpus": gpus if self.table_layout else gpus.reshape(-1)}
        if self.with_candidates:
            if cand is None:
                obs["candidates"] = self._cand.copy() if self.table_layout else self._cand.flatten()
            else:
                obs["candidates"] = cand.reshape(self._cand.shape) if self.table_layout else cand
        obs["queue"] = queue.reshape(self._queue_shape) if self.table_layout else queue
        obs["summary"] = summary
        if self.privileged and self.with_candidates:
            obs["gain"] = self._gain.copy()
        return obs
