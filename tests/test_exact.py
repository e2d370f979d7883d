"""Exact solvers: branch-and-bound over every placement and over the candidate space, the MILP, guards."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import check_answer

from crop_gym.baselines._common import own_comm_times
from crop_gym.baselines.crop import crop_greedy
from crop_gym.baselines.exact import (
    EXACT_LIMITS,
    OptimumPolicy,
    branch_and_bound,
    gpu_groups,
    optimum,
    search_space,
)
from crop_gym.baselines.instances import small_instance
from crop_gym.baselines.milp import milp_min_comm, milp_variables
from crop_gym.errors import ConfigError
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.policy import apply
from crop_gym.scenario import ScenarioSampler


def _F(state: ClusterState, placements) -> float:
    s = state.copy()
    apply(s, placements)
    return s.F


def _naive_optimum(state: ClusterState, queue: list[Job]) -> float:
    """Every subset of free GPUs for every job, no symmetry reduction (tiny instances only)."""
    free = np.flatnonzero(state.free_mask).tolist()
    best = state.F

    def rec(i: int, s: ClusterState, used: set[int]) -> None:
        nonlocal best
        best = max(best, s.F)
        if i == len(queue):
            return
        rec(i + 1, s, used)
        job = queue[i]
        for gpus in itertools.combinations([g for g in free if g not in used], job.num_gpus):
            s.add(job, np.array(gpus))
            rec(i + 1, s, used | set(gpus))
            s.remove(job.job_id)

    rec(0, state.copy(), set())
    return best


@pytest.mark.parametrize("seed", range(6))
def test_symmetry_reduced_search_matches_naive_enumeration(seed: int) -> None:
    state, queue = small_instance(
        np.random.default_rng(seed),
        cluster="testbed-8",
        profile=["severe", "testbed"][seed % 2],
        n_jobs=3,
        sizes=(1, 2, 3),
        background=1,
    )
    exact = branch_and_bound(state, queue, space="all", incumbent=[])
    assert pytest.approx(_naive_optimum(state, queue), abs=1e-9) == exact.F
    assert _F(state, exact.placements) == pytest.approx(exact.F)
    check_answer(state, exact.placements, queue)


def test_candidate_space_lies_between_crop_and_the_true_optimum() -> None:
    gaps = []
    for seed in range(25):
        state, queue = small_instance(
            np.random.default_rng(seed), cluster="testbed-8", profile="severe", n_jobs=(3, 5)
        )
        crop = _F(state, crop_greedy(state, queue).placements)
        cand = branch_and_bound(state, queue, space="candidates")
        full = branch_and_bound(state, queue, space="all")
        assert crop <= cand.F + 1e-9 <= full.F + 2e-9
        gaps.append(cand.F / full.F)
    print(
        f"\ncandidate-space optimum / true optimum on testbed-8: worst {min(gaps):.4f}, mean {np.mean(gaps):.4f}"
    )
    assert np.mean(gaps) > 0.97


def test_incumbent_does_not_change_the_optimum() -> None:
    state, queue = small_instance(
        np.random.default_rng(3), cluster="tiny-16", profile="mild", n_jobs=4
    )
    a = branch_and_bound(state, queue, space="all", incumbent=[])
    b = branch_and_bound(state, queue, space="all")
    assert pytest.approx(b.F, abs=1e-9) == a.F
    assert b.nodes <= a.nodes


def test_gpu_groups_are_interchangeable_gpus() -> None:
    inst = ScenarioSampler("testbed-8").sample(np.random.default_rng(0))
    groups = gpu_groups(inst.state)
    assert (
        sorted(int(g) for grp in groups for g in grp)
        == np.flatnonzero(inst.state.free_mask).tolist()
    )
    t, h = inst.state.topology, inst.state.health
    for grp in groups:
        assert len(set(t.gpu_server[grp].tolist())) == 1
        assert len(set(h.gpu_slowdown[grp].tolist())) == 1


def test_size_guard_refuses_large_instances_with_the_limit() -> None:
    inst = ScenarioSampler("default").sample(np.random.default_rng(0))
    limit = f"{EXACT_LIMITS.log10_candidates:g}"
    with pytest.raises(
        ConfigError,
        match=rf"combinations \(16 jobs x options per job .*above the limit of 10\^{limit}",
    ):
        branch_and_bound(inst.state, inst.queue, space="candidates")
    with pytest.raises(ConfigError, match="refuses this instance"):
        optimum(inst.state, inst.queue)
    with pytest.raises(ConfigError, match="refuses"):
        OptimumPolicy().place(inst.state, inst.queue)
    log10, opts = search_space(inst.state, inst.queue, space="candidates")
    assert log10 > EXACT_LIMITS.log10_candidates and len(opts) == len(inst.queue)
    with pytest.raises(ConfigError, match="unknown search space"):
        search_space(inst.state, inst.queue, space="everything")


def test_node_limit_message() -> None:
    state, queue = small_instance(
        np.random.default_rng(11), cluster="tiny-16", profile="severe", n_jobs=6
    )
    with pytest.raises(ConfigError, match="gave up after 50 nodes"):
        branch_and_bound(state, queue, space="all", max_nodes=50, incumbent=[])


def test_optimum_policy_on_testbed() -> None:
    inst = ScenarioSampler("testbed-8").sample(np.random.default_rng(2))
    policy = OptimumPolicy()
    placements = policy.place(inst.state, inst.queue)
    check_answer(inst.state, placements, inst.queue)
    assert policy.last is not None and policy.last.space == "all"
    assert (
        _F(inst.state, placements)
        >= _F(inst.state, crop_greedy(inst.state, inst.queue).placements) - 1e-9
    )
    with pytest.raises(ConfigError, match="space"):
        OptimumPolicy(space="some")


# ------------------------------------------------------------------------------------ MILP
def _max_jobs(state: ClusterState, queue: list[Job]) -> int:
    """Most jobs that fit, by capacity alone (sizes only matter; GPUs are interchangeable here)."""
    free = state.num_free
    sizes = sorted(j.num_gpus for j in queue)
    n = 0
    for k in sizes:
        if k <= free:
            free -= k
            n += 1
    return n


@pytest.mark.parametrize("seed", range(8))
def test_milp_places_the_most_jobs_with_least_communication(seed: int) -> None:
    state, queue = small_instance(
        np.random.default_rng(seed), cluster="tiny-16", profile="mild", n_jobs=(3, 6)
    )
    res = milp_min_comm(state, queue)
    check_answer(state, res.placements, queue)
    assert res.jobs_placed == len(res.placements) == _max_jobs(state, queue)
    modelled = sum(float(own_comm_times(state, p.job, p.gpus[None, :])[0]) for p in res.placements)
    assert res.comm_time == pytest.approx(modelled, rel=1e-9)
    # No answer placing as many jobs has less (modelled) communication: compare with CROP's and
    # with the exhaustive optimum of F when they place as many jobs.
    for other in (crop_greedy(state, queue).placements, branch_and_bound(state, queue).placements):
        if len(other) == res.jobs_placed:
            comm = sum(float(own_comm_times(state, p.job, p.gpus[None, :])[0]) for p in other)
            assert res.comm_time <= comm + 1e-12


def test_milp_size_guard() -> None:
    inst = ScenarioSampler("n64g8").sample(np.random.default_rng(0))
    with pytest.raises(ConfigError, match=r"MILP refuses this instance: more than 50000 variables"):
        milp_variables(inst.state, inst.queue)
    with pytest.raises(ConfigError, match="more than 10 variables"):
        milp_min_comm(inst.state, inst.queue, max_vars=10)
