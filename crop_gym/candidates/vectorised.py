"""The numpy generator for large clusters.

:class:`_Shared` is the per-version data every job size needs (GPU order per server, free counts,
prefix sums), vectorised; its per-switch loops over few servers (at most
:data:`~crop_gym.candidates.data.SMALL_SERVERS`) run in plain Python.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym._numeric import np_round9, np_sum
from crop_gym.candidates import data as _data
from crop_gym.candidates.candidate_set import CandidateSet, _assemble, _empty, _Row
from crop_gym.candidates.data import _HealthData
from crop_gym.objective import ClusterState


def _gpu_rank(
    hd: _HealthData, free: NDArray[np.bool_], srv_free: NDArray[np.int64]
) -> NDArray[np.int64]:
    """Rank of every free GPU by (badness rounded, -free GPUs of its server, index); busy GPUs
    rank after all free ones."""
    td = hd.td
    g_all = np.flatnonzero(free)
    srv_of = td.topo.gpu_server[g_all]
    g_all = g_all[np.lexsort((g_all, -srv_free[srv_of], hd.q_round[g_all]))]
    rank = np.full(td.G, len(g_all), dtype=np.int64)
    rank[g_all] = np.arange(len(g_all))
    return rank


def _best_by_rank(
    rank: NDArray[np.int64], q: NDArray[np.float64], glo: int, ghi: int, k: int
) -> tuple[list[int], float]:
    """The ``k`` best-ranked GPUs of ``[glo, ghi)`` (unsorted) and their badness sum."""
    r = rank[glo:ghi]
    g = glo + (np.argpartition(r, k - 1)[:k] if k < len(r) else np.arange(len(r)))
    return g.tolist(), float(q[g].sum())


class _Shared:
    """Per-version data every job size needs: GPU order per server, free counts, prefix sums.

    The GPU order lists, server by server, the free GPUs (healthiest and fastest first, then by
    index), then the busy ones. ``qcs`` are the prefix sums of the badness scores in that order, so
    a server's ``k`` best free GPUs have badness ``qcs[lo + k] - qcs[lo]``.

    This is the numpy version for large clusters (per-switch loops over few servers run in plain
    Python); small clusters use :class:`~crop_gym.candidates.small._Small`.
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

    def __init__(self, state: ClusterState, hd: _HealthData) -> None:
        td = self.td = hd.td
        self.hd = hd
        free = state.free_mask
        self.free = free
        self._order: NDArray[np.intp] | None = None
        self._q_sorted: NDArray[np.float64] | None = None
        self._qcs: NDArray[np.float64] | None = None
        self._srv_free: NDArray[np.int64] | None = None
        self._order_l: list[int] | None = None
        self._qs_l: list[float] | None = None
        self.qcs_l: list[float] | None = None
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
        if shi - slo <= _data.SMALL_SERVERS:
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
        if shi - slo <= _data.SMALL_SERVERS:
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
        """See :func:`_gpu_rank` (computed once per version)."""
        if self._rank is None:
            self._rank = _gpu_rank(self.hd, self.free, self.srv_free)
        return self._rank

    # ----------------------------------------------------------- candidates
    def compute(self, k: int, cap: int) -> CandidateSet:
        """The candidate set of size ``k``, at most ``cap`` rows."""
        if self.n_free < k:
            return _empty(k)
        if k > self.max_free:  # no server holds k: no single-server row
            singles: list[_Row] = []
            extras = self._extras(k, None)
        else:
            ranked, srv_q = self._singles_np(k, self.hd.uniform)
            # Without srv_q (uniform scores), there are no health-first rows.
            extras = self._extras(k, srv_q)
            # Only the best cap + len(extras) single rows can make it (see _assemble).
            need = cap + len(extras)
            order_l, lo_l = self.order_l, self.td.srv_lo
            singles = [
                (1, rq, lo, node, 0, tuple(sorted(order_l[lo_l[s] : lo_l[s] + k])), q)
                for rq, lo, node, s, q in zip(*(a[:need].tolist() for a in ranked), strict=True)
            ]
        return _assemble(k, cap, singles, extras)

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

    def _extras(self, k: int, srv_q: NDArray[np.float64] | None) -> list[_Row]:
        """Multi-server compact rows, then health-first rows (``srv_q``: each server's
        single-row badness, inf if none; ``None`` when no server holds ``k``)."""
        td = self.td
        out: list[_Row] = []
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
            elif k <= 32 and self._qs_l is not None:
                qs = self.qs_l
                q = np_sum([qs[p] for p in pos])
            else:
                q_sorted = self.q_sorted
                assert q_sorted is not None
                q = float(q_sorted[pos].sum())
            order_l = self.order_l
            row = tuple(sorted([order_l[p] for p in pos]))
            out.append((n_srv, np_round9(q), nf - k, node, 1, row, q))
            compact_q[node] = q
        if not uniform:
            self._health_first(k, srv_q, compact_q, out)
        return out

    def _health_first(
        self,
        k: int,
        srv_q: NDArray[np.float64] | None,
        compact_q: dict[int, float],
        out: list[_Row],
    ) -> None:
        """Append each switch subtree's ``k`` healthiest free GPUs if healthier than its compact
        candidates."""
        td = self.td
        sw_qmin = None
        for i, (node, slo, shi, glo, ghi) in enumerate(td.switches):
            nf = self.sw_free[i]
            if nf < k:
                continue
            best = float(srv_q[slo:shi].min()) if srv_q is not None else np.inf
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
                gl, q = _best_by_rank(self.gpu_rank(), self.hd.q, glo, ghi, k)
            if q >= inside - 1e-9:
                continue  # a compact candidate is as healthy
            gl.sort()
            gs = td.gpu_server
            out.append((len({gs[x] for x in gl}), np_round9(q), nf - k, node, 2, tuple(gl), q))
