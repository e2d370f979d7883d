"""Candidate placements: compact GPU sets for a job of ``k`` GPUs (docs/CROP.md, step 1).

Shared by CROP, the baselines and the environments. Every GPU has a *badness* score
``σ_g / speed_g / (1 - π_g)`` (:attr:`Conditions.badness <crop_gym.model.conditions.Conditions>`; 1
is a healthy reference GPU). Inside a server the free GPUs are taken healthiest first (then by
index). The candidates of size ``k``:

* **single-server rows**: every server with at least ``k`` free GPUs gives its ``k`` best;
* **compact rows**: every switch subtree (ToR, pod, root) with at least ``k`` free GPUs but no server
  holding ``k`` fills its servers with the most free GPUs first (then the least bad on average,
  then by index), so that it spans as few servers as possible;
* **health-first rows** (under a health that is not uniform only): every switch subtree with at
  least ``k`` free GPUs offers its ``k`` healthiest free GPUs (lowest badness rounded to 1e-9, then
  servers with the most free GPUs, then by index) when they are healthier, by more than 1e-9, than
  every single-server row inside it and its own compact row. Without them a job could only avoid a
  straggler by leaving a server that holds it whole, and CROP's measured ratio to the optimum under
  the ``severe`` profile dropped from 0.96 to 0.87 (docs/CROP.md).

The rows rank by servers spanned, then badness (rounded to 1e-9), then tightness (fewest free GPUs
left in their subtree, which limits fragmentation), then subtree node, then kind (single, compact,
health-first); a row whose GPU set repeats a better one is dropped and the list is capped. Ring
order = DFS order = sorted GPU indices.

A row's quality is its GPUs' badness summed in a fixed order (floating-point sums depend on it,
and the 1e-9 comparisons and roundings above, and the exact comparison of servers' averages, on the
last bit): a difference of the region's prefix sums along the GPU order (server by server, free
GPUs healthiest first) for a single-server row and for a server's average, numpy's pairwise sum
(``ndarray.sum``) in fill order for a compact row, and in ranking order for a health-first row.

With ``robust=False`` device health is ignored when choosing (the "CROP without robustness"
ablation): every usable GPU scores 1. Failed GPUs are never candidates.

**Regions.** On a replicated topology (:meth:`~crop_gym.model.topology.Topology.replicated`, ``n``
copies of a cluster under a new root) every region is a cluster of its own: the root that joins the
copies is no subtree, so no row crosses regions, and each region's rows are ranked and capped on
their own. :func:`generate` computes the sets of every region in one pass; a single cluster is the
batch of one region. :func:`candidate_placements` and :func:`candidate_sets` are that call for one
cluster state.

The generator is vectorised over regions, servers, subtrees and job sizes. The only thing kept is a
pure function of the immutable topology: its tree arrays (:func:`tree_arrays`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, check_range
from crop_gym.model import kernels
from crop_gym.model.conditions import Conditions
from crop_gym.model.topology import SWITCH, Topology

__all__ = [
    "CandidateSet",
    "TreeArrays",
    "candidate_inputs",
    "candidate_placements",
    "candidate_sets",
    "generate",
    "gpu_quality",
    "tree_arrays",
]

#: Badness differences up to this are ties (health-first rows must beat the compact ones by more).
EPS = 1e-9

_I64 = NDArray[np.int64]
_F64 = NDArray[np.float64]
_ZERO_I = np.zeros(1, dtype=np.int64)
_NO_FLOAT, _NO_INT = np.zeros(0), np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class CandidateSet:
    """Candidate placements for one job size, best first.

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
    _keys: tuple[tuple[int, ...], ...] | None = field(default=None, repr=False)

    @property
    def keys(self) -> tuple[tuple[int, ...], ...]:
        """Each candidate's GPUs as a tuple of ints (hashable; made when first read)."""
        keys = self._keys
        if keys is None:
            keys = tuple(map(tuple, self.gpus.tolist()))
            object.__setattr__(self, "_keys", keys)
        return keys

    @property
    def k(self) -> int:
        """GPUs per candidate."""
        return int(self.gpus.shape[1])

    def __len__(self) -> int:
        return len(self.gpus)


def _empty(k: int) -> CandidateSet:
    i32 = np.empty(0, np.int32)
    return CandidateSet(np.empty((0, k), np.int32), i32, i32, np.empty(0))


def gpu_quality(state: Any, robust: bool = True) -> NDArray[np.float64]:
    """Badness score of every GPU of a cluster state, ``σ_g / speed_g / (1 - π_g)`` (1 = healthy
    reference GPU); with ``robust=False`` every GPU scores 1."""
    cond: Conditions = state.conditions
    return cond.badness if robust else np.ones(cond.topology.num_gpus)


# ------------------------------------------------------------------------ the topology's arrays
@dataclass(frozen=True, eq=False)
class TreeArrays:
    """The topology's servers and switch subtrees as flat arrays (a pure function of it).

    A *membership* list holds, switch subtree by switch subtree (in node order), the servers
    inside it; ``mem_start`` is where each subtree's run begins. Sorting the list by
    ``mem_base + rank`` sorts each run by ``rank`` and keeps the runs in place. The root that
    joins the regions of a replicated topology is not a subtree.

    Attributes:
        srv_lo: ``int64[S]`` first GPU of each server.
        srv_region: ``int64[S]`` region of each server.
        srv_q: ``int64[S]`` where each server starts in the region-by-region prefix sums (each
            region's sums start with a 0: ``srv_lo + region``).
        end_q: ``int64[S]`` where each server's region ends in them.
        gpu_server: ``int64[G]`` server of each GPU.
        key2: ``2 * server`` of each GPU, as small ints where they fit (a radix sort key).
        sub_node: ``int64[S + W]`` node of each subtree: the servers', then the switch subtrees'.
        sw_region: ``int64[W]`` region of each switch subtree.
        mem_srv, mem_start, mem_end, mem_base: The membership lists.
        sw_gpus: GPU range of each switch subtree.
        flat: The same tree as the compiled generator reads it: per server its GPU range and
            node, per switch subtree its node and its server and GPU ranges, per region its
            servers, switch subtrees and GPUs (ranges of ``int64`` arrays).
    """

    srv_lo: _I64
    srv_region: _I64
    srv_q: _I64
    end_q: _I64
    gpu_server: _I64
    key2: NDArray[np.signedinteger[Any]]
    sub_node: _I64
    sw_region: _I64
    mem_srv: _I64
    mem_start: _I64
    mem_end: _I64
    mem_base: _I64
    sw_gpus: list[tuple[int, int]]
    flat: tuple[_I64, ...]


@lru_cache(maxsize=64)
def tree_arrays(topo: Topology) -> TreeArrays:
    """The :class:`TreeArrays` of ``topo`` (kept per topology: it is immutable)."""
    region = topo.node_region
    sw = np.flatnonzero((topo.kind == SWITCH) & (region >= 0))
    s_lo, s_hi = topo.node_srv_lo[sw].astype(np.int64), topo.node_srv_hi[sw].astype(np.int64)
    g_lo, g_hi = topo.node_gpu_lo[sw].astype(np.int64), topo.node_gpu_hi[sw].astype(np.int64)
    S = topo.num_servers
    n_srv = s_hi - s_lo
    lo = topo.server_gpu_lo.astype(np.int64)
    srv_region = region[topo.server_node].astype(np.int64)
    gpu_server = topo.gpu_server.astype(np.int64)
    return TreeArrays(
        srv_lo=lo,
        srv_region=srv_region,
        srv_q=lo + srv_region,
        end_q=(srv_region + 1) * (topo.region_gpus + 1) - 1,
        gpu_server=gpu_server,
        key2=(2 * gpu_server).astype(np.int16 if 2 * S < 2**15 else np.int64),
        sub_node=np.concatenate((topo.server_node, sw)).astype(np.int64),
        sw_region=region[sw].astype(np.int64),
        mem_srv=np.concatenate([*map(np.arange, s_lo, s_hi), _NO_INT]),  # (a lone server: none)
        mem_start=np.cumsum(n_srv) - n_srv,
        mem_end=np.cumsum(n_srv),
        mem_base=np.repeat(np.arange(len(sw), dtype=np.int64) * S, n_srv),
        sw_gpus=list(zip(g_lo.tolist(), g_hi.tolist(), strict=True)),
        flat=(
            lo,
            topo.server_gpu_hi.astype(np.int64),
            topo.server_node.astype(np.int64),
            sw.astype(np.int64),
            s_lo,
            s_hi,
            g_lo,
            g_hi,
            gpu_server,
            np.searchsorted(srv_region, np.arange(topo.regions + 1)).astype(np.int64),
            np.searchsorted(region[sw], np.arange(topo.regions + 1)).astype(np.int64),
            np.arange(topo.regions + 1, dtype=np.int64) * topo.region_gpus,
        ),
    )


@lru_cache(maxsize=64)
def _uniform_order(topo: Topology) -> NDArray[np.intp]:
    out = np.arange(topo.num_gpus)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=64)
def _ones(topo: Topology) -> _F64:
    out = np.ones(topo.num_gpus)
    out.setflags(write=False)
    return out


def _base_order(cond: Conditions, robust: bool) -> NDArray[np.intp]:
    """GPUs by (server, badness, index): a pure function of the conditions, kept on them."""
    if cond.uniform or not robust:
        return _uniform_order(cond.topology)
    order: NDArray[np.intp] | None = cond.cache.get("candidates.base_order")
    if order is None:
        order = np.lexsort((cond.badness, cond.topology.gpu_server))
        order.setflags(write=False)
        cond.cache["candidates.base_order"] = order
    return order


# ------------------------------------------------------------------------------------ entry points
def candidate_placements(
    state: Any,
    k: int,
    *,
    robust: bool = True,
    max_candidates: int = 8,
    free: NDArray[np.bool_] | None = None,
) -> CandidateSet:
    """Compact candidate placements of ``k`` GPUs in the current state of one cluster.

    Args:
        state: The cluster state (:class:`~crop_gym.model.state.ClusterState`: its free GPUs and
            conditions).
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
    state: Any,
    sizes: Iterable[int],
    *,
    robust: bool = True,
    max_candidates: int = 8,
    free: NDArray[np.bool_] | None = None,
) -> list[CandidateSet]:
    """:func:`candidate_placements` of each size in ``sizes`` (repeats allowed), computed
    together, in the order of ``sizes``; the other arguments are those of
    :func:`candidate_placements` (``max_candidates`` caps each size's set).

    Raises:
        ConfigError: As :func:`candidate_placements`, and on a replicated topology (use
            :func:`generate`, which takes the sizes of each region).
    """
    cond: Conditions = state.conditions
    if cond.topology.regions != 1:
        raise ConfigError("candidate_sets: the state has several regions; use generate()")
    mask = state.free_mask if free is None else free
    return generate(cond, mask, [list(sizes)], max_candidates, robust=robust)[0]


def generate(
    conditions: Conditions,
    free: NDArray[np.bool_],
    sizes: Sequence[Sequence[int]],
    max_candidates: int = 8,
    *,
    robust: bool = True,
    backend: str | None = None,
) -> list[list[CandidateSet]]:
    """The candidate sets of every region, in one vectorised pass.

    Args:
        conditions: The cluster under its health.
        free: ``bool[G]`` the GPUs to choose from (free and usable).
        sizes: Per region, the GPUs of its jobs (repeats allowed).
        max_candidates: Cap on the candidates per size and region (>= 1).
        robust: Whether device health steers the choice (else every usable GPU scores 1).
        backend: ``"numpy"`` (the reference), ``"numba"`` (:mod:`crop_gym.model.kernels`, the
            same rows compiled) or ``None``: the compiled kernel when it is available.

    Returns:
        Per region, the candidate set of each of its sizes, in order (GPU indices are the
        topology's, region by region).

    Raises:
        ConfigError: If a size is outside ``[1, GPUs of a region]``, ``max_candidates < 1``, or
            ``sizes`` does not have one entry per region.
    """
    topo = conditions.topology
    R, Gr = topo.regions, topo.region_gpus
    if max_candidates < 1:
        check_range("max_candidates", max_candidates, 1)
    if len(sizes) != R:
        raise ConfigError(f"generate: sizes for {len(sizes)} regions; the topology has {R}")
    wanted: list[list[int]] = []
    for ks in sizes:
        row = [int(k) for k in ks]
        for k in row:
            if not 1 <= k <= Gr:
                check_range("k", k, 1, Gr)
        wanted.append(row)
    if R == 1:
        n_free = [int(np.count_nonzero(free))]
    else:
        n_free = np.count_nonzero(free.reshape(R, Gr), axis=1).tolist()
    fitting = [sorted({k for k in row if k <= nf}) for row, nf in zip(wanted, n_free, strict=True)]
    out: dict[tuple[int, int], CandidateSet] = {}
    if any(fitting):
        compiled = kernels.enabled() if backend is None else backend == "numba"
        run = _generate_compiled if compiled else _generate
        out = run(conditions, free, fitting, int(max_candidates), robust)
    return [[out.get((k, r)) or _empty(k) for k in row] for r, row in enumerate(wanted)]


# ------------------------------------------------------------------------------------ the generator
def candidate_inputs(cond: Conditions, free: NDArray[np.bool_], robust: bool) -> tuple[Any, ...]:
    """The arguments of the compiled generator before its requests
    (:func:`crop_gym.model.kernels.generate_rows`): badness, whether it is uniform, the GPU order,
    the free GPUs and the tree's flat arrays."""
    t = tree_arrays(cond.topology)
    uniform = cond.uniform or not robust
    q = _ones(cond.topology) if uniform else cond.badness
    return (q, uniform, _base_order(cond, robust), free, *t.flat)


def _generate_compiled(
    cond: Conditions, free: NDArray[np.bool_], fitting: list[list[int]], cap: int, robust: bool
) -> dict[tuple[int, int], CandidateSet]:
    """:func:`_generate` by the compiled kernel (:func:`crop_gym.model.kernels.generate_rows`)."""
    # The requests as flat arrays: region r asks for sizes req_k[req_ptr[r]:req_ptr[r + 1]].
    # (Built from Python lists: arrays of one to a few items, where numpy calls cost most.)
    req_k = np.array([k for row in fitting for k in row], dtype=np.int64)
    req_ptr = np.array([0, *accumulate(len(row) for row in fitting)], dtype=np.int64)
    count, gpus, servers, subtree, quality = kernels.generate_rows(
        *candidate_inputs(cond, free, robust), req_ptr, req_k, cap
    )
    out: dict[tuple[int, int], CandidateSet] = {}
    row = pos = i = 0
    for r, ks in enumerate(fitting):
        for k in ks:
            n = int(count[i])
            if n:
                block = gpus[pos : pos + n * k].reshape(n, k)
                out[(k, r)] = CandidateSet(
                    block, servers[row : row + n], subtree[row : row + n], quality[row : row + n]
                )
            row += n
            pos += n * k
            i += 1
    return out


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
    cond: Conditions, free: NDArray[np.bool_], fitting: list[list[int]], cap: int, robust: bool
) -> dict[tuple[int, int], CandidateSet]:
    """The candidate sets of region ``r``'s sizes ``fitting[r]`` (each at most its free GPUs),
    keyed ``(size, r)``. Every size's rows are computed together, as (size, server) and
    (size, subtree) pairs."""
    topo = cond.topology
    t = tree_arrays(topo)
    uniform = cond.uniform or not robust
    q = _ones(topo) if uniform else cond.badness
    R = len(fitting)
    ks = sorted(set().union(*fitting))
    G, lo = len(q), t.srv_lo
    K = np.array(ks, dtype=np.int64)
    Kc = K[:, None]
    f = np.add.reduceat(free.view(np.uint8), lo, dtype=np.int64)  # free GPUs per server
    # The GPU order: server by server, its free GPUs (least bad first, then by index), then its
    # busy ones. A server's k best free GPUs are the k first of its block.
    base = _base_order(cond, robust)
    order = base[(t.key2[base] + ~free[base]).argsort(kind="stable")]
    qs = q[order]
    # Prefix sums of the badness in that order, region by region (0 first), so that a region's
    # sums never depend on another region's badness; server s starts at lo_q[s].
    qcs = np.concatenate((np.zeros((R, 1)), qs.reshape(R, -1).cumsum(axis=1)), axis=1).ravel()
    lo_q, end_q = t.srv_q, t.end_q

    # Single-server rows.
    fit = f >= Kc
    q_srv = qcs[np.minimum(lo_q + Kc, end_q)] - qcs[lo_q]  # [size, server] (where it fits)
    si, ss = fit.nonzero()
    q1 = q_srv[si, ss]
    n_sw = len(t.sw_region)

    # Compact rows, where a subtree has k free GPUs but no server inside holds k.
    g_c, q_c, n_c, ci, cw = _NO_INT, _NO_FLOAT, _NO_INT, _NO_INT, _NO_INT
    sw_free, has = _NO_INT, np.zeros((len(ks), 0), dtype=bool)
    c_start = _NO_INT
    if n_sw:
        f_mem = f[t.mem_srv]
        sw_free = np.add.reduceat(f_mem, t.mem_start)
        has = sw_free >= Kc
        ci, cw = (has & (np.maximum.reduceat(f_mem, t.mem_start) < Kc)).nonzero()
    if len(ci):
        kc = K[ci]
        c_start = kc.cumsum() - kc  # where each row's GPUs start in g_c
        # A subtree's free GPUs, server after server in compact order (most free, least bad on
        # average, index); a row of k GPUs is the first k of them (positions in `order`).
        avg = (qcs[lo_q + f] - qcs[lo_q]) / np.maximum(f, 1)
        srv_rank = np.lexsort((avg, -f)).argsort()
        msrv = t.mem_srv[(t.mem_base + srv_rank[t.mem_srv]).argsort()]
        mf = f[msrv]
        mcum = np.concatenate((_ZERO_I, mf.cumsum()))
        start = mcum[t.mem_start][cw]
        pos = _ragged(lo[msrv], mf)[_ragged(start, kc)]
        g_c, q_c = order[pos], _row_sums(qs[pos], ks, ci)
        n_c = mcum.searchsorted(start + kc) - t.mem_start[cw]  # servers of the prefix

    # Health-first rows: a subtree's k best free GPUs by (rounded badness, -free GPUs of their
    # server, index), kept if healthier than every row inside.
    g_h, q_h, n_h, hi, hw, h_start = _NO_INT, _NO_FLOAT, _NO_INT, _NO_INT, _NO_INT, _NO_INT
    if not uniform and n_sw:
        first = qs[lo]  # each server's healthiest free GPU (if it has one)
        sw_qmin = np.minimum.reduceat(np.where(f > 0, first, np.inf)[t.mem_srv], t.mem_start)
        inside = np.minimum.reduceat(
            np.where(fit, q_srv, np.inf)[:, t.mem_srv], t.mem_start, axis=1
        )
        inside[ci, cw] = q_c  # (no server inside holds k there)
        # A subtree is skipped at once if a row inside is made of its healthiest GPUs.
        hi, hw = (has & (inside > Kc * sw_qmin + EPS)).nonzero()
        if len(hi):
            kh = K[hi]
            h_start = kh.cumsum() - kh
            # Ranks of the free GPUs, busy ones all alike after them; a subtree's k best, in
            # ranking order, have their badness summed in that order.
            rank = np.lexsort((-f[t.gpu_server], np.round(q, 9), ~free)).argsort()
            best = []
            for k, w in zip(kh.tolist(), hw.tolist(), strict=True):
                a, z = t.sw_gpus[w]
                rk = rank[a:z]
                part = rk.argpartition(k - 1)[:k] if k < z - a else np.arange(z - a)
                best.append(part[np.argsort(rk[part], kind="stable")] + a)
            g_h = np.concatenate(best)
            q_h = _row_sums(q[g_h], ks, hi)
            span = np.zeros((len(hi), len(lo)), dtype=bool)
            span[np.arange(len(hi)).repeat(kh), t.gpu_server[g_h]] = True
            n_h = span.sum(axis=1)
            ok = ~(q_h >= inside[hi, hw] - EPS)  # else a row inside is as healthy
            if not ok.all():
                hi, hw, h_start, q_h, n_h = hi[ok], hw[ok], h_start[ok], q_h[ok], n_h[ok]

    # Every row of every size: single-server rows, then compact rows, then health-first ones.
    S = len(lo)
    sub = np.concatenate((ss, cw + S, hw + S))  # servers, then switch subtrees
    rows = _Rows(
        size=np.concatenate((si, ci, hi)),
        region=np.concatenate((t.srv_region[ss], t.sw_region[cw], t.sw_region[hw])),
        num_servers=np.concatenate((np.ones(len(si), dtype=np.int64), n_c, n_h)),
        quality=np.concatenate((q1, q_c, q_h)),
        left=np.concatenate((f, sw_free))[sub],
        node=t.sub_node[sub],
        src=np.concatenate((order, g_c, g_h)),
        start=np.concatenate((lo[ss], c_start + G, h_start + (G + len(g_c)))),
        singles=len(si),
    )
    wanted = np.zeros((len(ks), R), dtype=bool)
    for r, row in enumerate(fitting):
        wanted[np.searchsorted(ks, row), r] = True
    return _assemble(ks, K, cap, rows, wanted.ravel(), R, G)


@dataclass(frozen=True, eq=False)
class _Rows:
    """Candidate rows of several sizes and regions, one item per row.

    Attributes:
        size: Index of the row's size in ``ks``.
        region: The row's region.
        num_servers, quality, node: Servers spanned, badness, node of the subtree.
        left: Free GPUs of the subtree (before the row's ``k`` are taken).
        src, start: The row's ``k`` GPUs (unsorted) are ``src[start:start + k]``.
        singles: The single-server rows come first, this many (they never repeat each other).
    """

    size: _I64
    region: _I64
    num_servers: _I64
    quality: _F64
    left: _I64
    node: _I64
    src: _I64
    start: _I64
    singles: int


def _assemble(
    ks: list[int], K: _I64, cap: int, rows: _Rows, wanted: NDArray[np.bool_], R: int, G: int
) -> dict[tuple[int, int], CandidateSet]:
    """Each (size, region) group's best ``cap`` distinct rows, ranked by (servers spanned,
    rounded badness, free GPUs left, subtree node, kind): rows come kind by kind and the sort is
    stable. ``wanted[size * R + region]`` says whether a group is asked for."""
    size, node = rows.size, rows.node
    k_row = K[size]
    group = size * R + rows.region  # (size, region), size-major
    ranked = np.lexsort((node, rows.left - k_row, rows.quality.round(9), rows.num_servers, group))
    ranked_l = ranked.tolist()
    # A row that repeats a better one is dropped: only the extra rows (compact, health-first)
    # can repeat one, so each group's best cap + extras rows are enough.
    ng = len(ks) * R
    counts = np.bincount(group, minlength=ng).tolist()
    extras = np.bincount(group[rows.singles :], minlength=ng).tolist()
    picks: list[int] = []
    chosen: list[tuple[int, int, int]] = []  # (group, rows picked, extra rows)
    s0 = 0
    for g, (c, e) in enumerate(zip(counts, extras, strict=True)):
        if c and wanted[g]:
            n = min(c, cap + e)
            picks += ranked_l[s0 : s0 + n]
            chosen.append((g, n, e))
        s0 += c
    if not picks:
        return {}
    # The picked rows' GPUs, each row sorted; rows come group by group.
    pick = np.array(picks)
    kp = k_row[pick]
    row_key = np.arange(len(pick)).repeat(kp) * G
    gpus = rows.src[_ragged(rows.start[pick], kp)] + row_key
    gpus.sort()
    gpus -= row_key
    g32 = gpus.astype(np.int32)
    ns = rows.num_servers[pick].astype(np.int32)
    nd = node[pick].astype(np.int32)
    qq = rows.quality[pick]
    out: dict[tuple[int, int], CandidateSet] = {}
    end = p = 0
    for g, n, e in chosen:
        ki, r = divmod(g, R)
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
        out[(k, r)] = CandidateSet(
            block[kept], ns[sl][kept], nd[sl][kept], qq[sl][kept], _keys=tuple(keys)
        )
        end += n * k
        p += n
    return out
