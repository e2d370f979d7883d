"""The observation builder (crop_gym/envs/observation.py).

* Against the pre-rebuild builder: tests/fixtures/observations.npz holds the observations the old
  ``crop_gym.envs.features.ObservationBuilder`` gave on states of every registered environment (and
  of noisy, ring, overlap and ungrouped variants), recorded by tests/fixtures/record_observations.py
  on the code of commit 4a141cf; each state is rebuilt here and must give the same observation to
  float32 rounding.
* Columns against hand-computed values on the 8-GPU testbed.
* Every value of random instances lies within its ``Box``.
"""

from __future__ import annotations

import pickle
from functools import cache
from typing import Any

import networkx as nx
import numpy as np
import pytest
from helpers import observe, table_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from obs_fixture_replay import Case, builder_for, load_cases, rebuild, replay, table_for

from crop_gym.envs.actions import ActionTable
from crop_gym.envs.observation import (
    CANDIDATE_FEATURES,
    GPU_FEATURES,
    JOB_FEATURES,
    SUMMARY_FEATURES,
    ObservationBuilder,
)
from crop_gym.errors import ConfigError
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import PerfConfig
from crop_gym.model.topology import Topology, make_topology
from crop_gym.scenario import ScenarioSampler

G_ = {name: i for i, name in enumerate(GPU_FEATURES)}
C_ = {name: i for i, name in enumerate(CANDIDATE_FEATURES)}
J_ = {name: i for i, name in enumerate(JOB_FEATURES)}
S_ = {name: i for i, name in enumerate(SUMMARY_FEATURES)}


@cache
def _cases() -> tuple[Case, ...]:
    return tuple(load_cases())


# --------------------------------------------------------------------------- the old builder
def test_fixture_covers_every_kind_of_state() -> None:
    """The recorded states include noisy observations, extra GPU columns, GPU mode (no candidate
    table) and privileged gains, so the replay below exercises each path."""
    metas = [c.meta for c in _cases()]
    assert len(metas) >= 60
    assert any(not m["obs_is_true"] for m in metas)
    assert {tuple(m["gpu_extra"]) for m in metas} == {(), ("chosen",), ("job_remaining",)}
    assert any(not m["with_candidates"] for m in metas)
    assert any(m["privileged"] for m in metas)
    assert {m["allreduce"] for m in metas} == {"ring", "hierarchical"}
    assert {m["topology"] for m in metas} >= {"testbed-8", "leafspine-64", "hetero-64", "n128g8"}


@pytest.mark.parametrize("i", range(len(_cases())))
def test_matches_the_pre_rebuild_builder(i: int) -> None:
    new, old, old_mask, new_mask = replay(_cases()[i])
    assert np.array_equal(old_mask, new_mask)
    assert new.keys() == old.keys()
    for key in old:
        assert new[key].dtype == np.float32
        np.testing.assert_allclose(new[key], old[key], rtol=1e-6, atol=1e-6, err_msg=key)


def test_an_equal_observed_health_object_gives_the_same_observation() -> None:
    """The general path (observed health not the state's: facts and η re-evaluated under it) and
    the shortcut (the table's facts and gains) agree when the two healths are equal."""
    for case in _cases()[:40]:
        state, _, pending = rebuild(case)
        m = case.meta
        table = table_for(state, pending, m)
        b = builder_for(case)
        h = state.health
        twin = Health(
            h.gpu_slowdown, h.gpu_failed, h.gpu_fail_prob, h.link_degradation, h.link_fail_prob
        )
        extra = case.arrays.get("extra")
        a = observe(b, state, h, pending, table, 1, 3, extra=extra)
        c = observe(b, state, twin, pending, table, 1, 3, extra=extra)
        for key in a:
            np.testing.assert_allclose(a[key], c[key], rtol=1e-12, atol=1e-12, err_msg=key)


# --------------------------------------------------------------------------- testbed-8 by hand
TOPO = make_topology(
    "testbed-8"
)  # servers: node 1 (GPUs 0-3) and node 6 (GPUs 4-7), under the root
BW = 212.76e9


def _builder(**kw: Any) -> ObservationBuilder:
    kwargs: dict[str, Any] = dict(num_slots=4, max_candidates=8, queue_size=4, max_job_gpus=4)
    kwargs.update(kw)
    return ObservationBuilder(TOPO, PerfConfig(), **kwargs)


def _health(**changes: dict[int, float]) -> Health:
    h = Health.healthy(TOPO)
    arrays = {}
    for name, values in changes.items():
        a = np.array(getattr(h, name))
        for i, v in values.items():
            a[i] = v
        arrays[name] = a
    return h.replace(**arrays)


def _obs(
    state: ClusterState,
    pending: list[Job],
    observed: Health | None = None,
    robust: bool = True,
    **kw: Any,
) -> tuple[dict[str, Any], ActionTable, ObservationBuilder]:
    b = _builder(table_layout=True, **kw)
    table = table_of(state, pending, num_slots=4, max_candidates=8, robust=robust)
    obs = observe(b, state, observed or state.health, pending, table, 3, 6)
    return obs, table, b


def test_gpu_queue_and_summary_columns_by_hand() -> None:
    health = _health(gpu_slowdown={2: 2.0}, gpu_fail_prob={5: 0.05}, link_degradation={6: 0.5})
    state = ClusterState(TOPO, health)
    state.add(Job("a", "resnet50", 4, 128), [0, 1, 2, 3])
    pending = [Job("b", "resnet50", 2, 64), Job("c", "resnet50", 2, 64)]
    obs, table, _ = _obs(state, pending)
    g = obs["gpus"]
    assert g.shape == (8, 10)
    eta_a = state.job_record("a").eta
    assert eta_a < 1.0  # GPU 2 is twice as slow
    np.testing.assert_allclose(g[0], [0, 1, 0, 0, 0, 1, 0, 0, eta_a, 1.0], rtol=1e-6)
    np.testing.assert_allclose(g[2, G_["slow"]], 0.5)
    np.testing.assert_allclose(g[5], [1, 0, 0, 0, 0.05, 1, 0, 0.5, 0, 0], rtol=1e-6)
    q = obs["queue"]
    # b and c are identical: one slot standing for two jobs; k = 2 of at most 4.
    n = len(table.sets[0])
    np.testing.assert_allclose(q[0], [1, 0.5, q[0, 2], q[0, 3], 0.5, n / 8, 1.0, 2 / 16], rtol=1e-6)
    assert not q[1:].any()
    s = obs["summary"]
    F = state.F
    np.testing.assert_allclose(
        s,
        [2 / 4, 0, 4 / 8, 4 / 8, F / 8, 4 / 8, s[S_["comm_overhead"]], 0, 2 / 8, 3 / 6],
        rtol=1e-6,
    )


def test_single_server_candidate_columns_by_hand() -> None:
    state = ClusterState(TOPO, _health(gpu_fail_prob={5: 0.05}))
    state.add(Job("a", "resnet50", 4, 128), [0, 1, 2, 3])
    obs, table, _ = _obs(state, [Job("b", "resnet50", 2, 64)], robust=False)
    rows = {tuple(table.gpus(0, c).tolist()): c for c in range(len(table.sets[0]))}
    r = obs["candidates"][rows[(4, 5)]]
    assert r[C_["valid"]] == 1 and r[C_["job_gpus"]] == 0.5
    assert r[C_["servers"]] == pytest.approx(1 / 32)
    assert r[C_["spread"]] == 0 and r[C_["switches"]] == pytest.approx(1 / 8)
    assert r[C_["slow_frac"]] == 0 and r[C_["failprone_frac"]] == 0.5
    assert r[C_["slowdown"]] == 0 and r[C_["survival"]] == pytest.approx(0.95)
    # Alone on a healthy server, as compact as its ideal placement: η = 1.
    assert r[C_["eta"]] == pytest.approx(1.0) and r[C_["value_per_gpu"]] == pytest.approx(0.95)
    assert r[C_["contention"]] == 0 and r[C_["bandwidth"]] == pytest.approx(1.0)
    assert r[C_["queue_pos"]] == 0 and r[C_["weight"]] == 0.5
    # Padding rows are zeros.
    assert not obs["candidates"][len(table.sets[0]) :].any()


def test_cross_server_candidate_columns_by_hand() -> None:
    """The only free GPUs are 3 (server 1) and 7 (server 6, uplink at half bandwidth); job x
    already crosses both server uplinks."""
    state = ClusterState(TOPO, _health(link_degradation={6: 0.5}))
    state.add(Job("x", "resnet50", 2, 64), [0, 4])
    state.add(Job("a", "resnet50", 2, 64), [1, 2])
    state.add(Job("d", "resnet50", 2, 64), [5, 6])
    obs, table, _ = _obs(state, [Job("b", "vgg16", 2, 64)], privileged=True)
    assert table.gpus(0, 0).tolist() == [3, 7] and len(table.sets[0]) == 1
    r = obs["candidates"][0]
    assert r[C_["servers"]] == pytest.approx(2 / 32)
    assert r[C_["spread"]] == 1 and r[C_["switches"]] == pytest.approx(1 / 8)
    assert r[C_["contention"]] == pytest.approx(1 / 2)  # one job already on each uplink
    # Bottleneck share: ρB / (1 + 1) on server 6's uplink, over the fastest GPU link B.
    assert r[C_["bandwidth"]] == pytest.approx(0.5 / 2)
    assert r[C_["eta"]] < 1.0
    np.testing.assert_allclose(r[C_["eta"]], table.gains.eta[0], rtol=1e-6)
    np.testing.assert_allclose(obs["gain"][0], table.gains.total[0] / 4, rtol=1e-6)
    assert not obs["gain"][1:].any()
    # Every GPU's server uplink carries job x.
    np.testing.assert_allclose(obs["gpus"][:, G_["uplink_load"]], 0.5)
    np.testing.assert_allclose(obs["gpus"][4:, G_["uplink_degradation"]], 0.5)


def test_candidate_health_columns_use_the_observed_health() -> None:
    """The agent sees GPU 7 as 4x slow (it is healthy): the health columns and the η estimate
    follow the observation; the privileged gain follows the truth."""
    state = ClusterState(TOPO)
    for jid, gpus in (("a", [0, 1, 2]), ("d", [4, 5, 6])):
        state.add(Job(jid, "resnet50", 3, 96), gpus)
    pending = [Job("b", "resnet50", 2, 64)]
    observed = _health(gpu_slowdown={7: 4.0})
    true_obs, _, _ = _obs(state, pending, privileged=True)
    seen, _, _ = _obs(state, pending, observed, privileged=True)
    r, t = seen["candidates"][0], true_obs["candidates"][0]
    assert r[C_["slowdown"]] == pytest.approx(0.75) and t[C_["slowdown"]] == 0
    assert r[C_["slow_frac"]] == 0.5 and t[C_["slow_frac"]] == 0
    assert r[C_["eta"]] < t[C_["eta"]]
    assert seen["gpus"][7, G_["slow"]] == pytest.approx(0.75)
    assert seen["summary"][S_["abnormal_gpus"]] == pytest.approx(1 / 8)
    np.testing.assert_array_equal(seen["gain"], true_obs["gain"])


def test_no_candidate_table_leaves_best_eta_zero() -> None:
    state = ClusterState(TOPO)
    obs, _, b = _obs(state, [Job("b", "resnet50", 2, 64)], with_candidates=False)
    assert set(obs) == {"gpus", "queue", "summary"}
    assert obs["queue"][0, J_["present"]] == 1 and obs["queue"][0, J_["best_eta"]] == 0
    assert set(b.observation_space.spaces) == {"gpus", "queue", "summary"}


def test_empty_view() -> None:
    """Nothing fits: zero candidate and queue tables; every pending job is hidden."""
    state = ClusterState(TOPO)
    state.add(Job("a", "resnet50", 8, 128), range(8))
    obs, table, _ = _obs(state, [Job("b", "resnet50", 2, 64)], privileged=True)
    assert not table.jobs
    assert not obs["candidates"].any() and not obs["queue"].any() and not obs["gain"].any()
    assert obs["summary"][S_["hidden"]] == pytest.approx(1 / 4)
    assert obs["summary"][S_["free_gpus"]] == 0


def test_extra_gpu_columns_layout_and_fresh_arrays() -> None:
    state = ClusterState(TOPO)
    pending = [Job("b", "resnet50", 2, 64)]
    table = table_of(state, pending, num_slots=4, max_candidates=8)
    flat = _builder(gpu_extra=("chosen",))
    tab = _builder(gpu_extra=("chosen",), table_layout=True)
    extra = np.zeros((8, 1))
    extra[3] = 1.0
    a = observe(flat, state, state.health, pending, table, extra=extra)
    b = observe(tab, state, state.health, pending, table, extra=extra)
    assert flat.gpu_features == (*GPU_FEATURES, "chosen")
    assert b["gpus"].shape == (8, 11) and a["gpus"].shape == (88,)
    assert b["gpus"][:, -1].tolist() == extra[:, 0].tolist()
    for key in a:
        assert np.array_equal(flat.rows(a, key), tab.rows(b, key)), key
        assert flat.observation_space[key].shape == a[key].shape
        assert tab.observation_space[key].shape == b[key].shape
    # (info reads the state: the builder keeps nothing of the last state)
    # Fresh arrays: changing one observation changes neither the next nor the cached health.
    for key in a:
        a[key][...] = 0.5
    again = observe(flat, state, state.health, pending, table, extra=extra)
    assert np.array_equal(flat.rows(again, "gpus"), b["gpus"])
    with pytest.raises(ConfigError, match="extra GPU columns"):
        observe(flat, state, state.health, pending, table, extra=np.zeros((8, 2)))
    with pytest.raises(ConfigError, match="action table"):
        observe(_builder(num_slots=2), state, state.health, pending, table)


# --------------------------------------------------------------------------- bounds
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["testbed-8", "default", "default-severe", "pollux-16x4"]),
    seed=st.integers(0, 2**31 - 1),
    noise=st.sampled_from([0.0, 0.5, 3.0]),
    placements=st.integers(0, 6),
    privileged=st.booleans(),
    layout=st.booleans(),
)
def test_every_value_is_within_its_box(
    name: str, seed: int, noise: float, placements: int, privileged: bool, layout: bool
) -> None:
    rng = np.random.default_rng(seed)
    sampler = ScenarioSampler(name)
    inst = sampler.sample(rng)
    state, pending = inst.state, list(inst.queue)
    sc = sampler.scenario
    b = ObservationBuilder(
        state.topology,
        sc.perf,
        num_slots=8,
        max_candidates=sc.max_candidates,
        queue_size=sc.queue_size,
        max_job_gpus=sc.job_size_limit,
        privileged=privileged,
        table_layout=layout,
        gpu_extra=("x",),
    )
    observed = state.health.observe(rng, noise)
    for _ in range(placements + 1):
        table = table_of(state, pending, num_slots=8, max_candidates=sc.max_candidates)
        extra = rng.random((state.topology.num_gpus, 1))
        obs = observe(b, state, observed, pending, table, len(pending), 10, extra=extra)
        assert b.observation_space.contains(obs)
        if not table.jobs:
            break
        row = int(rng.integers(len(table.row_slot)))
        q, c = int(table.row_slot[row]), int(table.row_cand[row])
        state.add(table.jobs[q], table.gpus(q, c), facts=table.facts.take(row))
        pending.remove(table.jobs[q])


def test_builders_share_nothing_but_pure_caches() -> None:
    """Builds interleaved across clusters, healths and builders (one pickled) give what a fresh
    builder gives for each state alone."""
    cases = [c for c in _cases() if c.meta["topology"] in ("testbed-8", "leafspine-64")][::5][:8]
    assert len({c.meta["topology"] for c in cases}) == 2
    built = [(c, *rebuild(c)) for c in cases]
    tables = [table_for(s, p, c.meta) for c, s, _, p in built]
    builders = [builder_for(c) for c in cases]
    builders[0] = pickle.loads(pickle.dumps(builders[0]))
    first = [
        observe(b, s, o, p, t, extra=c.arrays.get("extra"))
        for b, (c, s, o, p), t in zip(builders, built, tables, strict=True)
    ]
    for (c, s, o, p), t, obs in zip(
        reversed(built), reversed(tables), reversed(first), strict=True
    ):
        again = observe(builder_for(c), s, o, p, t, extra=c.arrays.get("extra"))
        for key in obs:
            assert np.array_equal(obs[key], again[key]), key


def _mixed_tree() -> Topology:
    """Servers under switches at different depths and under the root itself."""
    g = nx.DiGraph(root="root")
    g.add_node("root", kind="switch")
    for sw, parent in (("A", "root"), ("B", "root"), ("C", "B")):
        g.add_node(sw, kind="switch")
        g.add_edge(parent, sw, bandwidth=10e9)
    for i, parent in enumerate(("A", "A", "root", "C", "C", "B")):
        srv = f"s{i}"
        g.add_node(srv, kind="server")
        g.add_edge(parent, srv, bandwidth=25e9)
        for j in range(2):
            g.add_node(f"{srv}g{j}", kind="gpu")
            g.add_edge(srv, f"{srv}g{j}", bandwidth=100e9)
    return Topology.from_graph(g, name="mixed")


@pytest.mark.parametrize("cluster", ["mixed", "testbed-8", "leafspine-64", "pollux-16x4"])
def test_switches_column_counts_the_switches_above_the_servers(cluster: str) -> None:
    """The ``switches`` column is the number of distinct switches (parents of servers) above a
    candidate's servers, on regular trees and on one with servers at several depths."""
    topo = _mixed_tree() if cluster == "mixed" else make_topology(cluster)
    state = ClusterState(topo)
    rng = np.random.default_rng(0)
    busy = rng.choice(topo.num_gpus, topo.num_gpus // 3, replace=False)
    state.add(Job("bg", "resnet50", len(busy), 64), busy)
    sizes = [1, 2, 3, 4, 5, 7, 8]
    pending = [Job(f"j{k}", "resnet50", k, 8 * k) for k in sizes if k <= state.num_free]
    table = table_of(state, pending, num_slots=len(pending), max_candidates=16)
    b = ObservationBuilder(
        topo,
        PerfConfig(),
        num_slots=len(pending),
        max_candidates=16,
        queue_size=8,
        max_job_gpus=8,
        table_layout=True,
    )
    cand = observe(b, state, state.health, pending, table)["candidates"]
    switch_of_gpu = topo.parent[topo.server_node[topo.gpu_server]]
    multi = 0
    for q, c, a in zip(table.row_slot, table.row_cand, table.row_action, strict=True):
        gpus = table.gpus(int(q), int(c))
        want = len(set(switch_of_gpu[gpus].tolist()))
        multi += want > 1
        assert cand[a, C_["switches"]] == pytest.approx(want / 8), gpus.tolist()
    assert multi or cluster in ("testbed-8", "pollux-16x4")  # (all servers under the root)
