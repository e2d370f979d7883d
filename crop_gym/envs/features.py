"""The candidate action table and the observation builder shared by every placement environment.

Two classes, both driven by a :class:`~crop_gym.objective.ClusterState` and a sequence of pending
:class:`~crop_gym.jobs.Job`, so that the static environments and the online environment expose the
same interface:

* :class:`CandidateActions`: the padded list of ``(job, candidate placement)`` pairs. The first
  ``num_jobs`` pending jobs that can be placed now (the *queue view*) get up to ``max_candidates``
  candidates each from
  :func:`~crop_gym.candidates.candidate_placements` (the generator CROP uses). Action
  ``a = q * max_candidates + c`` places view job ``q`` on its candidate ``c``; action
  ``num_jobs * max_candidates`` is *stop*, which is always valid.
* :class:`ObservationBuilder`: a flat ``Dict`` of bounded ``float32`` boxes (per-GPU, per-candidate,
  per-queued-job and summary features), written into preallocated buffers and returned as copies.

Feature columns are listed, in order, in :data:`GPU_FEATURES`, :data:`CANDIDATE_FEATURES`,
:data:`JOB_FEATURES` and :data:`SUMMARY_FEATURES`; every value is clipped to ``[0, 1]``, except the
privileged ``gain`` key, which is in ``[-1, 1]``. docs/ENVS.md explains each column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym._numeric import np_sum
from crop_gym.candidates import CandidateSet, candidate_placements
from crop_gym.devices import Health
from crop_gym.jobs import Job
from crop_gym.objective import ClusterState, ideal_time
from crop_gym.perf import PerfConfig, comm_time, iteration_time
from crop_gym.topology import Topology

__all__ = [
    "CANDIDATE_FEATURES",
    "GPU_FEATURES",
    "JOB_FEATURES",
    "SUMMARY_FEATURES",
    "CandidateActions",
    "ObservationBuilder",
    "job_key",
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


def _grad_feature(grad_bytes: Any) -> Any:
    return np.clip((np.log10(np.maximum(grad_bytes, 1.0)) - _GRAD_LOG_LO) / _GRAD_LOG_SPAN, 0.0, 1.0)


def _compute_feature(t: Any) -> Any:
    return t / (t + _COMPUTE_SCALE)


class CandidateActions:
    """Padded ``(job, candidate placement)`` action table over a window of pending jobs.

    After :meth:`build`, ``mask[a]`` says whether action ``a`` is valid; the stop action
    (:attr:`stop_action`, the last index) is always valid. Candidate sets come from the cached
    generator, so jobs of equal size share one computation per state version.

    The *view* is the first ``num_jobs`` pending jobs, in queue order, that have at least one
    candidate now (jobs too big for the free GPUs are skipped and stay pending). With
    ``group_identical=True`` (default) jobs that are identical for the objective — same model,
    size, batch and weight — share one view slot, held by the earliest of them in the queue: they
    have the same candidates and the same gains, so one slot expresses every choice and the view
    reaches further down the queue. (CROP breaks ties between identical jobs the same way.)

    Args:
        num_jobs: View size ``Q`` (slots).
        max_candidates: Candidates per job ``C`` (rows per slot).
        robust: Whether device health steers candidate choice (CROP's default: ``True``).
        group_identical: Whether identical pending jobs share a slot.

    Attributes:
        num_actions: ``Q * C + 1``.
        stop_action: ``Q * C``.
        mask: ``bool[Q * C + 1]`` valid actions (owned by this object; copy before keeping it).
        sets: Per view slot, its :class:`CandidateSet` (``None`` for an empty slot).
        view: The pending job of each view slot.
        positions: Index in ``pending`` of each view job.
        copies: ``int[Q]`` pending jobs each slot stands for (1 without grouping; 0 if empty).
        groups: The distinct candidate sets of the view (one per job size).
        slot_group: ``int[Q]`` index into :attr:`groups` of each slot (-1 if empty).
        pending_gpus: GPUs requested by all pending jobs.
    """

    def __init__(self, num_jobs: int, max_candidates: int, *, robust: bool = True, group_identical: bool = True) -> None:
        if num_jobs < 1 or max_candidates < 1:
            raise ValueError(f"num_jobs={num_jobs} and max_candidates={max_candidates} must be >= 1")
        self.num_jobs = int(num_jobs)
        self.max_candidates = int(max_candidates)
        self.robust = bool(robust)
        self.group_identical = bool(group_identical)
        self.num_actions = self.num_jobs * self.max_candidates + 1
        self.stop_action = self.num_actions - 1
        self.mask = np.zeros(self.num_actions, dtype=bool)
        self.mask[self.stop_action] = True
        self.sets: list[CandidateSet | None] = [None] * self.num_jobs
        self.view: tuple[Job, ...] = ()
        self.positions: tuple[int, ...] = ()
        self.copies = np.zeros(self.num_jobs, dtype=np.int64)
        self.groups: list[CandidateSet] = []
        self.slot_group = np.full(self.num_jobs, -1, dtype=np.int64)
        self._info_cache: dict[int, tuple[Job, tuple[int, int]]] = {}
        self._col = np.arange(self.max_candidates)
        self.pending_gpus = 0
        self._class_ids: dict[tuple[str, int, float, float], int] = {}

    @property
    def space(self) -> spaces.Discrete:
        """The action space, ``Discrete(Q * C + 1)``."""
        return spaces.Discrete(self.num_actions)

    @property
    def has_placement(self) -> bool:
        """Whether any action other than stop is valid."""
        return len(self.view) > 0

    def _job_info(self, job: Job) -> tuple[int, int]:
        """``(k, class id)`` of a job; the class id interns :func:`job_key` (cached per job object)."""
        hit = self._info_cache.get(id(job))
        if hit is not None and hit[0] is job:
            return hit[1]
        key = job_key(job)
        cls = self._class_ids.setdefault(key, len(self._class_ids))
        info = (job.num_gpus, cls)
        self._info_cache[id(job)] = (job, info)
        return info

    def forget_jobs(self) -> None:
        """Drop the per-job cache (call at reset, so finished episodes' jobs can be freed)."""
        self._info_cache.clear()

    def build(self, state: ClusterState, pending: Sequence[Job]) -> None:
        """Rebuild the table for ``state`` and the pending jobs (in queue order).

        Args:
            state: The cluster state.
            pending: Pending jobs in queue order.
        """
        Q, C = self.num_jobs, self.max_candidates
        mask = self.mask
        mask[:] = False
        mask[self.stop_action] = True
        sets = self.sets
        infos = [self._job_info(j) for j in pending]
        self.pending_gpus = sum(k for k, _ in infos)
        n_free = state.num_free
        robust = self.robust
        grouping = self.group_identical
        group_of_size: dict[int, int] = {}
        groups: list[CandidateSet] = []
        slot_of: dict[int, int] = {}
        copies: list[int] = []
        slot_group: list[int] = []
        pos: list[int] = []
        n = 0
        for i, (k, cls) in enumerate(infos):
            if grouping:
                q = slot_of.get(cls)
                if q is not None:
                    copies[q] += 1
                    continue
                if n == Q:
                    continue  # the view is full: only count copies of its jobs
            elif n == Q:
                break
            gi = group_of_size.get(k)
            if gi is None:
                gi = -1
                if k <= n_free:
                    cs = candidate_placements(state, k, robust=robust, max_candidates=C)
                    if len(cs):
                        gi = len(groups)
                        groups.append(cs)
                group_of_size[k] = gi
            if gi < 0:
                continue
            slot_of[cls] = n
            copies.append(1)
            slot_group.append(gi)
            pos.append(i)
            n += 1
        self.copies.fill(0)
        self.copies[:n] = copies
        self.slot_group.fill(-1)
        self.slot_group[:n] = slot_group
        if n:
            lens = np.array([len(cs) for cs in groups])[slot_group]
            mask[: n * C].reshape(n, C)[:] = self._col[None, :] < lens[:, None]
        for q in range(Q):
            sets[q] = groups[slot_group[q]] if q < n else None
        self.groups = groups
        self.positions = tuple(pos)
        self.view = tuple(pending[i] for i in pos)

    def decode(self, action: Any) -> tuple[int, int] | None:
        """``(view slot, candidate index)`` of a valid placement action, else ``None``.

        Stop, out-of-range, non-integer and masked actions all give ``None``; tell them apart with
        :meth:`is_stop` and ``mask``.
        """
        a = _as_index(action)
        if a is None or a < 0 or a >= self.stop_action or not self.mask[a]:
            return None
        return divmod(a, self.max_candidates)

    def is_stop(self, action: Any) -> bool:
        """Whether ``action`` is the stop action."""
        return _as_index(action) == self.stop_action

    def gpus(self, q: int, c: int) -> NDArray[np.int32]:
        """GPU indices of candidate ``c`` of view slot ``q``."""
        cs = self.sets[q]
        assert cs is not None
        return cs.gpus[c]

    def index_of(self, job_id: str, gpus: NDArray[np.integer[Any]], job: Job | None = None) -> int | None:
        """The action that places job ``job_id`` on exactly ``gpus``, or ``None`` if the table has no
        such row (the job is outside the view or the GPU set is not one of its candidates).

        With ``job`` given and identical jobs grouped, a view job identical to it (same model,
        size, batch and weight) also matches: placing either changes F the same way.
        """
        want = np.sort(np.asarray(gpus, dtype=np.int32))
        key = job_key(job) if job is not None and self.group_identical else None
        for q, vjob in enumerate(self.view):
            if vjob.job_id != job_id and (key is None or job_key(vjob) != key):
                continue
            cs = self.sets[q]
            if cs is None or len(cs) == 0 or cs.gpus.shape[1] != len(want):
                return None
            hit = np.flatnonzero((cs.gpus == want).all(axis=1))
            return int(q * self.max_candidates + hit[0]) if len(hit) else None
        return None


def job_key(job: Job) -> tuple[str, int, float, float]:
    """What makes two jobs identical for the objective: ``(model, k, batch, weight)``."""
    return (job.model, job.num_gpus, float(job.batch_size), float(job.weight))


def _as_index(action: Any) -> int | None:
    """An action as a Python int, or ``None`` if it is not a scalar integer."""
    try:
        arr = np.asarray(action)
        if arr.size != 1 or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.bool_)):
            if arr.size == 1 and np.issubdtype(arr.dtype, np.floating) and float(arr) == int(arr):
                return int(arr)
            return None
        return int(arr.reshape(()))
    except (TypeError, ValueError, OverflowError):
        return None


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
        self._job_cols: dict[int, tuple[Job, tuple[float, float, float, float]]] = {}
        self._view_facts = np.zeros((0, 5))
        self.last_metrics: Any = None
        # Static topology arrays used on the hot path.
        self._server_uplink = topology.server_node[topology.gpu_server]  # link above each GPU's server
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
        self._t_lat: list[float] = topology.link_lat.tolist()
        # Per-candidate (GPU set) stats of the current health; index arrays per table layout.
        self._rows: dict[tuple[int, ...], list[Any]] = {}
        self._layouts: dict[Any, tuple[NDArray[np.intp], ...]] = {}
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
        self._rows = {}
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

    def _job_columns(self, job: Job) -> tuple[float, float, float, float]:
        """A job's feature values ``(size, gradient size, compute time, weight)`` (cached per job)."""
        hit = self._job_cols.get(id(job))
        if hit is not None and hit[0] is job:
            return hit[1]
        k, grad, tc, w, _ = self.job_facts(job)
        cols = (
            min(k / self.max_job_gpus, 1.0),
            float(_grad_feature(grad)),
            _compute_feature(tc),
            w / (1.0 + w),
        )
        self._job_cols[id(job)] = (job, cols)
        return cols

    def clear_jobs(self) -> None:
        """Forget the cached job facts (call at reset; the ideal-time cache is kept)."""
        self._facts.clear()
        self._job_cols.clear()

    def tstar(self, job: Job) -> float:
        """Ideal iteration time ``T*`` of a job (cached by model, size and batch)."""
        key = (job.model, job.num_gpus, float(job.batch_size))
        v = self._tstar.get(key)
        if v is None:
            v = ideal_time(self.topology, job, self.perf)
            self._tstar[key] = v
        return v

    def _row_entry(self, key: tuple[int, ...], exp_todo: list[list[Any]]) -> list[Any]:
        """Job-independent stats of one candidate (its sorted GPUs ``key``), cached per health.

        The entry is ``[s, g, switches, slow_frac, failprone_frac, slowdown, survival, b_intra,
        a_intra, a_inter, k, spanned inter-server links or None]``; its survival is filled in by
        the caller, which exponentiates the log-survivals of all new entries in one numpy call
        (``exp_todo`` collects ``(entry, log-survival)``). Single-server rows need only per-GPU
        values; rows spanning servers also walk their inter-server links. Every value is computed
        with the same operations as the vectorised formulas (sums in numpy's pairwise order).
        """
        k = len(key)
        slow, fp, sd = self._h_slow, self._h_failprone, self._h_slowdown
        if k == 1:
            g0 = key[0]
            e = [1.0, 1.0, 1.0, slow[g0] / 1, fp[g0] / 1, sd[g0], 0.0, np.inf, 0.0, 0.0, 1.0, None]
            exp_todo.append([e, self._h_log_gpu[g0]])
            return e
        lg, lgl = self._h_log_gpu, self._h_log_gpu_link
        logs_in: list[float] = []
        for g in key:
            logs_in.append(lg[g])
            logs_in.append(lgl[g])
        bw, lat = self._h_bw_gpu_link, self._h_lat_gpu_link
        e = [
            1.0,
            float(k),
            1.0,
            sum([slow[g] for g in key]) / k,
            sum([fp[g] for g in key]) / k,
            max([sd[g] for g in key]),
            0.0,
            min([bw[g] for g in key]),
            max([lat[g] for g in key]),
            0.0,
            float(k),
            None,
        ]
        logs = np_sum(logs_in)
        srv = self._t_server
        if srv[key[0]] != srv[key[-1]]:
            logs += self._inter_entry(key, e)
        exp_todo.append([e, logs])
        return e

    def _inter_entry(self, key: tuple[int, ...], e: list[Any]) -> float:
        """Fill servers, most GPUs on one server, switches, a_inter and the spanned inter-server
        links of a multi-server candidate into ``e``; return its inter-server log-survival."""
        links, lo, hi = self._t_links, self._t_lo, self._t_hi
        logok = self._h_link_logok
        p0, p_last = key[0], key[-1]
        vals: list[float] = []  # log(1-π) of each (GPU, level) the first time a link is met
        spanned: dict[int, None] = {}
        prev = -1
        for g in key:
            for a in links[g][1:]:
                if a > 0 and (lo[a] > p0 or hi[a] <= p_last):
                    spanned[a] = None
                    vals.append(logok[a] if prev < lo[a] else 0.0)
                else:
                    vals.append(0.0)
            prev = g
        srv, par = self._t_server, self._t_srv_parent
        s_count, run, g_max, switches = 1, 1, 1, 1
        prev_s = srv[p0]
        for g in key[1:]:
            sv = srv[g]
            if sv == prev_s:
                run += 1
            else:
                s_count += 1
                g_max = max(g_max, run)
                run = 1
                if par[sv] != par[prev_s]:
                    switches += 1
                prev_s = sv
        lat = self._t_lat
        e[0] = float(s_count)
        e[1] = float(max(g_max, run))
        e[2] = float(switches)
        e[9] = max([lat[a] for a in spanned], default=0.0)
        e[11] = list(spanned)
        return np_sum(vals)

    def _candidate_features(self, state: ClusterState, view: Sequence[Job]) -> None:
        acts = self.actions
        C = acts.max_candidates
        self._cand.fill(0.0)
        self._best_eta.fill(0.0)
        n_view = len(view)
        if n_view == 0:
            if self.privileged:
                self._gain.fill(0.0)
            return
        groups = acts.groups
        load = state.link_load
        cache = self._rows
        exp_todo: list[list[Any]] = []
        entries: list[list[Any]] = []
        for cs in groups:
            for key in cs.row_keys():
                e = cache.get(key)
                if e is None:
                    e = cache[key] = self._row_entry(key, exp_todo)
                entries.append(e)
        if exp_todo:
            surv = np.exp(np.array([t[1] for t in exp_todo])).tolist()
            for t, sv in zip(exp_todo, surv, strict=True):
                t[0][6] = sv
        # Per candidate: its job-independent feature columns (F) and the time-model terms (H).
        ring = self.perf.allreduce == "ring"
        max_k, bw_ref, eff = self.max_job_gpus, self._bw_ref, self._h_eff_bw
        F: list[tuple[float, ...]] = []
        H: list[tuple[float, ...]] = []
        for e in entries:
            s, g, sw, slow_f, fp_f, sd, surv_, b_intra, a_intra, a_inter, k, spanned = e
            if spanned:
                ml = max([int(load[a]) for a in spanned])
                b_inter = min([eff[a] / (int(load[a]) + 1.0) for a in spanned])
            else:
                ml = 0
                b_inter = np.inf
            F.append(
                (
                    1.0,
                    k / max_k,
                    0.0,
                    0.0,
                    s / 32.0,
                    (s - 1.0) / max(k - 1.0, 1.0),
                    sw / 8.0,
                    slow_f,
                    fp_f,
                    1.0 - 1.0 / sd,
                    surv_,
                    0.0,
                    0.0,
                    ml / (ml + 1.0),
                    min(min(b_intra, b_inter), bw_ref) / bw_ref,
                    0.0,
                    0.0,
                )
            )
            if ring:
                steps = 2.0 * (k - 1.0)
                H.append((steps / k, min(b_intra, b_inter), steps * max(a_intra, a_inter), sd, surv_))
            else:
                H.append(
                    (
                        2.0 * (g - 1.0) / g,
                        b_intra,
                        2.0 * (g - 1.0) * a_intra,
                        2.0 * (s - 1.0) / s,
                        b_inter,
                        2.0 * (s - 1.0) * a_inter,
                        sd,
                        surv_,
                    )
                )
        gidx, qidx, row, starts = self._layout(groups, n_view)
        # Per view slot: the job's feature columns (J) and (M, t_c, T*) (V).
        J = np.zeros((n_view, len(CANDIDATE_FEATURES)))
        J[:, _JOB_CAND_COLS] = [self._job_columns(j)[1:] for j in view]
        J[:, 15] = self._queue_pos[:n_view]
        V = self._view_facts[:, _FACT_COLS]
        Hr = np.array(H)[gidx]
        Vr = V[qidx]
        grad = Vr[:, 0]
        if ring:
            comm = Hr[:, 0] * (grad / Hr[:, 1]) + Hr[:, 2]
        else:
            comm = (Hr[:, 0] * (grad / Hr[:, 1]) + Hr[:, 2]) + (Hr[:, 3] * (grad / Hr[:, 4]) + Hr[:, 5])
        T = iteration_time(Vr[:, 1] * Hr[:, -2], comm, self.perf.overlap)
        eta = np.minimum(1.0, Vr[:, 2] / T)
        X = np.array(F)[gidx]
        X += J[qidx]
        X[:, 11] = eta
        X[:, 12] = eta * Hr[:, -1]
        np.clip(X, 0.0, 1.0, out=X)
        self._cand[row] = X
        self._best_eta[:n_view] = np.maximum.reduceat(eta, starts)
        if self.privileged:
            self._gains(state, view)

    def _layout(self, groups: list[CandidateSet], n_view: int) -> tuple[NDArray[np.intp], ...]:
        """Index arrays of the table rows: per row its candidate (in the concatenated groups), its
        view slot and its action row; and each slot's first row. Cached per table layout."""
        sg = self.actions.slot_group
        key = (tuple([len(cs) for cs in groups]), sg[:n_view].tobytes())
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        C = self.actions.max_candidates
        sizes = np.array(key[0])
        goff = np.cumsum(sizes) - sizes
        sgv = sg[:n_view]
        cnt = sizes[sgv]
        starts = np.cumsum(cnt) - cnt
        within = np.arange(int(cnt.sum())) - np.repeat(starts, cnt)
        row = np.repeat(np.arange(n_view) * C, cnt) + within
        gidx = np.repeat(goff[sgv], cnt) + within
        qidx = np.repeat(np.arange(n_view), cnt)
        if len(self._layouts) >= 4096:
            self._layouts.clear()
        out = (gidx, qidx, row, starts)
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
        eta, k = state.slot_eta, state.slot_num_gpus
        slot = np.where(busy, owner, 0)
        g[:, 8] = np.where(busy, eta[slot], 0.0)
        g[:, 9] = np.where(busy, np.minimum(k[slot] / self.max_job_gpus, 1.0), 0.0)

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
        rows = []
        for q, job in enumerate(view):
            kf, gf, cf, wf = self._job_columns(job)
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
            min(max(len(pending) - int(self.actions.copies.sum()), 0) / self.queue_size, 1.0),
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
        self._view_facts = np.array([self.job_facts(j) for j in view]).reshape(len(view), 5)
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
