"""Candidate placements: compact GPU sets for a job of ``k`` GPUs (DESIGN §3, step 1).

Shared by CROP, the baselines and the environments. For every subtree (server, ToR, pod, root) with
at least ``k`` free usable GPUs, take the ``k`` best GPUs inside it: fill the servers with the most
free GPUs first (so that as few links as possible are spanned) and, inside a server, take the healthiest
and fastest GPUs first (lowest ``σ_g / speed_g / (1 - π_g)``). Duplicates are removed and the list is
capped, keeping the candidates that span the fewest servers, then the healthiest, then the tightest fit
(fewest free GPUs left in the subtree, which limits fragmentation). Ring order = DFS order = sorted
GPU indices.

With ``robust=True`` every switch subtree also offers a *health-first* candidate: its ``k`` healthiest
free GPUs (servers with the most free GPUs first among equally healthy ones), when that set is
healthier than every compact candidate taken inside the subtree. Without it a job could only avoid a
straggler by leaving a server that holds it whole, and CROP's measured ratio to the optimum under the
``severe`` profile dropped from 0.96 to 0.87 (docs/CROP.md).

With ``robust=False`` device health is ignored when choosing (the "CROP without robustness"
ablation): every usable GPU looks alike. Failed GPUs are never candidates.

Candidate sets depend only on the free GPUs, the health and ``k``; they are cached per
:attr:`ClusterState.version`, so jobs of the same size share one computation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import check_range
from crop_gym.objective import ClusterState
from crop_gym.topology import SWITCH, Topology

__all__ = ["CandidateSet", "candidate_placements", "gpu_quality"]


@dataclass(frozen=True, eq=False)
class CandidateSet:
    """Candidate placements for one job size.

    Attributes:
        gpus: ``int32[C, k]`` sorted GPU indices of each candidate.
        num_servers: ``int32[C]`` servers spanned by each candidate.
        subtree: ``int32[C]`` node index of the subtree the candidate was taken from.
        quality: ``float64[C]`` sum of the GPUs' badness scores (lower is healthier).
    """

    gpus: NDArray[np.int32]
    num_servers: NDArray[np.int32]
    subtree: NDArray[np.int32]
    quality: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.gpus)


def gpu_quality(state: ClusterState, robust: bool = True) -> NDArray[np.float64]:
    """Badness score of every GPU, ``σ_g / speed_g / (1 - π_g)`` (1 = healthy reference GPU).

    With ``robust=False`` every GPU scores 1.
    """
    if not robust:
        return np.ones(state.topology.num_gpus)
    h = state.health
    return h.gpu_slowdown / state.topology.gpu_speed / (1.0 - h.gpu_fail_prob)


def _empty(k: int) -> CandidateSet:
    return CandidateSet(
        np.empty((0, k), np.int32), np.empty(0, np.int32), np.empty(0, np.int32), np.empty(0)
    )


def candidate_placements(
    state: ClusterState, k: int, *, robust: bool = True, max_candidates: int = 8
) -> CandidateSet:
    """Compact candidate placements of ``k`` GPUs in the current state.

    Args:
        state: The cluster state (free GPUs and health).
        k: GPUs of the job (>= 1).
        robust: Whether device health steers the choice.
        max_candidates: Cap on the number of candidates returned (>= 1).

    Returns:
        Up to ``max_candidates`` distinct candidates, best first; empty if fewer than ``k`` GPUs are
        free.
    """
    if not 1 <= k <= state.topology.num_gpus:
        check_range("k", k, 1, state.topology.num_gpus)
    if max_candidates < 1:
        check_range("max_candidates", max_candidates, 1)
    cache = state._candidate_cache
    if cache.version != state.version:
        cache.reset(state.version)
    key = (k, robust, max_candidates)
    hit = cache.sets.get(key)
    if hit is None:
        shared = cache.shared.get(robust)
        if shared is None:
            shared = cache.shared[robust] = _Shared(state, robust)
        hit = _compute(state.topology, shared, k, max_candidates)
        cache.sets[key] = hit
    return hit


class _Shared:
    """Arrays every job size needs: GPU order per server, free counts, badness prefix sums."""

    __slots__ = ("free", "n_free", "node_free", "order", "q", "q_sorted", "qcs", "rank", "srv_free", "srv_qmin", "uniform")

    def __init__(self, state: ClusterState, robust: bool) -> None:
        topo = state.topology
        free = state.free_mask
        q = gpu_quality(state, robust)
        # GPUs sorted by (server, busy, badness, index): a server's best free GPUs come first.
        order = np.lexsort((np.arange(topo.num_gpus), q, ~free, topo.gpu_server)).astype(np.int32)
        cs = np.zeros(len(free) + 1, dtype=np.int64)
        np.cumsum(free, out=cs[1:])
        self.free = free
        self.n_free = int(cs[-1])
        self.q = q
        self.uniform = not robust or bool(np.all(q == 1.0))
        self.order = order
        self.srv_free = cs[topo.server_gpu_hi] - cs[topo.server_gpu_lo]
        self.node_free = cs[topo.node_gpu_hi] - cs[topo.node_gpu_lo]
        self.q_sorted = q[order]
        self.qcs = np.zeros(len(q) + 1)
        np.cumsum(self.q_sorted, out=self.qcs[1:])
        self.srv_qmin: NDArray[np.float64] | None = None
        self.rank: NDArray[np.int64] | None = None


def _compute(topo: Topology, sh: _Shared, k: int, cap: int) -> CandidateSet:
    if sh.n_free < k:
        return _empty(k)
    srv_free, node_free, qcs, order = sh.srv_free, sh.node_free, sh.qcs, sh.order
    srv_start = topo.server_gpu_lo  # position of each server's block in ``order``

    # Single-server candidates, vectorised over servers.
    servers = np.flatnonzero(srv_free >= k)
    base_rows = np.sort(order[srv_start[servers][:, None] + np.arange(k)], axis=1).astype(np.int32)
    base_ns = np.ones(len(servers), np.int32)
    base_st = topo.server_node[servers].astype(np.int32)
    base_q = qcs[srv_start[servers] + k] - qcs[srv_start[servers]]
    base_lo = (srv_free[servers] - k).astype(np.int64)

    # Multi-server candidates: switch subtrees whose servers cannot hold k alone.
    extra: list[tuple[NDArray[np.int32], int, int, float, int]] = []
    switches = np.flatnonzero((node_free >= k) & (topo.kind == SWITCH))
    compact_q: dict[int, float] = {}
    if len(switches):
        take_k = np.minimum(srv_free, k)
        server_badness = (qcs[srv_start + take_k] - qcs[srv_start]) / np.maximum(take_k, 1)
        for node in switches:
            lo, hi = topo.node_srv_lo[node], topo.node_srv_hi[node]
            if srv_free[lo:hi].max() >= k:
                continue  # the best single server inside is already a candidate
            srv = np.arange(lo, hi)
            srv = srv[srv_free[srv] > 0]
            srv = srv[np.lexsort((srv, server_badness[srv], -srv_free[srv]))]
            before = np.concatenate([[0], np.cumsum(srv_free[srv])[:-1]])
            take = np.minimum(srv_free[srv], np.maximum(k - before, 0))
            used = take > 0
            srv, take = srv[used], take[used]
            pos = np.concatenate([srv_start[s] + np.arange(t) for s, t in zip(srv, take, strict=True)])
            qv = float(sh.q_sorted[pos].sum())
            extra.append((np.sort(order[pos]), len(srv), int(node), qv, int(node_free[node] - k)))
            compact_q[int(node)] = qv
        if not sh.uniform:
            ends = np.minimum(srv_start + k, len(sh.q))
            srv_q = np.where(srv_free >= k, qcs[ends] - qcs[srv_start], np.inf)
            _health_first(topo, sh, k, switches, srv_q, compact_q, extra)

    n_base = len(base_rows)
    if extra:
        base_rows = np.concatenate([base_rows, np.stack([r[0] for r in extra])]).astype(np.int32)
        base_ns = np.concatenate([base_ns, np.array([r[1] for r in extra], np.int32)])
        base_st = np.concatenate([base_st, np.array([r[2] for r in extra], np.int32)])
        base_q = np.concatenate([base_q, np.array([r[3] for r in extra])])
        base_lo = np.concatenate([base_lo, np.array([r[4] for r in extra], np.int64)])
    if len(base_rows) == 0:
        return _empty(k)
    rank = np.lexsort((base_st, base_lo, np.round(base_q, 9), base_ns))
    if extra:
        # Identical GPU sets keep their best-ranked row. Only the few extra (multi-server or
        # health-first) rows can repeat another row: single-server rows are disjoint.
        pos = np.empty(len(rank), np.int64)
        pos[rank] = np.arange(len(rank))
        drop = np.zeros(len(rank), bool)
        for e in range(n_base, len(base_rows)):
            same = np.flatnonzero((base_rows == base_rows[e]).all(axis=1))
            if len(same) > 1:
                drop[same[pos[same] != pos[same].min()]] = True
        rank = rank[~drop[rank]]
    rank = rank[:cap]
    return CandidateSet(base_rows[rank].astype(np.int32, copy=False), base_ns[rank], base_st[rank], base_q[rank])


def _health_first(
    topo: Topology,
    sh: _Shared,
    k: int,
    switches: NDArray[np.int64],
    srv_q: NDArray[np.float64],
    compact_q: dict[int, float],
    out: list[tuple[NDArray[np.int32], int, int, float, int]],
) -> None:
    """Append each switch subtree's ``k`` healthiest free GPUs if healthier than its compact candidates."""
    free, q, srv_free, node_free = sh.free, sh.q, sh.srv_free, sh.node_free
    # Skip a subtree at once if a compact candidate inside is made of its healthiest free GPUs.
    if sh.srv_qmin is None:
        sh.srv_qmin = np.minimum.reduceat(np.where(free, q, np.inf), topo.server_gpu_lo)
    srv_qmin = sh.srv_qmin
    for node in switches:
        slo, shi = topo.node_srv_lo[node], topo.node_srv_hi[node]
        inside = min(float(srv_q[slo:shi].min()), compact_q.get(int(node), np.inf))
        if inside <= k * float(srv_qmin[slo:shi].min()) + 1e-9:
            continue
        if sh.rank is None:
            g_all = np.flatnonzero(free)
            g_all = g_all[np.lexsort((g_all, -srv_free[topo.gpu_server[g_all]], np.round(q[g_all], 9)))]
            sh.rank = np.full(topo.num_gpus, len(g_all), dtype=np.int64)  # busy GPUs rank last
            sh.rank[g_all] = np.arange(len(g_all))
        glo, ghi = int(topo.node_gpu_lo[node]), int(topo.node_gpu_hi[node])
        r = sh.rank[glo:ghi]
        g = glo + (np.argpartition(r, k - 1)[:k] if k < len(r) else np.arange(len(r)))
        qv = float(q[g].sum())
        if qv >= inside - 1e-9:
            continue  # a compact candidate is as healthy
        g = np.sort(g).astype(np.int32)
        out.append((g, len(np.unique(topo.gpu_server[g])), int(node), qv, int(node_free[node] - k)))
