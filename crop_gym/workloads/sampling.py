"""Drawing a static queue of pending jobs from a workload (for static-placement scenarios)."""

from __future__ import annotations

import dataclasses

import numpy as np

from crop_gym.errors import ConfigError
from crop_gym.model.jobs import Job
from crop_gym.workloads.workload import Workload

__all__ = ["sample_queue"]


def sample_queue(
    workload: Workload,
    k: int,
    rng: np.random.Generator,
    *,
    replace: bool = False,
    max_gpus: int | None = None,
) -> tuple[Job, ...]:
    """Draw ``k`` jobs from a workload as a static queue.

    The drawn jobs keep their model, GPUs, batch, work and weight; their arrival is set to 0, their
    deadline dropped, and their ids replaced by ``"q0"``, ``"q1"``, ... (in draw order) so that ids are
    unique within the queue even when drawing with replacement.

    Args:
        workload: Jobs to draw from.
        k: Queue length (>= 0).
        rng: The random generator (never numpy's global RNG).
        replace: Draw with replacement (needed when ``k`` exceeds the eligible jobs).
        max_gpus: Only draw jobs that request at most this many GPUs (e.g. the cluster size).

    Returns:
        The queue, in draw order.

    Raises:
        ConfigError: If ``rng`` is not a Generator, ``k`` is negative, or there are not enough
            eligible jobs to draw without replacement.
    """
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(
            f"sample_queue needs a numpy.random.Generator, got {type(rng).__name__} "
            "(use np.random.default_rng(seed))"
        )
    if int(k) != k or k < 0:
        raise ConfigError(f"sample_queue: k={k!r} must be an integer >= 0")
    k = int(k)
    jobs = workload.jobs
    if max_gpus is None:
        eligible = np.arange(len(jobs))
    else:
        eligible = np.flatnonzero(workload.arrays.num_gpus <= max_gpus)
    if k == 0:
        return ()
    if eligible.size == 0 or (not replace and k > eligible.size):
        raise ConfigError(
            f"sample_queue: cannot draw {k} jobs without replacement from {eligible.size} eligible "
            f"jobs of workload {workload.name!r} (pass replace=True)"
        )
    picks = rng.choice(eligible, size=k, replace=replace)
    return tuple(
        dataclasses.replace(jobs[i], job_id=f"q{n}", arrival=0.0, deadline=None)
        for n, i in enumerate(picks.tolist())
    )
