"""The MILP that places the most jobs with the least communication time (small instances).

:func:`milp_min_comm` places the most jobs, then minimises their total
all-reduce time, with :func:`scipy.optimize.milp` (HiGHS), lexicographically in two stages. A job's
options are its per-server GPU counts (its communication time depends on nothing else); the time of
each option is computed with the background jobs' link loads plus its own. Contention *between* the
new jobs is not modelled (it would make the program non-linear): the true communication overhead of the
answer is measured afterwards on the model, like every policy's.

The size guard counts the MILP's variables first and raises :class:`~crop_gym.errors.ConfigError`
naming the limit (``EXACT_LIMITS.milp_vars``) if the instance is too large.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from crop_gym.baselines._common import own_comm_times
from crop_gym.baselines.exact import EXACT_LIMITS, count_vectors
from crop_gym.errors import ConfigError
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.policy import Placement, pending_jobs

__all__ = ["MilpResult", "milp_min_comm", "milp_variables"]


@dataclass
class MilpResult:
    """Answer of :func:`milp_min_comm`.

    Attributes:
        placements: The placements.
        jobs_placed: Most jobs that fit.
        comm_time: Total all-reduce time of the placed jobs as the MILP models it (s/iteration).
        variables: MILP variables.
        seconds: Wall time.
    """

    placements: list[Placement]
    jobs_placed: int
    comm_time: float
    variables: int
    seconds: float = 0.0
    options: dict[str, int] = field(default_factory=dict)


def milp_variables(
    state: ClusterState, queue: Sequence[Job], *, max_vars: int | None = None
) -> int:
    """Number of variables of :func:`milp_min_comm` on this instance (its size guard).

    Raises:
        ConfigError: If it exceeds ``max_vars`` (default ``EXACT_LIMITS.milp_vars``).
    """
    return _milp_options(state, pending_jobs(state, queue), max_vars)[2]


def _milp_options(
    state: ClusterState, jobs: list[Job], max_vars: int | None
) -> tuple[list[int], dict[int, list[tuple[int, ...]]], int]:
    """Servers with free GPUs, per-size count vectors over them, and the variable count."""
    limit = EXACT_LIMITS.milp_vars if max_vars is None else max_vars
    topo = state.topology
    free = state.free_mask
    srv_free = [
        int(free[topo.server_gpu_lo[s] : topo.server_gpu_hi[s]].sum())
        for s in range(topo.num_servers)
    ]
    used = [s for s in range(topo.num_servers) if srv_free[s] > 0]
    caps = [srv_free[s] for s in used]
    pats: dict[int, list[tuple[int, ...]]] = {}
    total = 0
    for job in jobs:
        k = job.num_gpus
        if k not in pats:
            pats[k] = count_vectors(caps, k, limit) if k <= sum(caps) else []
        total += len(pats[k])
        if total > limit:
            raise ConfigError(
                f"MILP refuses this instance: more than {limit} variables (jobs x per-server GPU counts; "
                f"{len(jobs)} jobs on {sum(caps)} free GPUs in {len(caps)} servers); use fewer jobs or a "
                "smaller cluster"
            )
    return used, pats, total


def milp_min_comm(
    state: ClusterState,
    queue: Sequence[Job],
    *,
    max_vars: int | None = None,
    time_limit: float = 60.0,
) -> MilpResult:
    """Place the most jobs, then minimise their total all-reduce time (two-stage MILP, HiGHS).

    Args:
        state: The cluster (not mutated).
        queue: Pending jobs.
        max_vars: Variable limit (default ``EXACT_LIMITS.milp_vars``).
        time_limit: HiGHS time limit per stage, seconds.

    Returns:
        The placements (GPUs handed out lowest-numbered first inside each server), the number of jobs
        placed and the modelled total communication time.

    Raises:
        ConfigError: If the MILP would have more than ``max_vars`` variables.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    t0 = time.perf_counter()
    jobs = pending_jobs(state, queue)
    topo = state.topology
    free = state.free_mask
    used, pats, _ = _milp_options(state, jobs, max_vars)
    free_of = {
        s: topo.server_gpu_lo[s]
        + np.flatnonzero(free[topo.server_gpu_lo[s] : topo.server_gpu_hi[s]])
        for s in used
    }
    caps = [len(free_of[s]) for s in used]
    # Representative GPUs of each pattern (for the comm time) and the variable list.
    var_job: list[int] = []
    var_pat: list[tuple[int, ...]] = []
    cost: list[float] = []
    comm_cache: dict[tuple[str, int, tuple[int, ...]], float] = {}
    for j, job in enumerate(jobs):
        for p in pats[job.num_gpus]:
            key = (job.model, job.num_gpus, p)
            c = comm_cache.get(key)
            if c is None:
                gpus = np.concatenate([free_of[used[i]][:n] for i, n in enumerate(p) if n])
                c = float(own_comm_times(state, job, gpus[None, :])[0])
                comm_cache[key] = c
            var_job.append(j)
            var_pat.append(p)
            cost.append(c)
    n = len(var_job)
    if n == 0:
        return MilpResult([], 0, 0.0, 0, time.perf_counter() - t0)
    rows, cols, vals = [], [], []
    for v, (j, p) in enumerate(zip(var_job, var_pat, strict=True)):
        rows.append(j)
        cols.append(v)
        vals.append(1.0)
        for i, cnt in enumerate(p):
            if cnt:
                rows.append(len(jobs) + i)
                cols.append(v)
                vals.append(float(cnt))
    A = coo_matrix((vals, (rows, cols)), shape=(len(jobs) + len(used), n)).tocsr()
    ub = np.concatenate([np.ones(len(jobs)), np.asarray(caps, dtype=float)])
    cons = LinearConstraint(A, -np.inf, ub)
    integrality = np.ones(n)
    bounds = Bounds(0, 1)
    opts = {"time_limit": time_limit}
    r1 = milp(-np.ones(n), constraints=[cons], integrality=integrality, bounds=bounds, options=opts)
    if r1.x is None:
        raise ConfigError(f"MILP stage 1 failed: {r1.message}")
    n_star = round(-r1.fun)
    cnt = LinearConstraint(np.ones((1, n)), n_star, n_star)
    r2 = milp(
        np.asarray(cost),
        constraints=[cons, cnt],
        integrality=integrality,
        bounds=bounds,
        options=opts,
    )
    if r2.x is None:
        raise ConfigError(f"MILP stage 2 failed: {r2.message}")
    x = np.round(r2.x).astype(bool)
    # Hand out GPUs.
    pos = dict.fromkeys(used, 0)
    placements: list[Placement] = []
    for v in np.flatnonzero(x).tolist():
        j, p = var_job[v], var_pat[v]
        parts = []
        for i, c in enumerate(p):
            if c:
                s = used[i]
                parts.append(free_of[s][pos[s] : pos[s] + c])
                pos[s] += c
        placements.append(Placement(jobs[j], np.concatenate(parts)))
    comm = float(np.asarray(cost)[x].sum())
    return MilpResult(
        placements,
        int(n_star),
        comm,
        n,
        time.perf_counter() - t0,
        {j.job_id: len(pats[j.num_gpus]) for j in jobs},
    )
