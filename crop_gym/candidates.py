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
    check_range("k", k, 1, state.topology.num_gpus)
    check_range("max_candidates", max_candidates, 1)
    cache: dict[tuple[int, bool, int], CandidateSet]
    cache_version, cache = getattr(state, "_candidate_cache", (-1, {}))
    if cache_version != state.version:
        cache = {}
        state._candidate_cache = (state.version, cache)  # type: ignore[attr-defined]
    key = (k, robust, max_candidates)
    hit = cache.get(key)
    if hit is None:
        hit = _compute(state, k, robust, max_candidates)
        cache[key] = hit
    return hit


def _compute(state: ClusterState, k: int, robust: bool, cap: int) -> CandidateSet:
    topo = state.topology
    free = state.free_mask
    if free.sum() < k:
        return _empty(k)
    q = gpu_quality(state, robust)
    # GPUs sorted by (server, busy, badness, index): a server's best free GPUs come first.
    order = np.lexsort((np.arange(topo.num_gpus), q, ~free, topo.gpu_server)).astype(np.int32)
    cs = np.concatenate([[0], np.cumsum(free)])
    srv_free = cs[topo.server_gpu_hi] - cs[topo.server_gpu_lo]
    node_free = cs[topo.node_gpu_hi] - cs[topo.node_gpu_lo]
    q_sorted = q[order]
    qcs = np.concatenate([[0.0], np.cumsum(q_sorted)])
    srv_start = topo.server_gpu_lo  # position of each server's block in ``order``

    gpu_rows: list[NDArray[np.int32]] = []
    n_srv: list[NDArray[np.int32]] = []
    subtree: list[NDArray[np.int32]] = []
    qual: list[NDArray[np.float64]] = []
    leftover: list[NDArray[np.int64]] = []

    # Single-server candidates, vectorised over servers.
    servers = np.flatnonzero(srv_free >= k)
    if len(servers):
        pos = srv_start[servers][:, None] + np.arange(k)[None, :]
        gpu_rows.append(np.sort(order[pos], axis=1))
        n_srv.append(np.ones(len(servers), np.int32))
        subtree.append(topo.server_node[servers].astype(np.int32))
        qual.append(qcs[srv_start[servers] + k] - qcs[srv_start[servers]])
        leftover.append((srv_free[servers] - k).astype(np.int64))

    # Multi-server candidates: switch subtrees whose servers cannot hold k alone.
    switches = np.flatnonzero((node_free >= k) & (topo.kind == SWITCH))
    server_badness = (qcs[srv_start + np.minimum(srv_free, k)] - qcs[srv_start]) / np.maximum(
        np.minimum(srv_free, k), 1
    )
    compact_q: dict[int, float] = {}
    for node in switches:
        lo, hi = topo.node_srv_lo[node], topo.node_srv_hi[node]
        if srv_free[lo:hi].max() >= k:
            continue  # the best single server inside is already a candidate
        srv = np.arange(lo, hi)
        srv = srv[srv_free[srv] > 0]
        srv = srv[np.lexsort((srv, server_badness[srv], -srv_free[srv]))]
        take = np.minimum(
            srv_free[srv], np.maximum(k - np.concatenate([[0], np.cumsum(srv_free[srv])[:-1]]), 0)
        )
        used = take > 0
        srv, take = srv[used], take[used]
        pos = np.concatenate([srv_start[s] + np.arange(t) for s, t in zip(srv, take, strict=True)])
        gpu_rows.append(np.sort(order[pos])[None, :])
        n_srv.append(np.array([len(srv)], np.int32))
        subtree.append(np.array([node], np.int32))
        qual.append(np.array([q_sorted[pos].sum()]))
        leftover.append(np.array([node_free[node] - k], np.int64))
        compact_q[int(node)] = float(qual[-1][0])

    if robust and len(switches):
        ends = np.minimum(srv_start + k, len(q))
        srv_q = np.where(srv_free >= k, qcs[ends] - qcs[srv_start], np.inf)
        _health_first(topo, free, q, srv_free, node_free, k, switches, srv_q, compact_q, (gpu_rows, n_srv, subtree, qual, leftover))

    if not gpu_rows:
        return _empty(k)
    G = np.concatenate(gpu_rows).astype(np.int32)
    NS = np.concatenate(n_srv)
    ST = np.concatenate(subtree)
    QU = np.concatenate(qual)
    LO = np.concatenate(leftover)
    rank = np.lexsort((ST, LO, np.round(QU, 9), NS))
    G, NS, ST, QU = G[rank], NS[rank], ST[rank], QU[rank]
    # Deduplicate identical GPU sets (keep the first = best ranked).
    _, first = np.unique(G, axis=0, return_index=True)
    keep = np.sort(first)[:cap]
    return CandidateSet(G[keep], NS[keep], ST[keep], QU[keep])


def _health_first(
    topo: Topology,
    free: NDArray[np.bool_],
    q: NDArray[np.float64],
    srv_free: NDArray[np.int64],
    node_free: NDArray[np.int64],
    k: int,
    switches: NDArray[np.int64],
    srv_q: NDArray[np.float64],
    compact_q: dict[int, float],
    out: tuple[list, list, list, list, list],
) -> None:
    """Append each switch subtree's ``k`` healthiest free GPUs if healthier than its compact candidates."""
    gpu_rows, n_srv, subtree, qual, leftover = out
    # Skip a subtree at once if a compact candidate inside is made of its healthiest free GPUs.
    srv_qmin = np.minimum.reduceat(np.where(free, q, np.inf), topo.server_gpu_lo)
    rank: NDArray[np.int64] | None = None
    for node in switches:
        slo, shi = topo.node_srv_lo[node], topo.node_srv_hi[node]
        inside = min(float(srv_q[slo:shi].min()), compact_q.get(int(node), np.inf))
        if inside <= k * float(srv_qmin[slo:shi].min()) + 1e-9:
            continue
        if rank is None:
            g_all = np.flatnonzero(free)
            g_all = g_all[np.lexsort((g_all, -srv_free[topo.gpu_server[g_all]], np.round(q[g_all], 9)))]
            rank = np.full(topo.num_gpus, len(g_all), dtype=np.int64)  # busy GPUs rank last
            rank[g_all] = np.arange(len(g_all))
        glo, ghi = int(topo.node_gpu_lo[node]), int(topo.node_gpu_hi[node])
        r = rank[glo:ghi]
        g = glo + (np.argpartition(r, k - 1)[:k] if k < len(r) else np.arange(len(r)))
        qv = float(q[g].sum())
        if qv >= inside - 1e-9:
            continue  # a compact candidate is as healthy
        g = np.sort(g).astype(np.int32)
        gpu_rows.append(g[None, :])
        n_srv.append(np.array([len(np.unique(topo.gpu_server[g]))], np.int32))
        subtree.append(np.array([node], np.int32))
        qual.append(np.array([qv]))
        leftover.append(np.array([node_free[node] - k], np.int64))
