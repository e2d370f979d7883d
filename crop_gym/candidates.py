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
is kept until the health changes. Clusters with few servers work in plain Python (numpy's per-call
overhead dominates there) and keep, from one version to the next, every server and switch subtree
whose free GPUs did not change, with the rows already computed for them (a placement changes a
server or two); larger ones use vectorised numpy. Both give the same candidates, bit for bit.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import FrozenInstanceError
from itertools import accumulate, chain, compress
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym._numeric import np_round9, np_sum
from crop_gym.errors import check_range
from crop_gym.objective import ClusterState
from crop_gym.topology import SWITCH, Topology

__all__ = ["CandidateSet", "candidate_placements", "candidate_sets", "gpu_quality"]


class CandidateSet:
    """Candidate placements for one job size (immutable).

    The generator hands over its rows as tuples and builds the arrays on first access: the
    environments mostly read :meth:`row_keys` and one row.

    Attributes:
        gpus: ``int32[C, k]`` sorted GPU indices of each candidate.
        num_servers: ``int32[C]`` servers spanned by each candidate.
        subtree: ``int32[C]`` node index of the subtree the candidate was taken from.
        quality: ``float64[C]`` sum of the GPUs' badness scores (lower is healthier).
        keys: Each candidate's GPUs as a tuple of ints (hashable; see :meth:`row_keys`).
    """

    __slots__ = ("_arrays", "_src", "keys")

    _arrays: list[NDArray[Any] | None]
    _src: tuple[int, list[tuple[Any, ...]]] | None
    keys: tuple[tuple[int, ...], ...]

    def __init__(
        self,
        gpus: NDArray[np.int32],
        num_servers: NDArray[np.int32],
        subtree: NDArray[np.int32],
        quality: NDArray[np.float64],
        keys: tuple[tuple[int, ...], ...] | None = None,
    ) -> None:
        if keys is None:
            keys = tuple(map(tuple, gpus.tolist()))
        _set_arrays(self, [gpus, num_servers, subtree, quality])
        _set_src(self, None)
        _set_keys(self, keys)

    @classmethod
    def _from_rows(cls, k: int, rows: list[tuple[Any, ...]]) -> CandidateSet:
        """A set of the (non-empty) generator rows ``rows`` of ``k`` GPUs (see ``_Row``: servers
        spanned at index 0, subtree node at 3, GPUs at 5, badness at 6), whose arrays are built
        when first read."""
        self = object.__new__(cls)
        _set_arrays(self, [None, None, None, None])
        _set_src(self, (k, rows))
        _set_keys(self, tuple(map(_gpus_of, rows)))
        return self

    def _array(self, j: int) -> NDArray[Any]:
        """Array ``j`` of (gpus, num_servers, subtree, quality), built on first use."""
        a = self._arrays[j]
        if a is None:
            src, keys = self._src, self.keys
            assert src is not None
            k, rows = src
            if j == 0:
                n = len(keys)
                a = np.fromiter(chain.from_iterable(keys), np.int32, n * k).reshape(n, k)
            elif j == 1:
                a = np.array([r[0] for r in rows], dtype=np.int32)
            elif j == 2:
                a = np.array([r[3] for r in rows], dtype=np.int32)
            else:
                a = np.array([r[6] for r in rows], dtype=np.float64)
            self._arrays[j] = a
        return a

    @property
    def gpus(self) -> NDArray[np.int32]:
        """``int32[C, k]`` sorted GPU indices of each candidate."""
        return self._array(0)

    @property
    def num_servers(self) -> NDArray[np.int32]:
        """``int32[C]`` servers spanned by each candidate."""
        return self._array(1)

    @property
    def subtree(self) -> NDArray[np.int32]:
        """``int32[C]`` node index of the subtree each candidate was taken from."""
        return self._array(2)

    @property
    def quality(self) -> NDArray[np.float64]:
        """``float64[C]`` sum of each candidate's badness scores (lower is healthier)."""
        return self._array(3)

    def __len__(self) -> int:
        return len(self.keys)

    def row(self, c: int) -> NDArray[np.int32]:
        """``int32[k]`` sorted GPU indices of candidate ``c`` (without building :attr:`gpus`)."""
        a = self._arrays[0]
        if a is not None:
            return a[c]
        return np.array(self.keys[c], dtype=np.int32)

    def row_keys(self) -> tuple[tuple[int, ...], ...]:
        """Each candidate's GPU indices as a tuple."""
        return self.keys

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Slots and a frozen __setattr__: pickle and copy through the public constructor.
        return (CandidateSet, (self.gpus, self.num_servers, self.subtree, self.quality, self.keys))

    def __repr__(self) -> str:
        return (
            f"CandidateSet(gpus={self.gpus!r}, num_servers={self.num_servers!r}, "
            f"subtree={self.subtree!r}, quality={self.quality!r})"
        )


# The slots' setters, which bypass the frozen __setattr__ (faster than object.__setattr__).
_set_arrays = vars(CandidateSet)["_arrays"].__set__
_set_src = vars(CandidateSet)["_src"].__set__
_set_keys = vars(CandidateSet)["keys"].__set__


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
    cache = state._candidate_cache
    if cache.version != state.version:
        cache.reset(state.version)
    key = (k, robust, max_candidates)
    hit = cache.sets.get(key)
    if hit is None:  # (a cached key was checked when computed)
        shared = cache.shared.get(robust) or _shared(state, robust)
        if not 1 <= k <= shared.td.G:
            check_range("k", k, 1, shared.td.G)
        if max_candidates < 1:
            check_range("max_candidates", max_candidates, 1)
        hit = cache.sets[key] = shared.compute(int(k), int(max_candidates))
    return hit


def candidate_sets(
    state: ClusterState, sizes: Iterable[int], *, robust: bool = True, max_candidates: int = 8
) -> list[CandidateSet]:
    """:func:`candidate_placements` of each size in ``sizes``, in one call (which saves the
    per-call lookups when a caller needs several sizes of one state version).

    Args:
        state: The cluster state (free GPUs and health).
        sizes: GPUs of the jobs (each >= 1).
        robust: Whether device health steers the choice.
        max_candidates: Cap on the number of candidates returned per size (>= 1).

    Returns:
        The candidate set of each size, in the order of ``sizes``.
    """
    cache = state._candidate_cache
    if cache.version != state.version:
        cache.reset(state.version)
    sets = cache.sets
    shared: _Small | _Shared | None = None
    out: list[CandidateSet] = []
    for k in sizes:
        key = (k, robust, max_candidates)
        hit = sets.get(key)
        if hit is None:  # (a cached key was checked when computed)
            if shared is None:
                shared = cache.shared.get(robust) or _shared(state, robust)
                if max_candidates < 1:
                    check_range("max_candidates", max_candidates, 1)
            if not 1 <= k <= shared.td.G:
                check_range("k", k, 1, shared.td.G)
            hit = sets[key] = shared.compute(int(k), int(max_candidates))
        out.append(hit)
    return out


def _shared(state: ClusterState, robust: bool) -> _Small | _Shared:
    """The per-version data of ``state`` (made and cached; its version's cache is current)."""
    cache = state._candidate_cache
    health = state.health
    entry = cache.health.get(robust)
    if entry is None or entry[0] is not health:
        hd = _HealthData(state, robust, _topo_data(state.topology))
        entry = cache.health[robust] = (health, hd)
    hd = entry[1]
    shared = cache.shared[robust] = (_Small if hd.td.small else _Shared)(state, hd)
    return shared


#: Clusters with at most this many servers (and switch subtrees with at most this many) run the
#: per-server loops in plain Python; larger ones use numpy. Both give identical candidates.
SMALL_SERVERS = 32


class _TopoData:
    """Static per-topology lists and arrays used by the generator."""

    __slots__ = (
        "G",
        "S",
        "arange_f",
        "gpu_server",
        "small",
        "srv_key2",
        "srv_lo",
        "srv_lo_arr",
        "srv_node",
        "srv_node_arr",
        "sw_ranges",
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
        # (index, entry, first server, end server) of each switch subtree.
        self.sw_ranges = [(i, sw, sw[1], sw[2]) for i, sw in enumerate(self.switches)]


_TOPO_DATA: weakref.WeakKeyDictionary[Topology, _TopoData] = weakref.WeakKeyDictionary()


def _topo_data(topo: Topology) -> _TopoData:
    td = _TOPO_DATA.get(topo)
    if td is None:
        td = _TOPO_DATA[topo] = _TopoData(topo)
    return td


#: Cap on the entries of each server's memo in :class:`_HealthData` (a full memo is cleared):
#: every free-GPU pattern of a server of up to 8 GPUs fits, and the memory stays bounded.
_MEMO_CAP = 256

#: bytes.translate table swapping 0 and 1: free flags to busy flags.
_FLIP = bytes.maketrans(b"\x00\x01", b"\x01\x00")


class _HealthData:
    """What depends on the health alone: badness scores and each server's GPUs in health order.

    Small clusters also keep here the last version's servers and switch subtrees (``last``), which
    the next version reuses where its free GPUs are the same, and memoise what a server's free
    GPUs give (:class:`_Server`, keyed by its free-GPU pattern: after a removal a server often
    returns to an earlier pattern).
    """

    __slots__ = (
        "_key2",
        "_q_l",
        "_q_rank",
        "_q_round",
        "_servers",
        "base_order",
        "last",
        "q",
        "rep_sums",
        "td",
        "uniform",
    )

    def __init__(self, state: ClusterState, robust: bool, td: _TopoData) -> None:
        self.td = td
        topo = state.topology
        q = gpu_quality(state, robust)
        self.q = q
        self.uniform = not robust or bool((q == 1.0).all())
        if self.uniform:
            # GPUs are numbered server by server, so (server, index) order is the identity.
            self.base_order = np.arange(td.G)
        else:
            # By server, then badness, then index (lexsort is stable).
            self.base_order = np.lexsort((q, topo.gpu_server))
        self._q_round: NDArray[np.float64] | None = None
        self._q_l: list[float] | None = None
        self._q_rank: list[int] | None = None
        self._key2: NDArray[np.int64] | None = None
        self._servers: list[_ServerSpec] | None = None
        # np_sum([x] * k) by (x, k): the badness of k GPUs of equal badness x.
        self.rep_sums: dict[tuple[float, int], float] = {}
        # The last _Small built on this health (small clusters): its free GPUs (as
        # ClusterState.free_bits), its servers, their free GPUs and least badness
        # (``_Server.nf``, ``_Server.qmin``) and its switches.
        self.last: tuple[int, list[_Server], list[int], list[float], list[_Switch]] | None = None

    @property
    def q_round(self) -> NDArray[np.float64]:
        """``np.round(q, 9)``."""
        if self._q_round is None:
            self._q_round = np.round(self.q, 9)
        return self._q_round

    @property
    def q_l(self) -> list[float]:
        """:attr:`q` as a list."""
        if self._q_l is None:
            self._q_l = self.q.tolist()
        return self._q_l

    @property
    def q_rank(self) -> list[int]:
        """Per GPU, the rank of its rounded badness (:attr:`q_round`) among the distinct ones."""
        if self._q_rank is None:
            q_round = self.q_round.tolist()
            rank = {v: i for i, v in enumerate(sorted(set(q_round)))}
            self._q_rank = [rank[v] for v in q_round]
        return self._q_rank

    @property
    def key2(self) -> NDArray[np.int64]:
        """Sort key ``2 * server`` of the GPUs in health order."""
        if self._key2 is None:
            self._key2 = self.td.srv_key2[self.base_order]
        return self._key2

    @property
    def servers(self) -> list[_ServerSpec]:
        """Per server: (its first GPU, end GPU, node, its GPUs in health order, their badness
        (``None`` when uniform), memo of :class:`_Server` by free-GPU pattern: the server's bits of
        :attr:`ClusterState.free_bits`, shifted to bit 0)."""
        if self._servers is None:
            td = self.td
            order_l = self.base_order.tolist()
            q_o: list[float] | None = None if self.uniform else self.q[self.base_order].tolist()
            lo = [*td.srv_lo, td.G]
            self._servers = [
                (
                    lo[s],
                    lo[s + 1],
                    td.srv_node[s],
                    order_l[lo[s] : lo[s + 1]],
                    None if q_o is None else q_o[lo[s] : lo[s + 1]],
                    {},
                )
                for s in range(td.S)
            ]
        return self._servers


#: (first GPU, end GPU, node, GPUs in health order, their badness, memo) of a server; see
#: :meth:`_HealthData.servers`.
_ServerSpec = tuple[int, int, int, list[int], list[float] | None, dict[int, "_Server"]]
#: A candidate row: (servers spanned, badness rounded to 1e-9, free GPUs left in its subtree,
#: subtree node, kind, GPUs, badness); kind is 0 for a single-server row, 1 for a multi-server
#: compact row, 2 for a health-first row. Rows rank by their first five items, which tell any
#: two rows of a job size apart (a subtree has at most one row of each kind), so sorting never
#: compares the GPUs.
_Row = tuple[int, float, int, int, int, tuple[int, ...], float]


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
        key: Rank of the server in a subtree's compact order: most free GPUs first, then least
            bad on average (``(cs[nf] - cs[0]) / nf``), then index.
        singles: Single-server row of ``k`` GPUs, by ``k``.
    """

    __slots__ = (
        "_tier",
        "base",
        "cs",
        "end",
        "free",
        "key",
        "nf",
        "node",
        "qmin",
        "qs",
        "s",
        "singles",
    )

    cs: list[float] | None
    key: tuple[Any, ...]

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
            self.key = (-nf, s)
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
        self.key = (-nf, (cs[nf] - cs[0]) / nf, self.s) if nf else (0, 0.0, self.s)

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
        spec: Its entry of :attr:`_TopoData.switches` (node, servers, GPUs).
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
        """Servers with a free GPU in compact order (see :attr:`_Server.key`)."""
        out = self._compact
        if out is None:
            out = self._compact = sorted(filter(_nf_of, self.srv), key=_key_of)
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
_key_of = attrgetter("key")
_n_srv_of = itemgetter(0)
_gpus_of = itemgetter(5)
_badness_of = itemgetter(6)


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


class _Small:
    """Per-version data of a small cluster (plain Python): every server's :class:`_Server` and
    every switch subtree's :class:`_Switch`, taken from the last version where its free GPUs (and
    for a server, the prefix sum before it) did not change. Gives the same candidates as
    :class:`_Shared`, bit for bit (``tests/test_fastpaths.py`` checks it along random
    placements, removals and health changes)."""

    __slots__ = ("hd", "max_free", "n_free", "srv", "sws", "td")

    def __init__(self, state: ClusterState, hd: _HealthData) -> None:
        td = self.td = hd.td
        self.hd = hd
        uniform = hd.uniform
        # The free GPUs as an int (bit g: GPU g); a server's bits are its memo key.
        fx = state.free_bits
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
                lo, hi, node, blk, qblk, memo = specs[s]
                key = (fx >> lo) & ((1 << (hi - lo)) - 1)
                e = memo.get(key)
                if e is None:
                    if len(memo) >= _MEMO_CAP:
                        memo.clear()
                    # Its GPUs' free flags in health order.
                    flags = bytes([(key >> (g - lo)) & 1 for g in blk])
                    e = memo[key] = _Server(s, node, blk, qblk, flags, base)
                elif e.base != base and not uniform:
                    e = memo[key] = e.rebased(base)
                nfs[s] = e.nf
                qmins[s] = e.qmin
            else:
                e = srv[s]
                if uniform or e.base == base:
                    break  # this server and the ones after it are as in the last version
                lo, hi, _, _, _, memo = specs[s]
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
        """:func:`_best_by_rank` of switch subtree ``d`` (``k <= d.nf``), with the ranks of
        :func:`_gpu_rank` replaced by keys in the same order, computed for its GPUs only.

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
        """The candidate set of size ``k``, at most ``cap`` rows (see :meth:`_Shared.compute`)."""
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


class _Shared:
    """Per-version data every job size needs: GPU order per server, free counts, prefix sums.

    The GPU order lists, server by server, the free GPUs (healthiest and fastest first, then by
    index), then the busy ones. ``qcs`` are the prefix sums of the badness scores in that order, so
    a server's ``k`` best free GPUs have badness ``qcs[lo + k] - qcs[lo]``.

    This is the numpy version for large clusters (per-switch loops over few servers run in plain
    Python); small clusters use :class:`_Small`.
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
        free = state._free()
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


def _assemble(k: int, cap: int, singles: list[_Row], extras: list[_Row]) -> CandidateSet:
    """The candidate set from the single-server rows (in rank order) and the extra rows: the
    best ``cap`` rows in rank order (see :data:`_Row`), a row that repeats a better one dropped.
    """
    if not extras:
        top = singles[:cap]
        if not top:
            return _empty(k)
        return CandidateSet._from_rows(k, top)
    # Only the extra rows can repeat another row (single-server rows are disjoint), and each
    # repeat drops one row: the best cap + len(extras) single rows are enough.
    pool = singles[: cap + len(extras)]
    pool += extras
    pool.sort()  # never compares past the kind
    if min(map(_n_srv_of, extras)) > 1 and len(set(map(_gpus_of, extras))) == len(extras):
        # No repeat: the extra rows differ from each other and span more servers than a
        # single-server row.
        return CandidateSet._from_rows(k, pool[:cap])
    seen: set[tuple[int, ...]] = set()
    kept: list[_Row] = []
    for p in pool:
        row = p[5]
        if row in seen:
            continue
        seen.add(row)
        kept.append(p)
        if len(kept) == cap:
            break
    return CandidateSet._from_rows(k, kept)
