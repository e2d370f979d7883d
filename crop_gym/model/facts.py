"""Placement facts: the contention-independent facts of a set of GPUs on a cluster.

For a placement ``P`` (``k`` GPUs on ``s`` servers, at most ``g`` of them on one server) the facts
are ``k``, ``g``, ``s``, the bottleneck bandwidth and largest latency over the spanned GPU links,
the largest latency over the spanned inter-server links, the slowdown ``max σ/speed``, the
survival probability and ``Σ g_i²`` over the servers (``g_i`` GPUs of ``P`` on server ``i``: with
``k`` and ``s`` it tells apart placements that ``g`` does not, e.g. 3311 from 3221), plus the spanned inter-server links themselves (the links whose subtree
holds some but not all of ``P``; a DFS-ordered ring crosses each once per direction). They depend
on the topology and the device health only, never on other jobs: the iteration-time model
(:mod:`crop_gym.model.timing`) adds the contention.

:func:`placement_facts` computes them for many placements at once, vectorised over the placements,
from two tables of the health (:func:`device_table`, :func:`link_table`); the conditions of a health
(:class:`~crop_gym.model.conditions.Conditions`) keep those tables and the facts of every GPU set they
have evaluated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.health import Health
from crop_gym.model.topology import Topology

__all__ = [
    "FACT_COLUMNS",
    "PlacementFacts",
    "device_table",
    "facts_kernel",
    "link_table",
    "padded_rows",
    "placement_facts",
]

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

    @classmethod
    def concat(cls, parts: Sequence[PlacementFacts]) -> PlacementFacts:
        """The rows of ``parts``, in order (link rows root-padded to the widest)."""
        if len(parts) == 1:
            return parts[0]
        width = max((p.inter_links.shape[1] for p in parts), default=0)
        links = np.zeros((sum(len(p) for p in parts), width), dtype=np.int32)
        start = 0
        for p in parts:
            links[start : start + len(p), : p.inter_links.shape[1]] = p.inter_links
            start += len(p)
        values = (
            np.concatenate([p.values for p in parts]) if parts else np.zeros((0, len(FACT_COLUMNS)))
        )
        return cls(values, links)

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


def device_table(topology: Topology, health: Health) -> FloatArray:
    """``float64[G, 5]`` per GPU: minus the ``ρ·B`` and the latency of its own link, σ/speed,
    1 - π, and (1 - π)(1 - π of its own link): what the kernel gathers per GPU of a placement."""
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


def link_table(topology: Topology, health: Health) -> FloatArray:
    """``float64[N, 2]`` per link: latency and 1 - π (the root, the padding, has 0 and 1)."""
    out = np.column_stack((topology.link_lat, 1.0 - health.link_fail_prob))
    out[0] = (0.0, 1.0)
    out.setflags(write=False)
    return out


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
    # Narrower blocks are padded by repeating their last GPU (see facts_kernel).
    P = (
        np.concatenate(
            [np.sort(b, axis=1)[:, np.minimum(np.arange(kmax), b.shape[1] - 1)] for b in blocks]
        )
        if blocks
        else np.zeros((0, 0), dtype=np.int64)
    )
    k = np.repeat(np.array(sizes, dtype=np.int64), [b.shape[0] for b in blocks])
    return facts_kernel(
        topology, device_table(topology, health), link_table(topology, health), P, k
    )


def padded_rows(keys: Sequence[tuple[int, ...]]) -> tuple[NDArray[np.int64], IntArray]:
    """``(P, k)`` of the GPU sets ``keys`` (sorted tuples), as :func:`facts_kernel` takes them:
    each row's last GPU repeated up to the widest."""
    if not keys:
        return np.zeros((0, 0), np.int64), np.zeros(0, np.int64)
    kmax = max(map(len, keys))
    P = np.array([key + key[-1:] * (kmax - len(key)) for key in keys], dtype=np.int64)
    return P, np.array([len(key) for key in keys], dtype=np.int64)


def facts_kernel(
    topology: Topology,
    devices: FloatArray,
    links: FloatArray,
    P: NDArray[np.integer[Any]],
    k: IntArray,
) -> PlacementFacts:
    """The facts of the rows of ``P``: row ``r`` holds its ``k[r]`` GPUs sorted, then its last GPU
    repeated up to the width of ``P`` (a repeated GPU adds no server, link or ring step, and the
    per-GPU products skip it); ``devices`` and ``links`` are the health's tables.

    This is the reference; :func:`crop_gym.model.kernels.facts_rows` is the same computation
    compiled (the conditions' memo, :meth:`Conditions.facts
    <crop_gym.model.conditions.Conditions.facts>`, runs it when it is available)."""
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
    X = devices[P]  # [R, k, 5]
    multi = k >= 2
    worst = X[:, :, :3].max(axis=1)  # -bandwidth, latency and slowdown of the GPU links
    ok = np.where(valid[:, :, None], X[:, :, 3:], 1.0).prod(axis=1)  # (GPU, GPU and its link)
    values[:, 3] = np.where(multi, -worst[:, 0], np.inf)
    values[:, 4] = np.where(multi, worst[:, 1], 0.0)
    values[:, 6] = worst[:, 2]

    # Inter-server links: at each depth, the links above the row's GPUs are contiguous runs (GPUs
    # are numbered in DFS order). If a depth holds more than one link, none of them holds all of
    # the placement, so each is spanned; if it holds one, that link holds all of it.
    a = upper_links_by_depth(topology)[P]  # [R, k, D]; 0 where a GPU has no link at a depth
    change = a[:, 1:, :] != a[:, :-1, :]
    inter = np.empty(a.shape, dtype=bool)
    inter[:, 0, :] = True
    inter[:, 1:, :] = change
    inter &= change.any(axis=1)[:, None, :]
    inter = inter.reshape(R, -1)
    a = np.where(inter, a.reshape(R, -1), 0)
    link = links[a]  # [R, k * D, 2]: latency, 1 - π (root: 0, 1)
    values[:, 5] = link[:, :, 0].max(axis=1, initial=0.0)
    values[:, 7] = np.where(multi, ok[:, 1], ok[:, 0]) * link[:, :, 1].prod(axis=1)
    width = int(np.count_nonzero(a, axis=1).max(initial=0))
    a.sort(axis=1)
    # Largest first, root-padded.
    return PlacementFacts(values, a[:, ::-1][:, :width].astype(np.int32))


@lru_cache(maxsize=64)
def upper_links_by_depth(topology: Topology) -> NDArray[np.int32]:
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
