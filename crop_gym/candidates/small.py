"""The plain-Python generator for small clusters (numpy's per-call overhead dominates there).

:class:`_Small` is the per-version data of a small cluster; it keeps, from one version to the next,
every :class:`_Server` and :class:`_Switch` whose free GPUs did not change, with the rows already
computed for them. It gives the same candidates as :class:`~crop_gym.candidates.vectorised._Shared`,
bit for bit.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from itertools import accumulate, compress
from operator import attrgetter

import numpy as np

from crop_gym._numeric import np_round9, np_sum
from crop_gym.candidates.candidate_set import CandidateSet, _assemble, _badness_of, _empty, _Row
from crop_gym.candidates.data import _HealthData
from crop_gym.objective import ClusterState

#: Cap on the entries of each server's memo in :class:`~crop_gym.candidates.data._HealthData` (a
#: full memo is cleared): every free-GPU pattern of a server of up to 8 GPUs fits, and the memory
#: stays bounded.
_MEMO_CAP = 256

#: bytes.translate table swapping 0 and 1: free flags to busy flags.
_FLIP = bytes.maketrans(b"\x00\x01", b"\x01\x00")

#: The bits of each byte value as bytes 0/1, lowest first (a constant).
_BITS8 = tuple(bytes((b >> i) & 1 for i in range(8)) for b in range(256))


def _bits(key: int, n: int) -> bytes:
    """The ``n`` lowest bits of ``key`` (``key < 2**n``) as bytes 0/1, lowest first (padded with
    zeros to a multiple of 8)."""
    if n <= 8:
        return _BITS8[key]
    return b"".join([_BITS8[(key >> i) & 255] for i in range(0, n, 8)])


class _Server:
    """One server under one health, for one pattern of free GPUs and one ``base`` (small
    clusters): its free GPUs, badness prefix sums and single-server rows.

    ``cs[i]`` is the prefix sum of the badness along the global GPU order (server by server:
    free GPUs, healthiest first, then busy ones) up to the server's ``i``-th GPU, from ``base``
    (the sum over the servers before), by the same sequential additions as one global
    ``accumulate``, so bit-identical to it. Floating-point sums are not associative, so the
    prefix sums (and all they give) are only reused while ``base`` is the same: see
    :meth:`rebased`.

    Attributes:
        s, node: The server and its node index.
        free: The free GPUs, healthiest and fastest first (then by index).
        nf: ``len(free)``.
        qs: The badness of the free GPUs then the busy ones, in that order (``None`` when
            scores are uniform: any ``k`` GPUs then have badness ``k``, and ``cs`` is ``None``).
        qmin: Badness of the healthiest free GPU (``inf`` if none).
        end: ``cs[-1]``, the next server's ``base``.
        avg: Average badness of its free GPUs, ``(cs[nf] - cs[0]) / nf`` (0.0 if none or when
            scores are uniform): a subtree's compact order puts the servers with the most free
            GPUs first, then the least bad on average, then by index.
        singles: Single-server row of ``k`` GPUs, by ``k``.
    """

    __slots__ = (
        "_tier",
        "avg",
        "base",
        "cs",
        "end",
        "free",
        "nf",
        "node",
        "qmin",
        "qs",
        "s",
        "singles",
    )

    cs: list[float] | None

    def __init__(
        self,
        s: int,
        node: int,
        blk: list[int],
        qblk: list[float] | None,
        flags: bytes,
        base: float,
    ) -> None:
        """``blk``: the server's GPUs in health order, ``qblk`` their badness (``None`` when
        uniform), ``flags`` whether each is free (bytes 0/1, same order)."""
        self.s = s
        self.node = node
        free = self.free = list(compress(blk, flags))
        nf = self.nf = len(free)
        self._tier: tuple[list[int], bool, float] | None = None
        self.singles: dict[int, _Row] = {}
        self.base = base
        if qblk is None:
            self.qs = self.cs = None
            self.qmin = 1.0 if nf else np.inf
            self.end = base
            self.avg = 0.0
            return
        if nf == len(blk):
            qs = qblk
        else:  # free GPUs first, then busy ones
            qs = list(compress(qblk, flags))
            qs += compress(qblk, flags.translate(_FLIP))
        self.qs = qs
        self.qmin = qs[0] if nf else np.inf
        self._set_cs(base)

    def _set_cs(self, base: float) -> None:
        """The prefix sums from ``base`` and what they give."""
        assert self.qs is not None
        cs = self.cs = list(accumulate(self.qs, initial=base))
        self.end = cs[-1]
        nf = self.nf
        self.avg = (cs[nf] - cs[0]) / nf if nf else 0.0

    def rebased(self, base: float) -> _Server:
        """The same server with its prefix sums from another ``base`` (a new object: earlier
        versions keep this one intact)."""
        new = object.__new__(_Server)
        new.s, new.node, new.free, new.nf = self.s, self.node, self.free, self.nf
        new.qs, new.qmin, new._tier = self.qs, self.qmin, self._tier
        new.singles = {}
        new.base = base
        new._set_cs(base)
        return new

    def single(self, k: int) -> _Row:
        """The server's single-server row of ``k`` GPUs (``k <= nf``)."""
        t = self.singles.get(k)
        if t is None:
            cs = self.cs
            if cs is None:
                q = rq = float(k)
            else:
                q = cs[k] - cs[0]
                rq = round(q * 1e9) / 1e9  # q is finite, so this is np_round9(q)
            t = self.singles[k] = (
                1,
                rq,
                self.nf - k,
                self.node,
                0,
                tuple(sorted(self.free[:k])),
                q,
            )
        return t

    def tier(self) -> tuple[list[int], bool, float]:
        """``(best, tie, r)``: ``best`` are the free GPUs of badness exactly ``qmin`` (a prefix
        of ``free``); ``tie`` tells whether the next free GPU's badness rounds like ``qmin`` all
        the same; ``r`` is ``np_round9(qmin)``."""
        if self._tier is None:
            qs, nf, qmin = self.qs, self.nf, self.qmin
            assert qs is not None  # (only asked when scores vary)
            r = np_round9(qmin)
            n = bisect_right(qs, qmin, 0, nf)  # free GPUs come least bad first
            self._tier = (self.free[:n], n < nf and np_round9(qs[n]) == r, r)
        return self._tier


class _Switch:
    """One switch subtree for one list of its :class:`_Server` (small clusters): its free GPUs,
    the server orders its rows need, and its rows by job size. A pure function of those servers
    (and the health), so a later version with the same servers reuses it and its rows.

    Attributes:
        spec: Its entry of :attr:`~crop_gym.candidates.data._TopoData.switches` (node, servers,
            GPUs).
        srv: Its servers.
        every: Whether it holds every server (the root).
        nf, mx, qmin: Its free GPUs, the most free GPUs of a server inside, and the smallest
            badness of a free GPU inside (inf if none; 1 if scores are uniform).
        extras: Per job size ``k <= nf``: its multi-server and health-first rows.
    """

    __slots__ = ("_compact", "_tier1", "every", "extras", "mx", "nf", "qmin", "spec", "srv")

    def __init__(
        self,
        spec: tuple[int, int, int, int, int],
        srv: list[_Server],
        every: bool,
        nf: int,
        mx: int,
        qmin: float,
    ) -> None:
        self.spec = spec
        self.srv = srv
        self.every = every
        self.nf = nf
        self.mx = mx
        self.qmin = qmin
        self._compact: list[_Server] | None = None
        self._tier1: tuple[list[int], list[int]] | bool | None = False  # False: not computed yet
        self.extras: dict[int, tuple[_Row, ...]] = {}

    def compact(self) -> list[_Server]:
        """Servers with a free GPU in compact order (see :attr:`_Server.avg`)."""
        out = self._compact
        if out is None:
            # Two stable sorts (the servers come by index) with plain keys: faster than one
            # with (-nf, avg, s) tuples.
            out = sorted(filter(_nf_of, self.srv), key=_avg_of)
            out.sort(key=_nf_of, reverse=True)  # (stable also in reverse)
            self._compact = out
        return out

    def tier1(self) -> tuple[list[int], list[int]] | None:
        """The free GPUs inside of the smallest badness ``qmin``, in health-first rank order
        (most free GPUs on their server first, then index), and where each server's run of them
        ends in that list; ``None`` if some other free GPU's badness rounds like ``qmin`` (then
        the rank order is left to :meth:`_Small._best_by_rank`)."""
        out = self._tier1
        if out is False:
            out = self._tier1 = self._tier1_of()
        return out  # type: ignore[return-value]

    def _tier1_of(self) -> tuple[list[int], list[int]] | None:
        qmin = self.qmin
        r0: float | None = None  # np_round9(qmin), when needed
        out: list[int] = []
        ends: list[int] = []
        # Most free GPUs first, then by index (sorting is stable, also in reverse).
        for e in sorted(filter(_nf_of, self.srv), key=_nf_of, reverse=True):
            # Free GPUs come least bad first, equally bad ones by index: those of badness
            # qmin are a prefix, in rank order.
            best, tie, r = e._tier or e.tier()
            if e.qmin == qmin:
                if tie:
                    return None
                out += best
                ends.append(len(out))
            else:
                if r0 is None:
                    r0 = np_round9(qmin)
                if r == r0:
                    return None
        return out, ends


_nf_of = attrgetter("nf")
_avg_of = attrgetter("avg")


class _Small:
    """Per-version data of a small cluster (plain Python): every server's :class:`_Server` and
    every switch subtree's :class:`_Switch`, taken from the last version where its free GPUs (and
    for a server, the prefix sum before it) did not change. Gives the same candidates as
    :class:`~crop_gym.candidates.vectorised._Shared`, bit for bit (``tests/test_fastpaths.py``
    checks it along random placements, removals and health changes)."""

    __slots__ = ("hd", "max_free", "n_free", "srv", "sws", "td")

    def __init__(self, state: ClusterState, hd: _HealthData) -> None:
        td = self.td = hd.td
        self.hd = hd
        uniform = hd.uniform
        # The free GPUs as an int (bit g: GPU g); a server's bits are its memo key.
        fx = int.from_bytes(np.packbits(state.free_mask, bitorder="little").tobytes(), "little")
        specs = hd.servers
        n_srv = len(specs)
        last = hd.last
        if last is None:
            srv: list[_Server] = [None] * n_srv  # type: ignore[list-item]
            nfs = [0] * n_srv
            qmins = [0.0] * n_srv
            first, end = 0, n_srv
        else:
            # Only the servers from the first to the last GPU whose flag changed since the last
            # version can have changed (and the ones after them if their base did).
            last_fx, srv, nfs, qmins, last_sws = last
            x = fx ^ last_fx  # bit g of x: whether GPU g changed
            if not x:
                first = end = n_srv
            else:
                first = td.gpu_server[(x & -x).bit_length() - 1]
                end = td.gpu_server[x.bit_length() - 1] + 1
                srv = srv.copy()
                nfs = nfs.copy()
                qmins = qmins.copy()
        base = srv[first - 1].end if first else 0.0  # the prefix sum at a server's first GPU
        s = first
        while s < n_srv:
            if s < end:
                lo, hi, node, blk, qblk, memo, pick = specs[s]
                key = (fx >> lo) & ((1 << (hi - lo)) - 1)
                e = memo.get(key)
                if e is None:
                    if len(memo) >= _MEMO_CAP:
                        memo.clear()
                    # Its GPUs' free flags in health order.
                    n = hi - lo
                    flags = bytes(pick(_BITS8[key] if n <= 8 else _bits(key, n)))
                    e = memo[key] = _Server(s, node, blk, qblk, flags, base)
                elif e.base != base and not uniform:
                    e = memo[key] = e.rebased(base)
                nfs[s] = e.nf
                qmins[s] = e.qmin
            else:
                e = srv[s]
                if uniform or e.base == base:
                    break  # this server and the ones after it are as in the last version
                lo, hi, _, _, _, memo, _ = specs[s]
                e = memo[(fx >> lo) & ((1 << (hi - lo)) - 1)] = e.rebased(base)
            srv[s] = e
            base = e.end
            s += 1
        end = s  # the servers [first, end) may differ from the last version's
        self.srv = srv
        n_free = self.n_free = sum(nfs)
        max_free = self.max_free = max(nfs)
        if last is None:
            sws: list[_Switch] = [None] * len(td.switches)  # type: ignore[list-item]
        elif first < end:
            sws = last_sws.copy()
        else:
            sws = last_sws
        for i, spec, lo, hi in td.sw_ranges:
            if last is not None and (hi <= first or lo >= end):
                continue  # same servers
            if hi - lo == n_srv:
                sws[i] = _Switch(spec, srv, True, n_free, max_free, min(qmins))
            else:
                f = nfs[lo:hi]
                sws[i] = _Switch(spec, srv[lo:hi], False, sum(f), max(f), min(qmins[lo:hi]))
        self.sws = sws
        hd.last = (fx, srv, nfs, qmins, sws)

    def _best_by_rank(self, d: _Switch, k: int) -> tuple[list[int], float]:
        """:func:`~crop_gym.candidates.vectorised._best_by_rank` of switch subtree ``d``
        (``k <= d.nf``), with the ranks of :func:`~crop_gym.candidates.vectorised._gpu_rank`
        replaced by keys in the same order, computed for its GPUs only.

        ``np.argpartition`` only compares the ranks, so keys that compare alike (busy GPUs all
        equal and after the free ones) give the same GPUs in the same order, and so the same
        (order-dependent) badness sum."""
        hd = self.hd
        _, _, _, glo, ghi = d.spec
        q_rank = hd.q_rank
        # Key of a free GPU g on a server with nf free GPUs: (q_rank[g], -nf, g) as one int.
        n = ghi - glo
        step = (n + 1) * n
        busy = len(q_rank) * step
        keys = [busy] * n
        for e in d.srv:
            off = (n - e.nf) * n - glo
            for g in e.free:
                keys[g - glo] = q_rank[g] * step + off + g
        if k < n:
            gl = np.argpartition(np.array(keys), k - 1)[:k]
            gl += glo
            out = gl.tolist()
        else:
            out = list(range(glo, ghi))
        q_l = hd.q_l
        return out, np_sum([q_l[g] for g in out])

    def compute(self, k: int, cap: int) -> CandidateSet:
        """The candidate set of size ``k``, at most ``cap`` rows (see
        :meth:`~crop_gym.candidates.vectorised._Shared.compute`)."""
        if self.n_free < k:
            return _empty(k)
        uniform = self.hd.uniform
        singles: list[_Row] = []
        if k <= self.max_free:
            singles = [e.singles.get(k) or e.single(k) for e in self.srv if e.nf >= k]
            singles.sort()  # never compares past the server node
        extras: list[_Row] = []
        for d in self.sws:
            if d.nf >= k:
                rows = d.extras.get(k)
                if rows is None:
                    if k <= d.mx:
                        # Shortcut of _extras, which gives no rows here: a server inside holds k
                        # (no multi-server row), and the scores are uniform or a single-server
                        # row inside proves the health-first row's skip (compute made the rows
                        # of every server inside above).
                        proven = uniform
                        if not proven:
                            bound = k * d.qmin + 1e-9
                            if d.every:  # (the best-ranked row usually has the least badness)
                                proven = singles[0][6] <= bound
                            else:
                                for e in d.srv:
                                    if e.nf >= k and e.singles[k][6] <= bound:
                                        proven = True
                                        break
                        if proven:
                            d.extras[k] = ()
                            continue
                    rows = self._extras(d, k, singles)
                if rows:
                    extras += rows
        return _assemble(k, cap, singles, extras)

    def _extras(self, d: _Switch, k: int, singles: list[_Row]) -> tuple[_Row, ...]:
        """Switch subtree ``d``'s multi-server row (if no server inside holds ``k``) and
        health-first row (if healthier than every compact row inside) for ``k <= d.nf``.

        Stored in ``d.extras``. ``singles``: all single-server rows, in rank order."""
        hd = self.hd
        uniform = hd.uniform
        node, nf = d.spec[0], d.nf
        rows: list[_Row] = []
        cq = np.inf  # the multi-server row's badness
        if d.mx < k:
            need = k
            gpus: list[int] = []
            vals: list[float] = []
            n_srv = 0
            for e in d.compact():
                n = e.nf if e.nf < need else need
                gpus += e.free[:n]
                if e.qs is not None:
                    vals += e.qs[:n]
                n_srv += 1
                need -= n
                if need == 0:
                    break
            if uniform:
                cq = float(k)
            elif k <= 32:
                cq = np_sum(vals)
            else:
                cq = float(np.array(vals).sum())
            gpus.sort()
            # cq is finite, so np_round9(cq) is round(cq * 1e9) / 1e9.
            rows.append((n_srv, round(cq * 1e9) / 1e9, nf - k, node, 1, tuple(gpus), cq))
        if not uniform:
            m = d.qmin
            bound = k * m + 1e-9
            # The badness of the single-server rows inside (none if no server inside holds k).
            bads: Iterable[float] = ()
            if d.every:
                bads = map(_badness_of, singles)
            elif k <= d.mx:
                bads = ((e.singles.get(k) or e.single(k))[6] for e in d.srv if e.nf >= k)
            # Their best, unless one proves the skip below (usually the best-ranked one).
            best = np.inf
            proven = False
            for b in bads:
                if b <= bound:
                    proven = True
                    break
                if b < best:
                    best = b
            if not proven:
                inside = min(best, cq)
                # Skip if a compact candidate inside is made of its healthiest GPUs.
                if inside > bound:
                    t1 = d.tier1()
                    if t1 is not None and len(t1[0]) >= k:
                        # The k best are k GPUs of equal badness m: any k of them sum alike.
                        gl: list[int] = t1[0][:k]
                        sums = hd.rep_sums
                        q = sums.get((m, k))
                        if q is None:
                            q = sums[(m, k)] = np_sum([m] * k)
                        n_srv = bisect_left(t1[1], k) + 1  # the servers whose run starts < k
                    else:
                        gl, q = self._best_by_rank(d, k)
                        n_srv = len(set(map(self.td.gpu_server.__getitem__, gl)))
                    if not q >= inside - 1e-9:  # else a compact candidate is as healthy
                        gl.sort()
                        rows.append((n_srv, round(q * 1e9) / 1e9, nf - k, node, 2, tuple(gl), q))
        out = d.extras[k] = tuple(rows)
        return out
