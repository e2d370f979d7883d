"""Exact optima of F for small instances: branch-and-bound.

**Branch-and-bound (maximise F).** Two search spaces:

* ``space="all"``: every subset of free usable GPUs, for tiny clusters. GPUs of one server with the
  same health and speed are interchangeable (F cannot tell them apart), so a placement is a vector of
  GPU counts per such group and its canonical GPUs are the first free ones of each group. Jobs are
  decided in a fixed order (place on one count vector, or leave out); this is complete, so the result
  is the true optimum of the model.
* ``space="candidates"``: the candidate space CROP searches: jobs are placed one at a time, in any
  order, each on one of :func:`~crop_gym.model.candidates.candidate_placements` of the current state (with
  a larger cap, ``max_candidates=32`` by default); partial assignments already seen are not expanded
  again. Every CROP answer with a smaller or equal cap lies in this space, so its optimum is at least
  CROP's F. It is the optimum *over the candidate space*, not over all placements.

The bound at a node is ``F(now) + min(Σ w_j k_j over the jobs left, w_max · free GPUs)``: adding a job
never increases anyone else's value (link loads only grow) and a job is worth at most ``w k``. The
search starts from an incumbent (CROP's answer by default), which only speeds pruning up.

**The search space.** Free usable GPUs split into interchangeable groups (:func:`gpu_groups`); a
job's options in ``space="all"`` are its per-group GPU counts (:func:`count_vectors`), in
``space="candidates"`` its candidates. :func:`search_space` counts ``∏ (options_j + 1)`` over the
jobs.

**Size guard.** The search first counts its space and raises :class:`~crop_gym.errors.ConfigError`
naming the limit (:data:`EXACT_LIMITS`) if the instance is too large; it also stops with the same
error if it expands more than ``max_nodes`` nodes.

The MILP on communication time is in :mod:`crop_gym.baselines.milp`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, check_range
from crop_gym.model.candidates import candidate_placements
from crop_gym.model.facts import PlacementFacts
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import comm_time, iteration_time, model_constants
from crop_gym.policy import Placement, PlacementPolicy, apply, pending_jobs

__all__ = [
    "EXACT_LIMITS",
    "ExactLimits",
    "ExactResult",
    "OptimumPolicy",
    "branch_and_bound",
    "count_vectors",
    "gpu_groups",
    "guard_space",
    "optimum",
    "search_space",
    "upper_bound",
]


_TOL = 1e-9


# ---------------------------------------------------------------------------- size limits
@dataclass(frozen=True)
class ExactLimits:
    """Size limits of the exact solvers, measured on a 2-core machine (``benchmarks/bench_crop.py``;
    docs/CROP.md has the figures): instances within them finish in about a minute or less.

    Attributes:
        log10_all: Largest ``log10 ∏ (options_j + 1)`` accepted in ``space="all"`` (16-GPU trees with
            8 jobs, about 10^16, take under 15 s).
        log10_candidates: Largest ``log10 ∏ (candidates_j + 1)`` accepted in ``space="candidates"``
            (about 6 jobs x 8 candidates; 8 jobs on 64 GPUs take minutes).
        max_nodes: Most search nodes expanded before giving up (about a minute).
        max_options: Most placement options of one job in ``space="all"``.
        milp_vars: Most MILP variables (job x per-server count vector).
    """

    log10_all: float = 18.0
    log10_candidates: float = 5.5
    max_nodes: int = 200_000
    max_options: int = 20_000
    milp_vars: int = 50_000

    def log10_limit(self, space: str) -> float:
        """The search-space limit of ``space``."""
        return self.log10_all if space == "all" else self.log10_candidates


#: Default limits.
EXACT_LIMITS = ExactLimits()


# ---------------------------------------------------------------------------- GPU groups
def gpu_groups(state: ClusterState) -> list[NDArray[np.int32]]:
    """Free usable GPUs split into interchangeable groups (same server, health, speed and GPU link).

    Returns:
        One sorted ``int32`` array per group, groups ordered by their first GPU.
    """
    topo, h = state.topology, state.health
    free = np.flatnonzero(state.free_mask)
    node = topo.gpu_node[free]
    keys = np.stack(
        [
            topo.gpu_server[free].astype(np.float64),
            h.gpu_slowdown[free],
            h.gpu_fail_prob[free],
            topo.gpu_speed[free],
            topo.link_bw[node],
            topo.link_lat[node],
            h.link_degradation[node],
            h.link_fail_prob[node],
        ],
        axis=1,
    )
    groups: dict[tuple[float, ...], list[int]] = {}
    for g, key in zip(free.tolist(), map(tuple, keys.tolist()), strict=True):
        groups.setdefault(key, []).append(g)
    return sorted((np.array(v, dtype=np.int32) for v in groups.values()), key=lambda a: int(a[0]))


def count_vectors(caps: Sequence[int], k: int, limit: int) -> list[tuple[int, ...]]:
    """All vectors ``v`` with ``0 <= v_i <= caps[i]`` and ``Σ v = k`` (at most ``limit``)."""
    out: list[tuple[int, ...]] = []
    n = len(caps)
    suffix = np.concatenate([np.cumsum(np.asarray(caps[::-1], dtype=np.int64))[::-1], [0]]).tolist()

    def rec(i: int, left: int, acc: list[int]) -> None:
        if len(out) > limit:
            return
        if i == n:
            if left == 0:
                out.append(tuple(acc))
            return
        lo = max(0, left - suffix[i + 1])
        for v in range(min(caps[i], left), lo - 1, -1):
            acc.append(v)
            rec(i + 1, left - v, acc)
            acc.pop()

    rec(0, k, [])
    return out


# ---------------------------------------------------------------------------- search space
def search_space(
    state: ClusterState, queue: Sequence[Job], *, space: str = "all", max_candidates: int = 32
) -> tuple[float, dict[str, int]]:
    """Size of the branch-and-bound search space.

    Returns:
        ``log10 ∏ (options_j + 1)`` and the options of each job (count vectors for ``"all"``,
        candidates in the initial state for ``"candidates"``).

    Raises:
        ConfigError: For an unknown space, or a job with more than ``EXACT_LIMITS.max_options``
            options in ``space="all"``.
    """
    jobs = pending_jobs(state, queue)
    opts: dict[str, int] = {}
    if space == "all":
        caps = [len(g) for g in gpu_groups(state)]
        cache: dict[int, int] = {}
        for job in jobs:
            k = job.num_gpus
            if k not in cache:
                n = len(count_vectors(caps, k, EXACT_LIMITS.max_options)) if k <= sum(caps) else 0
                if n > EXACT_LIMITS.max_options:
                    raise ConfigError(
                        f"exact search (space='all') refuses this instance: a job of {k} GPUs has more than "
                        f"{EXACT_LIMITS.max_options} placements on {sum(caps)} free GPUs in {len(caps)} groups; "
                        "use space='candidates' or a smaller cluster"
                    )
                cache[k] = n
            opts[job.job_id] = cache[k]
    elif space == "candidates":
        for job in jobs:
            if job.num_gpus > state.topology.num_gpus:
                opts[job.job_id] = 0
                continue
            opts[job.job_id] = len(
                candidate_placements(state, job.num_gpus, max_candidates=max_candidates)
            )
    else:
        raise ConfigError(f"unknown search space {space!r}; use 'all' or 'candidates'")
    log10 = float(sum(math.log10(n + 1) for n in opts.values()))
    return log10, opts


def guard_space(log10: float, opts: dict[str, int], space: str, limit: float) -> None:
    """Refuse (one-line :class:`ConfigError`) a search space of ``10^log10`` above ``10^limit``."""
    if log10 > limit:
        sizes = ", ".join(f"{j}:{n}" for j, n in opts.items())
        raise ConfigError(
            f"exact search (space={space!r}) refuses this instance: its search space is 10^{log10:.1f} "
            f"combinations ({len(opts)} jobs x options per job [{sizes}]), above the limit of 10^{limit:g} "
            f"(about a minute on 2 cores); use fewer jobs or a smaller cluster"
        )


@dataclass
class ExactResult:
    """An exact optimum.

    Attributes:
        placements: Optimal placements (apply them in this order).
        F: F of the state after placing them.
        space: ``"all"`` or ``"candidates"``.
        nodes: Search nodes expanded.
        seconds: Wall time.
        log10_space: Size of the search space (``log10 ∏ (options_j + 1)``).
    """

    placements: list[Placement]
    F: float
    space: str
    nodes: int = 0
    seconds: float = 0.0
    log10_space: float = 0.0


# ---------------------------------------------------------------------------- branch and bound
class _Search:
    """Shared state of a branch-and-bound run (the working state is mutated and restored).

    Bounds: a job placed on GPUs with largest slowdown ``σ``, survival odds ``s`` (GPUs only) and
    ``n`` servers is worth at most ``w k s min(1, T*/T)`` with ``T = iteration_time(t σ, C_lb(n))``,
    where ``C_lb(n)`` is the all-reduce time over ``n`` servers at the best server uplink share
    available now (0 on one server). Link loads only grow during the search and a placement never
    raises another job's value, so these bound every later ΔF.
    """

    def __init__(self, state: ClusterState, jobs: list[Job], max_nodes: int) -> None:
        self.state = state
        self.jobs = jobs
        self.max_nodes = max_nodes
        self.nodes = 0
        self.best_F = -math.inf
        self.best: list[Placement] = []
        self.path: list[Placement] = []
        self.facts: dict[tuple[int, ...], PlacementFacts] = {}
        h, topo = state.health, state.topology
        self.slow = h.gpu_slowdown / topo.gpu_speed
        self.keep = 1.0 - h.gpu_fail_prob
        up = topo.server_node
        self.b_up = float((state.eff_bandwidth[up] / (state.link_load[up] + 1)).max())
        self.perf = state.perf
        self.tstar = {j.job_id: state.ideal_time(j) for j in jobs}

    def tick(self) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise ConfigError(
                f"exact search gave up after {self.max_nodes} nodes (the node limit); the instance "
                f"({len(self.jobs)} jobs) is too large for an exact answer; use fewer jobs or a smaller cluster"
            )

    def value_ub(self, job: Job, sigma: Any, keep: Any, servers: Any) -> Any:
        """Upper bound of ΔF of ``job`` (vectorised over options)."""
        k = job.num_gpus
        grad_bytes, compute = model_constants(self.state.topology, job)
        c = comm_time(self.perf.allreduce, grad_bytes, k, 1, servers, np.inf, self.b_up, 0.0, 0.0)
        c = np.where(np.asarray(servers) > 1, c, 0.0)
        # Every term left out (fabric, NIC sharing, compute sharing, step latency) only slows a
        # job, and T grows with t and C, so this stays an upper bound.
        t = iteration_time(
            compute * np.asarray(sigma, dtype=float), c, self.perf.overlap, self.perf.overlap_cap
        )
        return job.weight * k * keep * np.minimum(1.0, self.tstar[job.job_id] / t)

    def bound(self, left: Sequence[Job], free: NDArray[np.bool_] | None = None) -> float:
        """F now plus a fractional-knapsack bound of what the jobs ``left`` can still add.

        A job of ``k`` GPUs is bounded with the ``k``-th smallest slowdown, the ``k`` best survival
        odds and the fewest servers that hold ``k`` of the free GPUs.

        Args:
            left: Jobs that may still be placed.
            free: Free GPUs to assume (default: the state's).
        """
        return self.state.F + self.potential(left, self.state.free_mask if free is None else free)

    def potential(self, left: Sequence[Job], free: NDArray[np.bool_]) -> float:
        """Upper bound of what the jobs ``left`` can add on the GPUs ``free``.

        With free slowdowns sorted, ``σ_(1) <= σ_(2) <= ...``, if a set ``S`` of jobs is placed, the
        one whose slowest GPU is slowest has a slowest GPU of at least ``σ_(K(S))``, ``K(S)`` the GPUs
        of ``S``. So ``best[S] = max_{j in S} best[S - j] + ub_j(σ_(K(S)))`` bounds ``S`` (a dynamic
        programme over subsets, up to 10 jobs); beyond that, a fractional knapsack of each job's bound
        at the ``k``-th smallest slowdown.
        """
        n_free = int(free.sum())
        if not left or n_free == 0:
            return 0.0
        topo = self.state.topology
        slow = np.sort(self.slow[free])
        keep = np.cumprod(np.sort(self.keep[free])[::-1])
        per_srv = np.bincount(topo.gpu_server[free], minlength=topo.num_servers)
        reach = np.cumsum(np.sort(per_srv)[::-1])
        jobs = [j for j in left if j.num_gpus <= n_free]
        if not jobs:
            return 0.0
        # ub[i][K-1]: bound of job i if its slowest GPU is the K-th slowest (K >= its size).
        table = []
        for j in jobs:
            k = j.num_gpus
            n_srv = int(np.searchsorted(reach, k) + 1)
            table.append(
                np.asarray(self.value_ub(j, slow, keep[k - 1], n_srv), dtype=float).tolist()
            )
        sizes = [j.num_gpus for j in jobs]
        m = len(jobs)
        if m <= 10:
            best = [0.0] * (1 << m)
            used = [0] * (1 << m)
            top = 0.0
            for mask in range(1, 1 << m):
                low = mask & -mask
                i0 = low.bit_length() - 1
                used[mask] = used[mask ^ low] + sizes[i0]
                n_used = used[mask]
                if n_used > n_free:
                    best[mask] = -math.inf
                    continue
                b = -math.inf
                rest = mask
                while rest:
                    bit = rest & -rest
                    i = bit.bit_length() - 1
                    cand = best[mask ^ bit] + table[i][n_used - 1]
                    if cand > b:
                        b = cand
                    rest ^= bit
                best[mask] = b
                if b > top:
                    top = b
            return top
        items = sorted(
            ((table[i][sizes[i] - 1] / sizes[i], sizes[i]) for i in range(m)), reverse=True
        )
        cap, add = n_free, 0.0
        for density, k in items:
            take = min(k, cap)
            add += density * take
            cap -= take
            if cap == 0:
                break
        return add

    def record(self) -> None:
        now = self.state.F
        if now > self.best_F + _TOL:
            self.best_F = now
            self.best = list(self.path)

    def place(self, job: Job, gpus: NDArray[np.int32]) -> None:
        key = tuple(gpus.tolist())
        facts = self.facts.get(key)
        if facts is None:
            facts = self.facts[key] = self.state.facts_for(gpus)
        self.state.add(job, gpus, facts=facts)
        self.path.append(Placement(job, gpus))

    def unplace(self) -> None:
        p = self.path.pop()
        self.state.remove(p.job.job_id)


def _job_class(job: Job) -> tuple[str, int, float, float]:
    return job.model, job.num_gpus, float(job.batch_size), float(job.weight)


def _search_all(s: _Search) -> None:
    groups = gpu_groups(s.state)
    caps = np.array([len(g) for g in groups], dtype=np.int64)
    g_slow = np.array([s.slow[g[0]] for g in groups])
    g_logkeep = np.log(np.array([s.keep[g[0]] for g in groups]))
    g_srv = np.array([s.state.topology.gpu_server[g[0]] for g in groups])
    g_onehot = (g_srv[:, None] == np.unique(g_srv)[None, :]).astype(np.int64)
    avail = caps.copy()
    jobs = sorted(s.jobs, key=lambda j: -j.weight * j.num_gpus)  # big jobs first: better pruning
    # Identical jobs are interchangeable: the placed ones of a class are a prefix of it.
    prev_same = [-1] * len(jobs)
    last: dict[tuple[str, int, float, float], int] = {}
    for i, j in enumerate(jobs):
        prev_same[i] = last.get(_job_class(j), -1)
        last[_job_class(j)] = i
    placed = [False] * len(jobs)
    vectors: dict[int, NDArray[np.int64]] = {}
    for j in jobs:
        if j.num_gpus not in vectors:
            vs = (
                count_vectors(caps.tolist(), j.num_gpus, EXACT_LIMITS.max_options)
                if j.num_gpus <= caps.sum()
                else []
            )
            arr = np.array(vs, dtype=np.int64).reshape(len(vs), len(caps))
            # Fewest groups first (compact placements tend to be good: an earlier incumbent).
            vectors[j.num_gpus] = arr[np.argsort((arr > 0).sum(axis=1), kind="stable")]

    def rec(i: int) -> None:
        s.tick()
        s.record()
        if i == len(jobs) or s.bound(jobs[i:]) <= s.best_F + _TOL:
            return
        job = jobs[i]
        if prev_same[i] < 0 or placed[prev_same[i]]:
            vecs = vectors[job.num_gpus]
            rest = jobs[i + 1 :]
            free = s.state.free_mask
            ok = (vecs <= avail).all(axis=1)
            # Value bound of every option at once (GPUs of a group share σ, π and server).
            used = vecs > 0
            n_srv = (used @ g_onehot > 0).sum(axis=1)
            vb = s.value_ub(job, (used * g_slow).max(axis=1), np.exp(vecs @ g_logkeep), n_srv)
            ok &= s.state.F + vb + s.potential(rest, free) > s.best_F + _TOL
            for v, ub in zip(vecs[ok], vb[ok], strict=True):
                nz = np.flatnonzero(v)
                taken = caps - avail
                gpus = np.concatenate([groups[g][taken[g] : taken[g] + v[g]] for g in nz])
                # Prune the child before paying for its evaluation.
                free[gpus] = False
                hope = s.state.F + float(ub) + s.potential(rest, free)
                free[gpus] = True
                if hope <= s.best_F + _TOL:
                    continue
                avail[nz] -= v[nz]
                s.place(job, gpus)
                placed[i] = True
                rec(i + 1)
                placed[i] = False
                s.unplace()
                avail[nz] += v[nz]
                if s.bound(jobs[i:]) <= s.best_F + _TOL:
                    return
        rec(i + 1)  # leave the job out

    rec(0)


def _search_candidates(s: _Search, max_candidates: int) -> None:
    state = s.state
    jobs = s.jobs
    cls = {j.job_id: _job_class(j) for j in jobs}
    seen: set[frozenset[tuple[tuple[str, int, float, float], tuple[int, ...]]]] = set()
    placed: list[bool] = [False] * len(jobs)
    sig: list[tuple[tuple[str, int, float, float], tuple[int, ...]]] = []

    def rec() -> None:
        s.tick()
        s.record()
        left = [j for j, p in zip(jobs, placed, strict=True) if not p]
        if s.bound(left) <= s.best_F + _TOL:
            return
        tried: set[tuple[str, int, float, float]] = set()
        for i, job in enumerate(jobs):
            c = cls[job.job_id]
            if placed[i] or c in tried or job.num_gpus > state.num_free:
                continue
            tried.add(c)  # identical jobs: only the first pending one branches
            cands = candidate_placements(state, job.num_gpus, max_candidates=max_candidates)
            for gpus in list(cands.gpus):
                key = frozenset([*sig, (c, tuple(gpus.tolist()))])
                if key in seen:
                    continue
                seen.add(key)
                s.place(job, gpus)
                sig.append((c, tuple(gpus.tolist())))
                placed[i] = True
                rec()
                placed[i] = False
                sig.pop()
                s.unplace()
                if s.bound(left) <= s.best_F + _TOL:
                    return

    rec()


def branch_and_bound(
    state: ClusterState,
    queue: Sequence[Job],
    *,
    space: str = "all",
    max_candidates: int = 32,
    incumbent: Sequence[Placement] | None = None,
    max_nodes: int | None = None,
    log10_limit: float | None = None,
) -> ExactResult:
    """Maximise F exactly over a search space (see the module docstring).

    Args:
        state: The cluster (not mutated).
        queue: Pending jobs.
        space: ``"all"`` (every GPU subset; tiny clusters) or ``"candidates"`` (the candidate space).
        max_candidates: Candidate cap for ``space="candidates"``.
        incumbent: A feasible answer to start from; it must lie in the space (CROP's answer with
            ``max_candidates <= 32`` does). Default: CROP's answer.
        max_nodes: Node limit (default ``EXACT_LIMITS.max_nodes``).
        log10_limit: Search-space limit (default ``EXACT_LIMITS.log10_limit(space)``).

    Returns:
        The optimal placements and F.

    Raises:
        ConfigError: If the instance is larger than the limits (the message says which limit).
    """
    t0 = time.perf_counter()
    jobs = [j for j in pending_jobs(state, queue) if j.num_gpus <= state.num_free]
    log10, opts = search_space(state, jobs, space=space, max_candidates=max_candidates)
    guard_space(
        log10, opts, space, EXACT_LIMITS.log10_limit(space) if log10_limit is None else log10_limit
    )
    check_range("max_candidates", max_candidates, 1)
    work = state.copy()
    s = _Search(work, jobs, EXACT_LIMITS.max_nodes if max_nodes is None else max_nodes)
    if incumbent is None:
        from crop_gym.baselines.crop import crop_greedy

        incumbent = crop_greedy(state, jobs).placements
    _check_incumbent(state, incumbent, queue)
    inc = state.copy()
    apply(inc, incumbent)
    s.best_F, s.best = inc.F, list(incumbent)
    if space == "all":
        _search_all(s)
    else:
        _search_candidates(s, max_candidates)
    final = state.copy()
    apply(final, s.best)
    return ExactResult(s.best, final.F, space, s.nodes, time.perf_counter() - t0, log10)


def _check_incumbent(
    state: ClusterState, incumbent: Sequence[Placement], queue: Sequence[Job]
) -> None:
    """Refuse an incumbent that is not a valid answer for ``queue`` on ``state``.

    Raises:
        ConfigError: If it places a job that is not in the queue, or a placement is invalid
            (:meth:`~crop_gym.model.state.ClusterState.check_placements`).
    """
    ids = {j.job_id for j in queue}
    for p in incumbent:
        if p.job_id not in ids:
            raise ConfigError(f"the incumbent places job {p.job_id!r}, which is not in the queue")
    state.check_placements([p.job for p in incumbent], [p.gpus for p in incumbent])


def optimum(state: ClusterState, queue: Sequence[Job], **kwargs: object) -> ExactResult:
    """:func:`branch_and_bound` over every placement when the instance allows it, else over the
    candidate space (``ExactResult.space`` says which).

    Raises:
        ConfigError: If neither space is within the limits.
    """
    try:
        search_space_log, opts = search_space(state, queue, space="all")
        guard_space(search_space_log, opts, "all", EXACT_LIMITS.log10_all)
        space = "all"
    except ConfigError:
        space = "candidates"
    return branch_and_bound(state, queue, space=space, **kwargs)  # type: ignore[arg-type]


def upper_bound(state: ClusterState, queue: Sequence[Job]) -> float:
    """A proven upper bound of the F any placement of ``queue`` can reach (any instance size).

    Adding a job never raises another job's value (link loads only grow), so F after placing a
    set ``S`` is at most ``F(now) + Σ_{j∈S} ub_j``, with ``ub_j`` the bound of the search
    (:class:`_Search`: job ``j`` on its ``k`` least slow free GPUs, its ``k`` most reliable ones
    and the fewest servers that hold ``k`` free GPUs, at the best uplink share available now).
    Up to 10 jobs the subset programme of the search bounds the best ``S``; beyond, a 0-1 knapsack
    over the free GPUs (exact by dynamic programming, so tighter than the search's fractional one).
    """
    jobs = [j for j in pending_jobs(state, queue) if j.num_gpus <= state.num_free]
    s = _Search(state.copy(), jobs, 1)
    if len(jobs) <= 10:
        return s.bound(jobs)
    free = state.free_mask
    slow = np.sort(s.slow[free])
    keep = np.cumprod(np.sort(s.keep[free])[::-1])
    # reach[i]: the most free GPUs on i + 1 servers.
    reach = np.cumsum(np.sort(np.bincount(state.topology.gpu_server[free]))[::-1])
    cap = int(free.sum())
    best = np.zeros(cap + 1)  # best[c]: most value of the jobs seen on c GPUs
    for j in jobs:
        k = j.num_gpus
        n_srv = int(np.searchsorted(reach, k) + 1)
        ub = float(s.value_ub(j, slow[k - 1], keep[k - 1], n_srv))
        best[k:] = np.maximum(best[k:], best[: cap + 1 - k] + ub)
    return float(state.F + best[cap])


class OptimumPolicy(PlacementPolicy):
    """The exact optimum as a policy (small instances only).

    Args:
        space: ``"auto"`` (every placement if within limits, else the candidate space), ``"all"`` or
            ``"candidates"``.
        max_candidates: Candidate cap for the candidate space.
    """

    name = "optimum"

    def __init__(self, space: str = "auto", max_candidates: int = 32) -> None:
        if space not in ("auto", "all", "candidates"):
            raise ConfigError(f"space={space!r} must be 'auto', 'all' or 'candidates'")
        self.space = space
        self.max_candidates = max_candidates
        self.last: ExactResult | None = None

    def place(
        self, state: ClusterState, queue: Sequence[Job], rng: np.random.Generator | None = None
    ) -> list[Placement]:
        """The optimal placements (raises :class:`ConfigError` if the instance is too large)."""
        if self.space == "auto":
            self.last = optimum(state, queue, max_candidates=self.max_candidates)
        else:
            self.last = branch_and_bound(
                state, queue, space=self.space, max_candidates=self.max_candidates
            )
        return self.last.placements
