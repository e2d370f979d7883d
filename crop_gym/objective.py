"""Cluster state and the objective F: the cluster's expected effective GPUs (DESIGN §2.5).

For every placed job ``j``:

* ideal time ``T*_j``: the same job on a compact placement (fewest servers) of healthy reference GPUs
  in an empty cluster;
* normalised throughput ``η_j = min(1, T*_j / T_j)``;
* survival ``s_j = Π_{g∈P_j} (1-π_g) · Π_{e∈spanned(P_j)} (1-π_e)``;
* value ``v_j = w_j · k_j · η_j · s_j`` (GPU units) and ``F = Σ_j v_j``.

:class:`ClusterState` holds the placed jobs as preallocated numpy arrays ("slots") and keeps link loads,
iteration times and values up to date incrementally: adding or removing one job only recomputes the
jobs that share one of its inter-server links. :meth:`ClusterState.evaluate` recomputes everything from
scratch (vectorised) and is what the incremental path is tested against.

When few jobs are affected (the common case) the incremental path evaluates them in plain Python,
with the same floating-point operations in the same order as the vectorised formulas (sums follow
numpy's pairwise order, see :mod:`crop_gym._numeric`), so both paths give bit-identical results;
numpy's per-call overhead would otherwise dominate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym._numeric import np_sum
from crop_gym.devices import Health
from crop_gym.errors import ConfigError
from crop_gym.jobs import MODEL_ZOO, Job, get_model
from crop_gym.perf import (
    PerfConfig,
    PlacementStats,
    _lists,
    comm_time,
    comm_time_scalar,
    iteration_time,
    placement_stats,
    sorted_placement_stats,
)
from crop_gym.topology import Topology

__all__ = ["ClusterMetrics", "ClusterState", "VersionedCache", "ideal_time"]


def _view(a: NDArray[np.float64]) -> NDArray[np.float64]:
    v = a.view()
    v.setflags(write=False)
    return v


class VersionedCache:
    """Derived data of one :attr:`ClusterState.version` (e.g. candidate sets); reset when it changes.

    :attr:`health` survives version changes: it holds data derived from the health alone, each
    entry stored with the :class:`~crop_gym.devices.Health` object it was computed from (users
    check that object's identity before reusing an entry).

    Never pickled or copied with the state: a copy starts empty.
    """

    __slots__ = ("health", "sets", "shared", "version")

    def __init__(self) -> None:
        self.version = -1
        self.sets: dict[Any, Any] = {}
        self.shared: dict[Any, Any] = {}
        self.health: dict[Any, Any] = {}

    def reset(self, version: int) -> None:
        """Forget the per-version data; the state is now at ``version``."""
        self.version = version
        self.sets = {}
        self.shared = {}

    def __getstate__(self) -> tuple[int, dict[Any, Any], dict[Any, Any]]:
        return (-1, {}, {})

    def __setstate__(self, st: tuple[int, dict[Any, Any], dict[Any, Any]]) -> None:
        self.version, self.sets, self.shared = st
        self.health = {}


#: Memo of :meth:`ClusterState._job_consts`, per (topology, all-reduce, overlap, model, GPUs,
#: batch): ``(model spec, M, t_c, T*)``. Pure functions of the key and the spec (topologies are
#: immutable), so states and environments can share it.
_JOB_CONSTS: dict[tuple[Any, ...], tuple[Any, float, float, float]] = {}


def ideal_time(topology: Topology, job: Job, perf: PerfConfig) -> float:
    """``T*``: iteration time of ``job`` on a compact placement of healthy reference GPUs, alone.

    Cached per (topology, all-reduce, overlap, model, GPUs, batch): topologies are immutable.
    """
    return _ideal_time(
        topology, perf.allreduce, perf.overlap, job.model, job.num_gpus, float(job.batch_size)
    )


@lru_cache(maxsize=1 << 16)
def _ideal_time(
    topology: Topology, allreduce: str, overlap: float, model: str, k: int, batch: float
) -> float:
    spec = get_model(model)
    st = _compact_stats(topology, k)
    b_inter = float(topology.link_bw[st.inter_links].min()) if len(st.inter_links) else np.inf
    comm = comm_time_scalar(
        allreduce, spec.grad_bytes, st.k, st.g, st.s, st.b_intra, b_inter, st.a_intra, st.a_inter
    )
    return float(iteration_time(spec.compute_time(batch / k), comm, overlap))


@lru_cache(maxsize=1 << 12)
def _compact_stats(topology: Topology, k: int) -> PlacementStats:
    """Facts of the compact placement of ``k`` healthy GPUs (shared by every model and batch)."""
    return placement_stats(topology, Health.healthy(topology), topology.compact_placement(k))


@dataclass(frozen=True)
class ClusterMetrics:
    """Summary of a cluster state (DESIGN §2.5).

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


def _make_metrics(
    F: float, jobs_placed: int, gpus_busy: int, utilization: float, comm_overhead: float
) -> ClusterMetrics:
    """``ClusterMetrics(...)`` without the frozen ``__init__``'s per-field ``object.__setattr__``
    (the environments build one per step)."""
    m = object.__new__(ClusterMetrics)
    m.__dict__.update(
        F=F,
        jobs_placed=jobs_placed,
        gpus_busy=gpus_busy,
        utilization=utilization,
        comm_overhead=comm_overhead,
    )
    return m


class ClusterState:
    """The mutable state of a cluster: health, placed jobs, link loads, per-job times and values.

    Args:
        topology: The compiled cluster.
        health: Device health; healthy if ``None``.
        perf: Iteration-time options.

    Example:
        >>> from crop_gym.topology import make_topology
        >>> from crop_gym.jobs import Job, get_model
        >>> state = ClusterState(make_topology("testbed-8"))
        >>> _ = state.add(Job("a", "resnet50", 4, 128), np.arange(4))
        >>> round(state.F, 6)
        4.0
    """

    _INIT_SLOTS = 64
    _INIT_LINKS = 8
    #: At most this many affected jobs are re-evaluated in plain Python (else vectorised).
    _PY_ROWS = 16

    # Per-slot arrays (one row per placed job; ``_active`` marks the used rows).
    _active: NDArray[np.bool_]
    _links: NDArray[np.int32]  # spanned inter-server links, root-padded
    _M: NDArray[np.float64]  # gradient bytes
    _k: NDArray[np.float64]  # GPUs
    _g: NDArray[np.float64]  # most GPUs on one server
    _s: NDArray[np.float64]  # servers spanned
    _b_intra: NDArray[np.float64]  # bottleneck over GPU links
    _a_intra: NDArray[np.float64]  # largest intra latency
    _a_inter: NDArray[np.float64]  # largest inter latency
    _t: NDArray[np.float64]  # compute time with stragglers and speeds
    _tstar: NDArray[np.float64]  # ideal time T*
    _wsurv: NDArray[np.float64]  # w * k * survival
    _surv: NDArray[np.float64]  # survival
    _T: NDArray[np.float64]  # iteration time
    _C: NDArray[np.float64]  # communication time
    _eta: NDArray[np.float64]  # normalised throughput
    _value: NDArray[np.float64]  # v_j
    _kct: NDArray[np.float64]  # k * C / T (the job's GPU-weighted communication share)

    def __init__(
        self, topology: Topology, health: Health | None = None, perf: PerfConfig | None = None
    ) -> None:
        self.topology = topology
        self.perf = perf if perf is not None else PerfConfig()
        self.gpu_owner = np.full(topology.num_gpus, -1, dtype=np.int32)
        self.link_load = np.zeros(topology.num_nodes, dtype=np.int32)
        self._mark = np.zeros(topology.num_nodes, dtype=bool)
        self._tstar_cache: dict[tuple[str, int, float], float] = {}
        self.version = 0
        self._candidate_cache = VersionedCache()
        self._alloc(self._INIT_SLOTS, self._INIT_LINKS)
        self.jobs: dict[str, int] = {}
        self._slot_job: list[Job | None] = [None] * self._INIT_SLOTS
        self._slot_stats: list[PlacementStats | None] = [None] * self._INIT_SLOTS
        self._free_slots: list[int] = list(range(self._INIT_SLOTS - 1, -1, -1))
        # Plain-Python mirror of each used slot's inputs to the time model:
        # (M, k, g, s, b_intra, a_intra, a_inter, t, tstar, wsurv, inter links).
        self._slot_py: list[tuple[Any, ...] | None] = [None] * self._INIT_SLOTS
        # Active slots spanning each inter-server link.
        self._link_slots: dict[int, set[int]] = {}
        self._n_busy = 0
        self._free_cache: tuple[int, NDArray[np.bool_]] = (-1, np.empty(0, dtype=bool))
        self._F = 0.0
        self.set_health(health if health is not None else Health.healthy(topology))

    # ------------------------------------------------------------------ storage
    _FLOAT_FIELDS = (
        "M",
        "k",
        "g",
        "s",
        "b_intra",
        "a_intra",
        "a_inter",
        "t",
        "tstar",
        "wsurv",
        "surv",
        "T",
        "C",
        "eta",
        "value",
        "kct",
    )

    def _alloc(self, slots: int, width: int) -> None:
        self._active = np.zeros(slots, dtype=bool)
        self._links = np.zeros((slots, width), dtype=np.int32)
        for name in self._FLOAT_FIELDS:
            setattr(self, f"_{name}", np.zeros(slots))

    def _grow(self, slots: int, width: int) -> None:
        old = {name: getattr(self, f"_{name}") for name in ("active", "links", *self._FLOAT_FIELDS)}
        n_old, w_old = old["links"].shape
        self._alloc(slots, width)
        self._active[:n_old] = old["active"]
        self._links[:n_old, :w_old] = old["links"]
        for name in self._FLOAT_FIELDS:
            getattr(self, f"_{name}")[:n_old] = old[name]
        if slots > n_old:
            self._slot_job.extend([None] * (slots - n_old))
            self._slot_stats.extend([None] * (slots - n_old))
            self._slot_py.extend([None] * (slots - n_old))
            self._free_slots = list(range(slots - 1, n_old - 1, -1)) + self._free_slots

    # --------------------------------------------------------------- properties
    @property
    def health(self) -> Health:
        """Current device health."""
        return self._health

    @property
    def F(self) -> float:
        """Objective: expected effective GPUs of the placed jobs."""
        return self._F

    @property
    def free_mask(self) -> NDArray[np.bool_]:
        """``bool[G]``: GPUs that are free and usable."""
        return (self.gpu_owner < 0) & self._usable

    @property
    def num_free(self) -> int:
        """Free usable GPUs."""
        return self._n_usable - self._n_busy

    @property
    def free_bits(self) -> int:
        """:attr:`free_mask` as an int: bit ``g`` is set when GPU ``g`` is free and usable (kept
        up to date by every change; read-only)."""
        return self._free_bits

    def _free(self) -> NDArray[np.bool_]:
        """:attr:`free_mask`, computed once per version (read-only; internal use)."""
        ver, free = self._free_cache
        if ver != self.version:
            free = self.free_mask
            free.setflags(write=False)
            self._free_cache = (self.version, free)
        return free

    @property
    def eff_bandwidth(self) -> NDArray[np.float64]:
        """``float64[N]``: ``ρ_e · B_e`` per link (root: inf)."""
        return self._eff_bw

    @property
    def slot_iteration_times(self) -> NDArray[np.float64]:
        """Read-only ``T_j`` per slot (index with ``jobs[job_id]`` or ``gpu_owner``; unused slots stale)."""
        return _view(self._T)

    @property
    def slot_eta(self) -> NDArray[np.float64]:
        """Read-only ``η_j`` per slot (see :attr:`slot_iteration_times`)."""
        return _view(self._eta)

    @property
    def slot_num_gpus(self) -> NDArray[np.float64]:
        """Read-only ``k_j`` per slot (see :attr:`slot_iteration_times`)."""
        return _view(self._k)

    def placed_jobs(self) -> list[Job]:
        """The placed jobs, in slot order."""
        return [self._slot_job[s] for s in sorted(self.jobs.values())]  # type: ignore[misc]

    def placement(self, job_id: str) -> NDArray[np.int32]:
        """Sorted GPU indices of a placed job (read-only)."""
        st = self._slot_stats[self.jobs[job_id]]
        assert st is not None
        return st.gpus

    def job_record(self, job_id: str) -> dict[str, float]:
        """Per-job model outputs: ``T``, ``C``, ``eta``, ``survival``, ``value``, ``T_star``."""
        s = self.jobs[job_id]
        return {
            "T": float(self._T[s]),
            "C": float(self._C[s]),
            "eta": float(self._eta[s]),
            "survival": float(self._surv[s]),
            "value": float(self._value[s]),
            "T_star": float(self._tstar[s]),
        }

    def job_value(self, job_id: str) -> float:
        """Value ``v_j`` of a placed job (``job_record(job_id)["value"]``, cheaper)."""
        return float(self._value[self.jobs[job_id]])

    def iteration_times(self) -> dict[str, float]:
        """Current iteration time ``T_j`` of every placed job (seconds)."""
        return {jid: float(self._T[s]) for jid, s in self.jobs.items()}

    def metrics(self) -> ClusterMetrics:
        """Summary metrics of the current state."""
        busy = self._n_busy
        # Σ k over the placed jobs is the number of busy GPUs (an exact integer sum).
        ksum = float(busy)
        # Σ k·C/T over the placed jobs in slot order (numpy's sum of k[rows] * C[rows] / T[rows]:
        # the per-slot ratios are kept up to date with T and C).
        comm = float(np.add.reduce(self._kct[self._active]) / ksum) if ksum > 0 else 0.0
        return _make_metrics(self._F, len(self.jobs), busy, busy / self.topology.num_gpus, comm)

    # ------------------------------------------------------------------- health
    def set_health(
        self,
        health: Health,
        changed_gpus: NDArray[np.integer[Any]] | None = None,
        changed_links: NDArray[np.integer[Any]] | None = None,
    ) -> None:
        """Replace the device health and recompute the placed jobs it affects.

        Args:
            health: The new health.
            changed_gpus: GPUs whose health changed, if known: only the jobs holding one of them, or
                spanning one of ``changed_links``, get their placement facts recomputed (then every
                job is re-evaluated, vectorised). ``None`` for both = recompute every job.
            changed_links: Links (child node indices) whose health changed, if known.

        Raises:
            ConfigError: If a placed job holds a GPU that the new health marks failed (remove the job
                first, as the simulator does on a failure).
        """
        if changed_gpus is None and changed_links is None:
            slots = list(self.jobs.values())
        else:
            hit = np.zeros(len(self._active), dtype=bool)
            if changed_gpus is not None and len(changed_gpus):
                owners = self.gpu_owner[np.asarray(changed_gpus)]
                hit[owners[owners >= 0]] = True
            if changed_links is not None and len(changed_links):
                cl = np.asarray(changed_links, dtype=np.int64)
                topo = self.topology
                intra = cl[topo.is_intra[cl]]
                if len(intra):
                    owners = self.gpu_owner[np.searchsorted(topo.gpu_node, intra)]
                    hit[owners[owners >= 0]] = True
                inter = cl[~topo.is_intra[cl] & (cl > 0)]
                if len(inter):
                    hit[self._affected(inter.astype(np.int32))] = True
            slots = np.flatnonzero(hit & self._active).tolist()
        usable = health.usable
        for s in slots:
            st = self._slot_stats[s]
            assert st is not None
            if not usable[st.gpus].all():
                job = self._slot_job[s]
                assert job is not None
                raise ConfigError(
                    f"job {job.job_id} holds a failed GPU; remove it before marking the GPU failed"
                )
        self._health = health
        self._usable = usable
        self._n_usable = int(usable.sum())
        self._free_bits = _as_bits(self.free_mask)
        self._eff_bw = self.topology.link_bw * health.link_degradation
        self._eff_bw.setflags(write=False)
        self._eff_bw_l: list[float] = self._eff_bw.tolist()
        for s in slots:
            st, job = self._slot_stats[s], self._slot_job[s]
            assert st is not None and job is not None
            self._write_stats(s, placement_stats(self.topology, health, st.gpus), job)
        self.version += 1
        self.evaluate()

    # ------------------------------------------------------------- evaluation
    def _rows_values(self, rows: Any, load: NDArray[np.int32]) -> tuple[Any, Any, Any]:
        """(T, C, value) of slot rows under link loads ``load``."""
        links = self._links[rows]
        share = self._eff_bw[links] / np.maximum(load[links], 1)
        b_inter = share.min(axis=1)
        C = comm_time(
            self.perf.allreduce,
            self._M[rows],
            self._k[rows],
            self._g[rows],
            self._s[rows],
            self._b_intra[rows],
            b_inter,
            self._a_intra[rows],
            self._a_inter[rows],
        )
        T = iteration_time(self._t[rows], C, self.perf.overlap)
        value = self._wsurv[rows] * np.minimum(1.0, self._tstar[rows] / T)
        return T, C, value

    def _store_rows(self, rows: Any, load: NDArray[np.int32]) -> None:
        T, C, value = self._rows_values(rows, load)
        self._T[rows] = T
        self._C[rows] = C
        self._kct[rows] = self._k[rows] * C / T
        self._eta[rows] = np.minimum(1.0, self._tstar[rows] / T)
        self._value[rows] = value

    def evaluate(self) -> float:
        """Recompute link loads, every job's time and value, and F from scratch; return F."""
        rows = np.flatnonzero(self._active)
        load = np.bincount(self._links[rows].ravel(), minlength=self.topology.num_nodes).astype(
            np.int32
        )
        load[0] = 0
        self.link_load[:] = load
        if len(rows):
            self._store_rows(rows, self.link_load)
        self._F = float(self._value[rows].sum())
        return self._F

    def _affected(self, links: NDArray[np.int32]) -> NDArray[np.intp]:
        """Active slots whose inter-server links intersect ``links``."""
        if len(links) == 0 or not self.jobs:
            return np.empty(0, dtype=np.intp)
        self._mark[links] = True
        hit = self._mark[self._links].any(axis=1) & self._active
        self._mark[links] = False
        return np.flatnonzero(hit)

    def _tstar_of(self, job: Job) -> float:
        key = (job.model, job.num_gpus, float(job.batch_size))
        v = self._tstar_cache.get(key)
        if v is None:
            v = ideal_time(self.topology, job, self.perf)
            self._tstar_cache[key] = v
        return v

    def _job_consts(self, job: Job) -> tuple[float, float, float]:
        """``(M, t_c, T*)`` of a job: its gradient bytes, reference compute time and ideal time
        (``job.grad_bytes``, ``job.compute_time`` and :meth:`_tstar_of`, as Python floats),
        memoised in :data:`_JOB_CONSTS`."""
        perf = self.perf
        key = (self.topology, perf.allreduce, perf.overlap, job.model, job.num_gpus, job.batch_size)
        hit = _JOB_CONSTS.get(key)
        # An entry holds while the zoo maps the model to the same spec (models can be
        # re-registered); T* then also comes from _tstar_of, as it would without the memo.
        if hit is None or MODEL_ZOO.get(job.model) is not hit[0]:
            if len(_JOB_CONSTS) >= 1 << 16:
                _JOB_CONSTS.clear()
            hit = (job.spec, float(job.grad_bytes), float(job.compute_time), self._tstar_of(job))
            _JOB_CONSTS[key] = hit
        return hit[1], hit[2], hit[3]

    def _write_stats(self, s: int, st: PlacementStats, job: Job, fresh: bool = False) -> None:
        """Store a job's placement facts in slot ``s``.

        Args:
            s: The slot.
            st: The facts.
            job: The job.
            fresh: Whether ``s`` is a free slot, whose ``_links`` row is all padding (zeros):
                free rows are kept that way (see :meth:`remove` and :meth:`_alloc`).
        """
        inter = st.inter_links
        n_links = len(inter)
        if n_links > self._links.shape[1]:
            self._grow(len(self._active), max(n_links, 2 * self._links.shape[1]))
        self._slot_stats[s] = st
        if not fresh:
            self._links[s] = 0
        if n_links:
            self._links[s, :n_links] = inter
        M, tc, tstar = self._job_consts(job)
        k, g, sv = st.k, st.g, st.s
        b_intra, a_intra, a_inter, surv = st.b_intra, st.a_intra, st.a_inter, st.survival
        self._M[s] = M
        self._k[s] = k
        self._g[s] = g
        self._s[s] = sv
        self._b_intra[s] = b_intra
        self._a_intra[s] = a_intra
        self._a_inter[s] = a_inter
        t = tc * st.slowdown
        wsurv = job.weight * k * surv
        self._t[s] = t
        self._tstar[s] = tstar
        self._surv[s] = surv
        self._wsurv[s] = wsurv
        # The same values as stored in the float64 arrays above (ints are exact as floats).
        self._slot_py[s] = (
            M,
            float(k),
            float(g),
            float(sv),
            float(b_intra),
            float(a_intra),
            float(a_inter),
            float(t),
            tstar,
            float(wsurv),
            inter.tolist() if n_links else [],
        )

    def _placement_lists(self) -> Any:
        """:func:`crop_gym.perf._lists` of the topology and current health, kept in the
        candidate cache's health-keyed store (so copies and pickles do not carry it)."""
        store = self._candidate_cache.health
        hit = store.get("placement_lists")
        if hit is None or hit[0] is not self._health:
            hit = (self._health, _lists(self.topology, self._health))
            store["placement_lists"] = hit
        return hit[1]

    # --------------------------------------------------------------- mutation
    def check_placement(
        self, job: Job, gpus: NDArray[np.integer[Any]] | Sequence[int]
    ) -> NDArray[np.int32]:
        """Validate a placement and return it as sorted ``int32``.

        Raises:
            ConfigError: If the job is already placed, the GPU count is not ``job.num_gpus``, a GPU
                index is out of range or repeated, or a GPU is busy or failed.
        """
        p = np.sort(np.asarray(gpus, dtype=np.int32))
        if job.job_id in self.jobs:
            raise ConfigError(f"job {job.job_id} is already placed")
        if len(p) != job.num_gpus:
            raise ConfigError(f"job {job.job_id} needs {job.num_gpus} GPUs, got {len(p)}")
        if len(p) and (p[0] < 0 or p[-1] >= self.topology.num_gpus):
            raise ConfigError(
                f"GPU index outside [0, {self.topology.num_gpus - 1}] in {p.tolist()}"
            )
        if np.any(p[1:] == p[:-1]):
            raise ConfigError(f"repeated GPU in placement {p.tolist()}")
        if not self.free_mask[p].all():
            bad = p[~self.free_mask[p]].tolist()
            raise ConfigError(f"job {job.job_id}: GPUs {bad} are busy or failed")
        return p

    def stats_for(self, gpus: NDArray[np.integer[Any]]) -> PlacementStats:
        """Contention-independent facts of a placement under the current health."""
        return placement_stats(self.topology, self._health, gpus)

    def add(
        self,
        job: Job,
        gpus: NDArray[np.integer[Any]] | Sequence[int],
        stats: PlacementStats | None = None,
        *,
        validate: bool = True,
    ) -> float:
        """Place ``job`` on ``gpus`` and update everything it touches.

        Args:
            job: The job (its ``job_id`` must not be placed yet).
            gpus: Its GPUs (exactly ``job.num_gpus``, free and usable).
            stats: Precomputed :meth:`stats_for` of ``gpus`` (optional, saves time).
            validate: Check the placement with :meth:`check_placement` (default). Pass ``False``
                only when the caller guarantees a valid placement given as sorted, distinct GPU
                indices (e.g. a candidate of this state's current version): it saves the checks.

        Returns:
            The change of F.
        """
        # A copy: the stats keep the placement (a caller's array may change later).
        p = self.check_placement(job, gpus) if validate else np.array(gpus, dtype=np.int32)
        p.setflags(write=False)  # (handed out by placement())
        if stats is not None:
            st = stats
        else:
            st = sorted_placement_stats(self.topology, self._health, p, self._placement_lists())
        if not self._free_slots:
            self._grow(2 * len(self._active), self._links.shape[1])
        s = self._free_slots.pop()
        self._write_stats(s, st, job, fresh=True)
        self._slot_job[s] = job
        self._active[s] = True
        self.jobs[job.job_id] = s
        n = len(p)
        owner = self.gpu_owner
        gl: list[int] = p.tolist()
        if n <= 8:  # a few scalar writes beat one fancy-indexed write
            for g in gl:
                owner[g] = s
        else:
            owner[p] = s
        self._n_busy += n
        self._free_bits ^= _bits_of(gl)  # (they were free)
        py = self._slot_py[s]
        assert py is not None
        inter_l: list[int] = py[10]
        if inter_l:
            self._value[s] = 0.0
            load = self.link_load
            for e in inter_l:
                load[e] += 1
            ls = self._link_slots
            for e in inter_l:
                hit = ls.get(e)
                if hit is None:
                    ls[e] = {s}
                else:
                    hit.add(s)
            delta = self._update_rows(self._affected_py(inter_l))
        else:
            # _update_rows([s]) of the new job alone, whose value was 0: np_sum([v]) - np_sum([0.0]).
            ((T, C, eta, v),) = self._py_values([s], None)
            self._T[s] = T
            self._C[s] = C
            self._kct[s] = py[1] * C / T
            self._eta[s] = eta
            self._value[s] = v
            delta = (0.0 + v) - 0.0
        self._F += delta
        self.version += 1
        return delta

    def remove(self, job_id: str) -> float:
        """Remove a placed job; return the change of F.

        Raises:
            KeyError: If the job is not placed.
        """
        s = self.jobs.pop(job_id)
        st = self._slot_stats[s]
        py = self._slot_py[s]
        assert st is not None and py is not None
        inter = st.inter_links
        inter_l: list[int] = py[10]
        old_value = float(self._value[s])
        self._active[s] = False
        self._value[s] = 0.0
        self.gpu_owner[st.gpus] = -1
        self._n_busy -= len(st.gpus)
        self._free_bits |= _bits_of(st.gpus.tolist())  # (a placed job's GPUs are usable)
        if inter_l:
            self.link_load[inter] -= 1
            ls = self._link_slots
            for e in inter_l:
                hit = ls[e]
                hit.discard(s)
                if not hit:
                    del ls[e]
            rows = self._affected_py(inter_l)
        else:
            rows = []
        delta = self._update_rows(rows) - old_value
        self._F += delta
        self._links[s] = 0
        self._slot_job[s] = None
        self._slot_stats[s] = None
        self._slot_py[s] = None
        self._free_slots.append(s)
        self.version += 1
        return delta

    def _affected_py(self, links: list[int]) -> list[int]:
        """Active slots spanning one of ``links``, sorted (as :meth:`_affected`, from the index)."""
        ls = self._link_slots
        if len(links) == 1:
            return sorted(ls.get(links[0], ()))
        hit: set[int] = set()
        for e in links:
            v = ls.get(e)
            if v:
                hit |= v
        return sorted(hit)

    def _update_rows(self, rows: list[int]) -> float:
        """Re-evaluate slot ``rows`` under the current link loads; return the change of their
        summed value (summed in ``rows`` order, as numpy sums ``value[rows]``)."""
        vals = self._value
        if len(rows) > self._PY_ROWS:
            ra = np.array(rows, dtype=np.intp)
            before = float(vals[ra].sum())
            self._store_rows(ra, self.link_load)
            return float(vals[ra].sum()) - before
        if len(rows) == 1:
            # np_sum of one number, inline.
            r = rows[0]
            before = 0.0 + float(vals[r])
            ((T, C, eta, v),) = self._py_values(rows, None)
            self._T[r] = T
            self._C[r] = C
            self._kct[r] = self._slot_py[r][1] * C / T  # type: ignore[index]
            self._eta[r] = eta
            vals[r] = v
            return (0.0 + v) - before
        before = np_sum([float(vals[r]) for r in rows])
        new = self._py_values(rows, None)
        T_, C_, eta_, kct = self._T, self._C, self._eta, self._kct
        slot_py = self._slot_py
        for r, (T, C, eta, v) in zip(rows, new, strict=True):
            T_[r] = T
            C_[r] = C
            kct[r] = slot_py[r][1] * C / T  # type: ignore[index]
            eta_[r] = eta
            vals[r] = v
        return np_sum([x[3] for x in new]) - before

    def _py_values(
        self, rows: list[int], extra: set[int] | None
    ) -> list[tuple[float, float, float, float]]:
        """``(T, C, η, value)`` of slot ``rows`` in plain Python: :meth:`_rows_values` op for op.

        Args:
            rows: Slots.
            extra: Links carrying one more job than :attr:`link_load` says (a tentative job), or
                ``None``.
        """
        eff = self._eff_bw_l
        load = self.link_load
        ring = self.perf.allreduce == "ring"
        phi = self.perf.overlap
        out = []
        slot_py = self._slot_py
        for r in rows:
            py = slot_py[r]
            assert py is not None
            M, k, g, s, b_intra, a_intra, a_inter, t, tstar, wsurv, links = py
            if links:
                if extra:
                    b_inter = min([eff[e] / max(int(load[e]) + (e in extra), 1) for e in links])
                else:
                    b_inter = min([eff[e] / max(int(load[e]), 1) for e in links])
            else:
                b_inter = np.inf
            if ring:
                steps = 2.0 * (k - 1.0)
                C = steps / k * (M / min(b_intra, b_inter)) + steps * max(a_intra, a_inter)
            else:
                C = ((2.0 * (g - 1.0) / g) * (M / b_intra) + 2.0 * (g - 1.0) * a_intra) + (
                    (2.0 * (s - 1.0) / s) * (M / b_inter) + 2.0 * (s - 1.0) * a_inter
                )
            T = t + C if phi == 0.0 else (1.0 - phi) * (t + C) + phi * max(t, C)
            eta = min(1.0, tstar / T)
            out.append((T, C, eta, wsurv * eta))
        return out

    def gain(
        self,
        job: Job,
        gpus: NDArray[np.integer[Any]] | None = None,
        stats: PlacementStats | None = None,
    ) -> float:
        """ΔF of placing ``job`` on ``gpus`` without changing the state.

        Includes the job's own value and the change it causes to the jobs sharing its links.
        Pass ``stats`` (from :meth:`stats_for`) instead of ``gpus`` to save recomputation. The
        placement is not validated (use :meth:`check_placement`).
        """
        st = (
            stats
            if stats is not None
            else placement_stats(self.topology, self._health, np.asarray(gpus))
        )
        inter = st.inter_links
        inter_l: list[int] = inter.tolist()
        rows = self._affected_py(inter_l) if inter_l else []
        if inter_l:
            eff, load = self._eff_bw_l, self.link_load
            b_inter = min([eff[e] / (int(load[e]) + 1) for e in inter_l])
        else:
            b_inter = np.inf
        # The new job's own value.
        C = comm_time_scalar(
            self.perf.allreduce,
            job.grad_bytes,
            st.k,
            st.g,
            st.s,
            st.b_intra,
            b_inter,
            st.a_intra,
            st.a_inter,
        )
        t = job.compute_time * st.slowdown
        phi = self.perf.overlap
        T = t + C if phi == 0.0 else (1.0 - phi) * (t + C) + phi * max(t, C)
        own = job.weight * st.k * st.survival * min(1.0, self._tstar_of(job) / T)
        if not rows:
            return own
        if len(rows) > self._PY_ROWS:
            load = self.link_load.copy()
            load[inter] += 1
            ra = np.array(rows, dtype=np.intp)
            _, _, new_vals = self._rows_values(ra, load)
            return own + float(new_vals.sum() - self._value[ra].sum())
        vals = self._value
        new = self._py_values(rows, set(inter_l))
        return own + (np_sum([x[3] for x in new]) - np_sum([float(vals[r]) for r in rows]))

    # ------------------------------------------------------------------- copying
    def copy(self) -> ClusterState:
        """An independent copy (arrays copied; jobs, stats and the ideal-time cache shared)."""
        new = object.__new__(ClusterState)
        new.__dict__.update(self.__dict__)
        for name in (
            "gpu_owner",
            "link_load",
            "_mark",
            "_active",
            "_links",
            *(f"_{f}" for f in self._FLOAT_FIELDS),
        ):
            setattr(new, name, getattr(self, name).copy())
        new._candidate_cache = VersionedCache()
        new._free_cache = (-1, self._free_cache[1])
        new.jobs = dict(self.jobs)
        new._slot_job = list(self._slot_job)
        new._slot_stats = list(self._slot_stats)
        new._slot_py = list(self._slot_py)
        new._link_slots = {e: set(v) for e, v in self._link_slots.items()}
        new._free_slots = list(self._free_slots)
        return new

    def __repr__(self) -> str:
        return (
            f"ClusterState(topology={self.topology.name!r}, jobs={len(self.jobs)}, "
            f"free={self.num_free}/{self.topology.num_gpus}, F={self._F:.4f})"
        )


def _bits_of(gpus: list[int]) -> int:
    """The int with bit ``g`` set for each of ``gpus``."""
    bits = 0
    for g in gpus:
        bits |= 1 << g
    return bits


def _as_bits(mask: NDArray[np.bool_]) -> int:
    """The int with bit ``g`` set where ``mask[g]``."""
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")
