"""Placement facts: the contention-independent facts of a set of GPUs on a cluster.

For a placement ``P`` (``k`` GPUs on ``s`` servers, at most ``g`` of them on one server) the facts
are ``k``, ``g``, ``s``, the bottleneck bandwidth and largest latency over the spanned GPU links,
the largest latency over the spanned inter-server links, the slowdown ``max σ/speed``, the
survival probability and ``Σ g_i²`` over the servers (``g_i`` GPUs of ``P`` on server ``i``: with
``k`` and ``s`` it tells apart placements that ``g`` does not, e.g. 3311 from 3221), plus the spanned inter-server links themselves (the links whose subtree
holds some but not all of ``P``; a DFS-ordered ring crosses each once per direction). They depend
on the topology and the device health only, never on other jobs: the iteration-time model
(:mod:`crop_gym.model.timing`) adds the contention.

:func:`placement_facts` computes them for many placements at once; :func:`memo_facts` keeps them
per (topology, health) by GPU set, a pure function of immutable inputs.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.health import Health
from crop_gym.model.topology import Topology

__all__ = ["FACT_COLUMNS", "PlacementFacts", "memo_facts", "memo_facts_many", "placement_facts"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


# ----------------------------------------------------------------------------- placement facts
#: The columns of :attr:`PlacementFacts.values`, in order.
FACT_COLUMNS: tuple[str, ...] = (
    "k",  # GPUs
    "g",  # most GPUs on one server
    "s",  # servers spanned
    "b_intra",  # bottleneck ρ·B over the spanned GPU links (inf if none)
    "a_intra",  # largest latency over the spanned GPU links (0 if none)
    "a_inter",  # largest latency over the spanned inter-server links (0 if none)
    "slowdown",  # max σ_g / speed_g over the placement
    "survival",  # probability that no GPU or spanned link of the placement fails
    "sum_g2",  # Σ over servers of (GPUs of the placement on it)²
)


@dataclass(frozen=True, slots=True)
class PlacementFacts:
    """Contention-independent facts of ``R`` placements (named arrays, row ``r`` = placement ``r``).

    Attributes:
        values: ``float64[R, 9]``, one column per name of :data:`FACT_COLUMNS` (read them as
            ``facts.k``, ``facts.survival``, ...; counts are exact in float64).
        inter_links: ``int32[R, W]`` spanned inter-server links, largest first, root-padded
            (node 0, whose bandwidth is infinite).
    """

    values: FloatArray
    inter_links: NDArray[np.int32]

    @classmethod
    def of(cls, inter_links: NDArray[np.int32], **columns: Any) -> PlacementFacts:
        """Facts from one array per column of :data:`FACT_COLUMNS` (all of them, by name)."""
        values = np.empty((len(inter_links), len(FACT_COLUMNS)))
        for i, c in enumerate(FACT_COLUMNS):
            values[:, i] = columns[c]
        return cls(values, inter_links)

    def __len__(self) -> int:
        return len(self.values)

    def take(self, rows: Any) -> PlacementFacts:
        """The facts of ``rows`` (an index array, a slice or an int for one row)."""
        if isinstance(rows, (int, np.integer)):
            rows = slice(int(rows), int(rows) + 1 or None)  # (a view)
        return PlacementFacts(self.values[rows], self.inter_links[rows])

    k = property(lambda self: self.values[:, 0], doc="``float64[R]`` GPUs.")
    g = property(lambda self: self.values[:, 1], doc="``float64[R]`` most GPUs on one server.")
    s = property(lambda self: self.values[:, 2], doc="``float64[R]`` servers spanned.")
    b_intra = property(lambda self: self.values[:, 3], doc="``float64[R]`` GPU-link bottleneck.")
    a_intra = property(lambda self: self.values[:, 4], doc="``float64[R]`` GPU-link latency.")
    a_inter = property(lambda self: self.values[:, 5], doc="``float64[R]`` inter-link latency.")
    slowdown = property(lambda self: self.values[:, 6], doc="``float64[R]`` max σ/speed.")
    survival = property(lambda self: self.values[:, 7], doc="``float64[R]`` survival.")
    sum_g2 = property(
        lambda self: self.values[:, 8], doc="``float64[R]`` Σ over servers of GPUs² there."
    )


def placement_facts(
    topology: Topology,
    health: Health,
    placements: NDArray[np.integer[Any]] | Sequence[NDArray[np.integer[Any]]],
) -> PlacementFacts:
    """Compute the facts of many placements at once.

    Args:
        topology: The cluster.
        health: Device health (σ, ρ, π).
        placements: ``int[R, k]`` (one placement of ``k`` GPUs per row), or a sequence of blocks,
            each one placement (``int[k]``) or rows of equal size (``int[n, k]``); the rows of all
            blocks, in order, are the result's rows. GPUs of a placement must be distinct, in any
            order.

    Returns:
        One row of facts per placement.
    """
    if isinstance(placements, np.ndarray) and placements.ndim == 2:
        blocks = [placements]
    else:
        blocks = [np.atleast_2d(np.asarray(p)) for p in placements]
    blocks = [b for b in blocks if b.shape[0]]
    sizes = [b.shape[1] for b in blocks]
    kmax = max(sizes, default=0)
    # Narrower blocks are padded by repeating their last GPU (see _facts).
    P = (
        np.concatenate(
            [np.sort(b, axis=1)[:, np.minimum(np.arange(kmax), b.shape[1] - 1)] for b in blocks]
        )
        if blocks
        else np.zeros((0, 0), dtype=np.int64)
    )
    k = np.repeat(np.array(sizes, dtype=np.int64), [b.shape[0] for b in blocks])
    return _facts(topology, [health], P, k)


def _facts(
    topology: Topology,
    healths: Sequence[Health],
    P: NDArray[np.integer[Any]],
    k: IntArray,
    copy: IntArray | None = None,
) -> PlacementFacts:
    """The facts of the rows of ``P``: row ``r`` holds its ``k[r]`` GPUs sorted, then its last GPU
    repeated up to the width of ``P`` (a repeated GPU adds no server, link or ring step, and the
    per-GPU products skip it). Row ``r`` is under ``healths[copy[r]]`` (several states of one
    topology evaluated together; ``copy=None``: all under ``healths[0]``)."""
    R, kmax = P.shape
    if R == 0 or kmax == 0:
        z = np.zeros(R)
        return PlacementFacts(
            np.column_stack((k, k, k, z + np.inf, z, z, z + 1, z + 1, z)),
            np.zeros((R, 0), dtype=np.int32),
        )
    # Servers spanned, and the most GPUs on one server (rows are sorted: a server is a run).
    idx = np.arange(kmax)
    valid = idx < k[:, None]
    srv = topology.gpu_server[P]
    new_srv = np.ones(P.shape, dtype=bool)
    np.not_equal(srv[:, 1:], srv[:, :-1], out=new_srv[:, 1:])
    run_start = np.maximum.accumulate(np.where(new_srv, idx, 0), axis=1)
    values = np.empty((R, len(FACT_COLUMNS)))
    values[:, 0] = k
    values[:, 1] = np.where(valid, idx - run_start, -1).max(axis=1) + 1
    values[:, 2] = new_srv.sum(axis=1)
    # Σ_i g_i²: a server's run of g GPUs adds 1 + 3 + ... + (2g - 1) = g² (position p in it: 2p+1).
    values[:, 8] = np.where(valid, 2 * (idx - run_start) + 1, 0).sum(axis=1)

    # Per-GPU terms in one gather. A GPU's own (intra-server) link holds only that GPU: a ring of
    # k >= 2 spans every one.
    X = _per_health(_device_table, topology, healths, P, copy, topology.num_gpus)  # [R, k, 5]
    multi = k >= 2
    worst = X[:, :, :3].max(axis=1)  # -bandwidth, latency and slowdown of the GPU links
    ok = np.where(valid[:, :, None], X[:, :, 3:], 1.0).prod(axis=1)  # (GPU, GPU and its link)
    values[:, 3] = np.where(multi, -worst[:, 0], np.inf)
    values[:, 4] = np.where(multi, worst[:, 1], 0.0)
    values[:, 6] = worst[:, 2]

    # Inter-server links: at each depth, the links above the row's GPUs are contiguous runs (GPUs
    # are numbered in DFS order). If a depth holds more than one link, none of them holds all of
    # the placement, so each is spanned; if it holds one, that link holds all of it.
    a = _upper_links_by_depth(topology)[P]  # [R, k, D]; 0 where a GPU has no link at a depth
    change = a[:, 1:, :] != a[:, :-1, :]
    inter = np.empty(a.shape, dtype=bool)
    inter[:, 0, :] = True
    inter[:, 1:, :] = change
    inter &= change.any(axis=1)[:, None, :]
    inter = inter.reshape(R, -1)
    a = np.where(inter, a.reshape(R, -1), 0)
    # [R, k * D, 2]: latency, 1 - π (root: 0, 1)
    link = _per_health(_link_table, topology, healths, a, copy, topology.num_nodes)
    values[:, 5] = link[:, :, 0].max(axis=1)
    values[:, 7] = np.where(multi, ok[:, 1], ok[:, 0]) * link[:, :, 1].prod(axis=1)
    width = int(np.count_nonzero(a, axis=1).max(initial=0))
    a.sort(axis=1)
    # Largest first, root-padded.
    return PlacementFacts(values, a[:, ::-1][:, :width].astype(np.int32))


def _per_health(
    table: Any,
    topology: Topology,
    healths: Sequence[Health],
    index: NDArray[np.integer[Any]],
    copy: IntArray | None,
    size: int,
) -> FloatArray:
    """``table(topology, h)[index]`` with ``h`` the health of each row: ``healths[0]``, or with
    ``copy`` the tables of all ``healths`` stacked (``size`` rows each) and each row's index
    moved to its own."""
    if copy is None:
        out: FloatArray = table(topology, healths[0])[index]
        return out
    stacked = np.concatenate([table(topology, h) for h in healths])
    out = stacked[index + (copy * size).reshape((-1,) + (1,) * (index.ndim - 1))]
    return out


@lru_cache(maxsize=64)
def _upper_links_by_depth(topology: Topology) -> NDArray[np.int32]:
    """``int32[G, D]``: column ``d`` holds the inter-server link at depth ``d + 1`` above each GPU
    (0 where it has none). A pure function of the immutable topology, kept per topology."""
    G, D = topology.gpu_links.shape
    out = np.zeros((G, D), dtype=np.int32)
    flat = topology.gpu_links.ravel()
    rows = np.repeat(np.arange(G), D)
    keep = (flat > 0) & ~topology.is_intra[flat]
    out[rows[keep], topology.depth[flat[keep]] - 1] = flat[keep]
    used = out.any(axis=0)
    out = np.ascontiguousarray(out[:, used]) if used.any() else out[:, :0]
    out.setflags(write=False)
    return out


@lru_cache(maxsize=256)
def _device_table(topology: Topology, health: Health) -> FloatArray:
    """``float64[G, 5]`` per GPU: minus the ρ·B and the latency of its own link, σ/speed, 1 - π,
    and (1 - π)(1 - π of its own link). A pure function of the immutable topology and health."""
    own = topology.gpu_node
    gpu_ok = 1.0 - health.gpu_fail_prob
    out = np.column_stack(
        (
            -(topology.link_bw * health.link_degradation)[own],
            topology.link_lat[own],
            health.gpu_slowdown / topology.gpu_speed,
            gpu_ok,
            gpu_ok * (1.0 - health.link_fail_prob[own]),
        )
    )
    out.setflags(write=False)
    return out


@lru_cache(maxsize=256)
def _link_table(topology: Topology, health: Health) -> FloatArray:
    """``float64[N, 2]`` per link: latency and 1 - π (the root, the padding, has 0 and 1)."""
    out = np.column_stack((topology.link_lat, 1.0 - health.link_fail_prob))
    out[0] = (0.0, 1.0)
    out.setflags(write=False)
    return out


# ----------------------------------------------------------------------------- memoised facts
#: Rows a :class:`_FactsMemo` holds before it starts afresh (its bound).
_MEMO_ROWS = 1 << 13


@dataclass(eq=False)
class _FactsMemo:
    """Facts of the GPU sets already evaluated on one topology under one health (both immutable,
    so a row never goes stale): row ``row[gpus]`` of ``values``, ``links`` and ``width``."""

    topology: Topology
    row: dict[tuple[int, ...], int] = field(default_factory=dict)
    values: FloatArray = field(default_factory=lambda: np.zeros((0, len(FACT_COLUMNS))))
    links: NDArray[np.int32] = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int32))
    width: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def add(self, keys: list[tuple[int, ...]], facts: PlacementFacts) -> None:
        """Store ``facts`` (one row per key, in order)."""
        n, (R, W) = len(self.row), facts.inter_links.shape
        old_w = self.links.shape[1]
        if n + R > len(self.values) or old_w < W:
            cap = max(len(self.values), 2 * (n + R), 64)
            values, links = (
                np.zeros((cap, len(FACT_COLUMNS))),
                np.zeros((cap, max(old_w, W)), np.int32),
            )
            width = np.zeros(cap, dtype=np.int64)
            values[:n], links[:n, :old_w], width[:n] = (
                self.values[:n],
                self.links[:n],
                self.width[:n],
            )
            self.values, self.links, self.width = values, links, width
        self.values[n : n + R] = facts.values
        self.links[n : n + R, :W] = facts.inter_links
        self.width[n : n + R] = np.count_nonzero(facts.inter_links, axis=1)
        self.row.update(zip(keys, range(n, n + R), strict=True))


#: Per health (immutable, compared by identity) its memo; dropped with the health.
_MEMOS: weakref.WeakKeyDictionary[Health, _FactsMemo] = weakref.WeakKeyDictionary()


def memo_facts(
    topology: Topology, health: Health, keys: Sequence[tuple[int, ...]]
) -> PlacementFacts:
    """:func:`placement_facts` of the placements ``keys`` (sorted GPU tuples), memoised by GPU set.

    Facts are a pure function of the immutable topology, health and GPU set, so each set is
    evaluated once per health (in one :func:`placement_facts` call for all the new ones); the
    memo of a health holds at most 8,192 sets and is dropped with the health.
    """
    return memo_facts_many(topology, [health], [keys])[0]


def memo_facts_many(
    topology: Topology, healths: Sequence[Health], keys: Sequence[Sequence[tuple[int, ...]]]
) -> list[PlacementFacts]:
    """:func:`memo_facts` of several states of one topology, ``keys[i]`` under ``healths[i]``:
    the sets new to their health's memo are evaluated together, in one pass."""
    memos = []
    for health in healths:
        memo = _MEMOS.get(health)
        if memo is None or memo.topology is not topology or len(memo.row) > _MEMO_ROWS:
            memo = _MEMOS[health] = _FactsMemo(topology)
        memos.append(memo)
    rows = [[m.row.get(key, -1) for key in ks] for m, ks in zip(memos, keys, strict=True)]
    new = [
        list(dict.fromkeys(key for key, r in zip(ks, rs, strict=True) if r < 0)) if -1 in rs else []
        for ks, rs in zip(keys, rows, strict=True)
    ]
    flat = [key for ks in new for key in ks]
    if flat:
        kmax = max(map(len, flat))
        P = np.array([key + key[-1:] * (kmax - len(key)) for key in flat])
        k = np.array([len(key) for key in flat])
        copy = (
            None if len(healths) == 1 else np.repeat(np.arange(len(healths)), list(map(len, new)))
        )
        facts = _facts(topology, healths, P, k, copy)
        start = 0
        for i, ks in enumerate(new):
            if ks:
                memos[i].add(ks, facts.take(slice(start, start + len(ks))))
                rows[i] = [memos[i].row[key] for key in keys[i]]
                start += len(ks)
    out = []
    for memo, rs in zip(memos, rows, strict=True):
        idx = np.array(rs, dtype=np.intp)
        width = int(memo.width[idx].max(initial=0))
        out.append(PlacementFacts(memo.values[idx], memo.links[idx, :width]))
    return out
