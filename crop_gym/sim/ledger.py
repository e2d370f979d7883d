"""The simulator's bookkeeping: per-job records (:class:`JobLedger`) and the exact progress of the
running jobs (:class:`SlotTable`).

Both are plain containers of numpy arrays that :class:`~crop_gym.sim.Simulator` updates and
:class:`~crop_gym.sim.SimResult` reads; they hold no policy of their own.

Progress is integrated exactly (docs/SIMULATOR.md, "Exact progress"): a running job keeps
``(t_upd, remaining work at t_upd, T)``; whenever ``T`` changes it is *rebased* to the current time,
and its completion time is ``t_upd + remaining × T``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.jobs import Job

__all__ = ["DONE", "FUTURE", "QUEUED", "RUNNING", "JobLedger", "SlotTable"]

#: Job status codes (:attr:`JobLedger.status`).
FUTURE, QUEUED, RUNNING, DONE = 0, 1, 2, 3


@dataclass(eq=False)
class JobLedger:
    """Per-job arrays, indexed like :attr:`Simulator.jobs` (arrival order).

    Attributes:
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
        rem_saved: Iterations left as of the last stop (checkpointed value after a failure).
        executed: Iterations trained, lost ones included.
        lost_work: Iterations lost to failures.
        lost_gpu_s: GPU-seconds lost to failures.
        servers: Servers of the current (or last) placement.
        place_count: Placements so far.
        sum_servers: Sum of the servers over the placements.
    """

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
    rem_saved: NDArray[np.float64]
    executed: NDArray[np.float64]
    lost_work: NDArray[np.float64]
    lost_gpu_s: NDArray[np.float64]
    servers: NDArray[np.int64]
    place_count: NDArray[np.int64]
    sum_servers: NDArray[np.int64]

    @classmethod
    def build(cls, jobs: Sequence[Job], tstar: Sequence[float]) -> JobLedger:
        """Fresh records of ``jobs`` (none arrived yet) with their ideal iteration times."""
        n = len(jobs)
        work = np.fromiter((j.iterations for j in jobs), np.float64, n)
        return cls(
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
            rem_saved=work.copy(),
            executed=np.zeros(n),
            lost_work=np.zeros(n),
            lost_gpu_s=np.zeros(n),
            servers=np.zeros(n, dtype=np.int64),
            place_count=np.zeros(n, dtype=np.int64),
            sum_servers=np.zeros(n, dtype=np.int64),
        )


class SlotTable:
    """Per-slot progress of the running jobs, indexed like the cluster state's slots.

    Args:
        checkpoint_interval_s: Seconds between checkpoints (``inf``: never).
        capacity: Initial number of slots (grown on demand with :meth:`grow`).

    Attributes:
        job: Job index in the slot (-1: free).
        active: Whether the slot holds a running job.
        rem: Iterations left at ``tupd``.
        tupd: Time of the last rebase.
        iter_time: Iteration time since ``tupd``.
        seg: (Re)start time of the current run (the checkpoint clock).
        ckrem: Iterations left at the last checkpoint at or before ``tupd``.
        k: GPUs of the job.
        tstar: Ideal iteration time of the job.
    """

    _FIELDS: tuple[tuple[str, float, Any], ...] = (
        ("job", -1, np.int64),
        ("active", False, np.bool_),
        ("rem", 0.0, np.float64),
        ("tupd", 0.0, np.float64),
        ("iter_time", 1.0, np.float64),
        ("seg", 0.0, np.float64),
        ("ckrem", 0.0, np.float64),
        ("k", 0.0, np.float64),
        ("tstar", 0.0, np.float64),
    )
    job: NDArray[np.int64]
    active: NDArray[np.bool_]
    rem: NDArray[np.float64]
    tupd: NDArray[np.float64]
    iter_time: NDArray[np.float64]
    seg: NDArray[np.float64]
    ckrem: NDArray[np.float64]
    k: NDArray[np.float64]
    tstar: NDArray[np.float64]

    def __init__(self, checkpoint_interval_s: float, capacity: int = 64) -> None:
        self.checkpoint_interval_s = checkpoint_interval_s
        self.capacity = 0
        self.grow(capacity)

    def grow(self, capacity: int) -> None:
        """Make room for slots ``0 .. capacity - 1`` (keeps the existing entries)."""
        old = self.capacity
        if capacity <= old:
            return
        for name, fill, dtype in self._FIELDS:
            new = np.full(capacity, fill, dtype=dtype)
            if old:
                new[:old] = getattr(self, name)
            setattr(self, name, new)
        self.capacity = capacity

    def active_slots(self) -> NDArray[np.intp]:
        """Indices of the slots that hold a running job."""
        return np.flatnonzero(self.active)

    def last_checkpoint(self, seg: Any, t: float) -> Any:
        """Time of the latest checkpoint at or before ``t`` of runs (re)started at ``seg``."""
        interval = self.checkpoint_interval_s
        if not math.isfinite(interval):
            return seg
        return seg + np.floor((t - seg) / interval) * interval

    def finish_times(self, slots: NDArray[np.intp]) -> NDArray[np.float64]:
        """Completion times of ``slots`` at their current speed."""
        return self.tupd[slots] + self.rem[slots] * self.iter_time[slots]

    def remaining(self, slots: Any, now: float) -> Any:
        """Iterations ``slots`` have left at time ``now`` (at their current speed)."""
        rem = self.rem[slots] - (now - self.tupd[slots]) / self.iter_time[slots]
        return np.maximum(rem, 0.0)

    def rebase(self, slots: NDArray[np.intp], t: float) -> NDArray[np.float64]:
        """Bring the progress of ``slots`` up to time ``t``; return the iterations trained since
        their last rebase."""
        tupd = self.tupd[slots]
        T = self.iter_time[slots]
        rem = self.rem[slots]
        c = self.last_checkpoint(self.seg[slots], t)
        upd = c > tupd
        if np.any(upd):
            self.ckrem[slots[upd]] = np.maximum(rem[upd] - (c[upd] - tupd[upd]) / T[upd], 0.0)
        new = np.maximum(rem - (t - tupd) / T, 0.0)
        self.rem[slots] = new
        self.tupd[slots] = t
        trained: NDArray[np.float64] = rem - new
        return trained
