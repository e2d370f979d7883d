"""The simulator's per-job ledger: each job's record and the exact progress of its current run.

:class:`JobLedger` is a plain container of numpy arrays, one entry per job (indexed like
:attr:`Simulator.jobs <crop_gym.sim.Simulator.jobs>`), that :class:`~crop_gym.sim.Simulator` updates
and :class:`~crop_gym.sim.SimResult` reads. It holds only what the simulator itself knows: the
cluster state (:class:`~crop_gym.model.state.ClusterState`) stays the one record of where each
running job is placed and how fast it runs, and the simulator reads it there.

Progress is integrated exactly (docs/SIMULATOR.md, "Exact progress"): a running job keeps
``(t_upd, remaining work at t_upd, T)``, ``T`` being the iteration time its current segment is
integrated at. When the state's iteration time of the job differs from ``T`` (a placement, a
completion, a failure or a health change altered its links or devices), the job is *rebased* to
the current time at the old ``T`` and takes the new one; its completion time is
``t_upd + remaining × T``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.jobs import Job

__all__ = ["DONE", "FUTURE", "QUEUED", "RUNNING", "JobLedger"]

#: Job status codes (:attr:`JobLedger.status`).
FUTURE, QUEUED, RUNNING, DONE = 0, 1, 2, 3

IntArray = NDArray[np.intp]


@dataclass(eq=False)
class JobLedger:
    """Per-job arrays, indexed like :attr:`Simulator.jobs` (arrival order).

    The job's record:

    Attributes:
        checkpoint_interval_s: Seconds between checkpoints of a run (``inf``: never).
        k: GPUs each job needs.
        work: Iterations each job asks.
        arrival: Arrival times (s).
        tstar: Ideal iteration time ``T*`` (s).
        status: :data:`FUTURE`, :data:`QUEUED`, :data:`RUNNING` or :data:`DONE`.
        start: First start time (NaN until started).
        finish: Completion time (NaN until done).
        restarts: Interruptions by failures.
        queued_since: Time the job last entered the queue.
        queue_time: Time spent queued, up to the last start.
        run_time: Time spent running, up to the last stop.
        executed: Iterations trained, lost ones included.
        lost_work: Iterations lost to failures.
        lost_gpu_s: GPU-seconds lost to failures.
        servers: Servers of the current (or last) placement.
        place_count: Placements so far.
        sum_servers: Sum of the servers over the placements.

    The progress of its current run (of its last stop while it is not running):

    Attributes:
        rem: Iterations left at ``tupd`` (after a failure: the checkpointed value).
        tupd: Time of the last rebase.
        iter_time: Iteration time the run is integrated at since ``tupd``.
        run_start: (Re)start time of the current run (the checkpoint clock).
        ckrem: Iterations left at the last checkpoint at or before ``tupd``.
        slot: The job's slot in the cluster state while it runs (``ClusterState.jobs[job_id]``,
            the state's handle of a placement, fixed until it is removed): where the simulator
            reads the job's current iteration time.
    """

    checkpoint_interval_s: float
    k: NDArray[np.int64]
    work: NDArray[np.float64]
    arrival: NDArray[np.float64]
    tstar: NDArray[np.float64]
    status: NDArray[np.int8]
    start: NDArray[np.float64]
    finish: NDArray[np.float64]
    restarts: NDArray[np.int64]
    queued_since: NDArray[np.float64]
    queue_time: NDArray[np.float64]
    run_time: NDArray[np.float64]
    executed: NDArray[np.float64]
    lost_work: NDArray[np.float64]
    lost_gpu_s: NDArray[np.float64]
    servers: NDArray[np.int64]
    place_count: NDArray[np.int64]
    sum_servers: NDArray[np.int64]
    rem: NDArray[np.float64]
    tupd: NDArray[np.float64]
    iter_time: NDArray[np.float64]
    run_start: NDArray[np.float64]
    ckrem: NDArray[np.float64]
    slot: NDArray[np.intp]

    @classmethod
    def build(
        cls, jobs: Sequence[Job], tstar: Sequence[float], checkpoint_interval_s: float
    ) -> JobLedger:
        """Fresh records of ``jobs`` (none arrived yet) with their ideal iteration times."""
        n = len(jobs)
        work = np.fromiter((j.iterations for j in jobs), np.float64, n)
        return cls(
            checkpoint_interval_s=checkpoint_interval_s,
            k=np.fromiter((j.num_gpus for j in jobs), np.int64, n),
            work=work,
            arrival=np.fromiter((j.arrival for j in jobs), np.float64, n),
            tstar=np.fromiter(tstar, np.float64, n),
            status=np.full(n, FUTURE, dtype=np.int8),
            start=np.full(n, np.nan),
            finish=np.full(n, np.nan),
            restarts=np.zeros(n, dtype=np.int64),
            queued_since=np.zeros(n),
            queue_time=np.zeros(n),
            run_time=np.zeros(n),
            executed=np.zeros(n),
            lost_work=np.zeros(n),
            lost_gpu_s=np.zeros(n),
            servers=np.zeros(n, dtype=np.int64),
            place_count=np.zeros(n, dtype=np.int64),
            sum_servers=np.zeros(n, dtype=np.int64),
            rem=work.copy(),
            tupd=np.zeros(n),
            iter_time=np.ones(n),
            run_start=np.zeros(n),
            ckrem=np.zeros(n),
            slot=np.full(n, -1, dtype=np.intp),
        )

    def copy(self) -> JobLedger:
        """An independent copy (every array copied; the checkpoint interval is a number)."""
        return dataclasses.replace(
            self,
            **{
                f.name: getattr(self, f.name).copy()
                for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), np.ndarray)
            },
        )

    def last_checkpoint(self, run_start: Any, t: float) -> Any:
        """Time of the latest checkpoint at or before ``t`` of runs (re)started at ``run_start``."""
        interval = self.checkpoint_interval_s
        if not math.isfinite(interval):
            return run_start
        return run_start + np.floor((t - run_start) / interval) * interval

    def finish_times(self, jobs: IntArray) -> NDArray[np.float64]:
        """Completion times of the running ``jobs`` at their current speed."""
        return self.tupd[jobs] + self.rem[jobs] * self.iter_time[jobs]

    def remaining(self, jobs: Any, now: float) -> Any:
        """Iterations the running ``jobs`` have left at time ``now`` (at their current speed)."""
        rem = self.rem[jobs] - (now - self.tupd[jobs]) / self.iter_time[jobs]
        return np.maximum(rem, 0.0)

    def rebase(self, jobs: IntArray, t: float) -> None:
        """Bring the progress of the running ``jobs`` up to time ``t`` at their current speed (the
        iterations trained since their last rebase count as executed)."""
        tupd = self.tupd[jobs]
        T = self.iter_time[jobs]
        rem = self.rem[jobs]
        c = self.last_checkpoint(self.run_start[jobs], t)
        upd = c > tupd
        if np.any(upd):
            self.ckrem[jobs[upd]] = np.maximum(rem[upd] - (c[upd] - tupd[upd]) / T[upd], 0.0)
        new = np.maximum(rem - (t - tupd) / T, 0.0)
        self.rem[jobs] = new
        self.tupd[jobs] = t
        self.executed[jobs] += rem - new
