"""The candidate generator (:mod:`crop_gym.model.candidates`): its rules as properties, and small cases
computed by hand on ``testbed-8`` (2 servers x 4 GPUs under one switch: node 0 is the switch,
nodes 1 and 6 the servers, GPUs 0-3 and 4-7)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from crop_gym.errors import ConfigError
from crop_gym.model.candidates import (
    CandidateSet,
    candidate_placements,
    candidate_sets,
    gpu_quality,
)
from crop_gym.model.health import PROFILES, Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import SERVER, Topology, make_topology

PRESETS = ("testbed-8", "leafspine-64", "hetero-64", "pollux-16x4")


def _health(profile: str, topo: Topology, rng: np.random.Generator) -> Health:
    if profile != "ties":
        return PROFILES[profile].sample(topo, rng)
    # Badness scores that round alike (to 1e-9) without being equal, and exact duplicates.
    levels = np.array([1.0, 1.0 + 3e-10, 1.0 + 4e-10, 1.25, 1.25 + 1e-10, 1.5])
    slow = levels[rng.integers(len(levels), size=topo.num_gpus)]
    slow[rng.random(topo.num_gpus) < 0.6] = 1.0
    return Health.healthy(topo).replace(gpu_slowdown=slow)


def _fill(st: ClusterState, rng: np.random.Generator, frac: float) -> list[tuple[Job, list[int]]]:
    """Random jobs on random free GPUs until about ``frac`` of the GPUs are busy."""
    placed = []
    t = 0
    while st.topology.num_gpus - st.num_free < frac * st.topology.num_gpus and st.num_free:
        k = int(min(st.num_free, rng.choice([1, 2, 3, 4, 8])))
        gpus = sorted(rng.choice(np.flatnonzero(st.free_mask), size=k, replace=False).tolist())
        job = Job(f"j{t}", "resnet50", k, 64)
        st.add(job, gpus)
        placed.append((job, gpus))
        t += 1
    return placed


@hst.composite
def _cases(draw: hst.DrawFn) -> tuple[ClusterState, list[tuple[Job, list[int]]], int, bool, int]:
    preset = draw(hst.sampled_from(PRESETS))
    profile = draw(hst.sampled_from([*PROFILES, "ties"]))
    rng = np.random.default_rng(draw(hst.integers(0, 2**32 - 1)))
    topo = make_topology(preset)
    st = ClusterState(topo, _health(profile, topo, rng))
    placed = _fill(st, rng, draw(hst.floats(0.0, 0.95)))
    k = draw(hst.integers(1, topo.num_gpus))
    return st, placed, k, draw(hst.booleans()), draw(hst.integers(1, 16))


def _min_servers(free_counts: np.ndarray, k: int) -> int:
    """Fewest servers whose free GPUs add up to ``k`` (most free first)."""
    return int(np.searchsorted(np.cumsum(np.sort(free_counts)[::-1]), k) + 1)


def _is_best(chosen: np.ndarray, pool: np.ndarray, score: np.ndarray) -> bool:
    """Whether ``chosen`` are ``len(chosen)`` GPUs of ``pool`` with the lowest ``score``."""
    rest = np.setdiff1d(pool, chosen)
    return len(rest) == 0 or score[chosen].max() <= score[rest].min()


_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(_cases())
def test_candidates_follow_the_rules(
    case: tuple[ClusterState, list[tuple[Job, list[int]]], int, bool, int],
) -> None:
    st, _, k, robust, cap = case
    topo, health = st.topology, st.health
    cs = candidate_placements(st, k, robust=robust, max_candidates=cap)
    free = st.free_mask
    assert (len(cs) == 0) == (st.num_free < k)  # (free_mask holds the usable free GPUs)
    assert len(cs) <= cap and cs.k == k and len(cs.keys) == len(cs)
    assert cs.gpus.dtype == cs.num_servers.dtype == cs.subtree.dtype == np.int32
    assert cs.gpus.shape == (len(cs), k) and cs.quality.dtype == np.float64
    assert len(set(cs.keys)) == len(cs)  # distinct
    q = gpu_quality(st, robust)
    rounded = np.round(q, 9)
    srv_free = np.add.reduceat(free.astype(int), topo.server_gpu_lo)
    for c in range(len(cs)):
        g = cs.gpus[c]
        assert cs.keys[c] == tuple(g.tolist())
        assert (np.diff(g) > 0).all() and free[g].all() and not health.gpu_failed[g].any()
        servers = np.unique(topo.gpu_server[g])
        assert cs.num_servers[c] == len(servers)
        assert cs.quality[c] == pytest.approx(q[g].sum(), rel=1e-12)
        node = int(cs.subtree[c])
        lo, hi = topo.node_gpu_lo[node], topo.node_gpu_hi[node]
        assert lo <= g[0] and g[-1] < hi
        inside = lo + np.flatnonzero(free[lo:hi])
        if topo.kind[node] == SERVER:  # the server's k healthiest (robust) or first free GPUs
            assert len(servers) == 1 and _is_best(
                g, inside, q if robust else np.arange(topo.num_gpus)
            )
            continue
        # A switch subtree's row is compact (as few servers as its free GPUs allow, each full
        # but the last) or, with robust=True only, made of its k healthiest free GPUs.
        s_lo, s_hi = topo.node_srv_lo[node], topo.node_srv_hi[node]
        takes = np.bincount(topo.gpu_server[g], minlength=topo.num_servers)[servers]
        full = (takes == srv_free[servers]).sum()
        if len(servers) == _min_servers(srv_free[s_lo:s_hi], k) and full >= len(servers) - 1:
            assert (srv_free[s_lo:s_hi] < k).all()  # (else a single-server row is better)
        else:
            assert robust and _is_best(g, inside, rounded)
    # Ranked by servers spanned, then rounded badness.
    ranks = list(zip(cs.num_servers.tolist(), np.round(cs.quality, 9).tolist(), strict=True))
    assert ranks == sorted(ranks)


@_SETTINGS
@given(_cases())
def test_without_robustness_only_failed_gpus_matter(
    case: tuple[ClusterState, list[tuple[Job, list[int]]], int, bool, int],
) -> None:
    st, placed, k, _, cap = case
    plain = ClusterState(
        st.topology, Health.healthy(st.topology).replace(gpu_failed=st.health.gpu_failed)
    )
    for job, gpus in placed:
        plain.add(job, gpus)
    a = candidate_placements(st, k, robust=False, max_candidates=cap)
    b = candidate_placements(plain, k, robust=False, max_candidates=cap)
    assert a.keys == b.keys
    assert np.array_equal(a.num_servers, b.num_servers)
    assert np.array_equal(a.subtree, b.subtree)
    assert np.array_equal(a.quality, np.full(len(a), float(k)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases(), hst.lists(hst.integers(1, 64), max_size=8))
def test_candidate_sets_match_single_calls(
    case: tuple[ClusterState, list[tuple[Job, list[int]]], int, bool, int], sizes: list[int]
) -> None:
    st, _, k, robust, cap = case
    sizes = [min(s, st.topology.num_gpus) for s in [*sizes, k, k]]
    got = candidate_sets(st, sizes, robust=robust, max_candidates=cap)
    assert len(got) == len(sizes)
    for s, cs in zip(sizes, got, strict=True):
        want = candidate_placements(st, s, robust=robust, max_candidates=cap)
        assert cs.keys == want.keys
        for f in ("gpus", "num_servers", "subtree", "quality"):
            assert np.array_equal(getattr(cs, f), getattr(want, f)), f


def test_candidates_follow_the_state() -> None:
    """No stale result after the state changes (placements, removals, health)."""
    topo = make_topology("leafspine-64")
    rng = np.random.default_rng(3)
    st = ClusterState(topo, PROFILES["severe"].sample(topo, rng))
    for t in range(30):
        before = candidate_placements(st, 4)
        fresh = ClusterState(topo, st.health)
        for jid in st.jobs:
            fresh.add(Job(jid, "resnet50", 1, 64), st.placement(jid)[:1])
        if t % 3 == 0 and st.jobs:
            st.remove(sorted(st.jobs)[0])
        else:
            st.add(Job(f"n{t}", "resnet50", 4, 64), before.gpus[0])
        after = candidate_placements(st, 4)
        assert all(st.free_mask[after.gpus].all(axis=1))
        if t % 3 and len(after):
            assert before.keys[0] not in after.keys


def test_arguments_are_checked() -> None:
    st = ClusterState(make_topology("leafspine-64"))
    for bad in (0, 65):
        with pytest.raises(ConfigError, match=f"k={bad}"):
            candidate_placements(st, bad)
        with pytest.raises(ConfigError, match=f"k={bad}"):
            candidate_sets(st, [1, bad])
    with pytest.raises(ConfigError, match="max_candidates"):
        candidate_sets(st, [1], max_candidates=0)
    assert candidate_sets(st, []) == []


def test_candidate_set_is_a_frozen_value() -> None:
    topo = make_topology("leafspine-64")
    st = ClusterState(topo, PROFILES["severe"].sample(topo, np.random.default_rng(9)))
    cs = candidate_placements(st, 4)
    same = CandidateSet(cs.gpus.copy(), cs.num_servers, cs.subtree, cs.quality)
    assert len(same) == len(cs) and same.keys == cs.keys
    for other in (pickle.loads(pickle.dumps(cs)), copy.copy(cs), copy.deepcopy(cs)):
        assert other.keys == cs.keys
        for f in ("gpus", "num_servers", "subtree", "quality"):
            assert np.array_equal(getattr(other, f), getattr(cs, f))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cs.keys = ()  # type: ignore[misc]
    assert repr(cs).startswith("CandidateSet(gpus=array(")
    empty = candidate_placements(st, topo.num_gpus)
    assert len(empty) == 0 and empty.gpus.shape == (0, topo.num_gpus) and empty.keys == ()


# ------------------------------------------------------------------------ by hand, on testbed-8
def _testbed(slow: dict[int, float] | None = None, failed: tuple[int, ...] = ()) -> ClusterState:
    topo = make_topology("testbed-8")
    s = np.ones(8)
    for g, v in (slow or {}).items():
        s[g] = v
    f = np.zeros(8, dtype=bool)
    f[list(failed)] = True
    return ClusterState(topo, Health.healthy(topo).replace(gpu_slowdown=s, gpu_failed=f))


def _table(cs: CandidateSet) -> tuple[list[list[int]], list[int], list[int], list[float]]:
    return cs.gpus.tolist(), cs.num_servers.tolist(), cs.subtree.tolist(), cs.quality.tolist()


def test_by_hand_on_an_idle_testbed() -> None:
    st = _testbed()
    # Both servers hold 2: one row each, ties broken by node; the switch adds nothing.
    assert _table(candidate_placements(st, 2)) == ([[0, 1], [4, 5]], [1, 1], [1, 6], [2.0, 2.0])
    # No server holds 5: the switch fills server 0, then takes one GPU of server 1.
    assert _table(candidate_placements(st, 5)) == ([[0, 1, 2, 3, 4]], [2], [0], [5.0])
    assert len(candidate_placements(st, 8)) == 1


def test_by_hand_health_steers_the_choice() -> None:
    # GPU 1 three times slower: server 0 gives its three healthy GPUs.
    st = _testbed({1: 3.0})
    assert _table(candidate_placements(st, 3)) == (
        [[0, 2, 3], [4, 5, 6]],
        [1, 1],
        [1, 6],
        [3.0, 3.0],
    )
    assert candidate_placements(st, 3, robust=False).gpus.tolist() == [[0, 1, 2], [4, 5, 6]]
    # GPU 0 twice slower and server 1 half busy: only server 0 holds 4 (badness 5); the switch's
    # four healthiest free GPUs (server 0's, which has more free, then GPU 6) are healthier.
    st = _testbed({0: 2.0})
    st.add(Job("a", "vgg16", 2, 64), [4, 5])
    assert _table(candidate_placements(st, 4)) == (
        [[0, 1, 2, 3], [1, 2, 3, 6]],
        [1, 2],
        [1, 0],
        [5.0, 4.0],
    )
    assert candidate_placements(st, 4, max_candidates=1).gpus.tolist() == [[0, 1, 2, 3]]
    assert _table(candidate_placements(st, 4, robust=False)) == ([[0, 1, 2, 3]], [1], [1], [4.0])


def test_a_lone_server_without_switch() -> None:
    graph = nx.DiGraph()
    graph.add_node("s", kind="server", root=True)
    for g in range(4):
        graph.add_node(g, kind="gpu")
        graph.add_edge("s", g, bandwidth=1e10)
    topo = Topology.from_graph(graph)
    slow = np.array([2.0, 1.0, 1.0, 1.0])
    st = ClusterState(topo, Health.healthy(topo).replace(gpu_slowdown=slow))
    assert _table(candidate_placements(st, 2)) == ([[1, 2]], [1], [0], [2.0])
    assert candidate_placements(st, 4, robust=False).gpus.tolist() == [[0, 1, 2, 3]]


def test_by_hand_failed_gpus_are_never_candidates() -> None:
    st = _testbed(failed=(3,))
    assert candidate_placements(st, 4, robust=False).gpus.tolist() == [[4, 5, 6, 7]]
    # The switch fills server 1 (4 free) before server 0 (3 free).
    assert _table(candidate_placements(st, 7)) == ([[0, 1, 2, 4, 5, 6, 7]], [2], [0], [7.0])
    assert len(candidate_placements(st, 8)) == 0
    st.add(Job("a", "vgg16", 4, 64), [4, 5, 6, 7])
    assert candidate_placements(st, 3).gpus.tolist() == [[0, 1, 2]]
    assert len(candidate_placements(st, 4)) == 0
