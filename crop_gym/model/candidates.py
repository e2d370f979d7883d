"""Candidate placements: compact GPU sets for a job of ``k`` GPUs (docs/CROP.md, step 1).

Shared by CROP, the baselines and the environments. Every GPU has a *badness* score
``σ_g / speed_g / (1 - π_g)`` (:func:`gpu_quality`; 1 is a healthy reference GPU). Inside a
server the free GPUs are taken healthiest first (then by index). The candidates of size ``k``:

* **single-server rows**: every server with at least ``k`` free GPUs gives its ``k`` best;
* **compact rows**: every switch subtree (ToR, pod, root) with at least ``k`` free GPUs but no server
  holding ``k`` fills its servers with the most free GPUs first (then the least bad on average,
  then by index), so that it spans as few servers as possible;
* **health-first rows** (``robust=True`` only): every switch subtree with at least ``k`` free GPUs
  offers its ``k`` healthiest free GPUs (lowest badness rounded to 1e-9, then servers with the most
  free GPUs, then by index) when they are healthier, by more than 1e-9, than every single-server
  and compact row inside it. Without them a job could only avoid a straggler by leaving a server
  that holds it whole, and CROP's measured ratio to the optimum under the ``severe`` profile dropped
  from 0.96 to 0.87 (docs/CROP.md).

The rows rank by servers spanned, then badness (rounded to 1e-9), then tightness (fewest free GPUs
left in their subtree, which limits fragmentation), then subtree node, then kind (single, compact,
health-first); a row whose GPU set repeats a better one is dropped and the list is capped. Ring
order = DFS order = sorted GPU indices.

A row's quality is its GPUs' badness summed in a fixed order (floating-point sums depend on it,
and the 1e-9 comparisons and roundings above on the last bit): a difference of prefix sums along
the server's GPU order for a single-server row, numpy's pairwise sum in fill order for a compact
row, and in ``np.argpartition`` order of the ranks for a health-first row.

With ``robust=False`` device health is ignored when choosing (the "CROP without robustness"
ablation): every usable GPU looks alike. Failed GPUs are never candidates.

The generator is vectorised over servers, subtrees and job sizes: :func:`candidate_sets` computes
what every size shares (each server's GPU order and free count, the compact server order of
every subtree, the health ranking) once. Only pure functions of immutable inputs are cached: the
tree arrays of a :class:`~crop_gym.model.topology.Topology` and the badness order of a
:class:`~crop_gym.model.health.Health`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, check_range
from crop_gym.model.health import Health
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import SWITCH, Topology

__all__ = [
    "CandidateSet",
    "candidate_placements",
    "candidate_sets",
    "candidate_sets_many",
    "gpu_quality",
]

#: Badness differences up to this are ties (health-first rows must beat the compact ones by more).
_EPS = 1e-9

_I64 = NDArray[np.int64]
_F64 = NDArray[np.float64]
_ZERO_I = np.zeros(1, dtype=np.int64)
_NO_FLOAT, _NO_INT = np.zeros(0), np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class CandidateSet:
    """Candidate placements for one job size, best first.

    Attributes:
        gpus: ``int32[C, k]`` sorted GPU indices of each candidate.
        num_servers: ``int32[C]`` servers spanned by each candidate.
        subtree: ``int32[C]`` node index of the subtree the candidate was taken from.
        quality: ``float64[C]`` sum of the GPUs' badness scores (lower is healthier).
        keys: Each candidate's GPUs as a tuple of ints (hashable); derived from :attr:`gpus` when
            not given.
    """

    gpus: NDArray[np.int32]
    num_servers: NDArray[np.int32]
    subtree: NDArray[np.int32]
    quality: NDArray[np.float64]
    keys: tuple[tuple[int, ...], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.gpus):
            object.__setattr__(self, "keys", tuple(map(tuple, self.gpus.tolist())))

    @property
    def k(self) -> int:
        """GPUs per candidate."""
        return int(self.gpus.shape[1])

    def __len__(self) -> int:
        return len(self.keys)


def _empty(k: int) -> CandidateSet:
    i32 = np.empty(0, np.int32)
    return CandidateSet(np.empty((0, k), np.int32), i32, i32, np.empty(0))


def _badness(topology: Topology, health: Health) -> _F64:
    return health.gpu_slowdown / topology.gpu_speed / (1.0 - health.gpu_fail_prob)


def gpu_quality(state: ClusterState, robust: bool = True) -> NDArray[np.float64]:
    """Badness score of every GPU, ``σ_g / speed_g / (1 - π_g)`` (1 = healthy reference GPU).

    With ``robust=False`` every GPU scores 1.
    """
    if not robust:
        return np.ones(state.topology.num_gpus)
    return _badness(state.topology, state.health)


# ------------------------------------------------------------------------ cached, immutable inputs
@dataclass(frozen=True, eq=False)
class _Tree:
    """The topology's servers and switch subtrees as flat arrays.

    A *membership* list holds, switch subtree by switch subtree (in node order), the servers (or
    GPUs) inside it; ``*_start`` is where each subtree's run begins. Sorting the list by
    ``*_base + rank`` sorts each run by ``rank`` and keeps the runs in place.
    """

    srv_lo: _I64  # first GPU of each server
    srv_q: _I64  # where each server starts, and its copy ends, in the copy-by-copy prefix sums
    end_q: _I64
    gpu_server: _I64
    key2: NDArray[np.signedinteger[Any]]  # 2 * server of each GPU (small ints: radix sort)
    sub_node: _I64  # node of each subtree: the servers', then the switch subtrees'
    mem_srv: _I64
    mem_start: _I64
    mem_end: _I64
    mem_base: _I64  # subtree index * S
    sw_gpus: list[tuple[int, int]]  # GPU range of each switch subtree


@lru_cache(maxsize=64)
def _tree(topo: Topology, copies: int = 1) -> _Tree:
    """The tree arrays of ``copies`` side-by-side copies of ``topo``: copy ``i`` holds GPUs
    ``i * G ...``, servers ``i * S ...`` and nodes ``i * N ...``; its servers' subtrees come
    before the next copy's, and all servers before all switch subtrees."""
    if copies > 1:
        return _stacked(_tree(topo), topo, copies)
    sw = np.flatnonzero(topo.kind == SWITCH)
    s_lo, s_hi = topo.node_srv_lo[sw].astype(np.int64), topo.node_srv_hi[sw].astype(np.int64)
    g_lo, g_hi = topo.node_gpu_lo[sw].astype(np.int64), topo.node_gpu_hi[sw].astype(np.int64)
    S = topo.num_servers
    n_srv = s_hi - s_lo
    return _Tree(
        srv_lo=topo.server_gpu_lo.astype(np.int64),
        srv_q=topo.server_gpu_lo.astype(np.int64),
        end_q=np.full(S, topo.num_gpus, dtype=np.int64),
        gpu_server=topo.gpu_server.astype(np.int64),
        key2=_key2(topo.gpu_server.astype(np.int64), S),
        sub_node=np.concatenate((topo.server_node, sw)).astype(np.int64),
        mem_srv=np.concatenate([*map(np.arange, s_lo, s_hi), _NO_INT]),  # (a lone server: none)
        mem_start=np.cumsum(n_srv) - n_srv,
        mem_end=np.cumsum(n_srv),
        mem_base=np.repeat(np.arange(len(sw), dtype=np.int64) * S, n_srv),
        sw_gpus=list(zip(g_lo.tolist(), g_hi.tolist(), strict=True)),
    )


def _key2(gpu_server: _I64, num_servers: int) -> NDArray[np.signedinteger[Any]]:
    """``2 * server`` of each GPU, as small ints where they fit (a radix sort key)."""
    return (2 * gpu_server).astype(np.int16 if 2 * num_servers < 2**15 else np.int64)


def _stacked(t: _Tree, topo: Topology, n: int) -> _Tree:
    """:func:`_tree` of ``n`` copies, from the tree of one."""
    G, S, N = topo.num_gpus, topo.num_servers, topo.num_nodes
    W, M = len(t.sw_gpus), len(t.mem_srv)
    r = np.arange(n, dtype=np.int64)[:, None]

    def tile(a: _I64, step: int) -> _I64:
        return (a[None, :] + step * r).ravel()

    gpu_server = tile(t.gpu_server, S)
    return _Tree(
        srv_lo=tile(t.srv_lo, G),
        srv_q=tile(t.srv_lo, G + 1),  # (each copy's sums start with a 0)
        end_q=tile(t.end_q, G + 1),
        gpu_server=gpu_server,
        key2=_key2(gpu_server, n * S),
        sub_node=np.concatenate((tile(t.sub_node[:S], N), tile(t.sub_node[S:], N))),
        mem_srv=tile(t.mem_srv, S),
        mem_start=tile(t.mem_start, M),
        mem_end=tile(t.mem_end, M),
        mem_base=tile(t.mem_base // max(S, 1), W) * (n * S),
        sw_gpus=[(a + i * G, z + i * G) for i in range(n) for a, z in t.sw_gpus],
    )


@dataclass(frozen=True, eq=False)
class _Badness:
    """What the choice needs from the health: badness, its order, whether it is uniform."""

    topology: Topology
    q: _F64
    q_round: _F64
    uniform: bool  # every GPU scores 1 (no health-first rows)
    base: NDArray[np.intp]  # GPUs by (server, badness, index)
    key2: NDArray[np.signedinteger[Any]]  # _Tree.key2 in that order

    @classmethod
    def of(cls, topo: Topology, q: _F64) -> _Badness:
        uniform = bool((q == 1.0).all())
        base = np.arange(topo.num_gpus) if uniform else np.lexsort((q, topo.gpu_server))
        return cls(topo, q, np.round(q, 9), uniform, base, _tree(topo).key2[base])


#: Per health (immutable, compared by identity), its badness data; dropped with the health.
_BADNESS: weakref.WeakKeyDictionary[Health, _Badness] = weakref.WeakKeyDictionary()


@lru_cache(maxsize=64)
def _uniform(topo: Topology) -> _Badness:
    return _Badness.of(topo, np.ones(topo.num_gpus))


def _badness_of(topo: Topology, health: Health | None) -> _Badness:
    """The badness data of ``health`` (``None``: every GPU alike)."""
    if health is None:
        return _uniform(topo)
    b = _BADNESS.get(health)
    if b is None or b.topology is not topo:
        b = _BADNESS[health] = _Badness.of(topo, _badness(topo, health))
    return b


def _stack_badness(topo: Topology, parts: list[_Badness]) -> _Badness:
    """The badness data of side-by-side copies (copy ``i`` offset by ``i * G``)."""
    if len(parts) == 1:
        return parts[0]
    G = topo.num_gpus
    base = np.concatenate([b.base + i * G for i, b in enumerate(parts)])
    return _Badness(
        topo,
        np.concatenate([b.q for b in parts]),
        np.concatenate([b.q_round for b in parts]),
        all(b.uniform for b in parts),
        base,
        _tree(topo, len(parts)).key2[base],
    )


# ------------------------------------------------------------------------------------ entry points
def candidate_placements(
    state: ClusterState,
    k: int,
    *,
    robust: bool = True,
    max_candidates: int = 8,
    free: NDArray[np.bool_] | None = None,
) -> CandidateSet:
    """Compact candidate placements of ``k`` GPUs in the current state.

    Args:
        state: The cluster state (free GPUs and health).
        k: GPUs of the job (1 to the cluster's GPUs).
        robust: Whether device health steers the choice.
        max_candidates: Cap on the number of candidates returned (>= 1).
        free: ``bool[G]`` the GPUs to choose from (default: the state's free usable GPUs).

    Returns:
        Up to ``max_candidates`` distinct candidates, best first; empty if fewer than ``k`` GPUs are
        free.

    Raises:
        ConfigError: If ``k`` or ``max_candidates`` is out of range.
    """
    return candidate_sets(state, (k,), robust=robust, max_candidates=max_candidates, free=free)[0]


def candidate_sets(
    state: ClusterState,
    sizes: Iterable[int],
    *,
    robust: bool = True,
    max_candidates: int = 8,
    free: NDArray[np.bool_] | None = None,
) -> list[CandidateSet]:
    """:func:`candidate_placements` of each size in ``sizes`` (repeats allowed), computed
    together, in the order of ``sizes``; the other arguments are those of
    :func:`candidate_placements` (``max_candidates`` caps each size's set)."""
    frees = None if free is None else [free]
    return candidate_sets_many(
        [state], [sizes], robust=robust, max_candidates=max_candidates, frees=frees
    )[0]


def candidate_sets_many(
    states: Sequence[ClusterState],
    sizes: Sequence[Iterable[int]],
    *,
    robust: bool = True,
    max_candidates: int = 8,
    frees: Sequence[NDArray[np.bool_]] | None = None,
) -> list[list[CandidateSet]]:
    """:func:`candidate_sets` of several states of one topology, in one vectorised pass.

    The states are laid side by side (state ``i``'s GPUs offset by ``i * G``) and every (size,
    state) pair is a group of rows, ranked and capped on its own: the result of each state is
    exactly what :func:`candidate_sets` gives it alone (tests/test_batching.py checks this).

    Args:
        states: Cluster states, all on the same :class:`~crop_gym.model.topology.Topology`.
        sizes: Per state, the GPUs of its jobs (repeats allowed).
        robust: Whether device health steers the choice.
        max_candidates: Cap on the candidates per size and state (>= 1).
        frees: Per state the ``bool[G]`` GPUs to choose from (default: its free usable GPUs).

    Returns:
        Per state, the candidate set of each of its sizes, in order.

    Raises:
        ConfigError: If a size or ``max_candidates`` is out of range, or the states are not on
            one topology.
    """
    if not states:
        return []
    topo = states[0].topology
    if any(st.topology is not topo for st in states):
        raise ConfigError("candidate_sets_many: the states must share one topology")
    G = topo.num_gpus
    if max_candidates < 1:
        check_range("max_candidates", max_candidates, 1)
    wanted: list[list[int]] = []
    free_list = [st.free_mask for st in states] if frees is None else list(frees)
    n_free = [int(np.count_nonzero(f)) for f in free_list]
    for ks in sizes:
        row = [int(k) for k in ks]
        for k in row:
            if not 1 <= k <= G:
                check_range("k", k, 1, G)
        wanted.append(row)
    fitting = [sorted({k for k in row if k <= nf}) for row, nf in zip(wanted, n_free, strict=True)]
    out: dict[tuple[int, int], CandidateSet] = {}
    if any(fitting):
        bad = [_badness_of(topo, st.health if robust else None) for st in states]
        free = free_list[0] if len(states) == 1 else np.concatenate(free_list)
        out = _generate(
            topo, _stack_badness(topo, bad), free, sum(n_free), fitting, int(max_candidates)
        )
    return [[out.get((k, i)) or _empty(k) for k in row] for i, row in enumerate(wanted)]


# ------------------------------------------------------------------------------------ the generator


def _row_sums(values: _F64, ks: list[int], size: _I64) -> _F64:
    """Sums of the rows of ``values`` (rows of ``ks[i]`` items, grouped by ``i = size``), each
    numpy's pairwise sum of its items in order."""
    out = []
    off = 0
    for i, c in enumerate(np.bincount(size, minlength=len(ks)).tolist()):
        if c:
            n = c * ks[i]
            out.append(values[off : off + n].reshape(c, ks[i]).sum(axis=1))
            off += n
    return np.concatenate(out)


def _ragged(starts: _I64, lengths: _I64) -> _I64:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])``, vectorised."""
    ends = lengths.cumsum()
    return np.arange(ends[-1]) + (starts - ends + lengths).repeat(lengths)


def _generate(
    topo: Topology,
    b: _Badness,
    free: NDArray[np.bool_],
    n_free: int,
    fitting: list[list[int]],
    cap: int,
) -> dict[tuple[int, int], CandidateSet]:
    """The candidate sets of ``len(fitting)`` copies of ``topo`` side by side (``b`` and ``free``
    of all copies, ``n_free`` their free GPUs in all): for copy ``i`` those of its sizes
    ``fitting[i]`` (each at most its free GPUs), keyed ``(size, i)``, in the copy's own GPU and
    node numbers.

    Every size's rows are computed together, as (size, server) and (size, subtree) pairs.
    """
    n = len(fitting)
    ks = sorted(set().union(*fitting))
    t = _tree(topo, n)
    G, lo = len(b.q), t.srv_lo
    K = np.array(ks, dtype=np.int64)
    Kc = K[:, None]
    f = np.add.reduceat(free.view(np.uint8), lo, dtype=np.int64)  # free GPUs per server
    # The GPU order: server by server, its free GPUs (least bad first, then by index), then its
    # busy ones. A server's k best free GPUs are the k first of its block.
    order = b.base[(b.key2 + ~free[b.base]).argsort(kind="stable")]
    qs = b.q[order]
    # Prefix sums of the badness in that order, copy by copy (0 first), so that a copy's sums
    # never depend on another copy's badness; server s starts at lo_q[s].
    qcs = np.concatenate((np.zeros((n, 1)), qs.reshape(n, -1).cumsum(axis=1)), axis=1).ravel()
    lo_q = t.srv_q

    # Single-server rows.
    fit = f >= Kc
    q_srv = qcs[np.minimum(lo_q + Kc, t.end_q)] - qcs[lo_q]  # [size, server] (where it fits)
    si, ss = fit.nonzero()
    q1 = q_srv[si, ss]

    # Compact rows, where a subtree has k free GPUs but no server inside holds k.
    f_mem = f[t.mem_srv]
    sw_free = np.add.reduceat(f_mem, t.mem_start)
    has = sw_free >= Kc
    ci, cw = (has & (np.maximum.reduceat(f_mem, t.mem_start) < Kc)).nonzero()
    kc = K[ci]
    g_c, q_c, n_c = _NO_INT, _NO_FLOAT, _NO_INT
    c_start = kc.cumsum() - kc  # where each row's GPUs start in g_c
    if len(ci):
        # A subtree's free GPUs, server after server in compact order (most free, least bad on
        # average, index); a row of k GPUs is the first k of them (positions in `order`).
        avg = (qcs[lo_q + f] - qcs[lo_q]) / np.maximum(f, 1)
        srv_rank = np.lexsort((avg, -f)).argsort()
        msrv = t.mem_srv[(t.mem_base + srv_rank[t.mem_srv]).argsort()]
        mf = f[msrv]
        mcum = np.concatenate((_ZERO_I, mf.cumsum()))
        base = mcum[t.mem_start][cw]
        pos = _ragged(lo[msrv], mf)[_ragged(base, kc)]
        g_c, q_c = order[pos], _row_sums(qs[pos], ks, ci)
        n_c = mcum.searchsorted(base + kc) - t.mem_start[cw]  # servers of the prefix

    # Health-first rows: a subtree's k best free GPUs by (rounded badness, -free GPUs of their
    # server, index), kept if healthier than every row inside.
    g_h, q_h, n_h, hi, hw, h_start = _NO_INT, _NO_FLOAT, _NO_INT, _NO_INT, _NO_INT, _NO_INT
    if not b.uniform:
        sw_qmin = np.minimum.reduceat(np.where(f > 0, qs[lo], np.inf)[t.mem_srv], t.mem_start)
        inside = np.minimum.reduceat(
            np.where(fit, q_srv, np.inf)[:, t.mem_srv], t.mem_start, axis=1
        )
        inside[ci, cw] = q_c  # (no server inside holds k there)
        # A subtree is skipped at once if a row inside is made of its healthiest GPUs.
        hi, hw = (has & (inside > Kc * sw_qmin + _EPS)).nonzero()
        if len(hi):
            kh = K[hi]
            h_start = kh.cumsum() - kh
            # Ranks of the free GPUs, busy ones all alike after them; a subtree's k best are
            # taken as np.argpartition gives them, and their badness summed in that order.
            rank = np.lexsort((-f[t.gpu_server], b.q_round, ~free)).argsort()
            rank = np.minimum(rank, n_free)
            best = []
            for k, w in zip(kh.tolist(), hw.tolist(), strict=True):
                a, z = t.sw_gpus[w]
                part = rank[a:z].argpartition(k - 1)[:k] if k < z - a else np.arange(z - a)
                best.append(part + a)
            g_h = np.concatenate(best)
            q_h = _row_sums(b.q[g_h], ks, hi)
            span = np.zeros((len(hi), len(lo)), dtype=bool)
            span[np.arange(len(hi)).repeat(kh), t.gpu_server[g_h]] = True
            n_h = span.sum(axis=1)
            ok = ~(q_h >= inside[hi, hw] - _EPS)  # else a row inside is as healthy
            if not ok.all():
                hi, hw, h_start, q_h, n_h = hi[ok], hw[ok], h_start[ok], q_h[ok], n_h[ok]

    # Every row of every size: single-server rows, then compact rows, then health-first ones.
    if not len(ci) and not len(hi):
        ones = np.ones(len(si), dtype=np.int64)
        only = _Rows(si, ones, q1, f[ss], t.sub_node[ss], order, lo[ss], len(si))
        return _assemble(ks, K, cap, only, _Copies.of(topo, fitting, ks, ss, _NO_INT, _NO_INT))
    sub = np.concatenate((ss, cw + len(lo), hw + len(lo)))  # servers, then switch subtrees
    rows = _Rows(
        size=np.concatenate((si, ci, hi)),
        num_servers=np.concatenate((np.ones(len(si), dtype=np.int64), n_c, n_h)),
        quality=np.concatenate((q1, q_c, q_h)),
        left=np.concatenate((f, sw_free))[sub],
        node=t.sub_node[sub],
        src=np.concatenate((order, g_c, g_h)),
        start=np.concatenate((lo[ss], c_start + G, h_start + (G + len(g_c)))),
        singles=len(si),
    )
    return _assemble(ks, K, cap, rows, _Copies.of(topo, fitting, ks, ss, cw, hw))


@dataclass(frozen=True, eq=False)
class _Rows:
    """Candidate rows of several sizes, one item per row.

    Attributes:
        size: Index of the row's size in ``ks``.
        num_servers, quality, node: Servers spanned, badness, node of the subtree.
        left: Free GPUs of the subtree (before the row's ``k`` are taken).
        src, start: The row's ``k`` GPUs (unsorted) are ``src[start:start + k]``.
        singles: The single-server rows come first, this many (they never repeat each other).
    """

    size: _I64
    num_servers: _I64
    quality: _F64
    left: _I64
    node: _I64
    src: _I64
    start: _I64
    singles: int


@dataclass(frozen=True, eq=False)
class _Copies:
    """Which copy (of ``n`` side by side, each of ``gpus`` GPUs and ``nodes`` nodes) each row
    belongs to: ``copy`` ``int64[rows]``; and ``wanted`` ``bool[sizes * n]``, per (size index,
    copy), size-major, whether that group is asked for."""

    n: int
    gpus: int
    nodes: int
    copy: _I64
    wanted: NDArray[np.bool_]

    @classmethod
    def of(
        cls, topo: Topology, fitting: list[list[int]], ks: list[int], ss: _I64, cw: _I64, hw: _I64
    ) -> _Copies:
        n = len(fitting)
        if n == 1:  # one state: every size is asked for
            copy = np.zeros(len(ss) + len(cw) + len(hw), dtype=np.int64)
            return cls(1, topo.num_gpus, topo.num_nodes, copy, np.ones(len(ks), dtype=bool))
        wanted = np.zeros((len(ks), n), dtype=bool)
        for i, row in enumerate(fitting):
            wanted[np.searchsorted(ks, row), i] = True
        S, W = topo.num_servers, len(_tree(topo).sw_gpus)
        copy = np.concatenate((ss // S, cw // W, hw // W))
        return cls(n, topo.num_gpus, topo.num_nodes, copy, wanted.ravel())


def _assemble(
    ks: list[int], K: _I64, cap: int, rows: _Rows, cp: _Copies
) -> dict[tuple[int, int], CandidateSet]:
    """Each (size, copy) group's best ``cap`` distinct rows, ranked by (servers spanned, rounded
    badness, free GPUs left, subtree node, kind): rows come kind by kind and the sort is stable."""
    size, node = rows.size, rows.node
    k_row = K[size]
    group = size * cp.n + cp.copy  # (size, copy), size-major
    ranked = np.lexsort((node, rows.left - k_row, rows.quality.round(9), rows.num_servers, group))
    ranked_l = ranked.tolist()
    # A row that repeats a better one is dropped: only the extra rows (compact, health-first)
    # can repeat one, so each group's best cap + extras rows are enough.
    ng = len(ks) * cp.n
    counts = np.bincount(group, minlength=ng).tolist()
    extras = np.bincount(group[rows.singles :], minlength=ng).tolist()
    picks: list[int] = []
    chosen: list[tuple[int, int, int]] = []  # (group, rows picked, extra rows)
    s0 = 0
    for g, (c, e) in enumerate(zip(counts, extras, strict=True)):
        if c and cp.wanted[g]:
            n = min(c, cap + e)
            picks += ranked_l[s0 : s0 + n]
            chosen.append((g, n, e))
        s0 += c
    if not picks:
        return {}
    # The picked rows' GPUs, each row sorted; rows come group by group.
    pick = np.array(picks)
    kp = k_row[pick]
    G = cp.n * cp.gpus
    row_key = np.arange(len(pick)).repeat(kp) * G
    gpus = rows.src[_ragged(rows.start[pick], kp)] + row_key
    gpus.sort()
    gpus -= row_key
    nodes = node[pick]
    if cp.n > 1:  # each copy in its own numbers
        copy = cp.copy[pick]
        gpus -= (copy * cp.gpus).repeat(kp)
        nodes = nodes - copy * cp.nodes
    g32 = gpus.astype(np.int32)
    ns, nd, qq = rows.num_servers[pick].astype(np.int32), nodes.astype(np.int32), rows.quality[pick]
    out: dict[tuple[int, int], CandidateSet] = {}
    end = p = 0
    for g, n, e in chosen:
        ki, i = divmod(g, cp.n)
        k = ks[ki]
        block = g32[end : end + n * k].reshape(n, k)
        keys = list(map(tuple, block.tolist()))
        kept: Any = slice(0, min(n, cap))
        if e and len(set(keys)) < n:
            first: dict[tuple[int, ...], int] = {}
            for j, key in enumerate(keys):
                first.setdefault(key, j)
            kept = list(first.values())[:cap]  # first occurrences, best first
            keys = [keys[j] for j in kept]
        else:
            keys = keys[kept]
        sl = slice(p, p + n)
        out[(k, i)] = CandidateSet(
            block[kept], ns[sl][kept], nd[sl][kept], qq[sl][kept], tuple(keys)
        )
        end += n * k
        p += n
    return out
