"""Locality of the model: a cluster inside a larger tree behaves as the cluster alone.

N instances of a scenario, each with its own health and background jobs, held as one state over N
copies of the cluster under a new root (:meth:`Topology.replicated`: no job crosses copies), give,
copy by copy, the same candidates (offset by the copy's first GPU), the same placement facts, the
same job constants and gains, and each copy's F is its cluster's F: nothing outside the subtree of
a placement enters its value. The batched environments (crop_gym/envs/episodes.py) rely on this
property: they hold N episodes as one state over N copies (tests/test_batching.py checks each step
of them against the single environment).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import union_topology

from crop_gym.envs.episodes import joined_health
from crop_gym.model.candidates import candidate_sets, generate
from crop_gym.model.facts import placement_facts
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import job_constants
from crop_gym.model.topology import make_topology
from crop_gym.scenario import PlacementInstance, ScenarioSampler


def _instances(scenario: str, n: int, seed: int) -> tuple[ScenarioSampler, list[PlacementInstance]]:
    sampler = ScenarioSampler(scenario)
    rng = np.random.default_rng(seed)
    return sampler, [sampler.sample(rng) for _ in range(n)]


@pytest.mark.parametrize("preset", ["testbed-8", "leafspine-64", "pollux-16x4", "fattree-4096"])
def test_replicated_topology_is_the_union_built_as_a_graph(preset: str) -> None:
    topo = make_topology(preset)
    n = 2 if topo.num_gpus > 1000 else 3
    a, b = topo.replicated(n), union_topology(topo, n)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if f.name == "link_bw":
                y = np.where(y == 1e30, np.inf, y)  # (a graph's edge needs a finite bandwidth)
            np.testing.assert_array_equal(x, y, err_msg=f.name)
    assert (a.regions, a.region_gpus, a.region_topology) == (n, topo.num_gpus, topo)
    assert a.node_region.tolist() == [-1] + [r for r in range(n) for _ in range(topo.num_nodes)]


@pytest.mark.parametrize(
    ("scenario", "seed"), [("default", 0), ("default-severe", 1), ("pollux-16x4", 2)]
)
def test_copies_in_one_state_behave_as_the_clusters_alone(scenario: str, seed: int) -> None:
    n = 3
    sampler, insts = _instances(scenario, n, seed)
    topo = sampler.topology
    G = topo.num_gpus
    union = topo.replicated(n)
    assert union.num_gpus == n * G
    perf = insts[0].state.perf
    state = ClusterState(union, joined_health([i.state.health for i in insts]), perf=perf)
    for i, inst in enumerate(insts):
        for job in inst.state.placed_jobs():
            state.add(
                dataclasses.replace(job, job_id=f"{i}/{job.job_id}"),
                inst.state.placement(job.job_id) + i * G,
            )
    for i, inst in enumerate(insts):
        assert abs(state.region_F[i] - inst.state.F) <= 1e-12 * abs(inst.state.F)

    sizes = sorted({j.num_gpus for inst in insts for j in inst.queue} | {1, 2})
    inside_all = generate(state.conditions, state.free_mask, [sizes] * n, 8)
    for i, inst in enumerate(insts):
        alone = candidate_sets(inst.state, sizes, max_candidates=8)
        rows_alone, rows_inside = [], []
        for a, b in zip(alone, inside_all[i], strict=True):
            np.testing.assert_array_equal(a.gpus + i * G, b.gpus)
            np.testing.assert_array_equal(a.num_servers, b.num_servers)
            rows_alone += list(a.gpus)
            rows_inside += list(b.gpus)
        if not rows_alone:
            continue
        fa = placement_facts(topo, inst.state.health, rows_alone)
        fb = placement_facts(union, state.health, rows_inside)
        np.testing.assert_array_equal(fa.values, fb.values)
        jobs = [inst.queue[0]] * len(rows_alone)
        ca, cb = job_constants(topo, perf, jobs), job_constants(union, perf, jobs)
        np.testing.assert_array_equal(ca, cb)
        ga = inst.state.gains(ca, fa)
        gb = state.gains(cb, fb)
        np.testing.assert_allclose(gb.own, ga.own, rtol=1e-12, atol=0)
        np.testing.assert_allclose(gb.total, ga.total, rtol=1e-12, atol=1e-12)
