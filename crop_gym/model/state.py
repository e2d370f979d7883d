"""The mutable cluster state: device health, placed jobs, link loads, per-job times and values.

:class:`ClusterState` holds one representation of the placed jobs, :class:`PlacedJobs`: one row
(*slot*) per placed job with its placement facts, its constants ``M``, ``t_c``, ``T*``, ``w``, κ,
and its current ``T``, ``C``, ``η`` and value. Placing or removing a job changes the loads of its
inter-server links, so only the jobs sharing one of those links change speed; they are
re-evaluated together with :func:`~crop_gym.model.timing.times_of`. :meth:`ClusterState.gains`
evaluates ΔF of many candidate placements at once without changing the state; both are tested
against :func:`~crop_gym.model.objective.evaluate_from_scratch`.

**Regions.** On a replicated topology (:meth:`~crop_gym.model.topology.Topology.replicated`) the
state holds one cluster per region: no job crosses regions, so a region's jobs, loads and F are
exactly those of its cluster alone. F is kept per region (:attr:`ClusterState.region_F`) and
:meth:`ClusterState.region_metrics` summarises every region at once; a single cluster is the state
of one region. The batched environments step ``N`` episodes as one state over ``N`` regions, and
:meth:`ClusterState.clear` empties the regions whose episodes start anew.

Every sum over jobs adds them in the order of their first GPUs, so a region's numbers do not
depend on which slots its jobs happen to hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.model import kernels
from crop_gym.model.conditions import Conditions
from crop_gym.model.facts import FACT_COLUMNS, PlacementFacts
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.objective import ClusterMetrics, job_value
from crop_gym.model.timing import (
    JOB_COLUMNS,
    PerfConfig,
    ideal_time,
    inter_bandwidth,
    job_constants,
    times_of,
    whole_placement_terms,
)
from crop_gym.model.topology import Topology

__all__ = [
    "CONST",
    "FACTS",
    "OUTPUTS",
    "OUTPUT_COLUMNS",
    "VALUE",
    "WEIGHT",
    "ClusterState",
    "Gains",
    "JobRecord",
    "PlacedJobs",
    "RegionMetrics",
    "perf_args",
]

FloatArray = NDArray[np.float64]


# ----------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class JobRecord:
    """Model outputs of one placed job.

    Attributes:
        T: Iteration time (s).
        C: All-reduce time (s).
        eta: Normalised throughput ``min(1, T*/T)``.
        survival: Probability that none of its GPUs and spanned links fails.
        value: ``w·k·s·η``.
        T_star: Ideal time (s).
    """

    T: float
    C: float
    eta: float
    survival: float
    value: float
    T_star: float


@dataclass(frozen=True)
class Gains:
    """ΔF of placing one job on each of ``R`` candidate placements (the state is not changed).

    Attributes:
        own: ``float64[R]`` the new job's own value ``w·k·s·η`` (its rings added to the loads).
        interference: ``float64[R]`` the change of the placed jobs' values (≤ 0: sharing a link
            only slows them); ``None`` if not evaluated (:meth:`ClusterState.gains`).
        eta: ``float64[R]`` the new job's η.
        comm: ``float64[R]`` the new job's all-reduce time ``C`` (s).
        b_inter: ``float64[R]`` its bottleneck inter-server share (``inf`` on one server).
    """

    own: FloatArray
    interference: FloatArray | None
    eta: FloatArray
    comm: FloatArray
    b_inter: FloatArray

    @property
    def total(self) -> FloatArray:
        """``own + interference``: the change of F (the interference must have been evaluated)."""
        if self.interference is None:
            raise ValueError("these gains were evaluated without the interference")
        out: FloatArray = self.own + self.interference
        return out


@dataclass(frozen=True)
class RegionMetrics:
    """Summary of every region of a state, one element per region.

    Attributes:
        F: ``float64[R]`` expected effective GPUs.
        jobs_placed: ``int64[R]`` placed jobs.
        gpus_busy: ``int64[R]`` GPUs held by jobs.
        utilization: ``float64[R]`` busy GPUs / GPUs of a region.
        comm_overhead: ``float64[R]`` GPU-weighted share of iteration time spent communicating,
            ``Σ k_j C_j / T_j / Σ k_j`` (0 with no job).
    """

    F: FloatArray
    jobs_placed: NDArray[np.int64]
    gpus_busy: NDArray[np.int64]
    utilization: FloatArray
    comm_overhead: FloatArray

    def region(self, r: int) -> ClusterMetrics:
        """The :class:`~crop_gym.model.objective.ClusterMetrics` of region ``r``."""
        return ClusterMetrics(
            F=float(self.F[r]),
            jobs_placed=int(self.jobs_placed[r]),
            gpus_busy=int(self.gpus_busy[r]),
            utilization=float(self.utilization[r]),
            comm_overhead=float(self.comm_overhead[r]),
        )


#: The model outputs, the last columns of :attr:`PlacedJobs.data`.
OUTPUT_COLUMNS: tuple[str, ...] = ("T", "C", "eta", "value")
_NF = len(FACT_COLUMNS)
_OUT = _NF + len(JOB_COLUMNS)  # first output column
#: Column blocks of :attr:`PlacedJobs.data`: the placement facts, the job constants, the outputs;
#: and the single columns of the weight ``w`` and of the value.
FACTS, CONST, OUTPUTS = slice(0, _NF), slice(_NF, _OUT), slice(_OUT, None)
WEIGHT, VALUE = _NF + 3, _OUT + 3


@dataclass
class PlacedJobs:
    """The placed jobs as one named array per slot (``active`` marks the used rows).

    Attributes:
        active: ``bool[S]``.
        data: ``float64[S, 17]``: placement facts (:data:`~crop_gym.model.facts.FACT_COLUMNS`),
            the job's constants (:data:`~crop_gym.model.timing.JOB_COLUMNS`: ``M``, ``t_c``,
            ``T*``, ``w``, κ) and current outputs (:data:`OUTPUT_COLUMNS`: ``T``, ``C``, ``η``,
            value); free rows are stale but value 0.
        links: ``int32[S, W]`` each slot's inter-server links, root-padded (all padding when free).
        first_gpu: ``int64[S]`` the lowest GPU of each slot's job (its order among the jobs, and
            its region).
    """

    active: NDArray[np.bool_]
    data: FloatArray
    links: NDArray[np.int32]
    first_gpu: NDArray[np.int64]

    @classmethod
    def empty(cls, slots: int, width: int) -> PlacedJobs:
        """A table of ``slots`` free rows whose link rows hold ``width`` links."""
        data = np.zeros((slots, _OUT + len(OUTPUT_COLUMNS)))
        return cls(
            np.zeros(slots, dtype=bool),
            data,
            np.zeros((slots, width), dtype=np.int32),
            np.zeros(slots, dtype=np.int64),
        )

    @property
    def slots(self) -> int:
        return len(self.active)

    T = property(lambda self: self.data[:, _OUT], doc="``float64[S]`` iteration times.")
    C = property(lambda self: self.data[:, _OUT + 1], doc="``float64[S]`` all-reduce times.")
    eta = property(lambda self: self.data[:, _OUT + 2], doc="``float64[S]`` η.")
    value = property(lambda self: self.data[:, _OUT + 3], doc="``float64[S]`` values.")
    k = property(lambda self: self.data[:, 0], doc="``float64[S]`` GPUs.")
    survival = property(lambda self: self.data[:, 7], doc="``float64[S]`` survival.")
    tstar = property(lambda self: self.data[:, _NF + 2], doc="``float64[S]`` ideal times.")

    def resized(self, slots: int, width: int) -> PlacedJobs:
        """A copy with ``slots`` rows and ``width`` link columns (new rows free)."""
        new = PlacedJobs.empty(slots, width)
        n, w = self.links.shape
        new.active[:n] = self.active
        new.data[:n] = self.data
        new.links[:n, :w] = self.links
        new.first_gpu[:n] = self.first_gpu
        return new

    def copy(self) -> PlacedJobs:
        """An independent copy."""
        return PlacedJobs(
            self.active.copy(), self.data.copy(), self.links.copy(), self.first_gpu.copy()
        )


def perf_args(perf: PerfConfig) -> tuple[Any, ...]:
    """The model options as the compiled kernels take them (:func:`kernels.row_times`)."""
    return (
        perf.allreduce == "ring",
        perf.overlap,
        np.nan if perf.overlap_cap is None else perf.overlap_cap,
        perf.fabric_bandwidth,
        perf.nic_sharing,
        perf.step_latency,
    )


def _readonly(a: NDArray[Any]) -> NDArray[Any]:
    v = a.view()
    v.setflags(write=False)
    return v


# ----------------------------------------------------------------------------------- the state
class ClusterState:
    """The mutable state of a cluster: health, placed jobs, link loads, per-job times and values.

    Args:
        topology: The compiled cluster (or a replicated one: a state of several regions).
        health: Device health (or its :class:`~crop_gym.model.conditions.Conditions`); healthy if
            ``None``.
        perf: Iteration-time options.

    Attributes:
        topology: The cluster.
        perf: Model options.
        version: Incremented by every change (placements and health).

    Example:
        >>> from crop_gym.model.topology import make_topology
        >>> state = ClusterState(make_topology("testbed-8"))
        >>> _ = state.add(Job("a", "resnet50", 4, 128), np.arange(4))
        >>> round(state.F, 6)
        4.0
    """

    def __init__(
        self,
        topology: Topology,
        health: Health | Conditions | None = None,
        perf: PerfConfig | None = None,
    ) -> None:
        self.topology = topology
        self._perf = perf if perf is not None else PerfConfig()
        # Whether the model needs no term beyond the compiled kernels' (both inputs immutable).
        self._kernel_model = not whole_placement_terms(self._perf, topology)
        self.version = 0
        self._owner = np.full(topology.num_gpus, -1, dtype=np.int32)
        self._load = np.zeros(topology.num_nodes, dtype=np.int32)
        self._views = (_readonly(self._owner), _readonly(self._load))
        self._table = PlacedJobs.empty(16 * topology.regions, 4)
        self._jobs: dict[str, int] = {}
        self._slot_job: list[Job | None] = [None] * self._table.slots
        self._slot_gpus: list[NDArray[np.int32] | None] = [None] * self._table.slots
        self._F = np.zeros(topology.regions)
        if isinstance(health, Conditions):
            if health.topology is not topology:
                raise ConfigError("ClusterState: the conditions are of another topology")
            self._cond = health
        else:
            self._cond = Conditions(
                topology, Health.healthy(topology) if health is None else health
            )

    # --------------------------------------------------------------- reading
    @property
    def compiled(self) -> bool:
        """Whether this state's model runs on the compiled kernels: numba is in use
        (:func:`kernels.enabled`) and the model options need no term beyond the kernels' own
        (:func:`~crop_gym.model.timing.whole_placement_terms`: those run on the numpy reference)."""
        return self._kernel_model and kernels.enabled()

    @property
    def perf(self) -> PerfConfig:
        """The model options (fixed for the state's life)."""
        return self._perf

    @property
    def conditions(self) -> Conditions:
        """The cluster under its current health (compiled once per health)."""
        return self._cond

    @property
    def health(self) -> Health:
        """Current device health."""
        return self._cond.health

    @property
    def F(self) -> float:
        """Objective: expected effective GPUs of the placed jobs (all regions)."""
        return float(self._F[0]) if len(self._F) == 1 else float(self._F.sum())

    @property
    def region_F(self) -> FloatArray:
        """``float64[R]``: F of each region (read-only)."""
        return _readonly(self._F)

    @property
    def jobs(self) -> Mapping[str, int]:
        """Placed job id → its slot (read-only)."""
        return MappingProxyType(self._jobs)

    @property
    def gpu_owner(self) -> NDArray[np.int32]:
        """``int32[G]``: slot of the job holding each GPU, -1 if none (read-only)."""
        return self._views[0]

    @property
    def link_load(self) -> NDArray[np.int32]:
        """``int32[N]``: jobs whose rings cross each inter-server link (read-only)."""
        return self._views[1]

    @property
    def free_mask(self) -> NDArray[np.bool_]:
        """``bool[G]``: GPUs that are free and usable."""
        out: NDArray[np.bool_] = (self._owner < 0) & self._cond.usable
        return out

    @property
    def num_free(self) -> int:
        """Free usable GPUs."""
        return int(np.count_nonzero(self.free_mask))

    @property
    def eff_bandwidth(self) -> FloatArray:
        """``float64[N]``: ``ρ_e · B_e`` per link (root: inf; read-only)."""
        return self._cond.eff_bw

    @property
    def placed(self) -> PlacedJobs:
        """The per-slot table (read it; change the state only through its methods)."""
        return self._table

    @property
    def slot_iteration_times(self) -> FloatArray:
        """Read-only ``T_j`` per slot (index with :attr:`jobs` or :attr:`gpu_owner`)."""
        return _readonly(self._table.T)

    def placed_jobs(self) -> list[Job]:
        """The placed jobs, in slot order."""
        return [self._slot_job[s] for s in sorted(self._jobs.values())]  # type: ignore[misc]

    def placement(self, job_id: str) -> NDArray[np.int32]:
        """Sorted GPU indices of a placed job (read-only)."""
        gpus = self._slot_gpus[self._jobs[job_id]]
        assert gpus is not None
        return gpus

    def job_record(self, job_id: str) -> JobRecord:
        """Model outputs of a placed job."""
        s, t = self._jobs[job_id], self._table
        return JobRecord(
            T=float(t.T[s]),
            C=float(t.C[s]),
            eta=float(t.eta[s]),
            survival=float(t.survival[s]),
            value=float(t.value[s]),
            T_star=float(t.tstar[s]),
        )

    def job_value(self, job_id: str) -> float:
        """Value ``v_j`` of a placed job."""
        return float(self._table.value[self._jobs[job_id]])

    def iteration_times(self) -> dict[str, float]:
        """Current iteration time ``T_j`` of every placed job (seconds)."""
        T = self._table.T
        return {jid: float(T[s]) for jid, s in self._jobs.items()}

    def ideal_time(self, job: Job) -> float:
        """``T*`` of ``job`` on this cluster (:func:`~crop_gym.model.timing.ideal_time`)."""
        return ideal_time(self.topology, job, self.perf)

    def region_metrics(self) -> RegionMetrics:
        """Summary metrics of every region (one element per region)."""
        t, R, Gr = self._table, self.topology.regions, self.topology.region_gpus
        if self.compiled:
            _, jobs, busy, comm = kernels.region_sums(t.active, t.first_gpu, t.data, _OUT, Gr, R)
            return RegionMetrics(self._F.copy(), jobs, busy, busy / Gr, comm)
        else:
            rows = np.flatnonzero(t.active)
            # In the order of the jobs' first GPUs: a region's sums then do not depend on slots.
            rows = rows[np.argsort(t.first_gpu[rows], kind="stable")]
            d = t.data[rows]
            k = d[:, 0]
            region = t.first_gpu[rows] // Gr
            jobs = np.bincount(region, minlength=R)
            busy = np.bincount(region, weights=k, minlength=R)
            comm = np.bincount(region, weights=k * d[:, _OUT + 1] / d[:, _OUT], minlength=R)
        return RegionMetrics(
            F=self._F.copy(),
            jobs_placed=jobs,
            gpus_busy=busy.astype(np.int64),
            utilization=busy / self.topology.region_gpus,
            comm_overhead=np.where(busy > 0, comm / np.maximum(busy, 1.0), 0.0),
        )

    def metrics(self) -> ClusterMetrics:
        """Summary metrics of the current state (of a single cluster; on a replicated topology,
        of all regions together)."""
        m = self.region_metrics()
        if self.topology.regions == 1:
            return m.region(0)
        busy = int(m.gpus_busy.sum())
        comm = float((m.comm_overhead * m.gpus_busy).sum())
        return ClusterMetrics(
            F=self.F,
            jobs_placed=int(m.jobs_placed.sum()),
            gpus_busy=busy,
            utilization=busy / self.topology.num_gpus,
            comm_overhead=comm / busy if busy else 0.0,
        )

    def facts_for(self, gpus: NDArray[np.integer[Any]] | Sequence[int]) -> PlacementFacts:
        """Contention-independent facts of one placement under the current health (one row)."""
        key = tuple(np.sort(np.asarray(gpus)).tolist())
        return self._cond.facts([key])

    # --------------------------------------------------------------- evaluation
    def _times(self, rows: NDArray[np.intp]) -> None:
        """Re-evaluate slot ``rows`` under the current link loads."""
        t = self._table
        d = t.data[rows]
        if self.compiled:
            T, C, eta, value, _ = kernels.row_times(
                d[:, FACTS],
                t.links[rows],
                d[:, CONST],
                self._cond.eff_bw,
                self._load,
                0,
                *perf_args(self.perf),
            )
            t.data[rows, OUTPUTS] = np.column_stack((T, C, eta, value))
            return
        facts = PlacementFacts(d[:, FACTS], t.links[rows])
        b_inter = inter_bandwidth(self._cond.eff_bw, self._load, facts.inter_links)
        times = times_of(self.perf, d[:, CONST], facts, b_inter)
        value = job_value(d[:, WEIGHT], facts.k, facts.survival, times.eta)
        t.data[rows, OUTPUTS] = np.column_stack((times.T, times.C, times.eta, value))

    def sharing_slots(self, links: NDArray[np.int32]) -> NDArray[np.intp]:
        """Active slots whose rings cross one of ``links`` (any shape; root padding ignored)."""
        t = self._table
        on = np.zeros(self.topology.num_nodes, dtype=bool)
        on[links] = True
        on[0] = False
        return np.flatnonzero(on[t.links].any(axis=1) & t.active)

    def evaluate(self) -> float:
        """Recompute link loads, every job's time and value, and F from scratch; return F."""
        t = self._table
        rows = np.flatnonzero(t.active)
        load = np.bincount(t.links[rows].ravel(), minlength=self.topology.num_nodes)
        load[0] = 0
        self._load[:] = load
        if len(rows):
            self._times(rows)
        self._sum_values()
        return self.F

    def _sum_values(self) -> None:
        """F of every region: the sum of its jobs' values, added in the order of their first
        GPUs (so a region's F does not depend on which slots its jobs hold)."""
        t, R, Gr = self._table, self.topology.regions, self.topology.region_gpus
        if self.compiled:
            self._F[:] = kernels.region_sums(t.active, t.first_gpu, t.data, _OUT, Gr, R)[0]
            return
        rows = np.flatnonzero(t.active)
        rows = rows[np.argsort(t.first_gpu[rows], kind="stable")]
        # (bincount adds one after the other, in order, for one region as for many.)
        region = t.first_gpu[rows] // Gr
        self._F[:] = np.bincount(region, weights=t.value[rows], minlength=R)

    def gains(
        self, jobs: Job | FloatArray, facts: PlacementFacts, *, interference: bool = True
    ) -> Gains:
        """ΔF of placing a job on each placement of ``facts``, all rows at once (nothing changes).

        Each row is evaluated alone against the current state (the rows are alternatives, not a
        sequence).

        Args:
            jobs: The job of every row (a :class:`~crop_gym.model.jobs.Job`, not validated
                against the placements), or ``float64[R, 5]`` one row of
                :func:`~crop_gym.model.timing.job_constants` per placement (rows of different jobs
                evaluated in one call).
            facts: Facts of ``R`` placements under the current health (:meth:`facts_for`,
                :meth:`Conditions.facts <crop_gym.model.conditions.Conditions.facts>`).
            interference: Whether to evaluate the change of the placed jobs' values
                (:meth:`interference`); without it :attr:`Gains.interference` is ``None``.
        """
        const = job_constants(self.topology, self.perf, (jobs,)) if isinstance(jobs, Job) else jobs
        links = facts.inter_links  # [R, Wc]
        other = self.interference(facts) if interference else None
        if self.compiled:
            rows = const if len(const) == len(facts) else np.repeat(const, len(facts), axis=0)
            _, C, eta, own, b_own = kernels.row_times(
                facts.values,
                links,
                rows,
                self._cond.eff_bw,
                self._load,
                1,
                *perf_args(self.perf),
            )
            return Gains(own=own, interference=other, eta=eta, comm=C, b_inter=b_own)
        b_own = inter_bandwidth(self._cond.eff_bw, self._load[links] + 1, links)
        own_t = times_of(self.perf, const, facts, b_own)
        own = job_value(const[..., 3], facts.k, facts.survival, own_t.eta)
        return Gains(own=own, interference=other, eta=own_t.eta, comm=own_t.C, b_inter=b_own)

    def interference(self, facts: PlacementFacts) -> FloatArray:
        """``float64[R]``: the change of the placed jobs' values if a job were placed on each
        placement of ``facts`` (each alone; ``≤ 0``: sharing a link only slows them)."""
        links, R = facts.inter_links, len(facts)  # [R, Wc]
        rows = self.sharing_slots(links) if links.any() else ()  # (no inter-server link: none)
        if not len(rows):
            return np.zeros(R)
        t = self._table
        rows = rows[np.argsort(t.first_gpu[rows], kind="stable")]  # (a fixed order: see module)
        # on[r, e]: candidate r's rings cross link e (one more job there).
        on = np.zeros((R, self.topology.num_nodes), dtype=bool)
        on[np.arange(R)[:, None], links] = True
        on[:, 0] = False
        d, jl = t.data[rows], t.links[rows]  # [J, 17], [J, W]
        hit = on[:, jl]  # [R, J, W]
        b = inter_bandwidth(self._cond.eff_bw, self._load[jl] + hit, jl)  # [R, J]
        jf = PlacementFacts(d[:, FACTS], jl)
        times = times_of(self.perf, d[:, CONST], jf, b)
        new = job_value(d[:, WEIGHT], jf.k, jf.survival, times.eta)
        out: FloatArray = np.where(hit.any(axis=2), new - d[:, VALUE], 0.0).sum(axis=1)
        return out

    # --------------------------------------------------------------- mutation
    def check_placements(
        self, jobs: Sequence[Job], placements: Sequence[NDArray[np.integer[Any]] | Sequence[int]]
    ) -> list[NDArray[np.int32]]:
        """Validate placements (``jobs[i]`` on ``placements[i]``) and return each as sorted ``int32``.

        Raises:
            ConfigError: If a job is already placed, a GPU count is not its job's, a GPU index is
                out of range or repeated, a GPU is busy or failed, a job id or GPU is given
                twice, or a placement crosses regions.
        """
        G, Gr = self.topology.num_gpus, self.topology.region_gpus
        free = self.free_mask
        taken = np.zeros(G, dtype=bool)  # GPUs of the placements checked so far
        ids: set[str] = set()
        out = []
        for job, gpus in zip(jobs, placements, strict=True):
            p = np.sort(np.asarray(gpus, dtype=np.int64))
            if job.job_id in self._jobs:
                raise ConfigError(f"job {job.job_id} is already placed")
            if len(p) != job.num_gpus:
                raise ConfigError(f"job {job.job_id} needs {job.num_gpus} GPUs, got {len(p)}")
            if len(p) and (p[0] < 0 or p[-1] >= G):
                raise ConfigError(f"GPU index outside [0, {G - 1}] in {p.tolist()}")
            if (p[1:] == p[:-1]).any():
                raise ConfigError(f"repeated GPU in placement {p.tolist()}")
            if not free[p].all():
                raise ConfigError(
                    f"job {job.job_id}: GPUs {p[~free[p]].tolist()} are busy or failed"
                )
            if job.job_id in ids or taken[p].any():
                raise ConfigError(f"job {job.job_id}: its GPUs or its id are given twice")
            if len(p) and p[0] // Gr != p[-1] // Gr:
                raise ConfigError(f"job {job.job_id}: its GPUs {p.tolist()} cross regions")
            ids.add(job.job_id)
            taken[p] = True
            out.append(p.astype(np.int32))
        return out

    def add(
        self,
        job: Job,
        gpus: NDArray[np.integer[Any]] | Sequence[int],
        facts: PlacementFacts | None = None,
    ) -> float:
        """Place ``job`` on ``gpus`` (checked) and update everything it touches; return ΔF.

        Args:
            job: The job (its ``job_id`` must not be placed yet).
            gpus: Its GPUs (exactly ``job.num_gpus``, free and usable).
            facts: :meth:`facts_for` of ``gpus`` if the caller has it (one row).
        """
        return float(self.place([job], [gpus], facts).sum())

    def place(
        self,
        jobs: Sequence[Job],
        placements: Sequence[NDArray[np.integer[Any]] | Sequence[int]],
        facts: PlacementFacts | None = None,
        *,
        checked: bool = False,
        const: FloatArray | None = None,
    ) -> FloatArray:
        """Place ``jobs[i]`` on ``placements[i]``, all together, and re-evaluate every job they
        slow; return ΔF of each region (``float64[R]``).

        Args:
            jobs: The jobs.
            placements: Their GPUs.
            facts: The placements' facts, one row each, if the caller has them.
            checked: The caller guarantees the placements are valid and sorted ``int32`` (rows of
                an action table built for this very state); otherwise they are checked as by
                :meth:`check_placements` (a GPU or job id given twice is refused, and then nothing
                is placed).
            const: The jobs' rows of :func:`~crop_gym.model.timing.job_constants` if the caller
                has them (an action table holds them).
        """
        ps: list[NDArray[np.int32]] = (
            list(placements)  # type: ignore[arg-type]
            if checked
            else self.check_placements(jobs, placements)
        )
        if not ps:
            return np.zeros(self.topology.regions)
        if facts is None:
            facts = self._cond.facts([tuple(p.tolist()) for p in ps])
        slots = self._free_slots(len(ps), facts.inter_links.shape[1])
        if const is None:
            const = job_constants(self.topology, self.perf, jobs)
        if self.compiled:
            return self._place_compiled(jobs, ps, facts, slots, const)
        t = self._table
        t.data[slots, :_NF] = facts.values
        t.data[slots, _NF:_OUT] = const
        t.data[slots, VALUE] = 0.0
        t.links[slots] = 0
        t.links[slots, : facts.inter_links.shape[1]] = facts.inter_links
        t.active[slots] = True
        for s, job, p in zip(slots.tolist(), jobs, ps, strict=True):
            p.setflags(write=False)
            self._jobs[job.job_id] = s
            self._slot_job[s], self._slot_gpus[s] = job, p
            self._owner[p] = s
            t.first_gpu[s] = int(p[0])
        links = facts.inter_links[facts.inter_links > 0]
        if len(links):
            np.add.at(self._load, links, 1)
            # The jobs sharing one of their links, the new ones among them.
            rows = np.union1d(self.sharing_slots(links), slots)
        else:
            rows = slots
        return self._update(rows)

    def _place_compiled(
        self,
        jobs: Sequence[Job],
        ps: Sequence[NDArray[np.int32]],
        facts: PlacementFacts,
        slots: NDArray[np.intp],
        const: FloatArray,
    ) -> FloatArray:
        """:meth:`place` (after the checks and the slots) by the compiled kernel
        (:func:`crop_gym.model.kernels.place_rows`)."""
        t = self._table
        for s, job, p in zip(slots.tolist(), jobs, ps, strict=True):
            p.setflags(write=False)
            self._jobs[job.job_id] = s
            self._slot_job[s], self._slot_gpus[s] = job, p
        if len(ps) == 1:
            flat, ptr = ps[0], np.array([0, len(ps[0])], dtype=np.int64)
        else:
            flat = np.concatenate(ps)
            ptr = np.zeros(len(ps) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in ps], out=ptr[1:])
        before = self._F.copy()
        self._F[:] = kernels.place_rows(
            t.data, t.links, t.active, t.first_gpu, self._owner, self._load, slots,
            facts.values, facts.inter_links, const,
            flat, ptr, self._cond.eff_bw, _NF, _OUT, self.topology.region_gpus,
            self.topology.regions, *perf_args(self.perf),
        )  # fmt: skip
        self.version += 1
        out: FloatArray = self._F - before
        return out

    def _update(self, rows: NDArray[np.intp]) -> FloatArray:
        """Re-evaluate ``rows``; return the change of F of each region."""
        before = self._F.copy()
        if len(rows):
            self._times(rows)
        self._sum_values()
        self.version += 1
        out: FloatArray = self._F - before
        return out

    def _free_slots(self, n: int, width: int) -> NDArray[np.intp]:
        """The first ``n`` free slots, whose link rows hold ``width`` links (the table doubles
        until they exist)."""
        t = self._table
        cols = t.links.shape[1]
        if n == 1 and width <= cols:
            s = int(t.active.argmin())  # (the first free slot, if any)
            if not t.active[s]:
                return np.array([s], dtype=np.intp)
        free = np.flatnonzero(~t.active)
        if len(free) < n or width > cols:
            slots = t.slots
            while slots - (t.slots - len(free)) < n:
                slots *= 2
            self._table = t.resized(slots, max(cols, width))
            grow = slots - len(self._slot_job)
            self._slot_job += [None] * grow
            self._slot_gpus += [None] * grow
            free = np.flatnonzero(~self._table.active)
        return free[:n]

    def remove(self, job_id: str) -> float:
        """Remove a placed job; return the change of F.

        Raises:
            KeyError: If the job is not placed.
        """
        s = self._jobs.pop(job_id)
        t = self._table
        gpus = self._slot_gpus[s]
        assert gpus is not None
        region = int(gpus[0]) // self.topology.region_gpus
        self._owner[gpus] = -1
        links = t.links[s]
        links = links[links > 0]
        self._load[links] -= 1
        t.active[s] = False
        t.value[s] = 0.0
        t.links[s] = 0
        self._slot_job[s], self._slot_gpus[s] = None, None
        return float(self._update(self.sharing_slots(links))[region])

    def clear(self, regions: Sequence[int] | NDArray[np.integer[Any]]) -> None:
        """Remove every job of ``regions`` (their F becomes 0; nothing else changes: no job
        crosses regions)."""
        t, Gr = self._table, self.topology.region_gpus
        wipe = np.zeros(self.topology.regions, dtype=bool)
        wipe[np.asarray(regions, dtype=np.int64)] = True
        slots = np.flatnonzero(t.active & wipe[t.first_gpu // Gr])
        if len(slots):
            for s in slots.tolist():
                job = self._slot_job[s]
                assert job is not None
                del self._jobs[job.job_id]
                self._slot_job[s], self._slot_gpus[s] = None, None
            links = t.links[slots]
            np.subtract.at(self._load, links[links > 0], 1)
            self._owner[wipe[np.arange(self.topology.num_gpus) // Gr]] = -1
            t.active[slots] = False
            t.data[slots, VALUE] = 0.0
            t.links[slots] = 0
        self._F[wipe] = 0.0
        self.version += 1

    def set_health(self, health: Health | Conditions) -> None:
        """Replace the device health (or set new conditions); re-evaluate the jobs it changes
        (exactly as if all were).

        Raises:
            ConfigError: If a placed job holds a GPU the new health marks failed (remove it
                first), or the conditions are of another topology.
        """
        if isinstance(health, Conditions):
            if health.topology is not self.topology:
                raise ConfigError("set_health: the conditions are of another topology")
            cond = health
        else:
            cond = Conditions(self.topology, health)
        new = cond.health
        held_failed = (self._owner >= 0) & new.gpu_failed
        if held_failed.any():
            job = self._slot_job[int(self._owner[held_failed].min())]
            msg = f"job {job.job_id} holds a failed GPU; remove it before marking it failed"  # type: ignore[union-attr]
            raise ConfigError(msg)
        old, t = self._cond.health, self._table
        self._cond, self.version = cond, self.version + 1
        if new is old:
            return
        pi_ch = old.link_fail_prob != new.link_fail_prob
        link_ch = (old.link_degradation != new.link_degradation) | pi_ch
        pi_ch[0] = link_ch[0] = False  # the root: the links' padding
        # New facts (and times) for jobs on a changed GPU or link π; new times for a changed ρ.
        gpu_ch = old.gpu_slowdown != new.gpu_slowdown
        gpu_ch |= (old.gpu_fail_prob != new.gpu_fail_prob) | link_ch[self.topology.gpu_node]
        refact = np.zeros(t.slots, dtype=bool)
        refact[self._owner[gpu_ch & (self._owner >= 0)]] = True
        refact[t.active] |= pi_ch[t.links[t.active]].any(axis=1)
        slots = np.flatnonzero(refact)
        if len(slots):
            keys = [tuple(self._slot_gpus[s].tolist()) for s in slots.tolist()]  # type: ignore[union-attr]
            t.data[slots, FACTS] = cond.facts(keys).values  # (links depend on the topology only)
        refact[t.active] |= link_ch[t.links[t.active]].any(axis=1)
        rows = np.flatnonzero(refact)
        if len(rows):
            self._times(rows)
        self._sum_values()

    def __getstate__(self) -> dict[str, Any]:
        # The read-only views are views of the owner and load arrays: made anew on unpickling
        # (pickled, they would become copies that no longer follow the state).
        return {k: v for k, v in self.__dict__.items() if k != "_views"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._views = (_readonly(self._owner), _readonly(self._load))

    def copy(self) -> ClusterState:
        """An independent copy (jobs, placement arrays and conditions, which are immutable, are
        shared)."""
        new = object.__new__(ClusterState)
        new.__dict__.update(self.__dict__)
        new._owner = self._owner.copy()
        new._load = self._load.copy()
        new._views = (_readonly(new._owner), _readonly(new._load))
        new._table = self._table.copy()
        new._jobs = dict(self._jobs)
        new._slot_job = list(self._slot_job)
        new._slot_gpus = list(self._slot_gpus)
        new._F = self._F.copy()
        return new

    def __repr__(self) -> str:
        return (
            f"ClusterState(topology={self.topology.name!r}, jobs={len(self._jobs)}, "
            f"free={self.num_free}/{self.topology.num_gpus}, F={self.F:.4f})"
        )
