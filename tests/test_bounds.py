"""The GPU-sharing bound (baselines/bounds.py): valid per placement, above every exact optimum,
below the knapsack bound where GPUs are contended, and a case computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st_

from crop_gym.baselines.bounds import (
    best_bound,
    extreme_sum,
    group_table,
    job_value_bound,
    least_g_max,
    sharing_bound,
)
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


def _two_free_gpus(cluster: str, gpus: tuple[int, int], **health: object) -> ClusterState:
    """An empty cluster on which only ``gpus`` are usable (the rest failed)."""
    topo = make_topology(cluster)
    failed = np.ones(topo.num_gpus, dtype=bool)
    failed[list(gpus)] = False
    return ClusterState(topo, Health.healthy(topo).replace(gpu_failed=failed, **health))


def test_a_degraded_uplink_slows_every_gpu_of_a_spread_job() -> None:
    """Two free GPUs on the testbed's two servers, server 1's uplink at 0.3 of its bandwidth: a
    2-GPU job must span both uplinks, so its bottleneck is the degraded one for both GPUs (the
    bandwidth level). The per-GPU shares gave GPU 0 the healthy uplink's time; the level bound
    is the job's one placement's value."""
    topo = make_topology("testbed-8")
    rho = np.ones(topo.num_nodes)
    rho[topo.server_node[1]] = 0.3
    st = _two_free_gpus("testbed-8", (0, 4), link_degradation=rho)
    q = [Job("a", "vgg16", 2, 32)]
    only = optimum(st, q).F
    assert only < 1.9  # the degraded uplink costs time
    assert sharing_bound(st, q).value == pytest.approx(only, rel=1e-5)


def test_a_failure_prone_tor_uplink_is_charged_to_jobs_across_tors() -> None:
    """One free GPU under each ToR of leafspine-64, ToR 0's uplink fails with probability 0.5: a
    2-GPU job spans both ToR uplinks, survival 0.5 (hand-computed: r = 0.5 and 1, the chord
    over λ = μ = log 0.5 gives 2 · 0.5 · η, the job's value)."""
    topo = make_topology("leafspine-64")
    fail = np.zeros(topo.num_nodes)
    fail[topo.node_names.index("tor0")] = 0.5
    st = _two_free_gpus("leafspine-64", (0, 32), link_fail_prob=fail)
    q = [Job("a", "resnet50", 2, 32)]
    only = optimum(st, q).F
    eta = st.gains(q[0], st.facts_for(np.array([0, 32]))).eta[0]
    assert only == pytest.approx(2 * 0.5 * eta)
    assert sharing_bound(st, q).value == pytest.approx(only, rel=1e-5)


def testextreme_sums_andleast_g_max_by_hand() -> None:
    size = np.array([2, 3], dtype=np.int64)
    logs = np.array([-1.0, -0.5])
    assert extreme_sum(size, logs, 3, largest=False) == pytest.approx(-2.5)  # -1 -1 -0.5
    assert extreme_sum(size, logs, 3, largest=True) == pytest.approx(-1.5)  # 3 x -0.5
    # 4 GPUs on 2 of servers holding 4, 1, 1: 3 + 1 (2 + 1 = 3 < 4 with at most 2 on one)
    assert least_g_max(np.array([4, 1, 1]), 4, 2) == 3
    assert least_g_max(np.array([4, 1, 1]), 4, 3) == 2  # 2 + 1 + 1
    assert least_g_max(np.array([7, 7, 6, 6, 5, 4, 1]), 32, 6) == 6  # 6+6+6+6+5+4 = 33
    assert least_g_max(np.array([7, 7, 6, 6, 5, 4, 1]), 32, 5) > 31  # 31 GPUs on 5: no shape


@settings(max_examples=25, deadline=None)
@given(
    size=st_.lists(st_.integers(1, 5), min_size=1, max_size=6),
    logs=st_.lists(st_.floats(-3.0, 0.0), min_size=6, max_size=6),
    k=st_.integers(1, 30),
)
def testextreme_sums_bracket_every_choice(size: list[int], logs: list[float], k: int) -> None:
    """Every way to take ``k`` values (``size[c]`` copies of ``logs[c]``) sums between them."""
    n = np.array(size, dtype=np.int64)
    v = np.array(logs[: len(size)])
    k = min(k, int(n.sum()))
    pool = np.repeat(v, n)
    rng = np.random.default_rng(k)
    lo = extreme_sum(n, v, k, largest=False)
    hi = extreme_sum(n, v, k, largest=True)
    for _ in range(20):
        got = float(rng.choice(pool, k, replace=False).sum())
        assert lo - 1e-9 <= got <= hi + 1e-9
