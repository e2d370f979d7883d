"""The :class:`Workload`: an arrival-ordered, time-rebased tuple of jobs, and its numpy view.

Every loader and the synthetic generator return a :class:`Workload`. Its invariants: jobs are sorted
by arrival (ties keep file order), the first job arrives at 0 s (the trace's own clock is shifted by
``time_offset``; deadlines are shifted the same way), job ids are unique, and ``durations`` (when the
source has them) are aligned with ``jobs``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.model.jobs import MODEL_ZOO, Job

__all__ = ["Workload", "WorkloadArrays", "build_workload"]


@dataclass(frozen=True, eq=False)
class WorkloadArrays:
    """Column arrays of a workload, one entry per job in arrival order (read-only).

    Attributes:
        arrival: Arrival time, seconds from the first arrival (float64).
        num_gpus: GPUs per job (int64).
        iterations: Work in iterations (float64).
        batch_size: Global batch (int64).
        model_index: Index into ``model_names`` (int64).
        weight: Objective weight (float64).
        deadline: Deadline in seconds on the rebased clock, NaN when none (float64).
        duration: Duration recorded by the source in seconds, NaN when unknown (float64).
        model_names: Sorted distinct model names of the workload.
    """

    arrival: NDArray[np.float64]
    num_gpus: NDArray[np.int64]
    iterations: NDArray[np.float64]
    batch_size: NDArray[np.int64]
    model_index: NDArray[np.int64]
    weight: NDArray[np.float64]
    deadline: NDArray[np.float64]
    duration: NDArray[np.float64]
    model_names: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.arrival.shape[0])

    def grad_bytes(self) -> NDArray[np.float64]:
        """Gradient bytes ``M`` per job, from the current model zoo."""
        per_model = np.array([MODEL_ZOO[m].grad_bytes for m in self.model_names], dtype=np.float64)
        return per_model[self.model_index] if len(self) else np.zeros(0)

    def compute_time(self) -> NDArray[np.float64]:
        """Per-GPU compute time ``t_c`` per job at its local batch on the reference GPU, seconds."""
        if not len(self):
            return np.zeros(0)
        t0 = np.array([MODEL_ZOO[m].t0 for m in self.model_names], dtype=np.float64)
        per = np.array([MODEL_ZOO[m].per_sample for m in self.model_names], dtype=np.float64)
        local = self.batch_size / self.num_gpus
        result: NDArray[np.float64] = t0[self.model_index] + per[self.model_index] * local
        return result


def _readonly(a: NDArray[np.generic]) -> None:
    a.flags.writeable = False


@dataclass(frozen=True)
class Workload:
    """A set of training jobs with arrival times.

    Attributes:
        name: Short name (``"elasticflow:cluster10"``, a file stem, ``"synthetic"``).
        source: Where the jobs came from (a file path, or a description of the generator).
        jobs: Jobs sorted by arrival; the first arrives at 0.
        format: Source format: ``"elasticflow"``, ``"pollux"``, ``"csv"`` or ``"synthetic"``.
        durations: Per-job run time recorded by the source in seconds, aligned with ``jobs`` (NaN
            where unknown), or ``None`` when the source records no durations.
        time_offset: Source-clock time of the first arrival, subtracted from arrivals and deadlines.
    """

    name: str
    source: str
    jobs: tuple[Job, ...]
    format: str = "csv"
    durations: tuple[float, ...] | None = None
    time_offset: float = 0.0

    def __post_init__(self) -> None:
        jobs = self.jobs
        if self.durations is not None and len(self.durations) != len(jobs):
            raise ConfigError(
                f"Workload {self.name}: {len(self.durations)} durations for {len(jobs)} jobs"
            )
        if not jobs:
            return
        arrivals = [j.arrival for j in jobs]
        if arrivals[0] != 0.0:
            raise ConfigError(
                f"Workload {self.name}: first arrival is {arrivals[0]!r}, expected 0 (rebase it)"
            )
        if any(b < a for a, b in itertools.pairwise(arrivals)):
            raise ConfigError(f"Workload {self.name}: jobs are not sorted by arrival")
        if len({j.job_id for j in jobs}) != len(jobs):
            raise ConfigError(f"Workload {self.name}: job ids are not unique")

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs)

    @property
    def span_s(self) -> float:
        """Time between the first and the last arrival, seconds."""
        return self.jobs[-1].arrival if self.jobs else 0.0

    @cached_property
    def arrays(self) -> WorkloadArrays:
        """The jobs as numpy arrays (computed once, read-only)."""
        jobs = self.jobs
        n = len(jobs)
        names = tuple(sorted({j.model for j in jobs}))
        index = {m: i for i, m in enumerate(names)}
        deadline = np.fromiter(
            (math.nan if j.deadline is None else j.deadline for j in jobs), np.float64, n
        )
        duration = (
            np.full(n, np.nan)
            if self.durations is None
            else np.array(self.durations, dtype=np.float64)
        )
        arrays = WorkloadArrays(
            arrival=np.fromiter((j.arrival for j in jobs), np.float64, n),
            num_gpus=np.fromiter((j.num_gpus for j in jobs), np.int64, n),
            iterations=np.fromiter((j.iterations for j in jobs), np.float64, n),
            batch_size=np.fromiter((j.batch_size for j in jobs), np.int64, n),
            model_index=np.fromiter((index[j.model] for j in jobs), np.int64, n),
            weight=np.fromiter((j.weight for j in jobs), np.float64, n),
            deadline=deadline,
            duration=duration,
            model_names=names,
        )
        for a in (
            arrays.arrival,
            arrays.num_gpus,
            arrays.iterations,
            arrays.batch_size,
            arrays.model_index,
            arrays.weight,
            arrays.deadline,
            arrays.duration,
        ):
            _readonly(a)
        return arrays


def build_workload(
    *,
    name: str,
    source: str,
    format: str,
    job_ids: Sequence[str],
    models: Sequence[str],
    num_gpus: NDArray[np.float64],
    batch_size: NDArray[np.float64],
    iterations: NDArray[np.float64],
    arrival: NDArray[np.float64],
    weight: NDArray[np.float64] | None = None,
    deadline: NDArray[np.float64] | None = None,
    duration: NDArray[np.float64] | None = None,
) -> Workload:
    """Assemble a :class:`Workload` from validated columns on the source's clock.

    Sorts by arrival (stable), rebases arrivals and deadlines so that the first arrival is 0, and
    builds the :class:`~crop_gym.model.jobs.Job` objects. NaN in ``weight`` means the default 1; NaN in
    ``deadline`` means no deadline; NaN in ``duration`` means unknown.

    Args:
        name: Workload name.
        source: Source description.
        format: Source format name.
        job_ids: Unique job identifiers.
        models: Model names (already checked against the zoo).
        num_gpus: GPUs per job (integral, >= 1).
        batch_size: Global batch (integral, > 0).
        iterations: Iterations (> 0).
        arrival: Arrival times on the source clock (finite, >= 0).
        weight: Optional weights.
        deadline: Optional absolute deadlines on the source clock.
        duration: Optional durations in seconds.

    Returns:
        The workload.
    """
    n = len(job_ids)
    order = np.argsort(arrival, kind="stable")
    offset = float(arrival[order[0]]) if n else 0.0
    idx = order.tolist()
    arr = (arrival[order] - offset).tolist()
    gpus = num_gpus[order].astype(np.int64).tolist()
    batch = batch_size[order].astype(np.int64).tolist()
    iters = iterations[order].tolist()
    if weight is None:
        weights: list[float] = [1.0] * n
    else:
        weights = np.where(np.isnan(weight), 1.0, weight)[order].tolist()
    if deadline is None:
        deadlines: list[float | None] = [None] * n
    else:
        d = (deadline[order] - offset).tolist()
        deadlines = [None if math.isnan(x) else x for x in d]
    jobs = tuple(
        Job(job_ids[i], models[i], g, b, it, a, w, dl)
        for i, g, b, it, a, w, dl in zip(idx, gpus, batch, iters, arr, weights, deadlines)
    )
    durations = None if duration is None else tuple(duration[order].tolist())
    return Workload(
        name=name,
        source=source,
        jobs=jobs,
        format=format,
        durations=durations,
        time_offset=offset,
    )
