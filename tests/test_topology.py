"""Topology construction, validation and compilation."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from crop_gym.errors import ConfigError, TopologyError
from crop_gym.model.topology import PRESETS, Topology, build_tree, make_topology


def small_graph() -> nx.DiGraph:
    g = nx.DiGraph(root="sw")
    g.add_node("sw", kind="switch")
    for s in range(2):
        g.add_node(f"s{s}", kind="server")
        g.add_edge("sw", f"s{s}", bandwidth=1e9, latency=1e-5)
        for i in range(2):
            g.add_node(f"s{s}g{i}", kind="gpu")
            g.add_edge(f"s{s}", f"s{s}g{i}", bandwidth=4e9, latency=1e-6)
    return g


def test_compile_small_tree() -> None:
    t = Topology.from_graph(small_graph())
    assert t.num_gpus == 4 and t.num_servers == 2 and t.num_nodes == 7
    assert t.node_names[0] == "sw"
    assert list(t.gpu_server) == [0, 0, 1, 1]
    assert t.parent[0] == -1
    # GPU links carry the intra bandwidth, server links the inter bandwidth.
    assert np.allclose(t.link_bw[t.gpu_node], 4e9)
    assert np.allclose(t.link_bw[t.server_node], 1e9)
    assert t.is_intra[t.gpu_node].all() and not t.is_intra[t.server_node].any()
    # Subtree GPU ranges are contiguous in DFS order.
    assert (t.node_gpu_lo[t.server_node] == [0, 2]).all()
    assert (t.node_gpu_hi[t.server_node] == [2, 4]).all()
    assert t.node_gpu_lo[0] == 0 and t.node_gpu_hi[0] == 4


def test_undirected_graph_with_root_argument() -> None:
    t = Topology.from_graph(small_graph().to_undirected(), root="sw")
    assert t.num_gpus == 4


def test_spanned_links() -> None:
    t = Topology.from_graph(small_graph())
    g0, g1, g2 = (int(x) for x in t.gpu_node[:3])
    s0, s1 = (int(x) for x in t.server_node)
    assert len(t.spanned_links(np.array([0]))) == 0  # a single GPU spans nothing
    assert set(t.spanned_links(np.array([0, 1]))) == {
        g0,
        g1,
    }  # inside one server: only its GPU links
    assert set(t.spanned_links(np.array([0, 2]))) == {g0, g2, s0, s1}
    assert set(t.spanned_links(np.array([0, 1, 2, 3]))) == set(t.gpu_node) | {s0, s1}


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda g: g.add_edge("s0g0", "s1g0", bandwidth=1.0), "not a tree"),
        (lambda g: g.add_node("island", kind="gpu"), "not a tree"),
        (
            lambda g: g.edges["sw", "s0"].update(bandwidth=0.0),
            r"edge \('sw', 's0'\) has bandwidth 0.0",
        ),
        (lambda g: g.edges["sw", "s0"].update(bandwidth=-5.0), r"edge \('sw', 's0'\)"),
        (lambda g: g.edges["sw", "s1"].pop("bandwidth"), r"edge \('sw', 's1'\) has no 'bandwidth'"),
        (lambda g: g.edges["s0", "s0g1"].update(latency=-1.0), "latency"),
        (
            lambda g: (g.add_node("x", kind="switch"), g.add_edge("s0g0", "x", bandwidth=1.0)),
            "GPU node 's0g0' is not a leaf",
        ),
        (
            lambda g: (g.add_node("y", kind="switch"), g.add_edge("sw", "y", bandwidth=1.0)),
            "leaf node 'y' is not a GPU",
        ),
        (
            lambda g: (g.add_node("z", kind="gpu"), g.add_edge("sw", "z", bandwidth=1.0)),
            "GPU node 'z' must hang directly under a server",
        ),
        (lambda g: g.nodes["s0"].update(speed=0.0), "speed"),
    ],
)
def test_validation_names_the_culprit(mutate, match) -> None:  # type: ignore[no-untyped-def]
    g = small_graph()
    mutate(g)
    with pytest.raises(TopologyError, match=match):
        Topology.from_graph(g)


def test_topology_error_is_value_error() -> None:
    assert issubclass(TopologyError, ValueError)


def test_root_required() -> None:
    g = small_graph()
    g.graph.pop("root")
    with pytest.raises(TopologyError, match="root"):
        Topology.from_graph(g)


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_build(name: str) -> None:
    t = make_topology(name)
    assert t.num_gpus == len(t.gpu_links)
    assert (t.link_bw[1:] > 0).all()
    # Every GPU's path ends at the root; subtree ranges nest.
    assert (t.node_gpu_hi - t.node_gpu_lo).max() == t.num_gpus


def test_preset_sizes() -> None:
    sizes = {
        n: make_topology(n).num_gpus
        for n in (
            "testbed-8",
            "leafspine-64",
            "pollux-16x4",
            "n32g8",
            "n64g8",
            "n128g8",
            "fattree-8192",
        )
    }
    assert sizes == {
        "testbed-8": 8,
        "leafspine-64": 64,
        "pollux-16x4": 64,
        "n32g8": 256,
        "n64g8": 512,
        "n128g8": 1024,
        "fattree-8192": 8192,
    }
    assert make_topology("testbed-8").num_servers == 2


def test_leafspine_oversubscription() -> None:
    t = make_topology("leafspine-64")
    tor = next(i for i, n in enumerate(t.node_names) if n == "tor0")
    srv_bw = t.link_bw[t.server_node[0]]
    assert t.link_bw[tor] == pytest.approx(4 * srv_bw / 2.0)


def test_heterogeneous_speeds() -> None:
    t = build_tree([2, 4], [1e9, 4e9], server_speeds=[1.0, 0.5])
    assert list(t.gpu_speed) == [1.0] * 4 + [0.5] * 4
    t2 = t.with_server_speeds({0: 2.0})
    assert list(t2.gpu_speed[:4]) == [2.0] * 4
    assert make_topology("hetero-64").gpu_speed.min() == 0.5


def test_build_tree_checks() -> None:
    with pytest.raises(ConfigError, match="fanouts"):
        build_tree([4], [1.0])
    with pytest.raises(ConfigError, match="bandwidths"):
        build_tree([2, 4], [1.0])
    with pytest.raises(ConfigError, match="unknown cluster preset"):
        make_topology("nope")


def test_compact_placement() -> None:
    t = make_topology("leafspine-64")
    assert list(t.compact_placement(3)) == [0, 1, 2]
    p = t.compact_placement(12)
    assert len(np.unique(t.gpu_server[p])) == 2
    assert len(np.unique(p)) == 12
    with pytest.raises(ConfigError):
        t.compact_placement(65)


def test_arrays_are_read_only() -> None:
    t = make_topology("testbed-8")
    with pytest.raises(ValueError):
        t.link_bw[1] = 5.0
