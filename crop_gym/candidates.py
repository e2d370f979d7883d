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
:attr:`ClusterState.version`, so jobs of the same size share one computation, and what every size
needs (the GPU order inside each server, free counts, badness prefix sums) is computed once per
version. What depends on the health alone (badness scores, the health order of each server's GPUs)
is kept until the health changes. Clusters with few servers run the per-server loops in plain Python
(numpy's per-call overhead dominates there); larger ones use vectorised numpy. Both give the same
candidates, bit for bit.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym._numeric import np_round9, np_sum
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
        keys: Each candidate's GPUs as a tuple of ints (hashable; ``None`` until first asked for,
            see :meth:`row_keys`).
    """

    gpus: NDArray[np.int32]
    num_servers: NDArray[np.int32]
    subtree: NDArray[np.int32]
    quality: NDArray[np.float64]
    keys: tuple[tuple[int, ...], ...] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.gpus)

    def row_keys(self) -> tuple[tuple[int, ...], ...]:
        """Each candidate's GPU indices as a tuple (computed once)."""
        if self.keys is None:
            object.__setattr__(self, "keys", tuple(map(tuple, self.gpus.tolist())))
        assert self.keys is not None
        return self.keys


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
            shared = cache.shared[robust] = _Shared(state, robust, cache)
        hit = shared.compute(int(k), int(max_candidates))
        cache.sets[key] = hit
    return hit


#: Clusters with at most this many servers (and switch subtrees with at most this many) run the
#: per-server loops in plain Python; larger ones use numpy. Both give identical candidates.
SMALL_SERVERS = 32


class _TopoData:
    """Static per-topology lists and arrays used by the generator."""

    __slots__ = (
        "G",
        "S",
        "arange_f",
        "arange_l",
        "gpu_server",
        "small",
        "srv_key2",
        "srv_lo",
        "srv_lo_arr",
        "srv_node",
        "srv_node_arr",
        "switches",
        "topo",
    )

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.G = topo.num_gpus
        self.S = topo.num_servers
        self.small = self.S <= SMALL_SERVERS
        self.srv_lo_arr = topo.server_gpu_lo.astype(np.int64)
        self.srv_lo: list[int] = self.srv_lo_arr.tolist()
        self.srv_node_arr = topo.server_node.astype(np.int64)
        self.srv_node: list[int] = self.srv_node_arr.tolist()
        self.gpu_server: list[int] = topo.gpu_server.tolist()
        # Sort key of a GPU in the per-version order: (server, busy) as 2 * server + busy.
        self.srv_key2 = (2 * topo.gpu_server).astype(np.int64)
        self.arange_f = np.arange(self.G + 1, dtype=np.float64)
        self.arange_l: list[float] = self.arange_f.tolist()
        # Switch subtrees in node order: (node, first server, end server, first GPU, end GPU).
        self.switches: list[tuple[int, int, int, int, int]] = [
            (
                int(n),
                int(topo.node_srv_lo[n]),
                int(topo.node_srv_hi[n]),
                int(topo.node_gpu_lo[n]),
                int(topo.node_gpu_hi[n]),
            )
            for n in np.flatnonzero(topo.kind == SWITCH)
        ]


_TOPO_DATA: weakref.WeakKeyDictionary[Topology, _TopoData] = weakref.WeakKeyDictionary()


def _topo_data(topo: Topology) -> _TopoData:
    td = _TOPO_DATA.get(topo)
    if td is None:
        td = _TOPO_DATA[topo] = _TopoData(topo)
    return td


class _HealthData:
    """What depends on the health alone: badness scores and each server's GPUs in health order."""

    __slots__ = ("base_order", "blocks", "key2", "q", "q_l", "q_round", "uniform")

    def __init__(self, state: ClusterState, robust: bool, td: _TopoData) -> None:
        topo = state.topology
        q = gpu_quality(state, robust)
        self.q = q
        self.q_round = np.round(q, 9)
        self.uniform = not robust or bool(np.all(q == 1.0))
        if self.uniform:
            # GPUs are numbered server by server, so (server, index) order is the identity.
            self.base_order = np.arange(td.G)
        else:
            self.base_order = np.lexsort((np.arange(td.G), q, topo.gpu_server))
        self.key2 = td.srv_key2[self.base_order]
        # Plain-Python copies for small clusters: each server's GPUs in health order.
        self.q_l: list[float] = q.tolist()
        order_l = self.base_order.tolist()
        lo = [*td.srv_lo, td.G]
        self.blocks: list[list[int]] = [order_l[lo[s] : lo[s + 1]] for s in range(td.S)]


class _Shared:
    """Per-version data every job size needs: GPU order per server, free counts, prefix sums.

    The GPU order lists, server by server, the free GPUs (healthiest and fastest first, then by
    index), then the busy ones. ``qcs`` are the prefix sums of the badness scores in that order, so
    a server's ``k`` best free GPUs have badness ``qcs[lo + k] - qcs[lo]``.
    """

    __slots__ = (
        "_compact",
        "_order",
        "_order_l",
        "_q_sorted",
        "_qcs",
        "_qs_l",
        "_rank",
        "_srv_free",
        "_sw_qmin",
        "_tier1",
        "free",
        "hd",
        "max_free",
        "n_free",
        "qcs_l",
        "srv_free_l",
        "sw_free",
        "sw_max",
        "td",
    )

    def __init__(self, state: ClusterState, robust: bool, cache: Any) -> None:
        td = _topo_data(state.topology)
        self.td = td
        health = state.health
        per_health = cache.health
        entry = per_health.get(robust)
        if entry is None or entry[0] is not health:
            entry = per_health[robust] = (health, _HealthData(state, robust, td))
        hd: _HealthData = entry[1]
        self.hd = hd
        free = state._free()
        self.free = free
        self._order: NDArray[np.intp] | None = None
        self._q_sorted: NDArray[np.float64] | None = None
        self._qcs: NDArray[np.float64] | None = None
        self._srv_free: NDArray[np.int64] | None = None
        self._order_l: list[int] | None = None
        self._qs_l: list[float] | None = None
        self.qcs_l: list[float] | None = None
        if td.small:
            # Plain Python: each server's free GPUs in health order, then its busy ones.
            free_l = free.tolist()
            order_l: list[int] = []
            srv_free_l: list[int] = []
            for blk in hd.blocks:
                fr = [g for g in blk if free_l[g]]
                srv_free_l.append(len(fr))
                order_l += fr
                if len(fr) < len(blk):
                    order_l += [g for g in blk if not free_l[g]]
            self._order_l = order_l
            if hd.uniform:
                self.qcs_l = td.arange_l
            else:
                q_l = hd.q_l
                qs = [q_l[g] for g in order_l]
                self._qs_l = qs
                qcs_l = [0.0]
                qcs_l += accumulate(qs)  # sequential, as np.cumsum
                self.qcs_l = qcs_l
        else:
            base = hd.base_order
            # Stable sort of the health order by (server, busy) == lexsort((index, q, busy, server)).
            order = base[np.argsort(hd.key2 + ~free[base], kind="stable")]
            self._order = order
            if hd.uniform:
                self._qcs = td.arange_f
            else:
                self._q_sorted = hd.q[order]
                qcs = np.zeros(td.G + 1)
                np.cumsum(self._q_sorted, out=qcs[1:])
                self._qcs = qcs
            srv_free = np.add.reduceat(free.view(np.uint8), td.srv_lo_arr, dtype=np.int64)
            self._srv_free = srv_free
            srv_free_l = srv_free.tolist()
        self.srv_free_l = srv_free_l
        self.n_free = sum(srv_free_l)
        self.max_free = max(srv_free_l, default=0)
        self.sw_free = [sum(srv_free_l[lo:hi]) for _, lo, hi, _, _ in td.switches]
        self.sw_max = [max(srv_free_l[lo:hi], default=0) for _, lo, hi, _, _ in td.switches]
        self._compact: dict[int, list[int]] = {}
        self._sw_qmin: list[float] | None = None
        self._rank: NDArray[np.int64] | None = None
        self._tier1: dict[int, list[int] | None] = {}

    # ----------------------------------------------------------- lazy data
    @property
    def order(self) -> NDArray[np.intp]:
        """The GPU order (server by server: free GPUs in health order, then busy ones)."""
        if self._order is None:
            assert self._order_l is not None
            self._order = np.array(self._order_l, dtype=np.intp)
        return self._order

    @property
    def order_l(self) -> list[int]:
        """:attr:`order` as a list."""
        if self._order_l is None:
            self._order_l = self.order.tolist()
        return self._order_l

    @property
    def q_sorted(self) -> NDArray[np.float64] | None:
        """The badness scores in :attr:`order` (``None`` when uniform)."""
        if self._q_sorted is None and self._qs_l is not None:
            self._q_sorted = np.array(self._qs_l)
        return self._q_sorted

    @property
    def qcs(self) -> NDArray[np.float64]:
        """Prefix sums of :attr:`q_sorted` (``qcs[0] = 0``)."""
        if self._qcs is None:
            assert self.qcs_l is not None
            self._qcs = np.array(self.qcs_l)
        return self._qcs

    def _qcs_list(self) -> list[float]:
        if self.qcs_l is None:
            self.qcs_l = self.qcs.tolist()
        return self.qcs_l

    @property
    def qs_l(self) -> list[float]:
        """The badness scores in :attr:`order`, as a list (non-uniform scores only)."""
        if self._qs_l is None:
            q_sorted = self.q_sorted
            assert q_sorted is not None
            self._qs_l = q_sorted.tolist()
        return self._qs_l

    @property
    def srv_free(self) -> NDArray[np.int64]:
        """Free GPUs per server."""
        if self._srv_free is None:
            self._srv_free = np.array(self.srv_free_l, dtype=np.int64)
        return self._srv_free

    def compact_order(self, i: int) -> list[int]:
        """Servers of switch ``i`` with a free GPU, most free first, then least bad, then index."""
        hit = self._compact.get(i)
        if hit is not None:
            return hit
        td = self.td
        _, slo, shi, _, _ = td.switches[i]
        if shi - slo <= SMALL_SERVERS:
            sf, lo_l = self.srv_free_l, td.srv_lo
            keyed: list[tuple[float, ...]]
            if self.hd.uniform:
                keyed = [(-sf[s], s) for s in range(slo, shi) if sf[s] > 0]
            else:
                qcs = self._qcs_list()
                keyed = [
                    (-sf[s], (qcs[lo_l[s] + sf[s]] - qcs[lo_l[s]]) / sf[s], s)
                    for s in range(slo, shi)
                    if sf[s] > 0
                ]
            keyed.sort()
            out = [int(t[-1]) for t in keyed]
        else:
            srv = np.arange(slo, shi)
            f = self.srv_free[slo:shi]
            srv = srv[f > 0]
            f = f[f > 0]
            a = td.srv_lo_arr[srv]
            bad = (self.qcs[a + f] - self.qcs[a]) / f
            out = [int(x) for x in srv[np.lexsort((srv, bad, -f))]]
        self._compact[i] = out
        return out

    def sw_qmin(self) -> list[float]:
        """Per switch, the smallest badness of a free GPU inside (inf if none)."""
        if self._sw_qmin is None:
            td = self.td
            if td.small:
                # A server's best free GPU comes first in its block of the order.
                qs, sf, lo_l = self.qs_l, self.srv_free_l, td.srv_lo
                srv_min = [qs[lo_l[s]] if sf[s] else np.inf for s in range(td.S)]
                self._sw_qmin = [min(srv_min[lo:hi]) for _, lo, hi, _, _ in td.switches]
            else:
                qf = np.where(self.free, self.hd.q, np.inf)
                self._sw_qmin = [float(qf[glo:ghi].min()) for _, _, _, glo, ghi in td.switches]
        return self._sw_qmin

    def tier1(self, i: int) -> list[int] | None:
        """Switch ``i``'s free GPUs whose rounded badness is the smallest inside, in health-first
        rank order (most free GPUs on their server first, then index); ``None`` unless all of
        them have exactly the smallest badness (then any ``k`` of them sum alike)."""
        if i in self._tier1:
            return self._tier1[i]
        td = self.td
        _, slo, shi, glo, ghi = td.switches[i]
        qmin = self.sw_qmin()[i]
        r0 = np_round9(qmin)
        out: list[int] | None
        if shi - slo <= SMALL_SERVERS:
            qs, order_l, sf, lo_l = self.qs_l, self.order_l, self.srv_free_l, td.srv_lo
            # A server's free GPUs come least bad first, equally bad ones by index: its GPUs of
            # badness qmin are a prefix of its block, already in rank order.
            out = []
            for s in sorted(range(slo, shi), key=lambda s: -sf[s]):  # stable: by index next
                a = lo_l[s]
                e = a + sf[s]
                end = bisect_right(qs, qmin, a, e)
                if end < e and np_round9(qs[end]) == r0:
                    out = None  # rounds like qmin without being equal: leave it to numpy
                    break
                out.extend(order_l[a:end])
        else:
            hd = self.hd
            idx = glo + np.flatnonzero(self.free[glo:ghi] & (hd.q_round[glo:ghi] == r0))
            if bool(np.all(hd.q[idx] == qmin)):
                srv_of = td.topo.gpu_server[idx]
                out = idx[np.lexsort((idx, -self.srv_free[srv_of]))].tolist()
            else:
                out = None
        self._tier1[i] = out
        return out

    def gpu_rank(self) -> NDArray[np.int64]:
        """Rank of every free GPU by (badness rounded, -free GPUs of its server, index); busy last."""
        if self._rank is None:
            td = self.td
            q = self.hd.q
            g_all = np.flatnonzero(self.free)
            srv_of = td.topo.gpu_server[g_all]
            g_all = g_all[np.lexsort((g_all, -self.srv_free[srv_of], np.round(q[g_all], 9)))]
            rank = np.full(td.G, len(g_all), dtype=np.int64)
            rank[g_all] = np.arange(len(g_all))
            self._rank = rank
        return self._rank

    # ----------------------------------------------------------- candidates
    def compute(self, k: int, cap: int) -> CandidateSet:
        """The candidate set of size ``k``, at most ``cap`` rows."""
        if self.n_free < k:
            return _empty(k)
        td = self.td
        uniform = self.hd.uniform
        # Single-server candidates: (rounded badness, free GPUs left, server node, server, badness).
        if td.small:
            singles = self._singles_py(k)
            extras = self._extras(k, singles, None)
        else:
            if k > self.max_free:  # no server holds k: no single-server row
                singles = []
                extras = self._extras(k, singles, None)
            else:
                ranked, srv_q = self._singles_np(k, uniform)
                # Without srv_q, health-first rows need the single rows only when some exist
                # (then scores are uniform and there are no health-first rows).
                extras = self._extras(k, [], srv_q)
                # Only the best cap + len(extras) single rows can make it (see below).
                need = cap + len(extras)
                singles = list(zip(*(a[:need].tolist() for a in ranked), strict=True))
        order_l = self.order_l
        lo_l = td.srv_lo
        if not extras:
            top = singles[:cap]
            rows = [sorted(order_l[lo_l[s] : lo_l[s] + k]) for _, _, _, s, _ in top]
            ns = [1] * len(top)
            st = [t[2] for t in top]
            qv = [t[4] for t in top]
        else:
            # Only the extra rows can repeat another row (single-server rows are disjoint), and each
            # repeat drops one row: the best cap + len(extras) single rows are enough.
            pool: list[tuple[Any, ...]] = [
                (1, rq, lo, node, 0, sorted(order_l[lo_l[s] : lo_l[s] + k]), q)
                for rq, lo, node, s, q in singles[: cap + len(extras)]
            ]
            for e, (row, n_srv, node, q, lo) in enumerate(extras):
                pool.append((n_srv, np_round9(q), lo, node, 1 + e, row, q))
            pool.sort(key=_rank_key)
            seen: set[tuple[int, ...]] = set()
            rows, ns, st, qv = [], [], [], []
            for r in pool:
                t = tuple(r[5])
                if t in seen:
                    continue
                seen.add(t)
                rows.append(r[5])
                ns.append(r[0])
                st.append(r[3])
                qv.append(r[6])
                if len(rows) == cap:
                    break
        if not rows:
            return _empty(k)
        keys = tuple(map(tuple, rows))
        return CandidateSet(
            np.array(rows, dtype=np.int32).reshape(len(rows), k),
            np.array(ns, dtype=np.int32),
            np.array(st, dtype=np.int32),
            np.array(qv, dtype=np.float64),
            keys,
        )

    def _singles_py(self, k: int) -> list[tuple[float, int, int, int, float]]:
        td = self.td
        qcs = self.qcs_l
        assert qcs is not None
        sf, lo_l, node_l = self.srv_free_l, td.srv_lo, td.srv_node
        out = []
        if self.hd.uniform:
            fk = float(k)
            for s in range(td.S):
                if sf[s] >= k:
                    out.append((fk, sf[s] - k, node_l[s], s, fk))
        else:
            for s in range(td.S):
                if sf[s] >= k:
                    a = lo_l[s]
                    q = qcs[a + k] - qcs[a]  # finite, so np_round9(q) is:
                    out.append((round(q * 1e9) / 1e9, sf[s] - k, node_l[s], s, q))
        out.sort()
        return out

    def _singles_np(
        self, k: int, uniform: bool
    ) -> tuple[tuple[NDArray[Any], ...], NDArray[np.float64] | None]:
        """Single-server rows as arrays (rounded badness, free GPUs left, server node, server,
        badness) in rank order, and each server's single-row badness (inf if none; ``None`` when
        scores are uniform or no server holds ``k``)."""
        td = self.td
        fit = np.flatnonzero(self.srv_free >= k)
        a = td.srv_lo_arr[fit]
        lo = self.srv_free[fit] - k
        st = td.srv_node_arr[fit]
        if uniform or len(fit) == 0:
            sel = np.lexsort((st, lo))
            q = np.full(len(fit), float(k))
            return (q, lo[sel], st[sel], fit[sel], q), None
        q = self.qcs[a + k] - self.qcs[a]
        rq = np.round(q, 9)
        sel = np.lexsort((st, lo, rq))
        srv_q = np.full(td.S, np.inf)
        srv_q[fit] = q
        return (rq[sel], lo[sel], st[sel], fit[sel], q[sel]), srv_q

    def _extras(
        self,
        k: int,
        singles: list[tuple[float, int, int, int, float]],
        srv_q: NDArray[np.float64] | None,
    ) -> list[tuple[list[int], int, int, float, int]]:
        """Multi-server compact rows and health-first rows: (gpus, servers, node, badness, left)."""
        td = self.td
        out: list[tuple[list[int], int, int, float, int]] = []
        compact_q: dict[int, float] = {}
        uniform = self.hd.uniform
        sw_free, sw_max = self.sw_free, self.sw_max
        for i, (node, _, _, _, _) in enumerate(td.switches):
            nf = sw_free[i]
            if nf < k or sw_max[i] >= k:
                continue  # too few free GPUs, or a single server inside holds k
            sf, lo_l = self.srv_free_l, td.srv_lo
            need = k
            pos: list[int] = []
            n_srv = 0
            for s in self.compact_order(i):
                f = sf[s]
                t = f if f < need else need
                a = lo_l[s]
                pos.extend(range(a, a + t))
                n_srv += 1
                need -= t
                if need == 0:
                    break
            if uniform:
                q = float(k)
            elif k <= 32 and (td.small or self._qs_l is not None):
                qs = self.qs_l
                q = np_sum([qs[p] for p in pos])
            else:
                q_sorted = self.q_sorted
                assert q_sorted is not None
                q = float(q_sorted[pos].sum())
            order_l = self.order_l
            out.append((sorted([order_l[p] for p in pos]), n_srv, node, q, nf - k))
            compact_q[node] = q
        if not uniform:
            self._health_first(k, singles, srv_q, compact_q, out)
        return out

    def _health_first(
        self,
        k: int,
        singles: list[tuple[float, int, int, int, float]],
        srv_q: NDArray[np.float64] | None,
        compact_q: dict[int, float],
        out: list[tuple[list[int], int, int, float, int]],
    ) -> None:
        """Append each switch subtree's ``k`` healthiest free GPUs if healthier than its compact
        candidates."""
        td = self.td
        sw_qmin = None
        srv_q_l: list[float] | None = None
        for i, (node, slo, shi, glo, ghi) in enumerate(td.switches):
            nf = self.sw_free[i]
            if nf < k:
                continue
            if srv_q is not None:
                best = float(srv_q[slo:shi].min())
            else:
                if srv_q_l is None:
                    srv_q_l = [np.inf] * td.S
                    for t in singles:
                        srv_q_l[t[3]] = t[4]
                best = min(srv_q_l[slo:shi])
            inside = min(best, compact_q.get(node, np.inf))
            if sw_qmin is None:
                sw_qmin = self.sw_qmin()
            # Skip a subtree at once if a compact candidate inside is made of its healthiest GPUs.
            if inside <= k * sw_qmin[i] + 1e-9:
                continue
            t1 = self.tier1(i)
            if t1 is not None and len(t1) >= k:
                # The k best are k GPUs of equal badness: their sum does not depend on the order.
                gl: list[int] = t1[:k]
                q = np_sum([sw_qmin[i]] * k)
            else:
                r = self.gpu_rank()[glo:ghi]
                g = glo + (np.argpartition(r, k - 1)[:k] if k < len(r) else np.arange(len(r)))
                q = float(self.hd.q[g].sum())
                gl = g.tolist()
            if q >= inside - 1e-9:
                continue  # a compact candidate is as healthy
            gl.sort()
            gs = td.gpu_server
            out.append((gl, len({gs[x] for x in gl}), node, q, nf - k))


def _rank_key(r: tuple[Any, ...]) -> tuple[Any, ...]:
    return r[:5]
