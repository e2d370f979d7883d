"""The discrete-event simulator (docs/SIMULATOR.md).

Events are job arrivals (from a workload), job completions, and device-health events (abnormal
onsets and recoveries, GPU and link failures, repairs; see :mod:`crop_gym.sim.health`). Between two
events every running job trains at the constant speed ``1 / T_j`` iterations per second, where
``T_j`` is its iteration time in the current :class:`~crop_gym.model.state.ClusterState` (which
accounts for contention on shared links and for device health). Progress is integrated **exactly**
(:class:`~crop_gym.sim.ledger.SlotTable`); there is no time step. Events at one instant are taken
in the order completions, health events, arrivals (time 0 included); then the policy is asked.
Work is bounded (docs/SIMULATOR.md, "Bounded work"): validated rates, and an event budget
proportional to the run (:meth:`SimConfig.event_budget`).

A failure (of a GPU the job holds, or of a link its ring crosses) stops the job: it loses the work
done since its last checkpoint (checkpoints every ``checkpoint_interval_s`` of wall-clock time since
its (re)start) and goes back to the queue in its original arrival position.

At each event the placement policy — any object with the :class:`~crop_gym.sim.PlacementPolicy`
interface, e.g. CROP (``crop_gym.policies.make_policy("crop")``) — is asked for placements (non-preemptive), but only when
something it could act on changed: jobs arrived, GPUs were freed, or health changed, and the smallest
queued job fits in the free GPUs.

Typical use::

    from crop_gym.sim import Simulator, SimConfig
    from crop_gym.policies import make_policy
    sim = Simulator(load_workload("elasticflow:cluster10"), "n32g8", profile="mild", seed=0)
    result = sim.run(make_policy("crop"), progress=True)
    print(result.metrics["mean_jct_s"])
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.model.health import AbnormalityProfile, get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import ideal_time
from crop_gym.model.topology import Topology, make_topology
from crop_gym.sim.config import (
    EVENT_BUDGET_BASE,
    SimConfig,
    SimulationError,
    check_simulator_args,
)
from crop_gym.sim.health import HealthChange, HealthProcess, ScriptedFailure
from crop_gym.sim.ledger import DONE, QUEUED, RUNNING, JobLedger, SlotTable
from crop_gym.sim.progress import SimProgress
from crop_gym.sim.protocol import PlacementPolicy
from crop_gym.sim.result import SimResult
from crop_gym.workloads.workload import Workload

__all__ = ["Simulator", "simulate"]


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
        seed = check_simulator_args(config, topology, profile, seed)
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
        #: Per-job records (public: :class:`SimResult` reads them).
        self.ledger = JobLedger.build(self.jobs, tstar)
        #: Exact progress of the running jobs, by slot of :attr:`state`.
        self.slots = SlotTable(self.config.checkpoint_interval_s)
        self.now = 0.0
        self._arr_ptr = 0
        self._queue: list[int] = []
        self._k_count: dict[int, int] = {}
        self._busy = 0
        self._running = 0
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
        #: ``(t, busy, F, throughput, queued, running)`` at every event (``record_timeline``).
        self.timeline_rows: list[tuple[float, float, float, float, int, int]] = []
        self.wall_s = 0.0  # wall-clock seconds in :meth:`run`, of which in the policy:
        self.policy_wall_s = 0.0
        # Health events at time 0 (scripted failures, zero-length draws) apply before the arrivals
        # at time 0, as at every other instant.
        if self.health_process.next_time() <= 0.0:
            self._handle_health(self.health_process.pop(0.0))
        self._admit(0.0)

    # --------------------------------------------------------------- progress
    def _sync(self) -> None:
        """Rebase the running jobs whose iteration time changed, and adopt the new times."""
        sl = self.slots
        act = sl.active_slots()
        if not len(act):
            return
        Tnow = self.state.slot_iteration_times[act]
        ch = act[Tnow != sl.iter_time[act]]
        if len(ch):
            self._rebase(ch)
            sl.iter_time[ch] = self.state.slot_iteration_times[ch]

    def _rebase(self, slots: NDArray[np.intp]) -> None:
        """Bring the progress of ``slots`` up to now at their current speed."""
        if len(slots):
            self.ledger.executed[self.slots.job[slots]] += self.slots.rebase(slots, self.now)

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
        return self._running

    @property
    def completed(self) -> int:
        """Number of completed jobs."""
        return self._n_done

    @property
    def busy_gpus(self) -> int:
        """GPUs held by running jobs."""
        return self._busy

    def remaining_work(self, job_id: str) -> float:
        """Iterations ``job_id`` still has to train (as of now)."""
        i = self._index[job_id]
        if self.ledger.status[i] == RUNNING:
            self._sync()
            s = self.state.jobs[job_id]
            return float(self.slots.remaining(s, self.now))
        if self.ledger.status[i] == DONE:
            return 0.0
        return float(self.ledger.rem_saved[i])

    def remaining_time_by_gpu(self) -> NDArray[np.float64]:
        """Per GPU, the remaining run time (s) of the job holding it at its current speed; 0 if free."""
        self._sync()
        out = np.zeros(self.topology.num_gpus)
        owner = self.state.gpu_owner
        busy = owner >= 0
        if busy.any():
            s = owner[busy]
            out[busy] = self.slots.remaining(s, self.now) * self.slots.iter_time[s]
        return out

    def throughput(self) -> float:
        """``Σ k_j η_j`` over the running jobs now: effective GPUs without the survival term."""
        act = self.slots.active_slots()
        if not len(act):
            return 0.0
        sl = self.slots
        return float((sl.k[act] * np.minimum(1.0, sl.tstar[act] / sl.iter_time[act])).sum())

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
        s = self.state.jobs[jid]
        if s >= self.slots.capacity:
            self.slots.grow(max(2 * self.slots.capacity, s + 1))
        self._dequeue(i)
        self.ledger.status[i] = RUNNING
        self.ledger.queue_time[i] += self.now - self.ledger.queued_since[i]
        if np.isnan(self.ledger.start[i]):
            self.ledger.start[i] = self.now
        nsrv = len(self.topology.servers_of(self.state.placement(jid)))
        self.ledger.servers[i] = nsrv
        self.ledger.sum_servers[i] += nsrv
        self.ledger.place_count[i] += 1
        self.slots.job[s] = i
        self.slots.active[s] = True
        self.slots.rem[s] = self.ledger.rem_saved[i]
        self.slots.ckrem[s] = self.ledger.rem_saved[i]
        self.slots.tupd[s] = self.now
        self.slots.seg[s] = self.now
        self.slots.iter_time[s] = self.state.slot_iteration_times[s]
        self.slots.k[s] = self.ledger.k[i]
        self.slots.tstar[s] = self.ledger.tstar[i]
        self._busy += int(self.ledger.k[i])
        self._running += 1
        return delta

    def _release(self, s: int) -> int:
        i = int(self.slots.job[s])
        self.slots.active[s] = False
        self.slots.job[s] = -1
        self.ledger.run_time[i] += self.now - self.slots.seg[s]
        self.state.remove(self.jobs[i].job_id)
        self._busy -= int(self.ledger.k[i])
        self._running -= 1
        self._dirty = True
        return i

    def _complete(self, s: int) -> None:
        i = int(self.slots.job[s])
        self.ledger.executed[i] += self.slots.rem[s]
        self.slots.rem[s] = 0.0
        self._release(s)
        self.ledger.status[i] = DONE
        self.ledger.finish[i] = self.now
        self._n_done += 1

    def _kill(self, s: int) -> None:
        """Stop the job in slot ``s`` after a failure: it loses the work since its last checkpoint."""
        slots = np.array([s], dtype=np.intp)
        self._rebase(slots)
        c = float(self.slots.last_checkpoint(self.slots.seg[s], self.now))
        i = int(self.slots.job[s])
        self.ledger.lost_work[i] += self.slots.ckrem[s] - self.slots.rem[s]
        self.ledger.lost_gpu_s[i] += self.ledger.k[i] * (self.now - c)
        self.ledger.rem_saved[i] = self.slots.ckrem[s]
        self._release(s)
        self.ledger.restarts[i] += 1
        self.job_failures += 1
        self._enqueue(i)

    def _handle_health(self, change: HealthChange) -> None:
        owner = self.state.gpu_owner
        for g in change.failed_gpus:
            s = int(owner[g])
            if s >= 0:
                self._kill(s)
                self.job_failures_gpu += 1
        for e in change.failed_links:
            for jid in list(self.state.jobs):
                if e in self.topology.spanned_links(self.state.placement(jid)):
                    self._kill(self.state.jobs[jid])
                    self.job_failures_link += 1
        if change.health_changed:
            self.state.set_health(self.health_process.health())
            self._dirty = True  # repairs are health changes too

    # ----------------------------------------------------------------- events
    def next_event_time(self) -> float:
        """Time of the next event (arrival, completion, health event or the time limit)."""
        self._sync()
        t = self.ledger.arrival[self._arr_ptr] if self._arr_ptr < len(self.jobs) else math.inf
        act = self.slots.active_slots()
        if len(act):
            fin = self.slots.finish_times(act)
            t = min(t, float(fin.min()))
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
        t_next = self.next_event_time()
        idle = self._running == 0 and self._arr_ptr == len(self.jobs) and bool(self._queue)
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
        if dt > 0 and self._running:
            thr = self.throughput()
            comm = self.state.metrics().comm_overhead * self._busy
            self.int_F += area_F
            self.int_busy += self._busy * dt
            self.int_thr += thr * dt
            self.int_comm += comm * dt
        else:
            thr = 0.0
        if self.config.record_timeline:
            self.timeline_rows.append(
                (self.now, float(self._busy), F, thr, len(self._queue), self._running)
            )
        self.now = t_next
        # 1. Completions.
        act = self.slots.active_slots()
        if len(act):
            fin = self.slots.finish_times(act)
            for s in act[fin <= t_next]:
                self._complete(int(s))
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
            self._running == 0
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
        bar = SimProgress(self, progress)
        try:
            while not self.done:
                if self.needs_decision():
                    self.decide(policy)
                    if hook is not None:
                        hook(self)
                self.advance()
                if hook is not None:
                    hook(self)
                bar.update(self)
        finally:
            bar.close(self)
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
            if not self.slots.active[s] or self.jobs[int(self.slots.job[s])].job_id != jid:
                errs.append(f"slot {s} of {jid} is not tracked")
        if int((owner >= 0).sum()) != len(seen):
            errs.append("gpu_owner marks GPUs that no placed job holds")
        if self.health_process.failed[owner >= 0].any():
            errs.append("a failed GPU is held by a job")
        if self._busy != len(seen):
            errs.append(f"busy count {self._busy} != {len(seen)} held GPUs")
        if self._running != len(self.state.jobs):
            errs.append("running count disagrees with the cluster state")
        counts = np.bincount(self.ledger.status, minlength=4)
        if (
            counts[QUEUED] != len(self._queue)
            or counts[RUNNING] != self._running
            or counts[DONE] != self._n_done
        ):
            errs.append("job status counts disagree with queue/running/done")
        return errs

    def result(self, policy_name: str = "policy") -> SimResult:
        """The metrics and per-job records so far."""
        hp = self.health_process
        return SimResult.build(
            sim=self,
            policy_name=policy_name,
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
        )


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
