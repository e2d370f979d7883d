"""The GPU-sharing bound (baselines/bounds.py): valid per placement, above every exact optimum,
below the knapsack bound where GPUs are contended, and a case computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from crop_gym.baselines.bounds import best_bound, group_table, job_value_bound, sharing_bound
from crop_gym.baselines.exact import optimum, upper_bound
from crop_gym.baselines.instances import small_instance
from crop_gym.errors import ConfigError
from crop_gym.model.candidates import candidate_placements
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import make_topology
from crop_gym.policy import apply
from crop_gym.scenario import ScenarioSampler, get_scenario


@pytest.mark.parametrize(
    ("scenario", "hardware"),
    [("default-severe", None), ("default", "dgx-a100+rtx-2080ti"), ("fragmented", None)],
)
def test_every_placement_is_worth_at_most_its_coefficients(scenario: str, hardware: str) -> None:
    sc = get_scenario(scenario)
    if hardware:
        sc = sc.replace(hardware=hardware)
    rng = np.random.default_rng(7)
    checked = 0
    for seed in range(2):
        inst = ScenarioSampler(sc).sample(np.random.default_rng(seed))
        st, table = inst.state, group_table(inst.state)
        free = np.flatnonzero(st.free_mask)
        for job in inst.queue:
            if job.num_gpus > len(free):
                continue
            vb = job_value_bound(st, job, table)
            cands = list(candidate_placements(st, job.num_gpus, max_candidates=8).gpus)
            cands += [np.sort(rng.choice(free, job.num_gpus, replace=False)) for _ in range(4)]
            for gpus in cands:
                own = float(st.gains(job, st.facts_for(gpus)).own[0])
                assert own <= vb.placement_bound(table, gpus) + 1e-9
                checked += 1
    assert checked > 50


def test_the_bound_is_at_least_every_exact_optimum_and_often_below_the_knapsack() -> None:
    exact = tighter = 0
    for seed in range(33):
        st, q = small_instance(
            np.random.default_rng(seed),
            cluster=("tiny-16", "flat-16", "testbed-8")[seed % 3],
            profile="severe",
            n_jobs=(2, 5),
        )
        opt = optimum(st, q)
        share = sharing_bound(st, q)
        best = best_bound(st, q)
        knap = upper_bound(st, q)
        assert share.value >= opt.F - 1e-9
        assert best.value >= opt.F - 1e-9 and best.value <= knap + 1e-12
        exact += opt.space == "all"
        tighter += share.value < knap - 1e-6
    assert exact >= 30  # optima over every placement, not over candidates
    assert tighter >= 20  # contention for healthy GPUs is common on these


def test_severe_bound_shares_the_healthy_gpus() -> None:
    sampler = ScenarioSampler("default-severe")
    below = 0
    for seed in range(4):
        inst = sampler.sample(np.random.default_rng(10**9 + seed))
        share = sharing_bound(inst.state, inst.queue)
        assert share.kind in ("milp", "milp dual", "lp")
        below += share.value < upper_bound(inst.state, inst.queue) - 1e-6
    assert below >= 2


def test_hand_computed_case() -> None:
    """Two free GPUs (one healthy, one at slowdown 2, the rest failed) and eleven 1-GPU jobs of
    weight 1: each job alone would take the healthy GPU (the knapsack bound, used beyond ten
    jobs: 1 + 1), but only one can: the bound and the optimum are 1 + 1/2 (1 GPU: no
    communication, η = T*/(σ t) = 1/σ)."""
    topo = make_topology("testbed-8")
    h = Health.healthy(topo)
    slow = np.ones(topo.num_gpus)
    slow[1] = 2.0
    failed = np.ones(topo.num_gpus, dtype=bool)
    failed[:2] = False
    st = ClusterState(topo, h.replace(gpu_slowdown=slow, gpu_failed=failed))
    q = [Job(f"j{i}", "resnet50", 1, 32) for i in range(11)]
    assert upper_bound(st, q) == pytest.approx(2.0)
    assert sharing_bound(st, q).value == pytest.approx(1.5, rel=1e-5)
    assert sharing_bound(st, q, integral=False).value == pytest.approx(1.5, rel=1e-5)
    assert best_bound(st, q).kind == "milp"
    assert abs(optimum(st, q[:2]).F - 1.5) < 1e-9


def test_bad_time_limit_is_a_config_error() -> None:
    st, q = small_instance(np.random.default_rng(0), cluster="testbed-8")
    with pytest.raises(ConfigError, match="time_limit"):
        sharing_bound(st, q, time_limit=0.0)


def test_the_programs_answer_is_feasible_and_below_the_bound() -> None:
    sampler = ScenarioSampler(get_scenario("default").replace(hardware="dgx-a100+rtx-2080ti"))
    for seed in range(3):
        inst = sampler.sample(np.random.default_rng(10**9 + seed))
        share = sharing_bound(inst.state, inst.queue)
        assert share.answer
        after = inst.state.copy()
        apply(after, share.answer)  # raises on an invalid placement
        got = after.F
        assert got <= share.value + 1e-9
        assert len({p.job.job_id for p in share.answer}) == len(share.answer)
