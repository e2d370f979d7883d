"""Upper bounds of F that share the healthy GPUs among the jobs (the headroom table's bounds).

:func:`crop_gym.baselines.exact.upper_bound` values every job on its own best GPUs, so sixteen jobs
may all claim the same healthy GPUs: on ``Placement-Severe-v0`` it counts about 38 GPUs at full
value where about 29 free GPUs are healthy. :func:`sharing_bound` hands each free GPU to one job at
most: a mixed-integer program (HiGHS, :func:`scipy.optimize.milp`, under a time limit) whose
optimum, or whose proven dual bound when the limit stops it, is an upper bound of the best F any
placement of the queue reaches. :func:`best_bound` is the least of the valid bounds.

**The per-GPU value bound** (:func:`job_value_bound`). Free usable GPUs split into interchangeable
groups (:func:`~crop_gym.baselines.exact.gpu_groups`: same server, health, speed and GPU link). Let
job ``j`` (weight ``w``, ``k`` GPUs) take the GPUs ``P``. Its value is
``v = w k η s`` with ``η = min(1, T*/T)`` and survival ``s = Π_{g∈P} q_g · Π_{e} y_e`` over its
GPUs (``q_g``: the GPU and, for ``k >= 2``, its own link survive) and spanned inter-server links
``e``. Write ``ℓ`` for the largest slowdown ``σ/speed`` over ``P`` (its *pace*) and ``m`` for its
*mode*: on one server, or spread over two or more.

1. *Time.* Every term of ``T`` grows with the slowdown and with the all-reduce time ``C``, and
   ``C`` grows as bandwidths fall and latencies rise. For every ``g ∈ P``: the pace is ``ℓ``; on one
   server the most GPUs on a server is ``g_max = k`` and no inter-server link is crossed; spread
   over ``n`` servers, ``n_min(k) <= n <= min(k, servers with free GPUs)`` (``n_min(k)``: the
   fewest servers that hold ``k`` free GPUs) and ``g_max >= ⌈k/n⌉``, so ``T`` is at least its
   least value over those shapes ``(⌈k/n⌉, n)`` (each term grows with ``g_max`` and with ``n``),
   and the uplink of ``g``'s server is one of the spanned links, so the bottleneck share is at most
   that uplink's ``ρB / (load + 1)`` now (loads only grow as jobs are added). The GPU-link
   bottleneck is at most ``g``'s own link's ``ρB``, and the largest latencies at least ``g``'s
   link's (latency terms are dropped under ``latency="hops"``, where they are summed
   differently; they only add time). So ``T >= T_j(ℓ, m, g)`` (:func:`~crop_gym.model.timing.comm_time`
   and :func:`~crop_gym.model.timing.iteration_time` with those arguments), and
   ``η <= η_j(ℓ, m, g) = min(1, T*/T_j(ℓ, m, g))`` for every ``g ∈ P``.
2. *Survival.* Spread over servers ``i`` holding ``g_i <= G_i = min(k - 1, free GPUs of i)``
   GPUs each, every uplink ``y_i`` is spanned, and ``y_i = Π_{g on i} y_i^{1/g_i} <=
   Π_{g on i} y_i^{1/G_i}`` (``y <= 1``). So ``s <= Π_{g∈P} r_g`` with ``r_g = q_g`` on one
   server and ``r_g = q_g y_{i(g)}^{1/G_{i(g)}}`` spread. By the power-mean inequality,
   ``k Π_g r_g <= Σ_g r_g^k``.
3. Together: ``v = w k η s <= w η Σ_g r_g^k <= Σ_{g∈P} w η_j(ℓ, m, g) r_g^k`` — a sum over the
   job's GPUs of a coefficient that depends on the GPU's group, the job's pace and its mode only.
4. *The chord.* The power mean is loose when a large job mixes reliable and failure-prone GPUs
   (29 GPUs at 1 and 3 at 0.8: 0.91 for a product of 0.51). A second bound: with
   ``u = Σ_{g∈P} log r_g``, ``s <= e^u``, and ``u`` lies in ``[λ, 0]`` where ``λ`` is the least
   sum of ``k`` logs the allowed groups offer. ``e^u`` is convex, so it lies below its chord:
   ``e^u <= 1 + α u`` with ``α = (1 - e^λ) / -λ``. With ``η̄`` the largest ``η_j(ℓ, m, g)`` over
   the allowed groups, ``v <= w η̄ k (1 + α u) = Σ_{g∈P} w η̄ (1 + α k log r_g)`` (terms may be
   negative; their sum is not). For ``k >= 2`` the program takes the lesser of the two sums
   through a variable ``V <= Σ power-mean terms`` and ``V <= Σ chord terms`` per mode.

**The program.** Identical jobs (same model, GPUs, batch and weight) form a class ``a`` of
``n_a`` jobs. Integer ``z_{a,ℓ,m} >= 0`` counts the class's jobs placed at pace ``ℓ`` in mode
``m`` (one server ``i``, or spread); ``x_{a,ℓ,m,c} >= 0`` the GPUs of group ``c`` they take, only
from groups of slowdown ``<= ℓ`` (and, on one server, of server ``i``); ``V_{a,ℓ,m}`` their value
(point 4; for 1-GPU jobs the power-mean sum itself). Constraints:
``Σ_{ℓ,m} z_{a,ℓ,m} <= n_a``; ``Σ_c x_{a,ℓ,m,c} = k_a z_{a,ℓ,m}``; each group's GPUs are taken at
most once, ``Σ_{a,ℓ,m} x_{a,ℓ,m,c} <= |c|``. Objective: ``F(now) + Σ V``. (With several jobs
of a class in one mode, each bound is a sum over them, and the sum of their lesser bounds is
at most the lesser of the sums.)

**Validity.** Take the best placement of any subset of the queue. Adding a job never raises
another job's value (link loads only grow), so its F is at most ``F(now) + Σ_j v_j``. Setting each
placed job's ``z`` at its pace and mode and its ``x`` to its GPUs per group is feasible (a GPU is
held by one job; its pace bounds its GPUs' slowdowns), and by 3 the objective there is ``>= F``.
So the program's optimum is ``>= F``; HiGHS' dual bound is ``>=`` that optimum, and so is the
optimum of its LP relaxation (the fallback when the integer program is not solved in time).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.baselines.exact import gpu_groups, upper_bound
from crop_gym.errors import ConfigError, check_range
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import comm_time, iteration_time, job_constants
from crop_gym.policy import Placement, pending_jobs

__all__ = [
    "BoundResult",
    "GroupTable",
    "JobValueBound",
    "best_bound",
    "group_table",
    "job_value_bound",
    "sharing_bound",
]

#: Relative slack added to a solver's bound (HiGHS' feasibility tolerances are about 1e-7).
_SLACK = 1e-6


@dataclass(frozen=True)
class GroupTable:
    """The free GPUs' interchangeable groups and what the value bound reads of each.

    Attributes:
        gpus: One ``int32`` array of GPUs per group (:func:`~crop_gym.baselines.exact.gpu_groups`).
        size: ``int64[C]`` GPUs per group.
        server: ``int64[C]`` server of each group.
        slowdown: ``float64[C]`` ``σ/speed`` of the group's GPUs.
        keep_gpu: ``float64[C]`` survival of one GPU (``1 - π_g``).
        keep_link: ``float64[C]`` survival of a GPU's own link.
        link_bw: ``float64[C]`` effective bandwidth ``ρB`` of a GPU's own link.
        link_lat: ``float64[C]`` latency of a GPU's own link.
        up_share: ``float64[C]`` the server uplink's ``ρB / (load + 1)`` now.
        up_keep: ``float64[C]`` survival of the server uplink.
        up_lat: ``float64[C]`` latency of the server uplink.
        server_free: ``int64[S]`` free usable GPUs per server.
    """

    gpus: tuple[NDArray[np.int32], ...]
    size: NDArray[np.int64]
    server: NDArray[np.int64]
    slowdown: NDArray[np.float64]
    keep_gpu: NDArray[np.float64]
    keep_link: NDArray[np.float64]
    link_bw: NDArray[np.float64]
    link_lat: NDArray[np.float64]
    up_share: NDArray[np.float64]
    up_keep: NDArray[np.float64]
    up_lat: NDArray[np.float64]
    server_free: NDArray[np.int64]

    def fewest_servers(self, k: int) -> int:
        """The fewest servers whose free GPUs hold ``k`` (``servers + 1`` if none do)."""
        reach = np.cumsum(np.sort(self.server_free)[::-1])
        return int(np.searchsorted(reach, k) + 1)


def group_table(state: ClusterState) -> GroupTable:
    """The :class:`GroupTable` of ``state``'s free GPUs."""
    topo, h = state.topology, state.health
    groups = tuple(gpu_groups(state))
    first = np.array([int(g[0]) for g in groups], dtype=np.int64)
    node = topo.gpu_node[first]
    server = topo.gpu_server[first].astype(np.int64)
    up = topo.server_node[server]
    eff = state.eff_bandwidth
    free = state.free_mask
    return GroupTable(
        gpus=groups,
        size=np.array([len(g) for g in groups], dtype=np.int64),
        server=server,
        slowdown=(h.gpu_slowdown / topo.gpu_speed)[first],
        keep_gpu=1.0 - h.gpu_fail_prob[first],
        keep_link=1.0 - h.link_fail_prob[node],
        link_bw=eff[node],
        link_lat=topo.link_lat[node],
        up_share=eff[up] / (state.link_load[up] + 1.0),
        up_keep=1.0 - h.link_fail_prob[up],
        up_lat=topo.link_lat[up],
        server_free=np.bincount(topo.gpu_server[free], minlength=topo.num_servers).astype(np.int64),
    )


@dataclass(frozen=True)
class JobValueBound:
    """Per-GPU value coefficients of one job (module docstring, point 3).

    Attributes:
        paces: ``float64[L]`` the paces (distinct group slowdowns, increasing).
        single: ``float64[L, C]`` coefficient of a GPU of group ``c`` when the job sits on one
            server at pace ``ℓ`` (0 where the group is slower than the pace or the job does not
            fit on the group's server).
        spread: ``float64[L, C]`` the same spread over two or more servers (0 where ``k = 1`` or
            the group is slower than the pace).
        eta: ``float64[2, L, C]`` the bound ``η_j(ℓ, m, g)`` on one server (0) and spread (1).
        r: ``float64[2, C]`` the per-GPU survival factor ``r_g`` on one server and spread.
        weight: The job's weight.
        k: Its GPUs.
    """

    paces: NDArray[np.float64]
    single: NDArray[np.float64]
    spread: NDArray[np.float64]
    eta: NDArray[np.float64]
    r: NDArray[np.float64]
    weight: float
    k: int

    def chord(self, table: GroupTable, pace: int, part: NDArray[np.intp], spread: bool) -> Any:
        """Per-GPU coefficients of the chord bound (module docstring, point 4) for placements at
        ``pace`` in one mode whose GPUs all lie in the groups ``part``."""
        m = int(spread)
        logs = np.log(self.r[m, part])
        order = np.argsort(logs, kind="stable")
        take = np.minimum(
            table.size[part][order],
            np.maximum(0, self.k - np.concatenate(([0], np.cumsum(table.size[part][order])[:-1]))),
        )
        low = float((take * logs[order]).sum())  # the least Σ log r of k GPUs of the part
        alpha = (1.0 - math.exp(low)) / -low if low < -1e-12 else 0.0
        top = float(self.eta[m, pace, part].max())
        return self.weight * top * (1.0 + alpha * self.k * logs)

    def placement_bound(self, table: GroupTable, gpus: NDArray[np.integer]) -> float:
        """The bound of points 3 and 4 for one placement ``gpus`` of free GPUs (its own value is
        at most this; a check of the coefficients)."""
        gid = {int(g): c for c, arr in enumerate(table.gpus) for g in arr.tolist()}
        c_of = np.array([gid[int(g)] for g in np.asarray(gpus).tolist()], dtype=np.int64)
        pace = int(np.searchsorted(self.paces, table.slowdown[c_of].max()))
        servers = np.unique(table.server[c_of])
        spread = len(servers) > 1
        coef = (self.spread if spread else self.single)[pace]
        power = float(coef[c_of].sum())
        part = np.flatnonzero(coef > 0)
        if not spread:
            part = part[table.server[part] == servers[0]]
        where = {int(c): i for i, c in enumerate(part.tolist())}
        chord = self.chord(table, pace, part, spread)
        return min(power, float(sum(chord[where[int(c)]] for c in c_of.tolist())))


def job_value_bound(
    state: ClusterState, job: Job, table: GroupTable | None = None
) -> JobValueBound:
    """The per-GPU value coefficients of ``job`` on ``state``'s free GPUs (module docstring).

    Args:
        state: The cluster (not mutated).
        job: The job.
        table: ``group_table(state)``, if already built.
    """
    t = group_table(state) if table is None else table
    perf = state.perf
    grad_bytes, compute, tstar, weight, kappa, _, delta = job_constants(
        state.topology, perf, [job]
    )[0]
    k = job.num_gpus
    if k > 1:
        compute = max(compute - delta, 0.0)
    paces = np.unique(t.slowdown)
    lat = 1.0 if perf.latency == "max" else 0.0  # latency terms only add time
    allowed = t.slowdown[None, :] <= paces[:, None] * (1 + 1e-12)  # [L, C]

    def eta(sigma: NDArray[np.float64], comm: NDArray[np.float64], g: float) -> NDArray[np.float64]:
        tc = compute * sigma * (1.0 + kappa * (g - 1.0))
        T = iteration_time(tc, comm, perf.overlap, perf.overlap_cap)
        with np.errstate(divide="ignore"):
            return np.asarray(np.minimum(1.0, tstar / T), dtype=np.float64)

    def comm(
        g: int, s: int, b_inter: NDArray[np.float64], a_inter: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        return np.asarray(
            comm_time(
                perf.allreduce,
                grad_bytes,
                k,
                g,
                s,
                t.link_bw if k > 1 else np.inf,
                b_inter,
                lat * t.link_lat if k > 1 else 0.0,
                lat * a_inter,
                perf.fabric_bandwidth,
                perf.nic_sharing,
                perf.step_latency,
            ),
            dtype=np.float64,
        )

    keep = t.keep_gpu * (t.keep_link if k > 1 else 1.0)
    inf = np.full(len(t.size), np.inf)
    c1 = comm(k, 1, inf, np.zeros(len(t.size)))
    fits = t.server_free[t.server] >= k
    eta1 = np.where(allowed & fits[None, :], eta(paces[:, None], c1[None, :], float(k)), 0.0)
    single = weight * eta1 * keep[None, :] ** k
    if k > 1 and t.fewest_servers(k) <= len(t.server_free):
        # Spread over s servers, some server holds at least ceil(k / s) of the job's GPUs: the
        # bound takes the best s that the free GPUs allow.
        most = int(t.server_free.max())
        busy = int((t.server_free > 0).sum())
        shapes = [
            (-(-k // s), s)
            for s in range(max(2, t.fewest_servers(k)), min(k, busy) + 1)
            if -(-k // s) <= min(k - 1, most)
        ]
        G = np.minimum(k - 1, t.server_free[t.server]).astype(np.float64)
        r = keep * t.up_keep ** (1.0 / np.maximum(G, 1.0))
        best_eta = np.zeros((len(paces), len(t.size)))
        for g, s in shapes:
            c2 = comm(g, s, t.up_share, t.up_lat)
            best_eta = np.maximum(best_eta, eta(paces[:, None], c2[None, :], float(g)))
        best_eta = np.where(allowed, best_eta, 0.0)
        spread = weight * best_eta * r[None, :] ** k
    else:
        best_eta = np.zeros_like(single)
        spread = np.zeros_like(single)
        r = keep
    return JobValueBound(
        paces=paces,
        single=single,
        spread=spread,
        eta=np.stack([eta1, best_eta]),
        r=np.stack([keep, r]),
        weight=float(weight),
        k=k,
    )


@dataclass(frozen=True)
class BoundResult:
    """An upper bound of F.

    Attributes:
        value: The bound (F of the state plus what the queue can add).
        kind: How it was proven: ``"milp"`` (the program solved), ``"milp dual"`` (HiGHS' dual
            bound at the time limit), ``"lp"`` (the LP relaxation), ``"knapsack"``
            (:func:`~crop_gym.baselines.exact.upper_bound`), ``"exact"`` (the optimum) or
            ``"none"`` (nothing can be placed).
        variables: Variables of the program (0 where none was built).
        seconds: Wall time.
        answer: A feasible answer read off the integer program's solution (its F is achieved,
            not bounded; empty where none was found).
    """

    value: float
    kind: str
    variables: int = 0
    seconds: float = 0.0
    answer: list[Placement] = field(default_factory=list)


def _key(j: Job) -> tuple[str, int, float, float]:
    return j.model, j.num_gpus, float(j.batch_size), float(j.weight)


def _same(a: Job, b: Job) -> bool:
    return _key(a) == _key(b)


def _classes(jobs: Sequence[Job]) -> list[tuple[Job, int]]:
    """Identical jobs (model, GPUs, batch, weight) with their counts, in first-seen order."""
    seen: dict[tuple[str, int, float, float], list[Job]] = {}
    for j in jobs:
        seen.setdefault(_key(j), []).append(j)
    return [(v[0], len(v)) for v in seen.values()]


def sharing_bound(
    state: ClusterState,
    queue: Sequence[Job],
    *,
    time_limit: float = 10.0,
    integral: bool = True,
) -> BoundResult:
    """The GPU-sharing bound of the module docstring.

    Args:
        state: The cluster (not mutated).
        queue: Pending jobs.
        time_limit: HiGHS' time limit in seconds (> 0); when it stops the integer program, its
            dual bound is used (else the LP relaxation's optimum).
        integral: Solve the integer program (``False``: its LP relaxation only, faster and looser).

    Returns:
        The bound, ``kind`` ``"milp"``, ``"milp dual"``, ``"lp"`` or ``"none"``.

    Raises:
        ConfigError: If ``time_limit`` is not positive.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    check_range("time_limit", time_limit, 1e-3, 1e6)
    t0 = time.perf_counter()
    jobs = [j for j in pending_jobs(state, queue) if j.num_gpus <= state.num_free]
    F0 = float(state.F)
    if not jobs:
        return BoundResult(F0, "none", 0, time.perf_counter() - t0)
    table = group_table(state)
    cost: list[float] = []
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    integer: list[int] = []

    def new_row(low: float, high: float) -> int:
        lo.append(low)
        hi.append(high)
        return len(lo) - 1

    def new_var(c: float, is_int: bool) -> int:
        cost.append(c)
        integer.append(int(is_int))
        return len(cost) - 1

    cap_row = [new_row(-np.inf, float(n)) for n in table.size]
    modes: list[tuple[list[Job], int, list[tuple[int, int]]]] = []  # jobs, z, (x, group)
    members: dict[str, list[Job]] = {}
    for job, count in _classes(jobs):
        members[job.job_id] = [j for j in jobs if _same(j, job)]
        k = job.num_gpus
        vb = job_value_bound(state, job, table)
        class_row = new_row(-np.inf, float(count))
        for coef, spread in ((vb.single, False), (vb.spread, True)):
            for p in range(len(vb.paces)):
                on = np.flatnonzero(coef[p] > 0)
                if not len(on):
                    continue
                # One mode per server on one server; one spread mode.
                parts = (
                    [on]
                    if spread
                    else [on[table.server[on] == i] for i in np.unique(table.server[on])]
                )
                for part in parts:
                    if int(table.size[part].sum()) < k:
                        continue
                    z = new_var(0.0, True)
                    rows.append(class_row)
                    cols.append(z)
                    vals.append(1.0)
                    link = new_row(0.0, 0.0)  # Σ_c x - k z = 0
                    rows.append(link)
                    cols.append(z)
                    vals.append(-float(k))
                    xs = []
                    two = k > 1  # V <= Σ power-mean coef x and V <= Σ chord coef x
                    if two:
                        v = new_var(1.0, False)
                        r_pm, r_ch = new_row(-np.inf, 0.0), new_row(-np.inf, 0.0)
                        rows += [r_pm, r_ch]
                        cols += [v, v]
                        vals += [1.0, 1.0]
                        chord = vb.chord(table, p, part, spread)
                    for i, c in enumerate(part.tolist()):
                        x = new_var(0.0 if two else float(coef[p, c]), False)
                        rows += [link, cap_row[c]]
                        cols += [x, x]
                        vals += [1.0, 1.0]
                        if two:
                            rows += [r_pm, r_ch]
                            cols += [x, x]
                            vals += [-float(coef[p, c]), -float(chord[i])]
                        xs.append((x, c))
                    modes.append((members[job.job_id], z, xs))
    n = len(cost)
    if not any(integer):
        return BoundResult(F0, "none", 0, time.perf_counter() - t0)
    A = coo_matrix((vals, (rows, cols)), shape=(len(lo), n)).tocsr()
    cons = LinearConstraint(A, np.asarray(lo), np.asarray(hi))
    upper = np.full(n, np.inf)
    c = -np.asarray(cost)
    bounds = Bounds(np.zeros(n), upper)
    # HiGHS' presolve (scipy 1.17) returned a wrong "optimal" value below the true optimum on a
    # 16-GPU instance of this program (tests/test_bounds.py, seed 0 of the exact comparison);
    # without it the answers agree with the exact optima.
    opts = {"time_limit": float(time_limit), "presolve": False}
    kind = "lp"
    best = math.inf
    answer: list[Placement] = []
    if integral:
        r = milp(
            c, constraints=[cons], integrality=np.asarray(integer), bounds=bounds, options=opts
        )
        if r.x is not None:
            answer = _round(state, table, modes, np.asarray(r.x))
        dual = getattr(r, "mip_dual_bound", None)
        if r.status == 0 and r.fun is not None:
            best, kind = -float(dual if dual is not None else r.fun), "milp"
        elif dual is not None and np.isfinite(dual):
            best, kind = -float(dual), "milp dual"
    if not np.isfinite(best):
        r = milp(c, constraints=[cons], bounds=bounds, options=opts)
        if r.status != 0 or r.fun is None:
            raise ConfigError(f"the sharing bound's LP relaxation failed: {r.message}")
        best, kind = -float(r.fun), "lp"
    add = max(best, 0.0) * (1 + _SLACK) + _SLACK
    return BoundResult(F0 + add, kind, n, time.perf_counter() - t0, answer)


def _round(
    state: ClusterState,
    table: GroupTable,
    modes: Sequence[tuple[list[Job], int, list[tuple[int, int]]]],
    x: NDArray[np.float64],
) -> list[Placement]:
    """A feasible answer read off the program's solution: each mode's jobs take their ``k`` GPUs
    from the groups its ``x`` names (largest share first, then any free GPU of those groups)."""
    taken = np.zeros(len(table.size), dtype=np.int64)
    used: set[str] = set()
    out: list[Placement] = []
    for jobs, z, xs in modes:
        n = round(float(x[z]))
        if n <= 0:
            continue
        share = {c: float(x[v]) for v, c in xs}
        order = sorted(share, key=lambda c: -share[c])
        for job in [j for j in jobs if j.job_id not in used][:n]:
            k, got = job.num_gpus, list[int]()
            for want in (True, False):  # the program's share first, then what is left
                for c in order:
                    room = int(table.size[c] - taken[c])
                    m = min(room, k - len(got), round(share[c] / n) if want else room)
                    if m > 0:
                        got += table.gpus[c][taken[c] : taken[c] + m].tolist()
                        taken[c] += m
                        if want:
                            share[c] -= m
            if len(got) == k:
                out.append(Placement(job, np.sort(np.array(got, dtype=np.int32))))
                used.add(job.job_id)
            # (GPUs of a job that could not be completed stay taken: the answer stays valid.)
    return out


def best_bound(
    state: ClusterState, queue: Sequence[Job], *, time_limit: float = 10.0
) -> BoundResult:
    """The least of the valid bounds: the knapsack bound
    (:func:`~crop_gym.baselines.exact.upper_bound`) and :func:`sharing_bound` (whose answer it
    keeps)."""
    t0 = time.perf_counter()
    knap = upper_bound(state, queue)
    share = sharing_bound(state, queue, time_limit=time_limit)
    sec = time.perf_counter() - t0
    if knap <= share.value:
        return BoundResult(knap, "knapsack", share.variables, sec, share.answer)
    return BoundResult(share.value, share.kind, share.variables, sec, share.answer)
