"""The mutable cluster state: device health, placed jobs, link loads, per-job times and values.

:class:`ClusterState` holds one representation of the placed jobs, :class:`PlacedJobs`: one row
per placed job (its placement facts, constants ``M``, ``t_c``, ``T*``, ``w``, κ, and current ``T``,
``C``, ``η`` and value). Adding or removing a job changes the loads of its inter-server links, so
only the jobs sharing one of those links change speed; they are re-evaluated together with
:func:`~crop_gym.model.timing.times_of`. :meth:`ClusterState.gains` evaluates ΔF of many candidate
placements at once without changing the state; both are tested against
:func:`~crop_gym.model.objective.evaluate_from_scratch`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.model.facts import PlacementFacts, memo_facts
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.objective import ClusterMetrics, comm_share, job_value
from crop_gym.model.placed import CONST, FACTS, OUTPUTS, VALUE, WEIGHT, Gains, JobRecord, PlacedJobs
from crop_gym.model.timing import (
    PerfConfig,
    ideal_time,
    inter_bandwidth,
    job_constants,
    times_of,
)
from crop_gym.model.topology import Topology

__all__ = ["ClusterState"]

FloatArray = NDArray[np.float64]


def _readonly(a: NDArray[Any]) -> NDArray[Any]:
    v = a.view()
    v.setflags(write=False)
    return v


class ClusterState:
    """The mutable state of a cluster: health, placed jobs, link loads, per-job times and values.

    Args:
        topology: The compiled cluster.
        health: Device health; healthy if ``None``.
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
        self, topology: Topology, health: Health | None = None, perf: PerfConfig | None = None
    ) -> None:
        self.topology = topology
        self.perf = perf if perf is not None else PerfConfig()
        self.version = 0
        self._owner = np.full(topology.num_gpus, -1, dtype=np.int32)
        self._load = np.zeros(topology.num_nodes, dtype=np.int32)
        self._table = PlacedJobs.empty(16, 4)
        self._jobs: dict[str, int] = {}
        self._slot_job: list[Job | None] = [None] * 16
        self._slot_gpus: list[NDArray[np.int32] | None] = [None] * 16
        self._F = 0.0
        self._health = health if health is not None else Health.healthy(topology)
        self._set_health_arrays()

    def _set_health_arrays(self) -> None:
        self._usable = self._health.usable
        self._eff_bw = self.topology.link_bw * self._health.link_degradation
        self._eff_bw.setflags(write=False)

    # --------------------------------------------------------------- reading
    @property
    def health(self) -> Health:
        """Current device health."""
        return self._health

    @property
    def F(self) -> float:
        """Objective: expected effective GPUs of the placed jobs."""
        return self._F

    @property
    def jobs(self) -> Mapping[str, int]:
        """Placed job id → its slot (read-only)."""
        return MappingProxyType(self._jobs)

    @property
    def gpu_owner(self) -> NDArray[np.int32]:
        """``int32[G]``: slot of the job holding each GPU, -1 if none (read-only)."""
        return _readonly(self._owner)

    @property
    def link_load(self) -> NDArray[np.int32]:
        """``int32[N]``: jobs whose rings cross each inter-server link (read-only)."""
        return _readonly(self._load)

    @property
    def free_mask(self) -> NDArray[np.bool_]:
        """``bool[G]``: GPUs that are free and usable."""
        out: NDArray[np.bool_] = (self._owner < 0) & self._usable
        return out

    @property
    def num_free(self) -> int:
        """Free usable GPUs."""
        return int(np.count_nonzero(self.free_mask))

    @property
    def eff_bandwidth(self) -> FloatArray:
        """``float64[N]``: ``ρ_e · B_e`` per link (root: inf; read-only)."""
        return self._eff_bw

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

    def metrics(self) -> ClusterMetrics:
        """Summary metrics of the current state."""
        t = self._table
        rows = np.flatnonzero(t.active)
        busy = int(t.k[rows].sum())
        return ClusterMetrics(
            F=self._F,
            jobs_placed=len(self._jobs),
            gpus_busy=busy,
            utilization=busy / self.topology.num_gpus,
            comm_overhead=comm_share(t.k[rows], t.C[rows], t.T[rows]),
        )

    def facts_for(self, gpus: NDArray[np.integer[Any]] | Sequence[int]) -> PlacementFacts:
        """Contention-independent facts of one placement under the current health (one row)."""
        key = tuple(np.sort(np.asarray(gpus)).tolist())
        return memo_facts(self.topology, self._health, [key])

    # --------------------------------------------------------------- evaluation
    def _times(self, rows: NDArray[np.intp]) -> None:
        """Re-evaluate slot ``rows`` under the current link loads."""
        t = self._table
        d = t.data[rows]
        facts = PlacementFacts(d[:, FACTS], t.links[rows])
        b_inter = inter_bandwidth(self._eff_bw, self._load, facts.inter_links)
        times = times_of(self.perf, d[:, CONST], facts, b_inter)
        value = job_value(d[:, WEIGHT], facts.k, facts.survival, times.eta)
        t.data[rows, OUTPUTS] = np.column_stack((times.T, times.C, times.eta, value))

    def _reevaluate(self, rows: NDArray[np.intp]) -> float:
        """Re-evaluate ``rows``; return the change of their summed value."""
        before = float(self._table.value[rows].sum())
        self._times(rows)
        return float(self._table.value[rows].sum()) - before

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
        self._F = float(t.value[rows].sum())
        return self._F

    def gains(self, job: Job, facts: PlacementFacts, *, interference: bool = True) -> Gains:
        """ΔF of placing ``job`` on each placement of ``facts``, all at once (nothing changes).

        Args:
            job: The job (not validated against the placements).
            facts: Facts of ``R`` placements of ``job.num_gpus`` GPUs under the current health
                (:func:`~crop_gym.model.facts.placement_facts`, :meth:`facts_for`).
            interference: As in :meth:`row_gains`.
        """
        const = job_constants(self.topology, self.perf, (job,))
        return self.row_gains(const, facts, interference=interference)

    def row_gains(
        self, const: FloatArray, facts: PlacementFacts, *, interference: bool = True
    ) -> Gains:
        """ΔF of placing, on placement ``r`` of ``facts``, a job of constants ``const[r]``, all rows
        at once.

        ``const`` holds rows of :func:`~crop_gym.model.timing.job_constants` (one per placement,
        or one for all). Each row is evaluated alone against the current state (the rows are
        alternatives, not a sequence). With ``interference=False`` only the new job's side is
        evaluated and :attr:`Gains.interference` is ``None`` (:meth:`interference` gives it for
        the rows that need it).
        """
        links = facts.inter_links  # [R, Wc]
        b_own = inter_bandwidth(self._eff_bw, self._load[links] + 1, links)
        own_t = times_of(self.perf, const, facts, b_own)
        own = job_value(const[:, 3], facts.k, facts.survival, own_t.eta)
        other = self.interference(facts) if interference else None
        return Gains(own=own, interference=other, eta=own_t.eta, comm=own_t.C, b_inter=b_own)

    def interference(self, facts: PlacementFacts) -> FloatArray:
        """``float64[R]``: the change of the placed jobs' values if a job were placed on each
        placement of ``facts`` (each alone; ``≤ 0``: sharing a link only slows them)."""
        links, R = facts.inter_links, len(facts)  # [R, Wc]
        rows = self.sharing_slots(links) if links.any() else ()  # (no inter-server link: none)
        if not len(rows):
            return np.zeros(R)
        # on[r, e]: candidate r's rings cross link e (one more job there).
        on = np.zeros((R, self.topology.num_nodes), dtype=bool)
        on[np.arange(R)[:, None], links] = True
        on[:, 0] = False
        d, jl = self._table.data[rows], self._table.links[rows]  # [J, 17], [J, W]
        hit = on[:, jl]  # [R, J, W]
        b = inter_bandwidth(self._eff_bw, self._load[jl] + hit, jl)  # [R, J]
        jf = PlacementFacts(d[:, FACTS], jl)
        times = times_of(self.perf, d[:, CONST], jf, b)
        new = job_value(d[:, WEIGHT], jf.k, jf.survival, times.eta)
        out: FloatArray = np.where(hit.any(axis=2), new - d[:, VALUE], 0.0).sum(axis=1)
        return out

    def gain(
        self,
        job: Job,
        gpus: NDArray[np.integer[Any]] | Sequence[int] | None = None,
        facts: PlacementFacts | None = None,
    ) -> float:
        """ΔF of placing ``job`` on ``gpus`` (or on the one-row ``facts``) without changing the state."""
        f = facts if facts is not None else self.facts_for(np.asarray(gpus))
        return float(self.gains(job, f).total[0])

    # --------------------------------------------------------------- mutation
    def check_placements(
        self, jobs: Sequence[Job], placements: Sequence[NDArray[np.integer[Any]] | Sequence[int]]
    ) -> list[NDArray[np.int32]]:
        """Validate placements (``jobs[i]`` on ``placements[i]``) and return each as sorted ``int32``.

        Raises:
            ConfigError: If a job is already placed, a GPU count is not its job's, a GPU index is
                out of range or repeated, a GPU is busy or failed, or a job id or GPU is given
                twice.
        """
        G = self.topology.num_gpus
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
        """Place ``job`` on ``gpus`` and update everything it touches.

        Args:
            job: The job (its ``job_id`` must not be placed yet).
            gpus: Its GPUs (exactly ``job.num_gpus``, free and usable; checked).
            facts: :meth:`facts_for` of ``gpus`` if the caller has it (one row).

        Returns:
            The change of F.
        """
        (p,) = self.check_placements([job], [gpus])
        links = self._place([job], [p], facts if facts is not None else self.facts_for(p))
        # The jobs sharing one of its links include the new job itself.
        rows = self.sharing_slots(links) if len(links) else np.array([self._jobs[job.job_id]])
        delta = self._reevaluate(rows)
        self._F += delta
        self.version += 1
        return delta

    def add_many(
        self, jobs: Sequence[Job], placements: Sequence[NDArray[np.integer[Any]]]
    ) -> float:
        """Place ``jobs[i]`` on ``placements[i]`` (checked as by :meth:`add`; a GPU or job id given
        twice is refused and then nothing is placed), with one facts evaluation and one
        :meth:`evaluate` for all of them; return the change of F."""
        checked = self.check_placements(jobs, placements)
        if checked:
            facts = memo_facts(self.topology, self._health, [tuple(p.tolist()) for p in checked])
            self._place(list(jobs), checked, facts)
        before, self.version = self._F, self.version + 1
        return self.evaluate() - before

    def _place(
        self, jobs: Sequence[Job], ps: Sequence[NDArray[np.int32]], facts: PlacementFacts
    ) -> NDArray[np.int32]:
        """Store checked placements (job ``i`` on ``ps[i]`` with row ``i`` of ``facts``) in the
        first free slots, and add their rings to the loads (the caller evaluates the times);
        return their inter-server links (with repeats)."""
        slots = self._free_slots(len(jobs), facts.inter_links.shape[1])
        t = self._table
        t.write(slots, facts, job_constants(self.topology, self.perf, jobs))
        t.active[slots] = True
        for s, job, p in zip(slots.tolist(), jobs, ps, strict=True):
            p.setflags(write=False)
            self._jobs[job.job_id] = s
            self._slot_job[s], self._slot_gpus[s] = job, p
            self._owner[p] = s
        links = facts.inter_links[facts.inter_links > 0]
        self._load += np.bincount(links, minlength=len(self._load)).astype(self._load.dtype)
        return links

    def _free_slots(self, n: int, width: int) -> NDArray[np.intp]:
        """The first ``n`` free slots, whose link rows hold ``width`` links (the table doubles
        until they exist)."""
        t = self._table
        free, cols = np.flatnonzero(~t.active), t.links.shape[1]
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
        old = float(t.value[s])
        gpus = self._slot_gpus[s]
        assert gpus is not None
        self._owner[gpus] = -1
        links = t.links[s]
        links = links[links > 0]
        self._load[links] -= 1
        t.active[s] = False
        t.value[s] = 0.0
        delta = self._reevaluate(self.sharing_slots(links)) - old
        t.links[s] = 0
        self._slot_job[s], self._slot_gpus[s] = None, None
        self._F += delta
        self.version += 1
        return delta

    def set_health(self, health: Health) -> None:
        """Replace the device health; re-evaluate the jobs it changes (exactly as if all were).

        Raises:
            ConfigError: If a placed job holds a GPU the new health marks failed (remove it first).
        """
        held_failed = (self._owner >= 0) & health.gpu_failed
        if held_failed.any():
            job = self._slot_job[int(self._owner[held_failed].min())]
            msg = f"job {job.job_id} holds a failed GPU; remove it before marking it failed"  # type: ignore[union-attr]
            raise ConfigError(msg)
        old, t = self._health, self._table
        self._health, self.version = health, self.version + 1
        self._set_health_arrays()
        pi_ch = old.link_fail_prob != health.link_fail_prob
        link_ch = (old.link_degradation != health.link_degradation) | pi_ch
        pi_ch[0] = link_ch[0] = False  # the root: the links' padding
        # New facts (and times) for jobs on a changed GPU or link π; new times for a changed ρ.
        gpu_ch = old.gpu_slowdown != health.gpu_slowdown
        gpu_ch |= (old.gpu_fail_prob != health.gpu_fail_prob) | link_ch[self.topology.gpu_node]
        refact = np.zeros(t.slots, dtype=bool)
        refact[self._owner[gpu_ch & (self._owner >= 0)]] = True
        refact[t.active] |= pi_ch[t.links[t.active]].any(axis=1)
        slots = np.flatnonzero(refact)
        if len(slots):
            keys = [tuple(self._slot_gpus[s].tolist()) for s in slots.tolist()]  # type: ignore[union-attr]
            facts = memo_facts(self.topology, health, keys)
            t.data[slots, FACTS] = facts.values  # (the links depend on the topology only)
        refact[t.active] |= link_ch[t.links[t.active]].any(axis=1)
        rows = np.flatnonzero(refact)
        if len(rows):
            self._times(rows)
        self._F = float(t.value[t.active].sum())

    def copy(self) -> ClusterState:
        """An independent copy (jobs and placement arrays, which are immutable, are shared)."""
        new = object.__new__(ClusterState)
        new.__dict__.update(self.__dict__)
        new._owner = self._owner.copy()
        new._load = self._load.copy()
        new._table = self._table.copy()
        new._jobs = dict(self._jobs)
        new._slot_job = list(self._slot_job)
        new._slot_gpus = list(self._slot_gpus)
        return new

    def __repr__(self) -> str:
        return (
            f"ClusterState(topology={self.topology.name!r}, jobs={len(self._jobs)}, "
            f"free={self.num_free}/{self.topology.num_gpus}, F={self._F:.4f})"
        )
