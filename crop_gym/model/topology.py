"""Cluster topology: a rooted tree of links, built with networkx and compiled into numpy arrays.

The tree goes GPU → server (intra-server interconnect) → ToR switch → optional pod → root. Every edge
is a link with a per-direction bandwidth (bytes/s) and a latency (s). A multi-path fabric (spines
with ECMP) is one aggregated uplink whose bandwidth is the sum of the parallel links.

A link is identified by its *child* node: link ``e`` joins node ``e`` to ``parent[e]``. Nodes are
numbered in depth-first preorder from the root (node 0), so the GPUs of any subtree form a contiguous
range of GPU indices and a ring that visits GPUs in increasing index order is the DFS ring of
docs/MODEL.md §1. Node 0 (the root) is not a link; it is used as padding in link-index arrays and has
infinite bandwidth.

Graph attributes understood by :meth:`Topology.from_graph`:

* node ``kind``: ``"gpu"``, ``"server"`` or anything else (a switch);
* node ``speed`` (on a server or a GPU): relative GPU speed, 1.0 = the reference GPU (the A100 of
  the model zoo, or the GPU type of the topology's hardware profile);
* edge ``bandwidth`` (bytes/s, > 0) and ``latency`` (s, >= 0, default 0);
* graph ``root`` (or a node with ``root=True``): the root; defaults to the unique node of kind
  ``"root"`` or, failing that, the tree's center is *not* guessed and an error is raised.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import numbers
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib import resources
from typing import Any, Protocol

import networkx as nx
import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, TopologyError
from crop_gym.model.jobs import calibration_data

__all__ = [
    "PRESETS",
    "GpuHardware",
    "Topology",
    "build_tree",
    "default_link_params",
    "make_topology",
]

IntArray = NDArray[np.int32]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

GPU, SERVER, SWITCH = 0, 1, 2


def _readonly(a: np.ndarray) -> Any:
    a.setflags(write=False)
    return a


class GpuHardware(Protocol):
    """What a topology needs of its hardware profile (a :class:`~crop_gym.model.hardware.HardwareProfile`)."""

    @property
    def name(self) -> str: ...
    def compute_time(self, model: str, local_batch: Any, gpu_type: str | None = None) -> Any: ...
    def model_grad_bytes(self, model: str) -> float: ...
    @property
    def model_compute_sharing(self) -> Mapping[str, float]: ...
    @property
    def model_compute_saturation(self) -> Mapping[str, float]: ...
    @property
    def model_latency_inflation(self) -> Mapping[str, float]: ...
    @property
    def model_replica_overhead(self) -> Mapping[str, float]: ...


def _edge_number(u: Hashable, v: Hashable, attr: str, value: Any, *, positive: bool) -> float:
    """An edge attribute as a float: a real number (not a bool, a string or ``None``), finite, and
    ``> 0`` (``positive``) or ``>= 0``; else a :class:`TopologyError` naming the edge.

    ``float()`` alone would take ``True`` as 1 byte/s and ``"1e9"`` as a number: both refused.
    """
    rule = "> 0" if positive else ">= 0"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TopologyError(
            f"edge ({u!r}, {v!r}) has a non-numeric {attr} {value!r} "
            f"({type(value).__name__}; it must be a number {rule})"
        )
    x = float(value)
    if not math.isfinite(x) or (x <= 0 if positive else x < 0):
        raise TopologyError(f"edge ({u!r}, {v!r}) has {attr} {x!r}; it must be {rule} and finite")
    return x


@dataclass(frozen=True, eq=False)
class Topology:
    """A compiled cluster tree. Build it with :func:`build_tree`, :func:`make_topology` or
    :meth:`from_graph`; every array is read-only.

    Attributes:
        name: Human-readable name (preset name or ``"custom"``).
        graph: The validated networkx tree (``DiGraph`` from parent to child), kept for rendering.
        node_names: Original node identifiers, by node index (DFS preorder).
        parent: ``int32[N]`` parent node index (``-1`` for the root).
        depth: ``int32[N]`` depth (root 0).
        kind: ``int8[N]``: 0 GPU, 1 server, 2 switch.
        link_bw: ``float64[N]`` bandwidth of the link above each node (root: ``inf``).
        link_lat: ``float64[N]`` latency of the link above each node (root: 0).
        is_intra: ``bool[N]`` whether the link above the node is a GPU's intra-server link.
        gpu_node: ``int32[G]`` node index of each GPU (GPUs numbered in DFS order).
        gpu_server: ``int32[G]`` server index of each GPU.
        gpu_speed: ``float64[G]`` relative speed of each GPU.
        gpu_links: ``int32[G, D]`` links on the path from each GPU up to the root, root-padded.
        server_node: ``int32[S]`` node index of each server.
        server_gpu_lo / server_gpu_hi: ``int32[S]`` half-open GPU index range of each server.
        node_gpu_lo / node_gpu_hi: ``int32[N]`` half-open GPU index range of each subtree.
        node_srv_lo / node_srv_hi: ``int32[N]`` half-open server index range of each subtree.
        hardware: The profile it was built for (:mod:`crop_gym.model.hardware`): jobs'
            ``M`` and compute come from it (its GPU type has speed 1); ``None``: the model zoo.
        regions: Number of *regions*: ``1`` for a cluster; ``n`` for :meth:`replicated`, ``n``
            copies of one cluster under a new root, where no job crosses copies (the batched
            environments hold ``n`` episodes as one state over them). Region ``r`` holds GPUs
            ``r * region_gpus ...`` and nodes ``region_node_lo(r) ...``.
        base: The cluster each region copies (``None`` for a single cluster).
    """

    name: str
    graph: nx.DiGraph = field(repr=False)
    node_names: tuple[Hashable, ...] = field(repr=False)
    parent: IntArray = field(repr=False)
    depth: IntArray = field(repr=False)
    kind: NDArray[np.int8] = field(repr=False)
    link_bw: FloatArray = field(repr=False)
    link_lat: FloatArray = field(repr=False)
    is_intra: BoolArray = field(repr=False)
    gpu_node: IntArray = field(repr=False)
    gpu_server: IntArray = field(repr=False)
    gpu_speed: FloatArray = field(repr=False)
    gpu_links: IntArray = field(repr=False)
    server_node: IntArray = field(repr=False)
    server_gpu_lo: IntArray = field(repr=False)
    server_gpu_hi: IntArray = field(repr=False)
    node_gpu_lo: IntArray = field(repr=False)
    node_gpu_hi: IntArray = field(repr=False)
    node_srv_lo: IntArray = field(repr=False)
    node_srv_hi: IntArray = field(repr=False)
    uniform_depth: bool = field(default=False, repr=False)
    hardware: GpuHardware | None = field(default=None, repr=False)
    regions: int = 1
    base: Topology | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ sizes
    @cached_property
    def num_nodes(self) -> int:
        """Number of tree nodes ``N`` (links are nodes 1..N-1)."""
        return len(self.parent)

    @cached_property
    def num_gpus(self) -> int:
        """Number of GPUs ``G``."""
        return len(self.gpu_node)

    @cached_property
    def num_servers(self) -> int:
        """Number of servers ``S``."""
        return len(self.server_node)

    @cached_property
    def max_gpus_per_server(self) -> int:
        """Largest server size."""
        return int((self.server_gpu_hi - self.server_gpu_lo).max())

    @property
    def region_topology(self) -> Topology:
        """The cluster of one region: :attr:`base`, or this topology itself."""
        return self if self.base is None else self.base

    @cached_property
    def region_gpus(self) -> int:
        """GPUs per region."""
        return self.num_gpus // self.regions

    @cached_property
    def region_servers(self) -> int:
        """Servers per region."""
        return self.num_servers // self.regions

    @cached_property
    def region_nodes(self) -> int:
        """Nodes per region (the root that joins the copies belongs to none)."""
        return self.region_topology.num_nodes

    def region_node_lo(self, region: int) -> int:
        """First node of ``region`` (its root): 0 for a single cluster."""
        return 0 if self.base is None else 1 + region * self.region_nodes

    @property
    def node_region(self) -> NDArray[np.int64]:
        """``int64[N]`` region of each node (-1 for the root that joins the copies)."""
        if self.base is None:
            return np.zeros(self.num_nodes, dtype=np.int64)
        return np.concatenate(([-1], np.arange(self.num_nodes - 1) // self.region_nodes))

    def replicated(self, n: int) -> Topology:
        """``n`` copies of this cluster under a new root: one topology of ``n`` regions.

        Copy ``r`` holds GPUs ``r * G ...``, servers ``r * S ...`` and nodes ``1 + r * N ...`` (node
        0 is the new root; the link above each copy's root has infinite bandwidth and no latency,
        and no placement crosses copies, so each copy behaves exactly as the cluster alone:
        tests/test_locality.py). The batched environment steps ``n`` episodes as one state over
        such a topology.

        Raises:
            ConfigError: If ``n`` is not an integer >= 1, or this topology is itself replicated.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ConfigError(f"n={n!r} must be an integer >= 1")
        if self.base is not None:
            raise ConfigError("replicated(): the topology is already replicated")
        N, G, S = self.num_nodes, self.num_gpus, self.num_servers
        n = int(n)

        def tile(a: NDArray[Any], step: int, keep_neg: bool = False) -> NDArray[Any]:
            out = (a[None, :] + step * np.arange(n)[:, None]).ravel().astype(a.dtype)
            if keep_neg:
                out[np.tile(a < 0, n)] = -1
            return out

        parent = np.concatenate(([-1], tile(self.parent, N, keep_neg=True) + 1)).astype(np.int32)
        parent[1 + N * np.arange(n)] = 0
        gpu_links = np.zeros((n * G, self.gpu_links.shape[1] + 1), dtype=np.int32)
        own = self.gpu_links
        for r in range(n):
            block = gpu_links[r * G : (r + 1) * G]
            block[:, :-1] = np.where(own > 0, own + 1 + r * N, 0)
            # The copy's root becomes a link (to the new root), right after each path's last link.
            depth_g = np.count_nonzero(own, axis=1)
            block[np.arange(G), depth_g] = 1 + r * N
        node_gpu_lo = np.concatenate(([0], tile(self.node_gpu_lo, G)))
        node_gpu_hi = np.concatenate(([n * G], tile(self.node_gpu_hi, G)))
        node_srv_lo = np.concatenate(([0], tile(self.node_srv_lo, S)))
        node_srv_hi = np.concatenate(([n * S], tile(self.node_srv_hi, S)))
        graph = nx.DiGraph(name=f"{n}x{self.name}", root="joined")
        graph.add_node("joined", kind="switch")
        root0 = self.node_names[0]
        for r in range(n):
            graph.add_nodes_from(((r, v), dict(d)) for v, d in self.graph.nodes(data=True))
            graph.add_edges_from(
                ((r, u), (r, v), dict(d)) for u, v, d in self.graph.edges(data=True)
            )
            graph.add_edge("joined", (r, root0), bandwidth=math.inf, latency=0.0)
        names = ("joined", *((r, v) for r in range(n) for v in self.node_names))
        return Topology(
            name=f"{n}x{self.name}",
            graph=graph,
            node_names=names,
            parent=_readonly(parent),
            depth=_readonly(np.concatenate(([0], np.tile(self.depth + 1, n))).astype(np.int32)),
            kind=_readonly(np.concatenate(([SWITCH], np.tile(self.kind, n))).astype(np.int8)),
            link_bw=_readonly(np.concatenate(([np.inf], np.tile(self.link_bw, n)))),
            link_lat=_readonly(np.concatenate(([0.0], np.tile(self.link_lat, n)))),
            is_intra=_readonly(np.concatenate(([False], np.tile(self.is_intra, n)))),
            gpu_node=_readonly(tile(self.gpu_node, N) + 1),
            gpu_server=_readonly(tile(self.gpu_server, S)),
            gpu_speed=_readonly(np.tile(self.gpu_speed, n)),
            gpu_links=_readonly(gpu_links),
            server_node=_readonly(tile(self.server_node, N) + 1),
            server_gpu_lo=_readonly(tile(self.server_gpu_lo, G)),
            server_gpu_hi=_readonly(tile(self.server_gpu_hi, G)),
            node_gpu_lo=_readonly(node_gpu_lo.astype(np.int32)),
            node_gpu_hi=_readonly(node_gpu_hi.astype(np.int32)),
            node_srv_lo=_readonly(node_srv_lo.astype(np.int32)),
            node_srv_hi=_readonly(node_srv_hi.astype(np.int32)),
            uniform_depth=self.uniform_depth,
            hardware=self.hardware,
            regions=n,
            base=self,
        )

    def __repr__(self) -> str:
        sizes = f"gpus={self.num_gpus}, servers={self.num_servers}, nodes={self.num_nodes}"
        return f"Topology(name={self.name!r}, {sizes}, depth={int(self.depth.max())})"

    # ------------------------------------------------------------ construction
    @classmethod
    def from_graph(
        cls, graph: nx.Graph, *, root: Hashable | None = None, name: str = "custom"
    ) -> Topology:
        """Validate a networkx tree and compile it.

        Args:
            graph: An undirected ``Graph`` or a ``DiGraph`` (edges parent → child) whose nodes carry
                ``kind`` (``"gpu"``, ``"server"``, other = switch) and optional ``speed``, and whose
                edges carry ``bandwidth`` (bytes/s) and optional ``latency`` (s).
            root: The root node; defaults to ``graph.graph["root"]`` or the node with ``root=True``.
            name: Name of the topology.

        Raises:
            TopologyError: If a link is given twice (parallel edges of a ``MultiGraph`` or
                ``MultiDiGraph``, or both ``u → v`` and ``v → u``), the graph is not a tree, a
                bandwidth is not positive and finite, a latency is negative, a GPU is not a leaf or
                not directly under a server, a leaf is not a GPU, or a speed is not positive. The
                message names the node or edge.
        """
        if graph.is_directed() or graph.is_multigraph():
            # Parallel edges (a MultiGraph's, or u->v beside v->u) would collapse into the last
            # one's bandwidth: refuse them rather than guess how to merge them.
            seen: set[frozenset[Hashable]] = set()
            for u, v in graph.edges():
                pair = frozenset((u, v))
                if pair in seen:
                    raise TopologyError(
                        f"edge ({u!r}, {v!r}) appears more than once (parallel edges); use one "
                        "edge whose bandwidth is their sum"
                    )
                seen.add(pair)
            # Rebuild undirected with the same insertion order, so children keep their order.
            und: nx.Graph = nx.Graph()
            und.graph.update(graph.graph)
            und.add_nodes_from(graph.nodes(data=True))
            und.add_edges_from(graph.edges(data=True))
        else:
            und = graph
        if und.number_of_nodes() == 0:
            raise TopologyError("the cluster graph is empty")
        if not nx.is_tree(und):
            if not nx.is_connected(und):
                comps = nx.number_connected_components(und)
                raise TopologyError(f"the cluster graph is not a tree: it has {comps} components")
            cycle = nx.find_cycle(und)
            raise TopologyError(f"the cluster graph is not a tree: it has a cycle through {cycle}")
        if root is None:
            root = graph.graph.get("root")
        if root is None:
            flagged = [
                n for n, d in graph.nodes(data=True) if d.get("root") or d.get("kind") == "root"
            ]
            if len(flagged) != 1:
                raise TopologyError(
                    "cannot tell the root: set graph.graph['root'] or pass root=..., "
                    f"(found {len(flagged)} nodes flagged root)"
                )
            root = flagged[0]
        if root not in und:
            raise TopologyError(f"root {root!r} is not a node of the graph")

        order = list(nx.dfs_preorder_nodes(und, root))
        index = {n: i for i, n in enumerate(order)}
        n_nodes = len(order)
        parent = np.full(n_nodes, -1, dtype=np.int32)
        for u, v in nx.dfs_edges(und, root):
            parent[index[v]] = index[u]
        depth = np.zeros(n_nodes, dtype=np.int32)
        for i in range(1, n_nodes):
            depth[i] = depth[parent[i]] + 1

        kinds = np.full(n_nodes, SWITCH, dtype=np.int8)
        for i, n in enumerate(order):
            k = und.nodes[n].get("kind")
            kinds[i] = GPU if k == "gpu" else SERVER if k == "server" else SWITCH

        link_bw = np.full(n_nodes, np.inf)
        link_lat = np.zeros(n_nodes)
        for i in range(1, n_nodes):
            u, v = order[parent[i]], order[i]
            data = und.edges[u, v]
            if "bandwidth" not in data:
                raise TopologyError(f"edge ({u!r}, {v!r}) has no 'bandwidth' attribute")
            link_bw[i] = _edge_number(u, v, "bandwidth", data["bandwidth"], positive=True)
            if "latency" in data:
                link_lat[i] = _edge_number(u, v, "latency", data["latency"], positive=False)

        children_count = np.bincount(parent[1:], minlength=n_nodes)
        for i, n in enumerate(order):
            is_leaf = children_count[i] == 0
            if kinds[i] == GPU:
                if not is_leaf:
                    raise TopologyError(f"GPU node {n!r} is not a leaf: it has children")
                if i == 0 or kinds[parent[i]] != SERVER:
                    raise TopologyError(f"GPU node {n!r} must hang directly under a server node")
            elif is_leaf:
                raise TopologyError(
                    f"leaf node {n!r} is not a GPU (kind={und.nodes[n].get('kind')!r})"
                )
            elif kinds[i] == SERVER and np.any(kinds[np.flatnonzero(parent == i)] != GPU):
                raise TopologyError(f"server node {n!r} has a child that is not a GPU")

        gpu_node = np.flatnonzero(kinds == GPU).astype(np.int32)
        server_node = np.flatnonzero(kinds == SERVER).astype(np.int32)
        if len(gpu_node) == 0:
            raise TopologyError("the cluster graph has no GPU node (kind='gpu')")
        server_of_node = np.full(n_nodes, -1, dtype=np.int32)
        server_of_node[server_node] = np.arange(len(server_node), dtype=np.int32)
        gpu_server = server_of_node[parent[gpu_node]]

        gpu_speed = np.ones(len(gpu_node))
        for g, node in enumerate(gpu_node):
            srv = order[parent[node]]
            sp = und.nodes[order[node]].get("speed", und.nodes[srv].get("speed", 1.0))
            try:
                sp = float(sp)
            except (TypeError, ValueError):
                raise TopologyError(f"GPU {order[node]!r} has a non-numeric speed {sp!r}") from None
            if not (sp > 0 and math.isfinite(sp)):
                raise TopologyError(
                    f"GPU {order[node]!r} has speed {sp!r}; it must be > 0 and finite"
                )
            gpu_speed[g] = sp

        # Subtree ranges: in preorder a subtree is the contiguous node range [i, i + size).
        size = np.ones(n_nodes, dtype=np.int64)
        for i in range(n_nodes - 1, 0, -1):
            size[parent[i]] += size[i]
        gpu_prefix = np.concatenate([[0], np.cumsum(kinds == GPU)]).astype(np.int32)
        srv_prefix = np.concatenate([[0], np.cumsum(kinds == SERVER)]).astype(np.int32)
        hi_node = np.arange(n_nodes) + size
        node_gpu_lo, node_gpu_hi = gpu_prefix[:-1].copy(), gpu_prefix[hi_node]
        node_srv_lo, node_srv_hi = srv_prefix[:-1].copy(), srv_prefix[hi_node]

        max_d = int(depth[gpu_node].max())
        gpu_links = np.zeros((len(gpu_node), max_d), dtype=np.int32)
        for g, node in enumerate(gpu_node):
            j, cur = 0, int(node)
            while cur > 0:
                gpu_links[g, j] = cur
                cur = int(parent[cur])
                j += 1

        is_intra = np.zeros(n_nodes, dtype=bool)
        is_intra[gpu_node] = True

        digraph = nx.DiGraph(name=name, root=root)
        digraph.add_nodes_from((n, dict(und.nodes[n])) for n in order)
        digraph.add_edges_from(
            (order[parent[i]], order[i], dict(und.edges[order[parent[i]], order[i]]))
            for i in range(1, n_nodes)
        )
        return cls(
            name=name,
            graph=digraph,
            node_names=tuple(order),
            parent=_readonly(parent),
            depth=_readonly(depth),
            kind=_readonly(kinds),
            link_bw=_readonly(link_bw),
            link_lat=_readonly(link_lat),
            is_intra=_readonly(is_intra),
            gpu_node=_readonly(gpu_node),
            gpu_server=_readonly(gpu_server),
            gpu_speed=_readonly(gpu_speed),
            gpu_links=_readonly(gpu_links),
            server_node=_readonly(server_node),
            server_gpu_lo=_readonly(node_gpu_lo[server_node].copy()),
            server_gpu_hi=_readonly(node_gpu_hi[server_node].copy()),
            node_gpu_lo=_readonly(node_gpu_lo),
            node_gpu_hi=_readonly(node_gpu_hi.astype(np.int32)),
            node_srv_lo=_readonly(node_srv_lo),
            node_srv_hi=_readonly(node_srv_hi.astype(np.int32)),
            uniform_depth=bool(depth[gpu_node].min() == max_d),
        )

    # ------------------------------------------------------------- placement
    def spanned_links(self, gpus: NDArray[np.integer[Any]]) -> IntArray:
        """Links spanned by a ring over ``gpus``: those whose subtree holds some but not all of them.

        Args:
            gpus: GPU indices of a placement (any order, no duplicates).

        Returns:
            Sorted ``int32`` array of link (child node) indices; empty for a single GPU.
        """
        k = len(gpus)
        if k <= 1:
            return np.empty(0, dtype=np.int32)
        if self.uniform_depth:
            # Each column of gpu_links[sorted P] is sorted (DFS order), so equal links are
            # contiguous; a level with more than one distinct link spans all of them.
            a = self.gpu_links[np.sort(gpus)].T
            change = a[:, 1:] != a[:, :-1]
            multi = change.any(axis=1)
            if not multi.any():
                return np.empty(0, dtype=np.int32)
            first = np.ones(a.shape, dtype=bool)
            first[:, 1:] = change
            rows = a[multi]
            return np.sort(rows[first[multi]]).astype(np.int32, copy=False)
        anc = self.gpu_links[gpus].ravel()
        links, counts = np.unique(anc, return_counts=True)
        keep = (counts < k) & (links > 0)
        return links[keep].astype(np.int32, copy=False)

    def servers_of(self, gpus: NDArray[np.integer[Any]]) -> IntArray:
        """Distinct servers holding ``gpus``, sorted."""
        return np.unique(self.gpu_server[gpus]).astype(np.int32, copy=False)

    def compact_placement(self, k: int) -> IntArray:
        """A compact placement of ``k`` GPUs in an empty cluster: fewest servers, smallest subtree.

        Raises:
            ConfigError: If the cluster has fewer than ``k`` GPUs.
        """
        if not 1 <= k <= self.num_gpus:
            raise ConfigError(f"k={k} is outside the allowed range [1, {self.num_gpus}]")
        sizes = self.node_gpu_hi - self.node_gpu_lo
        fits = np.flatnonzero((sizes >= k) & (self.kind != GPU))
        # Fewest servers needed inside the subtree, then the smallest subtree, then leftmost.
        best: tuple[int, int, int] | None = None
        best_gpus: IntArray | None = None
        for node in fits:
            srv = np.arange(self.node_srv_lo[node], self.node_srv_hi[node])
            cap = self.server_gpu_hi[srv] - self.server_gpu_lo[srv]
            order = np.argsort(-cap, kind="stable")
            need = int(np.searchsorted(np.cumsum(cap[order]), k) + 1)
            key = (need, int(sizes[node]), int(node))
            if best is None or key < best:
                best = key
                gpus = np.concatenate(
                    [
                        np.arange(self.server_gpu_lo[s], self.server_gpu_hi[s])
                        for s in srv[order[:need]]
                    ]
                )
                best_gpus = np.sort(gpus[:k]).astype(np.int32)
        assert best_gpus is not None
        return best_gpus

    def with_server_speeds(self, speeds: Sequence[float] | Mapping[int, float]) -> Topology:
        """A copy with per-server relative GPU speeds (heterogeneous GPU types).

        Args:
            speeds: One speed per server, or ``{server_index: speed}`` for some servers.
        """
        g = self.graph.copy()
        items = speeds.items() if isinstance(speeds, Mapping) else enumerate(speeds)
        for s, sp in items:
            if not 0 <= s < self.num_servers:
                raise ConfigError(f"server index {s} is outside [0, {self.num_servers - 1}]")
            g.nodes[self.node_names[self.server_node[s]]]["speed"] = float(sp)
            for gpu in range(self.server_gpu_lo[s], self.server_gpu_hi[s]):
                g.nodes[self.node_names[self.gpu_node[gpu]]].pop("speed", None)
        topo = Topology.from_graph(g, root=self.node_names[0], name=self.name)
        return dataclasses.replace(topo, hardware=self.hardware)


def default_link_params() -> dict[str, float]:
    """Calibrated link parameters (bytes/s and s): ``intra_bandwidth``, ``inter_bandwidth``,
    ``intra_latency``, ``inter_latency``."""
    return {k: float(v) for k, v in calibration_data()["links"].items()}


def build_tree(
    fanouts: Sequence[int],
    bandwidths: Sequence[float],
    latencies: Sequence[float] | None = None,
    *,
    kinds: Sequence[str] | None = None,
    server_speeds: Sequence[float] | None = None,
    name: str = "custom",
) -> Topology:
    """Build a regular tree from per-level fan-outs.

    Level ``i`` has ``fanouts[i]`` children per node of level ``i - 1`` (level -1 is the root);
    the last level is the GPUs, the one before it the servers. ``bandwidths[i]`` and
    ``latencies[i]`` describe the links from level ``i`` up to its parent.

    Example: the paper's testbed is ``build_tree([2, 4], [inter_bw, intra_bw])`` (a switch with two
    4-GPU servers).

    Args:
        fanouts: Children per node at each level, root first; at least ``[servers, gpus]``.
        bandwidths: Link bandwidth (bytes/s) from each level to its parent.
        latencies: Link latency (s) per level; defaults to the calibrated intra/inter latencies.
        kinds: Names of the levels (default ``switch…, server, gpu``); used as node kinds.
        server_speeds: Optional relative GPU speed per server (heterogeneous clusters).
        name: Name of the topology.

    Raises:
        ConfigError: If the lists have different lengths or a fan-out is < 1.
    """
    n_levels = len(fanouts)
    if n_levels < 2:
        raise ConfigError(f"fanouts needs at least 2 levels (servers, gpus), got {list(fanouts)}")
    if len(bandwidths) != n_levels:
        raise ConfigError(f"bandwidths has {len(bandwidths)} entries, fanouts has {n_levels}")
    if latencies is None:
        lp = default_link_params()
        latencies = [lp["inter_latency"]] * (n_levels - 1) + [lp["intra_latency"]]
    if len(latencies) != n_levels:
        raise ConfigError(f"latencies has {len(latencies)} entries, fanouts has {n_levels}")
    for i, f in enumerate(fanouts):
        if int(f) != f or f < 1:
            raise ConfigError(f"fanouts[{i}]={f!r} must be an integer >= 1")
    if kinds is None:
        kinds = (["spine", "pod", "tor"][-(n_levels - 2) :] if n_levels > 2 else []) + [
            "server",
            "gpu",
        ]
        if n_levels > 5:
            kinds = ["switch"] * (n_levels - 5) + kinds
    g = nx.DiGraph(root="root")
    g.add_node("root", kind="switch")
    frontier = ["root"]
    server_idx = 0
    for lvl, fan in enumerate(fanouts):
        nxt = []
        for p in frontier:
            for c in range(int(fan)):
                prefix = {"server": "srv"}.get(kinds[lvl], kinds[lvl])
                node = f"{prefix}{c}" if p == "root" else f"{p}/{prefix}{c}"
                attrs: dict[str, Any] = {"kind": kinds[lvl]}
                if kinds[lvl] == "server" and server_speeds is not None:
                    if server_idx >= len(server_speeds):
                        raise ConfigError(
                            f"server_speeds has {len(server_speeds)} entries, too few"
                        )
                    attrs["speed"] = float(server_speeds[server_idx])
                    server_idx += 1
                g.add_node(node, **attrs)
                g.add_edge(p, node, bandwidth=float(bandwidths[lvl]), latency=float(latencies[lvl]))
                nxt.append(node)
        frontier = nxt
    return Topology.from_graph(g, root="root", name=name)


def _elasticflow_spec(shape: str) -> tuple[int, int, int]:
    text = (
        resources.files("crop_gym").joinpath(f"data/profiles/cluster_specs/{shape}.csv").read_text()
    )
    row = next(iter(csv.DictReader(text.splitlines())))
    return int(row["num_switch"]), int(row["num_node_p_switch"]), int(row["num_gpu_p_node"])


def _leafspine(tors: int, servers: int, gpus: int, oversub: float, name: str) -> Topology:
    lp = default_link_params()
    tor_up = servers * lp["inter_bandwidth"] / oversub
    return build_tree(
        [tors, servers, gpus], [tor_up, lp["inter_bandwidth"], lp["intra_bandwidth"]], name=name
    )


def _single_switch(servers: int, gpus: int, name: str) -> Topology:
    lp = default_link_params()
    return build_tree([servers, gpus], [lp["inter_bandwidth"], lp["intra_bandwidth"]], name=name)


def _elasticflow(shape: str) -> Topology:
    switches, nodes, gpus = _elasticflow_spec(shape)
    if switches == 1:
        return _single_switch(nodes, gpus, shape)
    return _leafspine(switches, nodes, gpus, 1.0, shape)


def _fattree(pods: int, tors: int, servers: int, gpus: int, oversub: float, name: str) -> Topology:
    lp = default_link_params()
    tor_up = servers * lp["inter_bandwidth"] / oversub
    pod_up = tors * tor_up / oversub
    return build_tree(
        [pods, tors, servers, gpus],
        [pod_up, tor_up, lp["inter_bandwidth"], lp["intra_bandwidth"]],
        name=name,
    )


#: Preset name → (description, builder). ``make_topology(name)`` builds (and caches) one.
PRESETS: dict[str, tuple[str, Any]] = {
    "testbed-8": (
        "the CROP paper's testbed: 2 servers x 4 GPUs under one switch",
        lambda: _single_switch(2, 4, "testbed-8"),
    ),
    "leafspine-64": (
        "8 servers x 8 GPUs, 2 ToRs, 2:1 oversubscribed uplinks",
        lambda: _leafspine(2, 4, 8, 2.0, "leafspine-64"),
    ),
    "hetero-64": (
        "leafspine-64 with the second ToR's servers at 0.5x speed (older GPUs)",
        lambda: _leafspine(2, 4, 8, 2.0, "hetero-64").with_server_speeds(
            {s: 0.5 for s in range(4, 8)}
        ),
    ),
    "pollux-16x4": (
        "Pollux-like: 16 servers x 4 GPUs under one switch",
        lambda: _single_switch(16, 4, "pollux-16x4"),
    ),
    "n32g8": ("ElasticFlow n32g8: 32 servers x 8 GPUs (256 GPUs)", lambda: _elasticflow("n32g8")),
    "n64g8": (
        "ElasticFlow n64g8: 2 switches x 32 servers x 8 GPUs (512 GPUs)",
        lambda: _elasticflow("n64g8"),
    ),
    "n128g8": (
        "ElasticFlow n128g8: 128 servers x 8 GPUs (1,024 GPUs)",
        lambda: _elasticflow("n128g8"),
    ),
    "n256g8": (
        "ElasticFlow n256g8: 8 switches x 32 servers x 8 GPUs (2,048 GPUs)",
        lambda: _elasticflow("n256g8"),
    ),
    "fattree-4096": (
        "4 pods x 8 ToRs x 16 servers x 8 GPUs, 2:1 oversubscribed (4,096 GPUs)",
        lambda: _fattree(4, 8, 16, 8, 2.0, "fattree-4096"),
    ),
    "fattree-8192": (
        "8 pods x 8 ToRs x 16 servers x 8 GPUs, 2:1 oversubscribed (8,192 GPUs)",
        lambda: _fattree(8, 8, 16, 8, 2.0, "fattree-8192"),
    ),
}


@cache
def make_topology(name: str) -> Topology:
    """Build a preset topology by name (cached: topologies are immutable).

    Raises:
        ConfigError: For an unknown name; the message lists the presets.
    """
    try:
        _, builder = PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown cluster preset {name!r}; presets: {', '.join(PRESETS)}"
        ) from None
    topo: Topology = builder()
    return topo
