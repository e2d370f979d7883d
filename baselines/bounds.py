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
*mode*: on one server, or spread over two or more. A spread placement's mode also names its
*lowest common switch* ``X`` (the deepest switch above all of ``P``: ``P`` touches two or more of
``X``'s children) and its *bandwidth level* ``β``, defined next. For ``g ∈ P`` under ``X``, two
links above ``g`` are spanned for certain: the uplink of ``g``'s server (``P`` is on two or more
servers) and the link ``e_X(g)`` just below ``X`` on ``g``'s path (``P`` touches another child of
``X``; the two are one link when the server hangs under ``X``). Its *chain share* is the lesser
of those links' ``ρB / (load + 1)`` now, and ``β`` is the least chain share over ``P``.

1. *Time.* Every term of ``T`` grows with the slowdown and with the all-reduce time ``C`` (and
   compute with ``g_max`` through :func:`~crop_gym.model.timing.sharing_factor`), and
   ``C`` grows as bandwidths fall and latencies rise. For every ``g ∈ P``: the pace is ``ℓ``; on one
   server the most GPUs on a server is ``g_max = k`` and no inter-server link is crossed. Spread
   under ``X`` at level ``β``, every GPU of ``P`` lies in the set ``U`` of GPUs under ``X`` of
   slowdown ``<= ℓ`` and chain share ``>= β``; with ``n`` servers, ``n_min <= n <= min(k, servers
   of U)`` (``n_min``: the fewest servers of ``U`` holding ``k`` of its GPUs) and ``g_max >= g(n)``,
   the least ``g`` for which the ``n`` largest ``min(|U ∩ server|, g)`` sum to ``k`` (at least
   ``⌈k/n⌉``), so ``T`` is at least its least value over those shapes ``(g(n), n)`` (each term
   grows with ``g_max`` and with ``n``). Both links of every chain are spanned and loads only grow
   as jobs are added, so the inter-server bottleneck share is at most ``β``; the largest
   inter-server latency is at least that of either link. The GPU-link bottleneck is at most ``g``'s
   own link's ``ρB``, and the largest intra-server latency at least ``g``'s link's (latency terms
   are dropped under ``latency="hops"``, where they are summed differently; they only add time).
   So ``T >= T_j(ℓ, m, g)`` (:func:`~crop_gym.model.timing.comm_time` and
   :func:`~crop_gym.model.timing.iteration_time` with those arguments), and
   ``η <= η_j(ℓ, m, g) = min(1, T*/T_j(ℓ, m, g))`` for every ``g ∈ P``.
2. *Survival.* Spread under ``X``, every spanned link ``e`` of a chain holds at most
   ``G_e = min(k - 1, free GPUs under e)`` GPUs of ``P`` (``e`` is spanned, so not all of ``P``
   is under it), and ``y_e = Π_{g under e} y_e^{1/g_e} <= Π_{g under e} y_e^{1/G_e}``
   (``y <= 1``, ``g_e = |P under e|``). The other spanned links only lower ``s``. So
   ``s <= Π_{g∈P} r_g`` with ``r_g = q_g`` on one server and ``r_g = q_g y_{i(g)}^{1/G_{i(g)}}
   y_{e_X(g)}^{1/G_{e_X(g)}}`` spread (the second factor once where the links are one). By the
   power-mean inequality, ``k Π_g r_g <= Σ_g r_g^k``.
3. Together: ``v = w k η s <= w η Σ_g r_g^k <= Σ_{g∈P} w η_j(ℓ, m, g) r_g^k`` — a sum over the
   job's GPUs of a coefficient that depends on the GPU's group, the job's pace and its mode only.
4. *The chord.* The power mean is loose when a large job mixes reliable and failure-prone GPUs
   (29 GPUs at 1 and 3 at 0.8: 0.91 for a product of 0.51). A second bound: with
   ``u = Σ_{g∈P} log r_g``, ``s <= e^u``, and ``u`` lies in ``[λ, μ]`` where ``λ`` and ``μ`` are
   the least and the greatest sums of ``k`` logs the allowed groups offer. ``e^u`` is convex, so it
   lies below its chord: ``e^u <= a + b u`` with ``b = (e^μ - e^λ) / (μ - λ)`` and
   ``a = e^μ - b μ`` (``b = 0``, ``a = e^μ`` where ``μ = λ``). With ``η̄`` the largest
   ``η_j(ℓ, m, g)`` over the allowed groups, ``v <= w η̄ k (a + b u) = Σ_{g∈P} w η̄ (a + b k
   log r_g)`` (terms may be negative; their sum is not). For ``k >= 2`` the program takes the
   lesser of the two sums through a variable ``V <= Σ power-mean terms`` and
   ``V <= Σ chord terms`` per mode.

**The program.** Identical jobs (same model, GPUs, batch and weight) form a class ``a`` of
``n_a`` jobs. Integer ``z_{a,ℓ,m} >= 0`` counts the class's jobs placed at pace ``ℓ`` in mode
``m`` (one server ``i``, or spread under a switch ``X`` at a level ``β``: one mode per chain share
under ``X`` that leaves ``k`` GPUs); ``x_{a,ℓ,m,c} >= 0`` the GPUs of group ``c`` they take, only
from groups of slowdown ``<= ℓ`` (and, on one server, of server ``i``; spread, of the mode's set
``U``); ``V_{a,ℓ,m}`` their value
(point 4; for 1-GPU jobs the power-mean sum itself). Constraints:
(A pace is kept for a part only where the part holds a GPU of that slowdown: any placement's
pace is one of its GPUs' slowdowns, and a pace without one offers the same GPUs as a faster pace
at a larger time.) ``Σ_{ℓ,m} z_{a,ℓ,m} <= n_a``; ``Σ_c x_{a,ℓ,m,c} = k_a z_{a,ℓ,m}``; each group's GPUs are taken at
most once, ``Σ_{a,ℓ,m} x_{a,ℓ,m,c} <= |c|``. Objective: ``F(now) + Σ V``. (With several jobs
of a class in one mode, each bound is a sum over them, and the sum of their lesser bounds is
at most the lesser of the sums.)

**Validity.** Take the best placement of any subset of the queue. Adding a job never raises
another job's value (link loads only grow), so its F is at most ``F(now) + Σ_j v_j``. Setting each
placed job's ``z`` at its pace and mode (its lowest common switch and the level of its least
chain share, read off the state before the queue) and its ``x`` to its GPUs per group is feasible
(a GPU is held by one job; its pace bounds its GPUs' slowdowns, its level their chain shares), and by 3 the objective there is ``>= F``.
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
from crop_gym.model.timing import (
    JOB_COLUMNS,
    comm_time,
    iteration_time,
    job_constants,
    sharing_factor,
)
from crop_gym.policy import Placement, pending_jobs

__all__ = [
    "BoundResult",
    "GroupTable",
    "JobValueBound",
    "ValueMode",
    "best_bound",
    "extreme_sum",
    "group_table",
    "job_value_bound",
    "least_g_max",
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
        path: ``int64[C, D]`` the links (child nodes) from the group's GPUs up to the root,
            root-padded (:attr:`~crop_gym.model.topology.Topology.gpu_links`).
        node_free: ``int64[N]`` free usable GPUs under each node.
        node_share: ``float64[N]`` each link's ``ρB / (load + 1)`` now.
        node_keep: ``float64[N]`` each link's survival.
        node_lat: ``float64[N]`` each link's latency.
        switches: ``int64[K]`` the switch nodes (spread modes' lowest common nodes).
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
    path: NDArray[np.int64]
    node_free: NDArray[np.int64]
    node_share: NDArray[np.float64]
    node_keep: NDArray[np.float64]
    node_lat: NDArray[np.float64]
    switches: NDArray[np.int64]

    def below(self, node: int) -> NDArray[np.bool_]:
        """``bool[C]``: the groups under ``node``."""
        return np.asarray((self.path == node).any(axis=1), dtype=np.bool_)

    def child_link(self, node: int) -> NDArray[np.int64]:
        """``int64[C]``: for each group under the switch ``node``, the link just below ``node``
        on its path (the child of ``node`` that holds it; -1 for groups not under ``node``)."""
        hit = self.path == node
        pos = hit.argmax(axis=1)
        out = self.path[np.arange(len(self.size)), np.maximum(pos - 1, 0)]
        return np.where(hit.any(axis=1) & (pos > 0), out, -1).astype(np.int64)


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
    share = eff / (state.link_load + 1.0)
    cum = np.concatenate(([0], np.cumsum(free)))
    # The links above each group's GPUs, then the root (0) as a last column: every group is
    # under the root.
    path = np.concatenate(
        (topo.gpu_links[first].astype(np.int64), np.zeros((len(first), 1), np.int64)), axis=1
    )
    return GroupTable(
        gpus=groups,
        size=np.array([len(g) for g in groups], dtype=np.int64),
        server=server,
        slowdown=(h.gpu_slowdown / topo.gpu_speed)[first],
        keep_gpu=1.0 - h.gpu_fail_prob[first],
        keep_link=1.0 - h.link_fail_prob[node],
        link_bw=eff[node],
        link_lat=topo.link_lat[node],
        up_share=share[up],
        up_keep=1.0 - h.link_fail_prob[up],
        up_lat=topo.link_lat[up],
        server_free=np.bincount(topo.gpu_server[free], minlength=topo.num_servers).astype(np.int64),
        path=path,
        node_free=(cum[topo.node_gpu_hi] - cum[topo.node_gpu_lo]).astype(np.int64),
        node_share=np.asarray(share, dtype=np.float64),
        node_keep=1.0 - h.link_fail_prob,
        node_lat=np.asarray(topo.link_lat, dtype=np.float64),
        switches=np.flatnonzero(topo.kind == 2).astype(np.int64),
    )


@dataclass(frozen=True)
class ValueMode:
    """One mode of a job's placements and its per-GPU coefficients (module docstring, point 3).

    Attributes:
        node: ``-1`` for placements on one server; else the switch that is the placements'
            lowest common node (spread over two or more of its children).
        level: The bandwidth level ``β`` of a spread mode (``inf`` on one server): its GPUs are
            those whose chain share is at least ``β``, and its time bound reads ``b_inter = β``.
        coef: ``float64[L, C]`` coefficient of a GPU of group ``c`` at pace ``ℓ`` (0 where the
            group is not in the mode, is slower than the pace, or, on one server, the job does
            not fit on the group's server).
        eta: ``float64[L, C]`` the bound ``η_j(ℓ, m, g)`` (0 where ``coef`` is).
        r: ``float64[C]`` the per-GPU survival factor ``r_g``.
    """

    node: int
    level: float
    coef: NDArray[np.float64]
    eta: NDArray[np.float64]
    r: NDArray[np.float64]


@dataclass(frozen=True)
class JobValueBound:
    """Per-GPU value coefficients of one job, per mode (module docstring, points 1-4).

    Attributes:
        paces: ``float64[L]`` the paces (distinct group slowdowns, increasing).
        modes: The modes: on one server first, then one per (lowest common switch, bandwidth
            level) for ``k >= 2``.
        weight: The job's weight.
        k: Its GPUs.
    """

    paces: NDArray[np.float64]
    modes: tuple[ValueMode, ...]
    weight: float
    k: int

    def chord(self, table: GroupTable, mode: ValueMode, pace: int, part: NDArray[np.intp]) -> Any:
        """Per-GPU coefficients of the chord bound (module docstring, point 4) for placements in
        ``mode`` at ``pace`` whose GPUs all lie in the groups ``part``."""
        logs = np.log(np.maximum(mode.r[part], 1e-300))
        size = table.size[part]
        low = extreme_sum(size, logs, self.k, largest=False)  # λ: the least Σ log r of k GPUs
        high = extreme_sum(size, logs, self.k, largest=True)  # μ: the greatest
        gap = high - low
        slope = (math.exp(high) - math.exp(low)) / gap if gap > 1e-12 else 0.0
        base = math.exp(high) - slope * high  # the chord through (λ, e^λ) and (μ, e^μ)
        top = float(mode.eta[pace, part].max())
        return self.weight * top * (base + slope * self.k * logs)

    def mode_of(self, table: GroupTable, c_of: NDArray[np.int64]) -> ValueMode | None:
        """The mode a placement on the groups ``c_of`` (one entry per GPU) maps to (the proof's
        "Validity"): one server, or its lowest common switch and the largest level at most its
        least chain share (``None`` only where the coefficients do not cover it: a bug)."""
        servers = np.unique(table.server[c_of])
        if len(servers) == 1:
            return self.modes[0]
        paths = table.path[c_of]
        common = [int(n) for n in paths[0] if (paths == n).any(axis=1).all()]
        lca = next(n for n in common if n in set(table.switches.tolist()))
        share = _chain_share(table, lca)[c_of].min()
        fit = [m for m in self.modes if m.node == lca and m.level <= share * (1 + 1e-12)]
        return max(fit, key=lambda m: m.level) if fit else None

    def placement_bound(self, table: GroupTable, gpus: NDArray[np.integer]) -> float:
        """The bound of points 3 and 4 for one placement ``gpus`` of free GPUs (its own value is
        at most this; a check of the coefficients)."""
        gid = {int(g): c for c, arr in enumerate(table.gpus) for g in arr.tolist()}
        c_of = np.array([gid[int(g)] for g in np.asarray(gpus).tolist()], dtype=np.int64)
        pace = int(np.searchsorted(self.paces, table.slowdown[c_of].max()))
        mode = self.mode_of(table, c_of)
        if mode is None:
            return math.inf
        coef = mode.coef[pace]
        power = float(coef[c_of].sum())
        part = np.flatnonzero(coef > 0)
        if mode.node < 0:
            part = part[table.server[part] == table.server[c_of[0]]]
        where = {int(c): i for i, c in enumerate(part.tolist())}
        chord = self.chord(table, mode, pace, part)
        return min(power, float(sum(chord[where[int(c)]] for c in c_of.tolist())))


def extreme_sum(
    size: NDArray[np.int64], values: NDArray[np.float64], k: int, *, largest: bool
) -> float:
    """The least (or, ``largest``, the greatest) sum of ``k`` values, group ``c`` offering
    ``size[c]`` copies of ``values[c]`` (``k <= size.sum()``)."""
    order = np.argsort(-values if largest else values, kind="stable")
    before = np.concatenate(([0], np.cumsum(size[order])[:-1]))
    take = np.minimum(size[order], np.maximum(0, k - before))
    return float((take * values[order]).sum())


def least_g_max(count: NDArray[Any], k: int, s: int) -> int:
    """The least ``g`` such that ``s`` servers holding ``count`` GPUs offer ``k`` GPUs with at
    most ``g`` on each (the ``s`` largest ``min(count, g)`` sum to ``k``): a placement of ``k``
    GPUs on ``s`` servers has at least that many on one (at least ``ceil(k / s)``)."""
    top = np.sort(np.asarray(count, dtype=np.int64))[::-1][:s]
    g = -(-k // s)
    while g <= k and int(np.minimum(top, g).sum()) < k:
        g += 1
    return g


def _fewest(count: NDArray[Any], k: int) -> int:
    """The fewest servers whose ``count`` GPUs hold ``k`` (one more than there are if none do)."""
    reach = np.cumsum(np.sort(count)[::-1])
    return int(np.searchsorted(reach, k - 1e-9) + 1)


def _chain_share(table: GroupTable, node: int) -> NDArray[np.float64]:
    """``float64[C]``: for placements whose lowest common node is the switch ``node``, the least
    share of the two links every such placement spans above a GPU of the group: its server's
    uplink and the link just below ``node`` (``-inf`` for groups not under ``node``)."""
    child = table.child_link(node)
    up = table.up_share
    return np.where(child >= 0, np.minimum(up, table.node_share[np.maximum(child, 0)]), -np.inf)


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
    const = dict(zip(JOB_COLUMNS, job_constants(state.topology, perf, [job])[0], strict=True))
    grad_bytes, compute, tstar = const["grad_bytes"], const["compute"], const["tstar"]
    weight = const["weight"]
    kappa, kappa_max, delta = (
        const["compute_sharing"],
        const["compute_saturation"],
        const["replica_overhead"],
    )
    k = job.num_gpus
    if k > 1:
        compute = max(compute - delta, 0.0)
    paces = np.unique(t.slowdown)
    lat = 1.0 if perf.latency == "max" else 0.0  # latency terms only add time
    allowed = t.slowdown[None, :] <= paces[:, None] * (1 + 1e-12)  # [L, C]

    def eta(sigma: NDArray[np.float64], comm: NDArray[np.float64], g: float) -> NDArray[np.float64]:
        tc = compute * sigma * sharing_factor(kappa, kappa_max, g)
        T = iteration_time(tc, comm, perf.overlap, perf.overlap_cap)
        with np.errstate(divide="ignore"):
            return np.asarray(np.minimum(1.0, tstar / T), dtype=np.float64)

    def comm(g: int, s: int, b_inter: Any, a_inter: Any) -> NDArray[np.float64]:
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
            )
            * np.ones(len(t.size)),
            dtype=np.float64,
        )

    keep = t.keep_gpu * (t.keep_link if k > 1 else 1.0)
    c1 = comm(k, 1, np.inf, 0.0)
    fits = t.server_free[t.server] >= k
    eta1 = np.where(allowed & fits[None, :], eta(paces[:, None], c1[None, :], float(k)), 0.0)
    modes = [ValueMode(-1, math.inf, weight * eta1 * keep[None, :] ** k, eta1, keep)]
    for node in t.switches.tolist() if k > 1 else []:
        under = t.below(node)
        child = t.child_link(node)
        if int(t.node_free[node]) < k or len(np.unique(child[under])) < 2:
            continue  # no placement has this lowest common node
        cl = np.maximum(child, 0)
        two = child != t.path[:, 1]  # the link below the node is not the server's own uplink
        G_up = np.minimum(k - 1, t.server_free[t.server]).astype(np.float64)
        G_ch = np.minimum(k - 1, t.node_free[cl]).astype(np.float64)
        r = keep * t.up_keep ** (1.0 / np.maximum(G_up, 1.0))
        r = r * np.where(two, t.node_keep[cl] ** (1.0 / np.maximum(G_ch, 1.0)), 1.0)
        a_inter = np.where(two, np.maximum(t.up_lat, t.node_lat[cl]), t.up_lat)
        share = _chain_share(t, node)
        for beta in np.unique(share[under]).tolist():
            inside = under & (share >= beta * (1 - 1e-12))
            if int(t.size[inside].sum()) < k:
                continue
            best_eta = np.zeros((len(paces), len(t.size)))
            for p in range(len(paces)):
                # A placement of this mode at pace p takes its GPUs from `use`; spread over s of
                # its servers, one of them holds at least ceil(k / s): the time bound takes the
                # best shape that those GPUs allow (point 1).
                use = inside & allowed[p]
                count = np.bincount(
                    t.server[use], weights=t.size[use], minlength=len(t.server_free)
                )
                if count.sum() < k:
                    continue
                fewest = _fewest(count, k)
                most, busy = int(count.max()), int((count > 0).sum())
                for s_ in range(max(2, fewest), min(k, busy) + 1):
                    g = least_g_max(count, k, s_)
                    if g <= min(k - 1, most):
                        c2 = comm(g, s_, beta, a_inter)
                        best_eta[p] = np.maximum(best_eta[p], eta(paces[p], c2, float(g)))
                best_eta[p] = np.where(use, best_eta[p], 0.0)
            if not best_eta.any():
                continue
            modes.append(
                ValueMode(node, float(beta), weight * best_eta * r[None, :] ** k, best_eta, r)
            )
    return JobValueBound(paces=paces, modes=tuple(modes), weight=float(weight), k=k)


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
        for mode in vb.modes:
            spread = mode.node >= 0
            coef = mode.coef
            for p in range(len(vb.paces)):
                on = np.flatnonzero(coef[p] > 0)
                if not len(on):
                    continue
                # One part per server on one server; the mode's groups spread.
                parts = (
                    [on]
                    if spread
                    else [on[table.server[on] == i] for i in np.unique(table.server[on])]
                )
                for part in parts:
                    if int(table.size[part].sum()) < k or not np.any(
                        table.slowdown[part] >= vb.paces[p] * (1 - 1e-12)
                    ):
                        continue  # too few GPUs, or none at this pace (the last pace's set)
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
                        chord = vb.chord(table, mode, p, part)
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
