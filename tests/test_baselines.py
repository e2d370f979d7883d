"""The policy interface, the registry and the heuristic baselines."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check_answer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crop_gym.baselines.heuristics import BestFitPolicy, FirstFitPolicy, HivedPolicy, SpreadPolicy
from crop_gym.baselines.instances import small_instance
from crop_gym.errors import ConfigError
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import make_topology
from crop_gym.policy import Placement, apply, make_policy, policy_description, policy_names
from crop_gym.scenario import ScenarioSampler

NAMES = list(policy_names())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    scenario=st.sampled_from(["default", "default-severe", "testbed-8", "pollux-16x4", "small"]),
)
def test_every_policy_keeps_the_contract(seed: int, scenario: str) -> None:
    """Only free usable GPUs, all-or-nothing, no GPU twice, no job twice, input state untouched."""
    if scenario == "small":
        state, queue = small_instance(
            np.random.default_rng(seed),
            cluster="tiny-16",
            profile="severe",
            n_jobs=(4, 9),
            background=3,
        )
    else:
        inst = ScenarioSampler(scenario).sample(np.random.default_rng(seed))
        state, queue = inst.state, list(inst.queue)
    snapshot = (state.version, state.F, state.gpu_owner.copy(), dict(state.jobs))
    for i, name in enumerate(NAMES):
        placements = make_policy(name).place(state, queue, np.random.default_rng([seed, i]))
        assert (state.version, state.F, state.jobs) == (snapshot[0], snapshot[1], snapshot[3]), name
        assert np.array_equal(state.gpu_owner, snapshot[2]), name
        check_answer(state, placements, queue)
        for p in placements:
            assert p.gpus.dtype == np.int32 and np.all(np.diff(p.gpus) > 0)
            assert state.free_mask[p.gpus].all() and state.health.usable[p.gpus].all()
        s = state.copy()
        apply(s, placements)  # applies cleanly, in order


def test_placement_value_semantics() -> None:
    job = Job("a", "resnet50", 2, 64)
    p = Placement(job, [5, 3])
    assert p.gpus.tolist() == [3, 5] and p.gpus.dtype == np.int32
    assert not p.gpus.flags.writeable
    assert p == Placement(job, np.array([3, 5]))
    assert len({p, Placement(job, [3, 5])}) == 1
    assert p.job_id == "a" and "a" in repr(p)


def test_registry() -> None:
    assert NAMES == [
        "crop",
        "crop-plain",
        "crop-nonrobust",
        "random",
        "first-fit",
        "best-fit",
        "spread",
        "hived",
        "comm-greedy",
    ]
    for name in NAMES:
        policy = make_policy(name)
        assert policy.name == name
        assert policy_description(name)
    assert make_policy("crop-plain").lazy is False  # type: ignore[attr-defined]
    assert make_policy("crop-nonrobust").robust is False  # type: ignore[attr-defined]
    assert make_policy("crop", max_candidates=16).max_candidates == 16  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown policy 'nope'; policies: crop, crop-plain"):
        make_policy("nope")
    with pytest.raises(ConfigError, match="policy 'random'"):
        make_policy("random", colour="red")


def test_the_state_check_rejects_bad_answers() -> None:
    """A policy's answer is checked by the state's one ``check_placements`` (tests/helpers.py)."""
    t = make_topology("testbed-8")
    state = ClusterState(t, Health.healthy(t).replace(gpu_failed=np.eye(1, 8, 7, dtype=bool)[0]))
    state.add(Job("bg", "resnet50", 1, 32), [0])
    a, b = Job("a", "resnet50", 2, 64), Job("b", "resnet50", 2, 64)
    with pytest.raises(ConfigError, match=r"job a: GPUs \[0\] are busy or failed"):
        check_answer(state, [Placement(a, [0, 1])])
    with pytest.raises(ConfigError, match=r"job a: GPUs \[7\] are busy or failed"):
        check_answer(state, [Placement(a, [6, 7])])
    with pytest.raises(ConfigError, match="job b: its GPUs or its id are given twice"):
        check_answer(state, [Placement(a, [1, 2]), Placement(b, [2, 3])])
    with pytest.raises(ConfigError, match="job a: its GPUs or its id are given twice"):
        check_answer(state, [Placement(a, [1, 2]), Placement(a, [3, 4])])
    with pytest.raises(ConfigError, match="job a needs 2 GPUs, got 3"):
        check_answer(state, [Placement(a, [1, 2, 3])])
    with pytest.raises(ConfigError, match="job bg is already placed"):
        check_answer(state, [Placement(Job("bg", "resnet50", 1, 32), [3])])
    with pytest.raises(AssertionError, match=r"not in the queue: \['a'\]"):
        check_answer(state, [Placement(a, [1, 2])], queue=[b])
    check_answer(state, [Placement(a, [1, 2]), Placement(b, [3, 4])], queue=[a, b])


def test_random_policy_is_seeded() -> None:
    inst = ScenarioSampler("default").sample(np.random.default_rng(1))
    p = make_policy("random", seed=4)
    assert p.place(inst.state, inst.queue) == p.place(inst.state, inst.queue)
    a = p.place(inst.state, inst.queue, np.random.default_rng(1))
    b = p.place(inst.state, inst.queue, np.random.default_rng(2))
    assert a != b


def _fresh(name: str = "leafspine-64") -> ClusterState:
    return ClusterState(make_topology(name))


def test_first_fit_takes_lowest_numbered_gpus() -> None:
    state = _fresh()
    state.add(Job("bg", "resnet50", 3, 96), [0, 2, 4])
    got = FirstFitPolicy().place(state, [Job("a", "resnet50", 4, 128)])
    assert got[0].gpus.tolist() == [1, 3, 5, 6]


def test_best_fit_consolidates_on_the_tightest_server() -> None:
    state = _fresh()
    state.add(Job("bg0", "resnet50", 5, 160), np.arange(8, 13))  # server 1: 3 free
    state.add(Job("bg1", "resnet50", 2, 64), np.arange(16, 18))  # server 2: 6 free
    got = BestFitPolicy().place(state, [Job("a", "resnet50", 3, 96), Job("b", "resnet50", 12, 384)])
    assert got[0].gpus.tolist() == [13, 14, 15]
    servers = np.unique(state.topology.gpu_server[got[1].gpus])
    assert len(servers) == 2  # 12 GPUs on the fewest (two empty) servers


def test_spread_balances_across_servers() -> None:
    state = _fresh()
    got = SpreadPolicy().place(state, [Job("a", "resnet50", 8, 256)])
    assert len(np.unique(state.topology.gpu_server[got[0].gpus])) == 8


def test_hived_uses_aligned_buddy_cells() -> None:
    state = _fresh()
    state.add(Job("bg", "resnet50", 1, 32), [0])  # splits server 0's cells
    got = HivedPolicy().place(
        state,
        [Job("a", "resnet50", 2, 64), Job("b", "resnet50", 3, 96), Job("c", "resnet50", 16, 512)],
    )
    a, b, c = (p.gpus.tolist() for p in got)
    assert a == [2, 3]  # the free buddy of a split 4-cell, not a fresh server
    assert b == [4, 5, 6]  # an aligned 4-cell of the same server
    assert c == list(range(8, 24))  # two whole servers under one ToR
    # No aligned cell free: the job waits even though 4 GPUs are free.
    frag = _fresh("testbed-8")
    frag.add(Job("x", "resnet50", 1, 32), [1])
    frag.add(Job("y", "resnet50", 1, 32), [5])
    assert HivedPolicy().place(frag, [Job("z", "resnet50", 4, 128)]) == []


def test_comm_greedy_minimises_communication_and_ignores_health() -> None:
    t = make_topology("leafspine-64")
    slow = np.ones(t.num_gpus)
    slow[0:8] = 4.0  # server 0 is all stragglers, but the tightest single server
    state = ClusterState(t, Health.healthy(t).replace(gpu_slowdown=slow))
    for s in range(1, 8):
        state.add(Job(f"bg{s}", "resnet50", 6, 192), t.server_gpu_lo[s] + np.arange(6))
    got = make_policy("comm-greedy").place(state, [Job("a", "vgg16", 8, 256)])
    assert len(np.unique(t.gpu_server[got[0].gpus])) == 1  # one server, stragglers or not
    crop = make_policy("crop").place(state, [Job("a", "vgg16", 8, 256)])
    assert not np.array_equal(crop[0].gpus, got[0].gpus)  # CROP avoids them


def test_jobs_that_do_not_fit_wait() -> None:
    state = _fresh("testbed-8")
    queue = [
        Job("big", "resnet50", 6, 192),
        Job("big2", "resnet50", 6, 192),
        Job("small", "resnet50", 2, 64),
    ]
    for name in NAMES:
        got = [p.job_id for p in make_policy(name).place(state, queue)]
        assert "big" not in got or "big2" not in got


def _hived_cell_reference(topo, free, k):  # type: ignore[no-untyped-def]
    """HiveD's in-server rule as a plain loop over servers and aligned offsets."""
    best = None
    for s in range(topo.num_servers):
        lo, size = int(topo.server_gpu_lo[s]), int(topo.server_gpu_hi[s] - topo.server_gpu_lo[s])
        if size < k:
            continue
        cell = min(1 << (k - 1).bit_length(), size)
        for off in range(0, size - cell + 1, cell):
            if not free[lo + off : lo + off + cell].all():
                continue
            span = cell
            while span * 2 <= size:
                b0 = lo + (off // (span * 2)) * span * 2
                if not free[b0 : b0 + span * 2].all():
                    break
                span *= 2
            if best is None or (span, lo + off) < best:
                best = (span, lo + off)
    return None if best is None else list(range(best[1], best[1] + k))


def _mixed_servers_topology():  # type: ignore[no-untyped-def]
    import networkx as nx

    from crop_gym.model.topology import Topology

    g = nx.DiGraph()
    g.add_node("root", kind="switch")
    for s, size in enumerate((8, 4, 6, 8, 2, 8)):
        g.add_node(f"s{s}", kind="server")
        g.add_edge("root", f"s{s}", bandwidth=1e10)
        for i in range(size):
            g.add_node(f"s{s}g{i}", kind="gpu")
            g.add_edge(f"s{s}", f"s{s}g{i}", bandwidth=1e11)
    return Topology.from_graph(g, root="root", name="mixed-servers")


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.lists(st.booleans(), min_size=36, max_size=36))
def test_hived_cell_search_matches_a_plain_loop(k: int, bits: list[bool]) -> None:
    topo = _mixed_servers_topology()
    free = np.array(bits, dtype=bool)
    got = HivedPolicy().choose(topo, free, k, np.random.default_rng(0))  # k <= 8: in a server
    want = _hived_cell_reference(topo, free, k)
    assert (None if got is None else got.tolist()) == want


def test_free_mask_policy_asks_once_per_skipped_size() -> None:
    calls: list[int] = []

    class Picky(FirstFitPolicy):
        def choose(self, topo, free, k, rng):  # type: ignore[no-untyped-def]
            calls.append(k)
            return None if k == 4 else super().choose(topo, free, k, rng)

    state = _fresh()
    queue = [Job(f"j{i}", "resnet50", k, 32 * k) for i, k in enumerate((4, 4, 2, 4, 4, 1))]
    got = Picky().place(state, queue)
    assert [p.job.job_id for p in got] == ["j2", "j5"]
    # Size 4 is asked again only after j2's placement changed the free GPUs.
    assert calls == [4, 2, 4, 1]
