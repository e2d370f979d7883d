"""The observation builder shared by every placement environment.

:class:`ObservationBuilder` writes a flat ``Dict`` of bounded ``float32`` boxes (per-GPU,
per-candidate, per-queued-job and summary features) into preallocated buffers and returns copies.
It is driven by a :class:`~crop_gym.objective.ClusterState`, a sequence of pending
:class:`~crop_gym.jobs.Job` and the :class:`~crop_gym.envs.actions.CandidateActions` table whose
rows the candidate features describe, so that the static environments and the online environment
expose the same interface.

Feature columns are listed, in order, in :data:`GPU_FEATURES`, :data:`CANDIDATE_FEATURES`,
:data:`JOB_FEATURES` and :data:`SUMMARY_FEATURES`; every value is clipped to ``[0, 1]``, except the
privileged ``gain`` key, which is in ``[-1, 1]``. docs/ENVS.md explains each column.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
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
from crop_gym.perf import PerfConfig, iteration_time
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
        self._summary = np.zeros(len(SUMMARY_FEATURES), dtype=np.float32)  # (shape only)
        self._gain = np.zeros(M, dtype=np.float32)
        self._best_eta = np.zeros(Q, dtype=np.float64)
        self._tstar: dict[tuple[str, int, float], float] = {}
        self._facts: dict[int, tuple[Job, tuple[float, float, float, float, float]]] = {}
        # Per job class (CandidateActions.view_classes): its queue-table columns (size, gradient
        # size, compute time, weight).
        self._cls_cols: dict[int, tuple[float, float, float, float]] = {}
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
        # Per candidate (GPU set) seen under the current health, a row of ``_feat``: its
        # job-independent feature columns (CANDIDATE_FEATURES, as float32, ready to be gathered
        # into the table), and a column of ``_num`` (column-major, so that each quantity of the
        # gathered table is contiguous): valid, survival and the terms of the time model (see
        # _new_row). Multi-server candidates also keep what their load-dependent values need
        # (see _multi). Candidate 0 is the padding that empty table rows gather.
        self._ring = perf.allreduce == "ring"
        self._h0 = len(CANDIDATE_FEATURES)
        self._feat = np.zeros((256, self._h0), dtype=np.float32)
        self._num = np.zeros((2 + (4 if self._ring else 7), 256))
        # Padding: valid = 0 and survival = 0 (so η and η·s are 0), and time-model terms that
        # give a finite positive iteration time for any job (communication time 1, slowdown 1).
        pad_h = (0.0, 1.0, 1.0, 1.0) if self._ring else (0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0)
        self._num[2:, 0] = pad_h
        self._rows: dict[tuple[int, ...], int] = {}
        # Per multi-server row: its spanned inter-server links, b_intra, and the link loads (as
        # ClusterState.link_load bytes) its load-dependent columns were last set for.
        self._multi: dict[int, tuple[list[int], float, bytes]] = {}
        # Topology facts of multi-server candidates (see _span), kept across health changes.
        self._spans: dict[tuple[int, ...], Any] = {}
        self._depth = topology.gpu_links.shape[1] - 1
        # The constant columns of single-GPU candidates (size, servers, spread, switches,
        # bandwidth) and their time-model terms but the slowdown (see _new_row).
        self._single_cols = (
            _clip01(1 / self.max_job_gpus),
            _clip01(1.0 / 32.0),
            _clip01(0.0 / 1.0),
            _clip01(1.0 / 8.0),
            _clip01(min(np.inf, self._bw_ref) / self._bw_ref),
        )
        self._single_h = (
            (0.0 / 1, np.inf, 0.0 * 0.0)
            if self._ring
            else (0.0 / 1.0, 0.0 / 1.0, np.inf, np.inf, 0.0 * 0.0, 0.0 * 0.0)
        )
        # Per job class, the first of its Q job rows (one per view slot): a row of ``_jfeat``
        # (the job's columns of the candidate table: grad_size, compute_time, queue_pos,
        # weight; the others zero) and a column of ``_jval`` (its M, t_c, T*). Row 0 (zeros)
        # stands for no job.
        self._jbase: dict[int, int] = {}
        self._jfeat = np.zeros((1 + 4 * Q, self._h0), dtype=np.float32)
        self._jval = np.zeros((3, 1 + 4 * Q))
        # The first candidate-table row of each view slot.
        self._slot_starts = np.arange(0, M, C)
        # Per-GPU table parts (see _gpu_features): the health/load columns, the per-slot rows, and
        # what they were last computed from.
        self._gpu_base = np.zeros((G, len(GPU_FEATURES)), dtype=np.float32)
        self._load_key = b""
        self._slot_tab = np.zeros((0, len(GPU_FEATURES)), dtype=np.float32)
        self._usable_ref: NDArray[np.bool_] | None = None
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
        return self._queue

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
        self._rows = {}
        self._multi = {}
        self._n_rows = 1  # row 0 is the padding row
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

    def _new_row(
        self, key: Sequence[int], new: tuple[list[float], list[float], list[float]]
    ) -> int:
        """Compute the job-independent values of one candidate (its sorted GPUs ``key``).

        Returns its row index and appends to the lists ``new`` its feature columns, its ``_num``
        values (valid, survival, then the time-model terms; both with survival left 0) and its
        log-survival: the caller stores the new rows, which are consecutive, with their
        survivals (``exp`` of all new log-survivals in one numpy call). The time-model terms are
        ``(A, B, C, slowdown)`` with ring all-reduce (communication time ``A·(M/B) + C``) and
        ``(A_intra, A_inter, B_intra, B_inter, C_intra, C_inter, slowdown)`` with hierarchical
        all-reduce (``(A_intra·(M/B_intra) + C_intra) + (A_inter·(M/B_inter) + C_inter)``), the
        terms of :func:`~crop_gym.perf.comm_time`.

        Single-server candidates need only per-GPU values; multi-server ones also walk their
        inter-server links, and their load-dependent values are set per step (see
        :meth:`_load_columns`). Every value is computed with the same floating-point operations
        as the vectorised formulas (sums in numpy's pairwise order).
        """
        k = len(key)
        i = self._n_rows
        self._n_rows = i + 1
        bw_ref = self._bw_ref
        new_feat, new_num, new_logs = new
        if k == 1:
            g0 = key[0]
            sd = self._h_slowdown[g0]
            new_logs.append(self._h_log_gpu[g0])
            # s = g = switches = 1, b_intra = inf, a_intra = a_inter = 0: the constant columns
            # (_single_cols, _single_h) follow from them.
            c1, c4, c5, c6, c14 = self._single_cols
            new_num += (1.0, 0.0, *self._single_h, sd)
            new_feat += (
                1.0,
                c1,
                0.0,
                0.0,
                c4,
                c5,
                c6,
                _clip01(self._h_slow[g0] / 1),
                _clip01(self._h_failprone[g0] / 1),
                _clip01(1.0 - 1.0 / sd),
                0.0,  # survival, in [0, 1]: set by the caller
                0.0,
                0.0,
                0.0,  # contention (single server: no inter-server link)
                c14,
                0.0,
                0.0,
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
            _, c4, c5, c6, _ = self._single_cols
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
            self._multi[i] = (spanned, b_intra, b"")
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
        new_num.append(1.0)
        new_num.append(0.0)
        new_num += h
        new_feat += (
            1.0,
            _clip01(k / self.max_job_gpus),
            0.0,
            0.0,
            c4,
            c5,
            c6,
            slow_f,
            fp_f,
            _clip01(1.0 - 1.0 / sd),
            0.0,  # survival, in [0, 1]: set by the caller
            0.0,
            0.0,
            0.0,  # contention: set per step (see _load_columns)
            min(b_intra, bw_ref) / bw_ref,
            0.0,
            0.0,
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

    def _job_rows(self, view: Sequence[Job]) -> NDArray[np.intp]:
        """Each candidate-table row's job row: its slot's job on the valid rows (the valid
        actions), 0 elsewhere."""
        acts = self.actions
        base = self._jbase
        classes = acts.view_classes
        firsts = list(map(base.get, classes))
        if None in firsts:
            for q, (c, job) in enumerate(zip(classes, view, strict=True)):
                if firsts[q] is None:
                    # (A class may hold several slots when identical jobs are not grouped.)
                    b = base.get(c)
                    firsts[q] = b if b is not None else self._new_job(c, job)
        rows = [b + q for q, b in enumerate(firsts)]  # type: ignore[operator]
        rows += [0] * (acts.num_jobs - len(rows))
        valid = acts.mask[:-1].reshape(-1, acts.max_candidates)
        return np.multiply(valid, np.array(rows, dtype=np.intp).reshape(-1, 1), dtype=np.intp)

    def _new_job(self, cls: int, job: Job) -> int:
        """Store the job rows of job class ``cls`` (one per view slot); return the first."""
        Q = self.actions.num_jobs
        i = 1 + Q * len(self._jbase)
        if i + Q > len(self._jfeat):
            n = 2 * len(self._jfeat)
            feat = np.zeros((n, self._h0), dtype=np.float32)
            feat[:i] = self._jfeat[:i]
            val = np.zeros((3, n))
            val[:, :i] = self._jval[:, :i]
            self._jfeat, self._jval = feat, val
        _, gf, cf, wf = self._class_columns(cls, job)
        _, grad, tc, _, tstar = self.job_facts(job)
        # Written as float32, as the float64 table would be cast.
        rows = self._jfeat[i : i + Q]
        rows[:, 2], rows[:, 3], rows[:, 16] = _clip01(gf), _clip01(cf), _clip01(wf)
        rows[:, 15] = self._queue_pos
        self._jval[:, i : i + Q] = np.array([[grad], [tc], [tstar]])
        self._jbase[cls] = i
        return i

    def _candidate_features(
        self, state: ClusterState, view: Sequence[Job]
    ) -> NDArray[np.float32] | None:
        """The candidate table ``(Q, C, 17)`` (a fresh array), or ``None`` with an empty view.

        Also sets :attr:`_best_eta` (and the gains when privileged).

        Every row of the table is computed, empty ones too: each gathers its candidate's values
        (the padding candidate, row 0, for an empty row) and its job's values (job row 0, zeros,
        for an empty row), and the per-row values (η, η·survival) are computed on whole
        ``(Q, C)`` arrays. The padding makes every column 0 on empty rows, so no scatter into a
        zeroed table is needed; real rows see exactly the operations of the per-row formulas.
        """
        acts = self.actions
        if not acts.view:
            self._best_eta.fill(0.0)
            if self.privileged:
                self._gain.fill(0.0)
            return None
        C = acts.max_candidates
        cache = self._rows
        multi = self._multi
        n0 = self._n_rows
        new: tuple[list[float], list[float], list[float]] = ([], [], [])
        # Per candidate set (group), its rows padded with row 0 to C; then an all-padding group,
        # which the empty slots (slot_group -1) pick.
        gids: list[int] = []
        for cs in acts.groups:
            # A candidate's key: its sorted GPUs as a tuple (the generator makes them anyway;
            # its numpy arrays are built only when read).
            keys = cs.row_keys()
            ids: list[int | None] = list(map(cache.get, keys))
            if None in ids:
                for j, key in enumerate(keys):
                    if ids[j] is None:
                        ids[j] = cache[key] = self._new_row(key, new)
            gids += ids  # type: ignore[arg-type]  # (no None left)
            gids += [0] * (C - len(ids))
        gids += [0] * C
        if new[2]:
            self._store_rows(n0, *new)
        if multi:
            # (Row 0, padding, is never multi-server.)
            used_multi = multi.keys() & gids
            if used_multi:
                self._load_columns(state, used_multi)
        idx = np.array(gids, dtype=np.intp).reshape(-1, C)[acts.slot_group]
        jrows = self._job_rows(view)
        # Column by column, each (Q, C) and contiguous.
        N = self._num.take(idx, axis=1)
        grad, tc, tstar = self._jval.take(jrows, axis=1)
        # The time model, term by term as comm_time and iteration_time compute it.
        if self._ring:
            comm = N[2] * (grad / N[3]) + N[4]
            sd = N[5]
        else:
            # Both levels at once: (2(g-1)/g, 2(s-1)/s)·(M/(b_intra, b_inter))
            # + (2(g-1)·a_intra, 2(s-1)·a_inter), then their sum.
            r = grad / N[4:6]
            r *= N[2:4]
            r += N[6:8]
            comm = r[0] + r[1]
            sd = N[8]
        T = iteration_time(tc * sd, comm, self.perf.overlap)
        # η = min(1, T*/T) on real rows (valid = 1) and min(0, T*/T) = 0 on empty ones (T*/T >= 0
        # there). η and η·survival are in [0, 1] (as is every other column), so no final clip.
        eta = np.minimum(N[0], np.divide(tstar, T, out=T), out=T)
        # Empty rows have η = 0 <= every real η.
        np.maximum.reduceat(eta.reshape(-1), self._slot_starts, out=self._best_eta)
        # The job columns are zero in the candidate rows and the others zero in the job rows:
        # the (float32) sum only places them.
        F = self._feat.take(idx, axis=0)
        F += self._jfeat.take(jrows, axis=0)
        F[:, :, 11] = eta
        np.multiply(eta, N[1], out=F[:, :, 12])
        if self.privileged:
            self._gains(state, view)
        return F

    def _store_rows(self, n0: int, feat: list[float], num: list[float], logs: list[float]) -> None:
        """Store the new rows ``n0, n0 + 1, ...`` of ``_feat`` and ``_num`` (flat values), with
        their survival ``exp(logs)``."""
        n1 = n0 + len(logs)
        if n1 > len(self._feat):
            n = max(n1, 2 * len(self._feat))
            grow_f = np.zeros((n, self._h0), dtype=np.float32)
            grow_f[:n0] = self._feat[:n0]
            grow_n = np.zeros((len(self._num), n))
            grow_n[:, :n0] = self._num[:, :n0]
            self._feat, self._num = grow_f, grow_n
        # The survivals go into the flat values before the (one) conversion of each table.
        wf, wn = self._h0, len(self._num)
        for j, v in enumerate(np.exp(logs).tolist()):
            feat[j * wf + 10] = v
            num[j * wn + 1] = v
        self._feat[n0:n1].reshape(-1)[:] = feat
        self._num[:, n0:n1] = np.array(num).reshape(n1 - n0, wn).T

    def _load_columns(self, state: ClusterState, rows: Iterable[int]) -> None:
        """Set the load-dependent values (contention, bandwidth share, and the bottleneck the time
        model uses) of the multi-server ``rows`` under the current link loads, where the loads
        changed since they were last set."""
        loads = state.link_load
        key = loads.tobytes()
        load = loads.item
        eff, bw_ref = self._h_eff_bw, self._bw_ref
        ring = self._ring
        num, feat, multi = self._num, self._feat, self._multi
        ch = 3 if ring else 5
        for i in rows:
            spanned, b_intra, last = multi[i]
            if last == key:
                continue
            multi[i] = (spanned, b_intra, key)
            lds = list(map(load, spanned))
            ml = max(lds)
            b_inter = min([eff[a] / (ld + 1.0) for a, ld in zip(spanned, lds, strict=True)])
            f = feat[i]
            f[13] = _clip01(ml / (ml + 1.0))
            f[14] = _clip01(min(min(b_intra, b_inter), bw_ref) / bw_ref)
            num[ch, i] = min(b_intra, b_inter) if ring else b_inter

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

    def _gpu_features(self, state: ClusterState) -> None:
        """Fill the per-GPU columns of :attr:`gpu_buffer` (the ``gpu_extra`` columns are kept).

        Each GPU's row is its health/load row (``_gpu_base``: slow, fail_prob, ... and the uplink
        load) plus the row of what holds it (``_slot_tab``: a placed job's busy flag, η and size
        feature; or the free or the failed row). The two have disjoint non-zero columns, so the
        float32 sum only places them.
        """
        # The uplink-load column changes only when the link loads do.
        load_key = state.link_load.tobytes()
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
        tab[:S, 8] = eta
        np.minimum(state._k / self.max_job_gpus, 1.0, out=tab[:S, 9])
        # Unplaced GPUs have owner -1: usable ones pick the free row, failed ones the row before
        # (a placed job never holds a failed GPU: ClusterState rejects it).
        usable = state._usable
        if usable is not self._usable_ref:
            self._usable_ref = usable
            self._unusable = None if usable.all() else (~usable).astype(np.int32)
        owner = state.gpu_owner
        if self._unusable is not None:
            owner = owner - self._unusable
        np.add(tab.take(owner, axis=0), self._gpu_base, out=self._gpu[:, :10])

    def _queue_features(self, view: Sequence[Job]) -> None:
        """Fill :attr:`queue_buffer` (call after :meth:`_candidate_features`: it uses the best
        η of each slot)."""
        if not view:
            self._queue.fill(0.0)
            return
        acts = self.actions
        C = acts.max_candidates
        columns = self._class_columns
        # Per slot: present, its job class's columns, its candidates (those of its group) / C, best η
        # (clipped), copies / 16 (written from one flat list: one conversion); then zero rows.
        lens = [len(cs) / C for cs in acts.groups]
        flat: list[float] = []
        # (zip stops at the view's end: the arrays cover every slot.)
        for q, (c, g, b, cp) in enumerate(
            zip(
                acts.view_classes,
                acts.slot_groups,
                self._best_eta.tolist(),
                acts.view_copies,
            )
        ):
            flat.append(1.0)
            flat += columns(c, view[q])
            flat += (lens[g], 0.0 if b < 0.0 else 1.0 if b > 1.0 else b, min(cp / 16.0, 1.0))
        qb = self._queue.reshape(-1)
        qb[: len(flat)] = flat
        qb[len(flat) :] = 0.0

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
        self._gpu_features(state)
        cand = None
        if self.with_candidates:
            cand = self._candidate_features(state, view)
        else:
            self._best_eta.fill(0.0)
        self._queue_features(view)
        summary = self._summary_features(state, pending, step, max_steps)
        out = self._out
        obs = {"gpus": out(self._gpu)}
        if self.with_candidates:
            if cand is None:
                obs["candidates"] = out(self._cand)  # zeros
            else:
                obs["candidates"] = cand.reshape(self._cand.shape if self.table_layout else -1)
        obs["queue"] = out(self._queue)
        obs["summary"] = summary
        if self.privileged and self.with_candidates:
            obs["gain"] = self._gain.copy()
        return obs

    def _out(self, buf: NDArray[np.float32]) -> NDArray[np.float32]:
        return buf.copy() if self.table_layout else buf.flatten()
