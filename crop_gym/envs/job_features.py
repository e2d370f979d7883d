"""What an agent sees of a job: its feature columns (in ``[0, 1]``), shared by the queue and
candidate tables of the observation (:mod:`crop_gym.envs.observation`) and kept per queue job by
the pending queue (:class:`~crop_gym.envs.actions.PendingQueue`).

* ``job_gpus``: ``k`` over the largest job size of the environment (capped at 1);
* ``grad_size``: ``(log10(M bytes) - 6) / 4`` (clipped), the model zoo's gradient size;
* ``compute_time``: ``t_c / (t_c + 0.25 s)``, the model zoo's per-GPU compute time at the job's
  local batch;
* ``weight``: ``w / (1 + w)``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from crop_gym.model.jobs import Job

__all__ = ["class_columns", "job_columns"]

_GRAD_LOG_LO, _GRAD_LOG_SPAN = 6.0, 4.0
_COMPUTE_SCALE = 0.25


def job_columns(job: Job, max_job_gpus: int) -> tuple[float, float, float, float]:
    """A job's ``(job_gpus, grad_size, compute_time, weight)`` feature values (in ``[0, 1]``)."""
    grad, compute, weight = class_columns(job.model, job.num_gpus, job.batch_size, job.weight)
    return (min(job.num_gpus / max_job_gpus, 1.0), grad, compute, weight)


@lru_cache(maxsize=1 << 12)
def class_columns(model: str, k: int, batch: int, weight: float) -> tuple[float, float, float]:
    """``(grad_size, compute_time, weight)`` of a job class (memoised: a pure function of
    immutable values; the ``job_gpus`` column also needs the environment's largest job size)."""
    job = Job("", model, k, batch, weight=weight)
    grad = (np.log10(max(job.grad_bytes, 1.0)) - _GRAD_LOG_LO) / _GRAD_LOG_SPAN
    t = job.compute_time
    return (float(np.clip(grad, 0.0, 1.0)), t / (t + _COMPUTE_SCALE), weight / (1.0 + weight))
