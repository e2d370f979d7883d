"""Locality of the model: a cluster inside a larger tree behaves as the cluster alone.

N instances of a scenario, each with its own health and background jobs, held as one state over N
copies of the cluster under a new root (no job crosses copies), give, copy by copy, the same
candidates (offset by the copy's first GPU), the same placement facts, the same job constants and
row gains, and F is the sum of the copies' F: nothing outside the subtree of a placement enters its
value. The batched environment (crop_gym/envs/vector.py) relies on the same property when
it lays many states side by side in one candidate generation and one facts evaluation
(tests/test_batching.py checks those against the per-state calls).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import joined_health, union_topology

from crop_gym.model.candidates import candidate_sets
from crop_gym.model.facts import placement_facts
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import job_constants
from crop_gym.scenario import PlacementInstance, ScenarioSampler


def _instances(scenario: str, n: int, seed: int) -> tuple[ScenarioSampler, list[PlacementInstance]]:
    sampler = ScenarioSampler(scenario)
    rng = np.random.default_rng(seed)
    return sampler, [sampler.sample(rng) for _ in range(n)]


@pytest.mark.parametrize(
    ("scenario", "seed"), [("default", 0), ("default-severe", 1), ("pollux-16x4", 2)]
)
def test_copies_in_one_state_behave_as_the_clusters_alone(scenario: str, seed: int) -> None:
    n = 3
    sampler, insts = _instances(scenario, n, seed)
    topo = sampler.topology
    G = topo.num_gpus
    union = union_topology(topo, n)
    assert union.num_gpus == n * G
    perf = insts[0].state.perf
    state = ClusterState(union, joined_health([i.state.health for i in insts]), perf=perf)
    for i, inst in enumerate(insts):
        for job in inst.state.placed_jobs():
            state.add(
                dataclasses.replace(job, job_id=f"{i}/{job.job_id}"),
                inst.state.placement(job.job_id) + i * G,
            )
    total = sum(i.state.F for i in insts)
    assert abs(state.F - total) <= 1e-12 * abs(total)

    region = np.repeat(np.arange(n), G)
    sizes = sorted({j.num_gpus for inst in insts for j in inst.queue} | {1, 2})
    for i, inst in enumerate(insts):
        alone = candidate_sets(inst.state, sizes, max_candidates=8)
        inside = candidate_sets(
            state, sizes, max_candidates=8, free=state.free_mask & (region == i)
        )
        rows_alone, rows_inside = [], []
        for a, b in zip(alone, inside, strict=True):
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
        ga = inst.state.row_gains(ca, fa)
        gb = state.row_gains(cb, fb)
        np.testing.assert_allclose(gb.own, ga.own, rtol=1e-12, atol=0)
        np.testing.assert_allclose(gb.total, ga.total, rtol=1e-12, atol=1e-12)
