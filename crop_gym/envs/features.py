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
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym._numeric import np_sum_sparse
from crop_gym.candidates import CandidateSet
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
#: Candidate columns that depend on the job alone: grad_size, compute_time, weight.
_JOB_CAND_COLS = [2, 3, 16]
#: Columns (M, t_c, T*) of :meth:`ObservationBuilder.job_facts` that the η estimate needs.
_FACT_COLS = [1, 2, 4]


def _clip01(x: float) -> float:
    """``x`` clipped to ``[0, 1]``, as ``np.clip(x, 0.0, 1.0)``."""
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def _grad_feature(grad_bytes: Any) -> Any:
    return np.clip(
        (np.log10(np.maximum(grad_bytes, 1.0)) - _GRAD_LOG_LO) / _GRAD_LOG_SPAN, 0.0, 1.0
    )


def _compute_feature(t: Any) -> Any:
    return t / (t + _COMPUTE_SCALE)


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
        self._cand = np.zeros((M, len(CANDIDATE_FEATURES)), dtype=np.float32)
        self._queue = np.zeros((Q, len(JOB_FEATURES)), dtype=np.float32)
        self._summary = np.zeros(len(SUMMARY_FEATURES), dtype=np.float32)
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
        self._row_q = np.repeat(np.arange(Q), C)
        self._queue_pos = (np.arange(Q, dtype=np.float64) / max(Q - 1, 1)).astype(np.float32)
        # Plain-Python copies of the topology for the per-candidate stats.
        self._t_links: list[tuple[int, ...]] = [tuple(r) for r in topology.gpu_links.tolist()]
        self._t_lo: list[int] = topology.node_gpu_lo.tolist()
        self._t_hi: list[int] = topology.node_gpu_hi.tolist()
        self._t_server: list[int] = topology.gpu_server.tolist()
        self._t_srv_parent: list[int] = self._srv_parent.tolist()
        self._t_srv_hi: list[int] = topology.server_gpu_hi.tolist()
        self._t_lat: list[float] = topology.link_lat.tolist()
        # Per candidate (GPU set) seen under the current health, a row of ``_mat``: its
        # job-independent feature columns (CANDIDATE_FEATURES), then the terms of the time model
        # (_H_RING or _H_HIER), then zeros where the job's (M, t_c, T*) go (see
        # _candidate_features). Multi-server candidates also keep what their load-dependent values
        # need (spanned inter-server links, b_intra).
        self._ring = perf.allreduce == "ring"
        n_h = 4 if self._ring else 7
        self._h0 = len(CANDIDATE_FEATURES)
        self._v0 = self._h0 + n_h
        self._mat = np.zeros((256, self._v0 + 3))
        self._rows: dict[tuple[int, ...], int] = {}
        self._multi: dict[int, tuple[list[int], float]] = {}
        self._layouts: dict[Any, tuple[NDArray[np.intp], ...]] = {}
        # Per job class (CandidateActions.view_classes): a _mat-wide row holding the job's
        # candidate columns and its (M, t_c, T*).
        self._jmat = np.zeros((64, self._v0 + 3))
        self._jmat_done: set[int] = set()
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
        self._rows = {}
        self._multi = {}
        self._n_rows = 0
        self._failed = health.gpu_failed.astype(np.float32)
        self._failed_frac = float(self._failed.mean())
        self._abnormal_frac = float(health.is_abnormal_gpu.mean())
        g = self._gpu
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

    def _new_row(self, key: tuple[int, ...], exp_rows: list[int], exp_logs: list[float]) -> int:
        """Add the job-independent values of one candidate (its sorted GPUs ``key``) to ``_mat``.

        Returns the row. Its survival columns are left for the caller, which exponentiates the
        log-survivals of all new rows (``exp_rows``, ``exp_logs``) in one numpy call. Single-server
        candidates need only per-GPU values; multi-server ones also walk their inter-server links,
        and their load-dependent columns are set per step. Every value is computed with the same
        floating-point operations as the vectorised formulas (sums in numpy's pairwise order).
        """
        k = len(key)
        slow, fp, sdl = self._h_slow, self._h_failprone, self._h_slowdown
        if k == 1:
            g0 = key[0]
            s_, g_, sw = 1.0, 1.0, 1.0
            slow_f, fp_f, sd = slow[g0] / 1, fp[g0] / 1, sdl[g0]
            b_intra, a_intra, a_inter = np.inf, 0.0, 0.0
            logs = self._h_log_gpu[g0]
            multi = False
        else:
            s_, g_, sw = 1.0, float(k), 1.0
            # The flags are 0/1, so their sums are the counts.
            slow_f = float(len(self._h_slow_set.intersection(key))) / k
            fp_f = float(len(self._h_failprone_set.intersection(key))) / k
            sd = max(map(sdl.__getitem__, key))
            b_intra = min(map(self._h_bw_gpu_link.__getitem__, key))
            a_intra = max(map(self._h_lat_gpu_link.__getitem__, key))
            a_inter = 0.0
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
            multi = srv[key[0]] != srv[key[-1]]
        i = self._n_rows
        if i == len(self._mat):
            self._mat = np.concatenate([self._mat, np.zeros_like(self._mat)])
        self._n_rows = i + 1
        if multi:
            s_, g_, sw, a_inter, spanned, inter_logs = self._inter(key)
            logs += inter_logs
            self._multi[i] = (spanned, b_intra)
        if self._ring:
            steps = 2.0 * (k - 1.0)
            h: tuple[float, ...] = (steps / k, b_intra, steps * max(a_intra, a_inter), sd)
        else:
            h = (
                2.0 * (g_ - 1.0) / g_,
                b_intra,
                2.0 * (g_ - 1.0) * a_intra,
                2.0 * (s_ - 1.0) / s_,
                np.inf,
                2.0 * (s_ - 1.0) * a_inter,
                sd,
            )
        bw_ref = self._bw_ref
        # Feature columns are clipped to [0, 1] here, once (as np.clip would clip the table).
        self._mat[i] = (
            1.0,
            _clip01(k / self.max_job_gpus),
            0.0,
            0.0,
            _clip01(s_ / 32.0),
            _clip01((s_ - 1.0) / max(k - 1.0, 1.0)),
            _clip01(sw / 8.0),
            _clip01(slow_f),
            _clip01(fp_f),
            _clip01(1.0 - 1.0 / sd),
            0.0,  # survival, in [0, 1]
            0.0,
            0.0,
            0.0,  # contention (single server: no inter-server link)
            _clip01(min(b_intra, bw_ref) / bw_ref),
            0.0,
            0.0,
            *h,
            0.0,
            0.0,
            0.0,
        )
        exp_rows.append(i)
        exp_logs.append(logs)
        return i

    def _inter(self, key: tuple[int, ...]) -> tuple[float, float, float, float, list[int], float]:
        """Servers, most GPUs on one server, switches, a_inter, spanned inter-server links and
        inter-server log-survival of a multi-server candidate."""
        links, lo, hi = self._t_links, self._t_lo, self._t_hi
        logok = self._h_link_logok
        srv, par, srv_hi = self._t_server, self._t_srv_parent, self._t_srv_hi
        p0, p_last = key[0], key[-1]
        k = len(key)
        depth = len(links[p0]) - 1
        # Walk the placement server by server: only the first GPU of each server meets the links
        # above its server for the first time; the others add zeros to the (k, depth) block that
        # numpy sums.
        items: list[tuple[int, float]] = []
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
                    v = logok[a]
                    if v and prev_g < lo[a]:
                        items.append((pos, v))
                pos += 1
            prev_s, prev_g, j = sv, key[end - 1], end
        lat = self._t_lat
        a_inter = max([lat[a] for a in spanned], default=0.0)
        return (
            float(s_count),
            float(g_max),
            float(switches),
            a_inter,
            list(spanned),
            np_sum_sparse(k * depth, items),
        )

    def _job_rows(self, view: Sequence[Job]) -> NDArray[np.float64]:
        """Per view job, its columns of the candidate table (grad_size, compute_time, weight, the
        rest zero) followed by its (M, t_c, T*), as ``_mat``-wide rows (cached per job class)."""
        classes = self.actions.view_classes
        done = self._jmat_done
        for c, job in zip(classes, view, strict=True):
            if c in done:
                continue
            if c >= len(self._jmat):
                grow = np.zeros((max(c + 1, 2 * len(self._jmat)), self._jmat.shape[1]))
                grow[: len(self._jmat)] = self._jmat
                self._jmat = grow
            _, gf, cf, wf = self._class_columns(c, job)
            _, grad, tc, _, tstar = self.job_facts(job)
            row = self._jmat[c]
            row[2], row[3], row[16] = _clip01(gf), _clip01(cf), _clip01(wf)
            row[self._v0 :] = grad, tc, tstar
            done.add(c)
        return self._jmat[list(classes)]

    def _candidate_features(self, state: ClusterState, view: Sequence[Job]) -> None:
        acts = self.actions
        self._cand.fill(0.0)
        self._best_eta.fill(0.0)
        n_view = len(view)
        if n_view == 0:
            if self.privileged:
                self._gain.fill(0.0)
            return
        groups = acts.groups
        cache = self._rows
        exp_rows: list[int] = []
        exp_logs: list[float] = []
        eidx: list[int] = []
        for cs in groups:
            for key in cs.row_keys():
                i = cache.get(key)
                if i is None:
                    i = cache[key] = self._new_row(key, exp_rows, exp_logs)
                eidx.append(i)
        h0, v0 = self._h0, self._v0
        if exp_rows:
            self._mat[exp_rows, 10] = np.exp(exp_logs)
        M = self._mat[eidx]
        # Multi-server candidates: contention and bandwidth share under the current link loads.
        multi = self._multi
        if multi:
            load = state.link_load
            eff, bw_ref = self._h_eff_bw, self._bw_ref
            ch = h0 + (1 if self._ring else 4)
            rs: list[int] = []
            cs_: list[int] = []
            vals: list[float] = []
            for r, i in enumerate(eidx):
                hit = multi.get(i)
                if hit is None:
                    continue
                spanned, b_intra = hit
                lds = [int(load[a]) for a in spanned]
                ml = max(lds)
                b_inter = min([eff[a] / (ld + 1.0) for a, ld in zip(spanned, lds, strict=True)])
                rs += (r, r, r)
                cs_ += (13, 14, ch)
                vals += (
                    _clip01(ml / (ml + 1.0)),
                    _clip01(min(min(b_intra, b_inter), bw_ref) / bw_ref),
                    min(b_intra, b_inter) if self._ring else b_inter,
                )
            if rs:
                M[rs, cs_] = vals
        gidx, qidx, row, starts = self._layout(groups, n_view)
        J = self._job_rows(view)
        J[:, 15] = self._queue_pos[:n_view]
        X = M[gidx]
        X += J[qidx]
        grad, tc, tstar = X[:, v0], X[:, v0 + 1], X[:, v0 + 2]
        if self._ring:
            comm = X[:, h0] * (grad / X[:, h0 + 1]) + X[:, h0 + 2]
        else:
            comm = (X[:, h0] * (grad / X[:, h0 + 1]) + X[:, h0 + 2]) + (
                X[:, h0 + 3] * (grad / X[:, h0 + 4]) + X[:, h0 + 5]
            )
        T = iteration_time(tc * X[:, v0 - 1], comm, self.perf.overlap)
        # Every other column is in [0, 1] already; so are η (a positive ratio capped at 1) and
        # η·survival, so the table needs no final clip.
        eta = np.minimum(1.0, tstar / T)
        X[:, 11] = eta
        X[:, 12] = eta * X[:, 10]
        self._cand[row] = X[:, :h0]
        self._best_eta[:n_view] = np.maximum.reduceat(eta, starts)
        if self.privileged:
            self._gains(state, view)

    def _layout(self, groups: list[CandidateSet], n_view: int) -> tuple[NDArray[np.intp], ...]:
        """Index arrays of the table rows: per row its candidate (in the concatenated groups), its
        view slot and its action row; and each slot's first row. Cached per table layout."""
        sizes = tuple([len(cs) for cs in groups])
        sg = self.actions.slot_groups
        key = (sizes, sg)
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        C = self.actions.max_candidates
        goff = [0] * len(sizes)
        acc = 0
        for i, c in enumerate(sizes):
            goff[i] = acc
            acc += c
        gidx: list[int] = []
        qidx: list[int] = []
        row: list[int] = []
        starts: list[int] = []
        n = 0
        for q, gi in enumerate(sg):
            c, o = sizes[gi], goff[gi]
            starts.append(n)
            gidx.extend(range(o, o + c))
            qidx.extend([q] * c)
            row.extend(range(q * C, q * C + c))
            n += c
        if len(self._layouts) >= 4096:
            self._layouts.clear()
        out = tuple(np.array(a, dtype=np.intp) for a in (gidx, qidx, row, starts))
        self._layouts[key] = out
        return out

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
        g = self._gpu
        owner = state.gpu_owner
        busy = owner >= 0
        g[:, 0] = state._free()
        g[:, 1] = busy
        n = state.link_load[self._server_uplink]
        g[:, 6] = n / (n + 1.0)
        # Per slot (η, size feature), plus a zero row that free GPUs (owner -1) pick.
        eta, k = state._eta, state._k
        per_slot = np.zeros((len(eta) + 1, 2))
        per_slot[:-1, 0] = eta
        per_slot[:-1, 1] = np.minimum(k / self.max_job_gpus, 1.0)
        g[:, 8:10] = per_slot[owner]

    def _queue_features(self, view: Sequence[Job]) -> None:
        qb = self._queue
        qb.fill(0.0)
        n = len(view)
        if n == 0:
            return
        acts = self.actions
        C = acts.max_candidates
        sets = acts.sets
        best = self._best_eta[:n].tolist()
        copies = acts.copies[:n].tolist()
        classes = acts.view_classes
        rows = []
        for q, job in enumerate(view):
            kf, gf, cf, wf = self._class_columns(classes[q], job)
            cs = sets[q]
            b = best[q]
            rows.append(
                (
                    1.0,
                    kf,
                    gf,
                    cf,
                    wf,
                    (0 if cs is None else len(cs)) / C,
                    0.0 if b < 0.0 else 1.0 if b > 1.0 else b,
                    min(copies[q] / 16.0, 1.0),
                )
            )
        qb[:n] = rows

    def _summary_features(
        self, state: ClusterState, pending: Sequence[Job], step: int, max_steps: int
    ) -> None:
        G = self.topology.num_gpus
        m = self.last_metrics = state.metrics()
        self._summary[:] = (
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
        if self.with_candidates:
            self._candidate_features(state, view)
        else:
            self._best_eta.fill(0.0)
        self._queue_features(view)
        self._summary_features(state, pending, step, max_steps)
        out = self._out
        obs = {"gpus": out(self._gpu)}
        if self.with_candidates:
            obs["candidates"] = out(self._cand)
        obs["queue"] = out(self._queue)
        obs["summary"] = self._summary.copy()
        if self.privileged and self.with_candidates:
            obs["gain"] = self._gain.copy()
        return obs

    def _out(self, buf: NDArray[np.float32]) -> NDArray[np.float32]:
        return buf.copy() if self.table_layout else buf.ravel().copy()
