"""Issue 30, class 1: every topology that compiles can be placed on.

Degenerate trees compile (``Topology.from_graph`` accepts them): one GPU, a server at the root (one
box, no switch), a switch with one server, uneven depths, single-GPU servers. Each must then take
every job size its GPUs allow: candidates exist, every candidate can be placed, and F, the gains and
the objective from scratch agree and are finite.

The trees with a server at the root failed before core v2 (a zero-size reduction in
``model/facts.py``: such a placement has no link above its server); the test runs both the compiled
kernels, or the numpy reference without numba (tests/test_kernels.py checks the two agree).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import networkx as nx
import numpy as np
import pytest

from crop_gym.model.candidates import candidate_placements
from crop_gym.model.jobs import Job
from crop_gym.model.objective import evaluate_from_scratch
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import Topology


def _server(g: nx.DiGraph, name: str, gpus: int, parent: str | None) -> None:
    g.add_node(name, kind="server")
    if parent is not None:
        g.add_edge(parent, name, bandwidth=1e9, latency=1e-5)
    for i in range(gpus):
        g.add_node(f"{name}g{i}", kind="gpu")
        g.add_edge(name, f"{name}g{i}", bandwidth=4e9, latency=1e-6)


def one_gpu_server_root() -> nx.DiGraph:
    g = nx.DiGraph(root="s0")
    _server(g, "s0", 1, None)
    return g


def one_gpu_under_a_switch() -> nx.DiGraph:
    g = nx.DiGraph(root="sw")
    g.add_node("sw", kind="switch")
    _server(g, "s0", 1, "sw")
    return g


def server_root() -> nx.DiGraph:
    g = nx.DiGraph(root="s0")
    _server(g, "s0", 4, None)
    return g


def switch_with_one_server() -> nx.DiGraph:
    g = nx.DiGraph(root="sw")
    g.add_node("sw", kind="switch")
    _server(g, "s0", 4, "sw")
    return g


def uneven_depths() -> nx.DiGraph:
    g = nx.DiGraph(root="core")
    g.add_node("core", kind="switch")
    _server(g, "a", 2, "core")
    g.add_node("tor", kind="switch")
    g.add_edge("core", "tor", bandwidth=2e9, latency=1e-5)
    _server(g, "b", 2, "tor")
    _server(g, "c", 2, "tor")
    return g


def single_gpu_servers() -> nx.DiGraph:
    g = nx.DiGraph(root="sw")
    g.add_node("sw", kind="switch")
    for s in range(4):
        _server(g, f"s{s}", 1, "sw")
    return g


def chain_of_switches() -> nx.DiGraph:
    g = nx.DiGraph(root="sw0")
    g.add_node("sw0", kind="switch")
    g.add_node("sw1", kind="switch")
    g.add_edge("sw0", "sw1", bandwidth=1e9)
    g.add_node("sw2", kind="switch")
    g.add_edge("sw1", "sw2", bandwidth=1e9)
    _server(g, "s0", 2, "sw2")
    _server(g, "s1", 2, "sw2")
    return g


TREES: list[Callable[[], nx.DiGraph]] = [
    one_gpu_server_root,
    one_gpu_under_a_switch,
    server_root,
    switch_with_one_server,
    uneven_depths,
    single_gpu_servers,
    chain_of_switches,
]


def _cases() -> list[object]:
    return [pytest.param(tree, id=tree.__name__) for tree in TREES]


@pytest.mark.parametrize("tree", _cases())
def test_every_job_size_can_be_placed_on_every_candidate(tree: Callable[[], nx.DiGraph]) -> None:
    topo = Topology.from_graph(tree())
    empty = ClusterState(topo)
    for k in range(1, topo.num_gpus + 1):
        cands = candidate_placements(empty, k)
        assert len(cands.gpus) >= 1, f"no candidate for {k} GPU(s)"
        job = Job("j", "resnet50", k, 64 * k)
        for gpus in cands.gpus:
            gain = float(empty.gains(job, empty.facts_for(gpus)).total[0])
            state = empty.copy()
            state.add(job, gpus)
            assert math.isfinite(state.F) and state.F > 0
            assert pytest.approx(gain) == state.F
            scratch = evaluate_from_scratch(topo, empty.health, empty.perf, [job], [gpus])
            assert pytest.approx(scratch.F) == state.F


@pytest.mark.parametrize("tree", _cases())
def test_two_jobs_share_the_cluster(tree: Callable[[], nx.DiGraph]) -> None:
    topo = Topology.from_graph(tree())
    if topo.num_gpus < 2:
        pytest.skip("one GPU")
    state = ClusterState(topo)
    state.add(Job("a", "resnet50", 1, 64), np.array([0]))
    rest = candidate_placements(state, topo.num_gpus - 1)
    state.add(Job("b", "bert", topo.num_gpus - 1, 64), rest.gpus[0])
    assert state.num_free == 0 and math.isfinite(state.F)
