"""The discrete-event simulator (docs/SIMULATOR.md).

Events are job arrivals (from a workload), job completions, and device-health events (abnormal
onsets and recoveries, GPU and link failures, repairs; see :mod:`crop_gym.sim.health`). Between two
events every running job trains at the constant speed ``1 / T_j`` iterations per second, where
``T_j`` is its iteration time in the current :class:`~crop_gym.model.state.ClusterState` (which
accounts for contention on shared links and for device health). Progress is integrated **exactly**
(:class:`~crop_gym.sim.ledger.JobLedger`); there is no time step. Events at one instant are taken
in the order completions, health events, arrivals (time 0 included); then the policy is asked.
Work is bounded (docs/SIMULATOR.md, "Bounded work"): validated rates, and an event budget
proportional to the run (:meth:`SimConfig.event_budget`).

A failure (of a GPU the job holds, or of a link its ring crosses) stops the job: it loses the work
done since its last checkpoint (checkpoints every ``checkpoint_interval_s`` of wall-clock time since
its (re)start) and goes back to the queue in its original arrival position.

At each event the placement policy — any object with the :class:`~crop_gym.policy.PlacementPolicy`
interface, e.g. CROP (``crop_gym.policy.make_policy("crop")``) — is asked for placements
(non-preemptive), but only when
something it could act on changed: jobs arrived, GPUs were freed, or health changed, and the smallest
queued job fits in the free GPUs.

Typical use::

    from crop_gym.sim import Simulator, SimConfig
    from crop_gym.policy import make_policy
    sim = Simulator(load_workload("elasticflow:cluster10"), "n32g8", profile="mild", seed=0)
    result = sim.run(make_policy("crop"), progress=True)
    print(result.metrics["mean_jct_s"])
"""

from __future__ import annotations

import bisect
import copy
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, check_int
from crop_gym.model.health import AbnormalityProfile, get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import ideal_time
from crop_gym.model.topology import Topology, make_topology
from crop_gym.policy import PlacementPolicy
from crop_gym.sim.config import EVENT_BUDGET_BASE, SimConfig, SimulationError
from crop_gym.sim.health import HealthChange, HealthProcess, ScriptedFailure
from crop_gym.sim.ledger import DONE, QUEUED, RUNNING, JobLedger
from crop_gym.sim.result import RunTotals, SimResult, Timeline
from crop_gym.workloads.workload import Workload

__all__ = ["SimProgress", "Simulator", "simulate"]

IntArray = NDArray[np.intp]


def _check_arguments(config: object, topology: object, profile: object, seed: object) -> int | None:
    """Check the types of :class:`Simulator`'s arguments; return the seed.

    Raises:
        ConfigError: One line naming the argument: ``config`` not a :class:`SimConfig` (or
            ``None``), ``topology`` not a Topology or a preset name, ``profile`` not an
            AbnormalityProfile or a name, ``seed`` not ``None`` or an integer >= 0.
    """
    if config is not None and not isinstance(config, SimConfig):
        raise ConfigError(f"config must be a SimConfig, got {type(config).__name__}")
    if not isinstance(topology, Topology | str):
        raise ConfigError(
            f"topology must be a Topology or a preset name, got {type(topology).__name__}"
        )
    if not isinstance(profile, AbnormalityProfile | str):
        raise ConfigError(
            f"profile must be an AbnormalityProfile or a name, got {type(profile).__name__}"
        )
    return None if seed is None else check_int("seed", seed, 0)


class SimProgress:
    """A tqdm bar over simulated hours for :meth:`Simulator.run` (a no-op when off).

    Args:
        horizon_s: Expected simulated span (the last arrival); the bar's total grows past it.
        enabled: Whether to show the bar (tqdm is imported only then).
        every: Refresh every this many events.
    """

    def __init__(self, horizon_s: float, enabled: bool, every: int = 64) -> None:
        self.every = every
        self.bar: Any = None
        if enabled:
            from tqdm.auto import tqdm

            total = round(max(horizon_s / 3600.0, 1e-3), 2)
            self.bar = tqdm(total=total, unit="h", desc="simulated", dynamic_ncols=True)

    def update(self, events: int, now_s: float, done: int, queued: int, running: int) -> None:
        """Advance the bar to simulated time ``now_s`` (every ``every`` events)."""
        bar = self.bar
        if bar is None or events % self.every:
            return
        h = round(now_s / 3600.0, 2)
        if h > bar.total:
            bar.total = h
        bar.set_postfix(done=done, queued=queued, running=running, refresh=False)
        bar.update(h - bar.n)  # redraws at most every ``mininterval``

    def close(self, now_s: float) -> None:
        """Show the final simulated time and close the bar."""
        if self.bar is not None:
            self.bar.n = round(now_s / 3600.0, 2)
            self.bar.total = max(self.bar.total, self.bar.n)
            self.bar.close()


class Simulator:
    """A trace-driven discrete-event simulator of a GPU cluster under a placement policy.

    Drive it with :meth:`run` (a policy decides at every event), or step by step — the online
    environment does this — with :meth:`pending`, :meth:`place` and :meth:`advance`.

    Args:
        jobs: A :class:`~crop_gym.workloads.Workload` or a sequence of jobs (sorted by arrival here,
            stably; job ids must be unique).
        topology: A :class:`~crop_gym.model.topology.Topology` or a preset name.
        profile: Abnormality profile (a name from :data:`crop_gym.model.health.PROFILES` or an object).
        config: Simulator options.
        seed: Seed of every random draw (health timeline, policy's ``rng``); ``None`` = fresh entropy.
        scripted_failures: Extra GPU failures ``(time_s, gpu[, repair_s])``.

    Raises:
        SimulationError: If a job needs more GPUs than the cluster has (unless
            ``config.skip_oversized``), or job ids repeat.
        ConfigError: For an argument of the wrong type, a bad seed or scripted failure.
    """

    def __init__(
        self,
        jobs: Workload | Sequence[Job],
        topology: Topology | str,
        *,
        profile: str | AbnormalityProfile = "none",
        config: SimConfig | None = None,
        seed: int | None = 0,
        scripted_failures: Sequence[ScriptedFailure] = (),
    ) -> None:
        seed = _check_arguments(config, topology, profile, seed)
        self.config = config if config is not None else SimConfig()
        self.topology = make_topology(topology) if isinstance(topology, str) else topology
        self.profile = get_profile(profile)
        self.seed = seed
        self.workload_name = jobs.name if isinstance(jobs, Workload) else "jobs"
        all_jobs = sorted(jobs, key=lambda j: j.arrival)
        if len({j.job_id for j in all_jobs}) != len(all_jobs):
            raise SimulationError("job ids are not unique")
        G = self.topology.num_gpus
        big = [j for j in all_jobs if j.num_gpus > G]
        if big and not self.config.skip_oversized:
            ids = ", ".join(f"{j.job_id} ({j.num_gpus} GPUs)" for j in big[:5])
            raise SimulationError(
                f"{len(big)} job(s) need more GPUs than the cluster {self.topology.name} has ({G}): "
                f"{ids}{' ...' if len(big) > 5 else ''}; use a larger cluster or skip them "
                "(SimConfig(skip_oversized=True), --skip-oversized)"
            )
        self.skipped: tuple[Job, ...] = tuple(big)
        self.jobs: tuple[Job, ...] = tuple(j for j in all_jobs if j.num_gpus <= G)
        self._index = {j.job_id: i for i, j in enumerate(self.jobs)}
        #: Events this run may take (:meth:`SimConfig.event_budget`, proportional to its jobs).
        self.event_budget = self.config.event_budget(len(self.jobs))
        ss = np.random.SeedSequence(seed)
        health_seq, policy_seq = ss.spawn(2)
        self.policy_rng = np.random.default_rng(policy_seq)
        self.health_process = HealthProcess(
            self.topology,
            self.profile,
            self.config,
            np.random.default_rng(health_seq),
            scripted_failures,
        )
        self.state = ClusterState(self.topology, self.health_process.health(), self.config.perf)

        tstar = [ideal_time(self.topology, j, self.config.perf) for j in self.jobs]
        #: Per-job records and the progress of their runs (:class:`SimResult` reads them).
        self.ledger = JobLedger.build(self.jobs, tstar, self.config.checkpoint_interval_s)
        self.now = 0.0
        self._arr_ptr = 0
        self._queue: list[int] = []
        self._k_count: dict[int, int] = {}
        self._running: list[int] = []  # the running jobs (ascending), as _queue holds the queued
        self._n_done = 0
        self._dirty = True
        self._stall = 0
        self._idle_declines = 0
        self.truncated = False

        # Integrals over time.
        self.int_F = 0.0
        self.int_busy = 0.0
        self.int_thr = 0.0
        self.int_comm = 0.0
        self.events = 0
        self.policy_calls = 0
        self.job_failures = 0
        self.job_failures_gpu = 0
        self.job_failures_link = 0
        #: The cluster at every event (``record_timeline``).
        self.timeline = Timeline()
        self.wall_s = 0.0  # wall-clock seconds in :meth:`run`, of which in the policy:
        self.policy_wall_s = 0.0
        # Health events at time 0 (scripted failures, zero-length draws) apply before the arrivals
        # at time 0, as at every other instant.
        if self.health_process.next_time() <= 0.0:
            self._handle_health(self.health_process.pop(0.0))
        self._admit(0.0)

    # ------------------------------------------------------------------- copy
    def copy(self) -> Simulator:
        """An independent copy of the simulation as it stands, for lookahead.

        The copy has the same jobs, queue, placements, progress, integrals and counters, and the
        same future: the health process and the policy generator are copied with their random
        states, so advancing both with the same placements gives the same events at the same
        times (the health timeline does not depend on placements). Changing one never changes
        the other. Immutable parts (jobs, topology, profile, configuration) are shared.
        """
        new = object.__new__(Simulator)
        new.__dict__.update(self.__dict__)
        new.state = self.state.copy()
        new.ledger = self.ledger.copy()
        new.health_process = self.health_process.copy()
        new.policy_rng = copy.deepcopy(self.policy_rng)
        new.timeline = self.timeline.copy()
        new._queue = list(self._queue)
        new._k_count = dict(self._k_count)
        new._running = list(self._running)
        return new

    # --------------------------------------------------------------- progress
    def _running_jobs(self) -> IntArray:
        """Indices of the running jobs, ascending."""
        return np.fromiter(self._running, np.intp, len(self._running))

    def _sync(self, run: IntArray | None = None) -> None:
        """Rebase the running jobs (``run``: all of them) whose iteration time in the state
        changed, and adopt it."""
        if run is None:
            run = self._running_jobs()
        if not len(run):
            return
        Tnow = self.state.slot_iteration_times[self.ledger.slot[run]]
        ch = Tnow != self.ledger.iter_time[run]
        if ch.any():
            self.ledger.rebase(run[ch], self.now)
            self.ledger.iter_time[run[ch]] = Tnow[ch]

    # ------------------------------------------------------------------ queue
    def _enqueue(self, i: int) -> None:
        bisect.insort(self._queue, i)
        k = int(self.ledger.k[i])
        self._k_count[k] = self._k_count.get(k, 0) + 1
        self.ledger.status[i] = QUEUED
        self.ledger.queued_since[i] = self.now
        self._dirty = True

    def _dequeue(self, i: int) -> None:
        pos = bisect.bisect_left(self._queue, i)
        del self._queue[pos]
        k = int(self.ledger.k[i])
        c = self._k_count[k] - 1
        if c:
            self._k_count[k] = c
        else:
            del self._k_count[k]

    def _admit(self, t: float) -> None:
        n = len(self.jobs)
        while self._arr_ptr < n and self.ledger.arrival[self._arr_ptr] <= t:
            self._enqueue(self._arr_ptr)
            self._arr_ptr += 1

    # ------------------------------------------------------------- properties
    @property
    def done(self) -> bool:
        """Whether every job has completed (or the time limit was reached)."""
        return self.truncated or self._n_done == len(self.jobs)

    @property
    def queue(self) -> list[Job]:
        """The queued jobs, oldest arrival first."""
        return [self.jobs[i] for i in self._queue]

    @property
    def queue_length(self) -> int:
        """Number of queued jobs."""
        return len(self._queue)

    @property
    def running(self) -> int:
        """Number of running jobs."""
        return len(self.state.jobs)

    @property
    def completed(self) -> int:
        """Number of completed jobs."""
        return self._n_done

    @property
    def busy_gpus(self) -> int:
        """GPUs held by running jobs."""
        return int(np.count_nonzero(self.state.gpu_owner >= 0))

    def remaining_work(self, job_id: str) -> float:
        """Iterations ``job_id`` still has to train (as of now)."""
        i = self._index[job_id]
        if self.ledger.status[i] == RUNNING:
            self._sync()
            return float(self.ledger.remaining(i, self.now))
        if self.ledger.status[i] == DONE:
            return 0.0
        return float(self.ledger.rem[i])

    def attained_service_s(self, job_id: str) -> float:
        """GPU-seconds ``job_id`` has run so far (GPUs × time running, lost work included; 0 for a
        job never started): the attained service a least-attained-service scheduler ranks by."""
        i = self._index[job_id]
        led = self.ledger
        running = self.now - led.run_start[i] if led.status[i] == RUNNING else 0.0
        return float(led.k[i] * (led.run_time[i] + running))

    def remaining_time_by_gpu(self) -> NDArray[np.float64]:
        """Per GPU, the remaining run time (s) of the job holding it at its current speed; 0 if free."""
        self._sync()
        out = np.zeros(self.topology.num_gpus)
        run = self._running_jobs()
        if len(run):
            slots, owner = self.ledger.slot[run], self.state.gpu_owner
            by_slot = np.zeros(int(slots.max()) + 1)
            by_slot[slots] = self.ledger.remaining(run, self.now) * self.ledger.iter_time[run]
            busy = owner >= 0
            out[busy] = by_slot[owner[busy]]
        return out

    def throughput(self) -> float:
        """``Σ k_j η_j`` over the running jobs now: effective GPUs without the survival term
        (``η`` as the state's model computes it)."""
        placed = self.state.placed
        act = np.flatnonzero(placed.active)
        if not len(act):
            return 0.0
        return float((placed.k[act] * placed.eta[act]).sum())

    def next_arrival_time(self) -> float:
        """Arrival time of the next job still to arrive (``inf`` if none)."""
        return (
            float(self.ledger.arrival[self._arr_ptr])
            if self._arr_ptr < len(self.jobs)
            else math.inf
        )

    def pending(self) -> list[Job]:
        """The queue as the policy sees it (:attr:`SimConfig.queue_view`, :attr:`SimConfig.max_queue_view`)."""
        if not self._queue:
            return []
        q = np.fromiter(self._queue, np.int64, len(self._queue))
        if self.config.queue_view == "fitting":
            q = q[self.ledger.k[q] <= self.state.num_free]
        if self.config.max_queue_view is not None:
            q = q[: self.config.max_queue_view]
        return [self.jobs[i] for i in q.tolist()]

    def needs_decision(self) -> bool:
        """Whether asking the policy now could place something new.

        True when jobs are queued, the smallest of them fits in the free GPUs, and something changed
        since the last decision (an arrival, freed GPUs, a health change).
        """
        if not self._queue or not self._dirty:
            return False
        return min(self._k_count) <= self.state.num_free

    # -------------------------------------------------------------- mutation
    def place(self, job: Job | str, gpus: NDArray[np.integer[Any]] | Sequence[int]) -> float:
        """Start a queued job on ``gpus`` now; return the change of F.

        Raises:
            SimulationError: If the job is not queued or the placement is invalid (busy, failed or
                out-of-range GPUs, wrong count).
        """
        jid = job if isinstance(job, str) else job.job_id
        i = self._index.get(jid)
        if i is None or self.ledger.status[i] != QUEUED:
            raise SimulationError(f"t={self.now:.3f}s: job {jid!r} is not in the queue")
        the_job = self.jobs[i]
        try:
            delta = self.state.add(the_job, np.asarray(gpus))
        except ConfigError as exc:
            raise SimulationError(
                f"t={self.now:.3f}s: invalid placement of job {jid}: {exc}"
            ) from exc
        self._dequeue(i)
        led = self.ledger
        led.status[i] = RUNNING
        bisect.insort(self._running, i)
        led.queue_time[i] += self.now - led.queued_since[i]
        if np.isnan(led.start[i]):
            led.start[i] = self.now
        nsrv = len(self.topology.servers_of(self.state.placement(jid)))
        led.servers[i] = nsrv
        led.sum_servers[i] += nsrv
        led.place_count[i] += 1
        led.slot[i] = self.state.jobs[jid]
        led.ckrem[i] = led.rem[i]
        led.tupd[i] = self.now
        led.run_start[i] = self.now
        led.iter_time[i] = self.state.slot_iteration_times[led.slot[i]]
        return delta

    def _release(self, i: int) -> None:
        del self._running[bisect.bisect_left(self._running, i)]
        self.ledger.run_time[i] += self.now - self.ledger.run_start[i]
        self.state.remove(self.jobs[i].job_id)
        self._dirty = True

    def _complete(self, i: int) -> None:
        led = self.ledger
        led.executed[i] += led.rem[i]
        led.rem[i] = 0.0
        self._release(i)
        led.status[i] = DONE
        led.finish[i] = self.now
        self._n_done += 1

    def _kill(self, i: int) -> None:
        """Stop running job ``i`` after a failure: it loses the work since its last checkpoint."""
        led = self.ledger
        led.rebase(np.array([i], dtype=np.intp), self.now)
        c = float(led.last_checkpoint(led.run_start[i], self.now))
        led.lost_work[i] += led.ckrem[i] - led.rem[i]
        led.lost_gpu_s[i] += led.k[i] * (self.now - c)
        led.rem[i] = led.ckrem[i]
        self._release(i)
        led.restarts[i] += 1
        self.job_failures += 1
        self._enqueue(i)

    def _handle_health(self, change: HealthChange) -> None:
        owner = self.state.gpu_owner
        for g in change.failed_gpus:
            s = int(owner[g])
            if s >= 0:
                run = self._running_jobs()
                self._kill(int(run[self.ledger.slot[run] == s][0]))
                self.job_failures_gpu += 1
        for e in change.failed_links:
            for jid in list(self.state.jobs):
                if e in self.topology.spanned_links(self.state.placement(jid)):
                    self._kill(self._index[jid])
                    self.job_failures_link += 1
        if change.health_changed:
            self.state.set_health(self.health_process.health())
            self._dirty = True  # repairs are health changes too

    # ----------------------------------------------------------------- events
    def next_event_time(self) -> float:
        """Time of the next event (arrival, completion, health event or the time limit)."""
        run = self._running_jobs()
        self._sync(run)
        return self._next_time(self.ledger.finish_times(run))

    def _next_time(self, finish: NDArray[np.float64]) -> float:
        """:meth:`next_event_time`, given the running jobs' completion times (after a sync)."""
        t = self.ledger.arrival[self._arr_ptr] if self._arr_ptr < len(self.jobs) else math.inf
        if len(finish):
            t = min(t, float(finish.min()))
        t = min(t, self.health_process.next_time())
        if self.config.max_time_s is not None:
            t = min(t, self.config.max_time_s)
        return max(float(t), self.now)

    def advance(self) -> float:
        """Move to the next event time and process every event due then.

        Returns:
            ``∫ F dt`` over the interval just simulated (expected effective GPU-seconds).

        Raises:
            SimulationError: If jobs are queued, nothing runs, no arrival is pending and no event can
                ever change that (a policy that never places), if the run's event budget
                (:meth:`SimConfig.event_budget`) is spent, or if the simulation is over.
        """
        if self.done:
            raise SimulationError("the simulation is over")
        cfg = self.config
        if self.events >= self.event_budget:
            raise SimulationError(
                f"t={self.now:.6g}s: stopped after the run's event budget of {self.event_budget} "
                f"events (SimConfig.events_per_job={cfg.events_per_job} x {len(self.jobs)} jobs "
                f"+ {EVENT_BUDGET_BASE}, max_events={cfg.max_events}) with {len(self.jobs) - self._n_done} "
                "job(s) unfinished: events come faster than simulated time advances (raise "
                "failure_horizon_s or mean_abnormal_duration_s, lower onset_rate_per_gpu_hour, set "
                "max_time_s, or raise events_per_job)"
            )
        run = self._running_jobs()
        self._sync(run)
        finish = self.ledger.finish_times(run)
        t_next = self._next_time(finish)
        running = len(run)
        idle = running == 0 and self._arr_ptr == len(self.jobs) and bool(self._queue)
        if idle and not self.health_process.failed.any():
            self._stall += 1
        else:
            self._stall = 0
        if not idle:
            self._idle_declines = 0
        if (
            math.isinf(t_next)
            or self._stall > cfg.stall_events
            or self._idle_declines > cfg.stall_events
        ):
            ids = ", ".join(self.jobs[i].job_id for i in self._queue[:5])
            raise SimulationError(
                f"t={self.now:.1f}s: {len(self._queue)} job(s) stay queued on an idle cluster and "
                f"the policy places none of them ({ids}{' ...' if len(self._queue) > 5 else ''})"
            )
        # Integrate the (constant) state over [now, t_next).
        dt = t_next - self.now
        F = self.state.F
        area_F = F * dt
        m = self.state.metrics() if running else None
        busy = m.gpus_busy if m is not None else 0
        if dt > 0 and m is not None:
            thr = self.throughput()
            comm = m.comm_overhead * busy
            self.int_F += area_F
            self.int_busy += busy * dt
            self.int_thr += thr * dt
            self.int_comm += comm * dt
        else:
            thr = 0.0
        if self.config.record_timeline:
            self.timeline.append(self.now, float(busy), F, thr, len(self._queue), running)
        self.now = t_next
        # 1. Completions, in the order of the state's slots.
        due = run[finish <= t_next]
        if len(due):
            for i in due[np.argsort(self.ledger.slot[due], kind="stable")].tolist():
                self._complete(i)
        # 2. Health.
        if self.health_process.next_time() <= t_next:
            self._handle_health(self.health_process.pop(t_next))
        # 3. Arrivals.
        self._admit(t_next)
        if (
            self.config.max_time_s is not None
            and t_next >= self.config.max_time_s
            and not self.done
        ):
            self.truncated = True
        self._sync()
        self.events += 1
        return area_F

    def decide(self, policy: PlacementPolicy) -> int:
        """Ask ``policy`` for placements now and apply them; return how many were placed."""
        view = self.pending()
        self._dirty = False
        if not view:
            return 0
        self.policy_calls += 1
        t0 = time.perf_counter()
        placements = policy.place(self.state, view, self.policy_rng)
        self.policy_wall_s += time.perf_counter() - t0
        for p in placements:
            self.place(p.job, p.gpus)
        if placements:
            self._idle_declines = 0
        elif (
            self.running == 0
            and self._arr_ptr == len(self.jobs)
            and min(j.num_gpus for j in view) <= self.state.num_free
        ):
            self._idle_declines += 1  # an idle cluster, a job that fits, and nothing placed
        return len(placements)

    def run(
        self,
        policy: PlacementPolicy,
        *,
        progress: bool = False,
        hook: Callable[[Simulator], None] | None = None,
    ) -> SimResult:
        """Simulate until every job completes (or the time limit) and return the result.

        Args:
            policy: The placement policy.
            progress: Show a tqdm bar over simulated time (hours).
            hook: Called after every event and every decision (e.g. to check invariants in tests).
        """
        t0 = time.perf_counter()
        bar = SimProgress(self.jobs[-1].arrival if self.jobs else 0.0, progress)
        try:
            while not self.done:
                if self.needs_decision():
                    self.decide(policy)
                    if hook is not None:
                        hook(self)
                self.advance()
                if hook is not None:
                    hook(self)
                bar.update(self.events, self.now, self._n_done, len(self._queue), self.running)
        finally:
            bar.close(self.now)
        self.wall_s += time.perf_counter() - t0
        return self.result(policy_name=getattr(policy, "name", type(policy).__name__))

    # ---------------------------------------------------------------- results
    def invariant_errors(self) -> list[str]:
        """Consistency checks of the current state (empty when all hold); used by tests."""
        errs: list[str] = []
        owner = self.state.gpu_owner
        seen: dict[int, str] = {}
        for jid, s in self.state.jobs.items():
            gpus = self.state.placement(jid)
            for g in gpus.tolist():
                if g in seen:
                    errs.append(f"GPU {g} held by {seen[g]} and {jid}")
                seen[g] = jid
            if not np.all(owner[gpus] == s):
                errs.append(f"gpu_owner disagrees with the placement of {jid}")
            i = self._index[jid]
            if self.ledger.status[i] != RUNNING or self.ledger.slot[i] != s:
                errs.append(f"the ledger does not track {jid} as running on slot {s}")
        if int((owner >= 0).sum()) != len(seen):
            errs.append("gpu_owner marks GPUs that no placed job holds")
        if self.health_process.failed[owner >= 0].any():
            errs.append("a failed GPU is held by a job")
        if self._running != sorted(self._index[jid] for jid in self.state.jobs):
            errs.append("the running jobs disagree with the cluster state")
        counts = np.bincount(self.ledger.status, minlength=4)
        if (
            counts[QUEUED] != len(self._queue)
            or counts[RUNNING] != len(self.state.jobs)
            or counts[DONE] != self._n_done
        ):
            errs.append("job status counts disagree with queue/running/done")
        return errs

    def result(self, policy_name: str = "policy") -> SimResult:
        """The metrics and per-job records so far."""
        hp = self.health_process
        timeline = self.timeline.copy()
        if len(timeline) or self.now > 0:  # the cluster as it is now closes the series
            timeline.append(
                self.now,
                float(self.busy_gpus),
                self.state.F,
                self.throughput(),
                self.queue_length,
                self.running,
            )
        totals = RunTotals(
            now=self.now,
            truncated=self.truncated,
            gpus=self.topology.num_gpus,
            skipped=len(self.skipped),
            int_F=self.int_F,
            int_busy=self.int_busy,
            int_thr=self.int_thr,
            int_comm=self.int_comm,
            counters={
                "events": self.events,
                "policy_calls": self.policy_calls,
                "job_failures": self.job_failures,
                "job_failures_gpu": self.job_failures_gpu,
                "job_failures_link": self.job_failures_link,
                "gpu_failures": hp.gpu_failures,
                "link_failures": hp.link_failures,
                "gpu_repairs": hp.repairs,
                "abnormal_onsets": hp.onsets,
                "abnormal_recoveries": hp.recoveries,
            },
            wall_s=self.wall_s,
            policy_wall_s=self.policy_wall_s,
        )
        info = {
            "policy": policy_name,
            "workload": self.workload_name,
            "cluster": self.topology.name,
            "gpus": self.topology.num_gpus,
            "profile": self.profile.name,
            "seed": self.seed,
            "checkpoint_interval_s": self.config.checkpoint_interval_s,
        }
        return SimResult.build(self.jobs, self.ledger, totals, timeline, info)


def simulate(
    jobs: Workload | Sequence[Job],
    topology: Topology | str,
    policy: PlacementPolicy,
    *,
    profile: str | AbnormalityProfile = "none",
    config: SimConfig | None = None,
    seed: int | None = 0,
    progress: bool = False,
) -> SimResult:
    """Build a :class:`Simulator` and run ``policy`` to the end (see :class:`Simulator`)."""
    sim = Simulator(jobs, topology, profile=profile, config=config, seed=seed)
    return sim.run(policy, progress=progress)
