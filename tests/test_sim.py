"""Tests of the discrete-event simulator (crop_gym.sim)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from crop_gym.model.candidates import candidate_placements
from crop_gym.model.health import get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import make_topology
from crop_gym.policy import PlacementPolicy
from crop_gym.sim import SimConfig, SimulationError, Simulator
from crop_gym.workloads import load_workload


@dataclass(frozen=True)
class P:
    job: Job
    gpus: np.ndarray


class FirstCandidate:
    """Greedy in queue order on the first (best) candidate: a stand-in for the baselines."""

    name = "first-candidate"

    def __init__(self, robust: bool = True) -> None:
        self.robust = robust

    def place(self, state: ClusterState, queue: Sequence[Job], rng: Any = None) -> list[P]:
        st = state.copy()
        out = []
        for j in queue:
            if j.num_gpus > st.num_free:
                continue
            c = candidate_placements(st, j.num_gpus, robust=self.robust)
            if len(c):
                st.add(j, c.gpus[0])
                out.append(P(j, c.gpus[0]))
        return out


class Scripted:
    """Places each job on fixed GPUs (``{job_id: gpus}``) when they are free; otherwise first candidate."""

    name = "scripted"

    def __init__(self, where: dict[str, list[int]]) -> None:
        self.where = where

    def place(self, state: ClusterState, queue: Sequence[Job], rng: Any = None) -> list[P]:
        st = state.copy()
        out = []
        for j in queue:
            g = self.where.get(j.job_id)
            if g is not None and st.free_mask[g].all():
                gpus = np.array(g)
            else:
                c = candidate_placements(st, j.num_gpus)
                if not len(c):
                    continue
                gpus = c.gpus[0]
            st.add(j, gpus)
            out.append(P(j, gpus))
        return out


class Never:
    name = "never"

    def place(self, state: ClusterState, queue: Sequence[Job], rng: Any = None) -> list[P]:
        return []


def small_trace(n: int = 60, scale: float = 0.02) -> list[Job]:
    """The first ``n`` jobs of cluster10 with arrivals compressed, work scaled down and sizes capped."""
    wl = load_workload("elasticflow:cluster10")
    out = []
    for j in wl.jobs[:n]:
        out.append(
            dataclasses.replace(
                j,
                arrival=j.arrival * scale,
                iterations=max(1.0, j.iterations * scale),
                num_gpus=min(j.num_gpus, 16),
                deadline=None,
            )
        )
    return out


def test_policy_protocol_is_structural() -> None:
    assert isinstance(FirstCandidate(), PlacementPolicy)


def test_lone_job_finishes_in_work_times_T() -> None:
    topo = make_topology("n32g8")
    job = Job("a", "resnet50", 16, 512, iterations=12345.0, arrival=100.0)
    sim = Simulator([job], topo, seed=0)
    res = sim.run(FirstCandidate())
    # Hand check against ClusterState on the same placement.
    st = ClusterState(topo)
    c = candidate_placements(st, 16)
    st.add(job, c.gpus[0])
    T = st.iteration_times()["a"]
    assert res.records["start_s"][0] == 100.0
    assert res.records["finish_s"][0] == 100.0 + 12345.0 * T
    assert res.metrics["jobs_completed"] == 1
    assert res.metrics["mean_jct_s"] == pytest.approx(12345.0 * T, rel=1e-12)
    assert res.metrics["mean_slowdown"] == pytest.approx(1.0)


def test_piecewise_speed_under_contention() -> None:
    """Job A slows down exactly while B and C share its ToR uplinks, and speeds up when they leave."""
    topo = make_topology("leafspine-64")
    ga = [*range(0, 8), *range(32, 40)]  # server 0 (ToR 0) + server 4 (ToR 1)
    gb = [*range(8, 16), *range(40, 48)]  # server 1 (ToR 0) + server 5 (ToR 1)
    gc = [*range(16, 24), *range(48, 56)]  # server 2 (ToR 0) + server 6 (ToR 1)
    a = Job("A", "vgg16", 16, 512, iterations=5000.0, arrival=0.0)
    b = Job("B", "vgg16", 16, 512, iterations=500.0, arrival=200.0)
    c = Job("C", "vgg16", 16, 512, iterations=500.0, arrival=200.0)
    st = ClusterState(topo)
    st.add(a, np.array(ga))
    ta1 = st.iteration_times()["A"]
    st.add(b, np.array(gb))
    st.add(c, np.array(gc))
    times = st.iteration_times()
    ta2, tb = times["A"], times["B"]
    assert ta2 > ta1  # three rings share the 2:1 oversubscribed ToR uplinks
    sim = Simulator([a, b, c], topo, seed=0)
    res = sim.run(Scripted({"A": ga, "B": gb, "C": gc}))
    fin = dict(zip(res.records["job_id"], res.records["finish_s"], strict=True))
    b_finish = 200.0 + 500.0 * tb
    a_left = 5000.0 - 200.0 / ta1 - (b_finish - 200.0) / ta2
    assert fin["B"] == pytest.approx(b_finish, rel=1e-12)
    assert fin["C"] == fin["B"]
    assert fin["A"] == pytest.approx(b_finish + a_left * ta1, rel=1e-12)
    assert res.metrics["events"] == 3  # B+C arrive, B+C finish, A finishes (A arrives at 0)


def test_failure_costs_exactly_the_work_since_the_last_checkpoint() -> None:
    topo = make_topology("n32g8")
    job = Job("a", "bert", 8, 256, iterations=60000.0, arrival=0.0)
    interval = 1000.0
    t_fail = 3500.0
    cfg = SimConfig(checkpoint_interval_s=interval)
    sim = Simulator([job], topo, config=cfg, seed=0, scripted_failures=[(t_fail, 3, 600.0)])
    res = sim.run(Scripted({"a": list(range(8))}))
    st = ClusterState(topo)
    st.add(job, np.arange(8))
    T = st.iteration_times()["a"]
    last_ckpt = 3000.0
    lost_work = (t_fail - last_ckpt) / T
    assert res.metrics["restarts"] == 1
    assert res.metrics["job_failures"] == 1
    assert res.metrics["lost_gpu_hours"] == pytest.approx(
        8 * (t_fail - last_ckpt) / 3600.0, rel=1e-12
    )
    assert sim.ledger.lost_work[0] == pytest.approx(lost_work, rel=1e-9)
    # It restarts at once on another server from the checkpoint (same speed: another whole server).
    remaining = 60000.0 - last_ckpt / T
    assert res.records["finish_s"][0] == pytest.approx(t_fail + remaining * T, rel=1e-12)
    assert res.records["restarts"][0] == 1
    assert sim.ledger.executed[0] - sim.ledger.lost_work[0] == pytest.approx(60000.0, rel=1e-12)


def test_failure_without_checkpoints_loses_everything() -> None:
    topo = make_topology("testbed-8")
    job = Job("a", "resnet50", 4, 128, iterations=5000.0)
    cfg = SimConfig(checkpoint_interval_s=math.inf)
    sim = Simulator([job], topo, config=cfg, seed=0, scripted_failures=[(300.0, 0, 100.0)])
    res = sim.run(Scripted({"a": [0, 1, 2, 3]}))
    T = res.records["ideal_run_s"][0] / 5000.0
    assert sim.ledger.lost_work[0] == pytest.approx(300.0 / T, rel=1e-9)
    assert res.records["finish_s"][0] == pytest.approx(300.0 + 5000.0 * T, rel=1e-9)


@pytest.mark.parametrize("profile", ["none", "mild", "severe"])
def test_conservation_and_invariants(profile: str) -> None:
    jobs = small_trace(60)
    cfg = SimConfig(checkpoint_interval_s=300.0, failure_horizon_s=900.0, mean_repair_s=600.0)
    prof = get_profile(profile)
    if profile == "severe":  # onsets and recoveries within the short run
        prof = get_profile(profile, onset_rate_per_gpu_hour=0.5, mean_abnormal_duration_s=600.0)
    sim = Simulator(jobs, "leafspine-64", profile=prof, config=cfg, seed=1)
    errors: list[str] = []

    def hook(s: Simulator) -> None:
        errs = s.invariant_errors()
        if errs:
            errors.append(f"t={s.now}: {errs}")
        held = s.state.gpu_owner[s.state.gpu_owner >= 0]
        assert held.size == s.busy_gpus

    res = sim.run(FirstCandidate(robust=False), hook=hook)
    assert not errors, errors[:3]
    n = len(jobs)
    assert res.metrics["jobs_completed"] == n
    assert np.isfinite(res.records["finish_s"]).all()
    ids = list(res.records["job_id"])
    assert sorted(ids) == sorted(j.job_id for j in jobs)
    work = np.array([j.iterations for j in sim.jobs])
    np.testing.assert_allclose(sim.ledger.executed - sim.ledger.lost_work, work, rtol=1e-9)
    # GPU-time conservation: ∫ busy dt equals Σ k × time running.
    assert sim.int_busy == pytest.approx(
        float((sim.ledger.k * sim.ledger.run_time).sum()), rel=1e-9
    )
    assert 0 <= res.metrics["mean_utilization"] <= 1
    assert res.metrics["mean_effective_gpus"] <= res.metrics["mean_throughput_gpus"] + 1e-9
    assert (res.records["jct_s"] >= res.records["queueing_s"] - 1e-6).all()
    if profile == "severe":
        assert res.metrics["job_failures"] > 0
        assert res.metrics["abnormal_onsets"] > 0
        assert res.metrics["abnormal_recoveries"] > 0
        assert res.metrics["lost_gpu_hours"] > 0
        # JCT = queueing + running (a job is always queued or running between arrival and finish).
        np.testing.assert_allclose(
            res.records["jct_s"],
            res.records["queueing_s"] + res.records["run_s"],
            rtol=1e-9,
            atol=1e-6,
        )


def test_same_seed_same_result_different_seed_different_abnormalities() -> None:
    jobs = small_trace(40)
    cfg = SimConfig(failure_horizon_s=3600.0, mean_repair_s=600.0)

    def run(seed: int) -> tuple[Any, Simulator]:
        sim = Simulator(jobs, "leafspine-64", profile="severe", config=cfg, seed=seed)
        return sim.run(FirstCandidate()), sim

    r1, s1 = run(7)
    r2, _s2 = run(7)
    r3, s3 = run(8)
    for key in (
        "mean_jct_s",
        "makespan_s",
        "mean_effective_gpus",
        "events",
        "gpu_failures",
        "abnormal_onsets",
    ):
        assert r1.metrics[key] == r2.metrics[key]
    np.testing.assert_array_equal(r1.records["finish_s"], r2.records["finish_s"])
    h1, h3 = s1.health_process, s3.health_process
    assert not np.array_equal(h1.sigma, h3.sigma) or h1.onsets != h3.onsets
    assert r1.metrics["mean_jct_s"] != r3.metrics["mean_jct_s"]


def test_health_timeline_does_not_depend_on_the_policy() -> None:
    jobs = small_trace(40)
    cfg = SimConfig(failure_horizon_s=3600.0, mean_repair_s=600.0)
    a = Simulator(jobs, "leafspine-64", profile="severe", config=cfg, seed=3)
    b = Simulator(jobs, "leafspine-64", profile="severe", config=cfg, seed=3)
    a.run(FirstCandidate(robust=True))
    b.run(FirstCandidate(robust=False))
    # Bring both processes to a common later time: they must be in the same state.
    t = max(a.now, b.now) + 3600.0
    ha, hb = a.health_process, b.health_process
    ha.pop(t)
    hb.pop(t)
    assert (ha.gpu_failures, ha.onsets, ha.recoveries, ha.link_failures) == (
        hb.gpu_failures,
        hb.onsets,
        hb.recoveries,
        hb.link_failures,
    )
    assert ha.onsets > 0
    np.testing.assert_array_equal(ha.sigma, hb.sigma)
    np.testing.assert_array_equal(ha.failed, hb.failed)
    np.testing.assert_array_equal(ha.pi_link, hb.pi_link)


def test_oversized_jobs_are_refused_or_skipped_and_reported() -> None:
    jobs = [
        Job("small", "resnet50", 4, 128, 10.0),
        Job("huge", "resnet50", 16, 128, 10.0, arrival=1.0),
    ]
    with pytest.raises(SimulationError, match="huge"):
        Simulator(jobs, "testbed-8")
    sim = Simulator(jobs, "testbed-8", config=SimConfig(skip_oversized=True))
    res = sim.run(FirstCandidate())
    assert res.metrics["jobs_skipped"] == 1
    assert res.metrics["jobs_completed"] == 1


def test_policy_that_never_places_is_reported() -> None:
    with pytest.raises(SimulationError, match="stay queued"):
        Simulator([Job("a", "resnet50", 4, 128, 10.0)], "testbed-8").run(Never())


def test_invalid_placement_is_refused() -> None:
    class Bad:
        def place(self, state: ClusterState, queue: Sequence[Job], rng: Any = None) -> list[P]:
            return [P(queue[0], np.arange(queue[0].num_gpus + 1))]

    with pytest.raises(SimulationError, match="invalid placement"):
        Simulator([Job("a", "resnet50", 2, 128, 10.0)], "testbed-8").run(Bad())


def test_time_limit_truncates() -> None:
    jobs = small_trace(30)
    sim = Simulator(jobs, "leafspine-64", config=SimConfig(max_time_s=600.0))
    res = sim.run(FirstCandidate())
    assert res.metrics["truncated"]
    assert res.metrics["makespan_s"] == 600.0
    assert res.metrics["jobs_unfinished"] > 0
    # Running jobs' partial runs are counted: GPU-time is still conserved.
    busy_gpu_s = float((res.records["num_gpus"] * res.records["run_s"]).sum())
    assert sim.int_busy == pytest.approx(busy_gpu_s, rel=1e-9)


def test_writers(tmp_path: Any) -> None:
    sim = Simulator(small_trace(20), "leafspine-64", profile="mild", seed=0)
    res = sim.run(FirstCandidate())
    res.to_json(tmp_path / "m.json")
    res.to_csv(tmp_path / "r.csv")
    res.plot(tmp_path / "p.png")
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["jobs_completed"] == 20
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert lines[0].startswith("job_id,model,num_gpus")
    assert len(lines) == 21
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_simulator_rejects_bad_config() -> None:
    from crop_gym.errors import ConfigError

    with pytest.raises(ConfigError):
        SimConfig(checkpoint_interval_s=0)
    with pytest.raises(ConfigError):
        SimConfig(queue_view="some")
    with pytest.raises(ConfigError):
        Simulator([Job("a", "resnet50", 1, 1, 1.0)], "testbed-8", scripted_failures=[(1.0, 99)])


def test_queue_view_fitting_equals_all_for_a_backfilling_policy() -> None:
    # All 60 jobs (100 GPUs) arrive within seconds on 64 GPUs: a real queue builds up.
    jobs = [dataclasses.replace(j, arrival=j.arrival * 1e-4) for j in small_trace(60)]
    out = []
    for view in ("fitting", "all"):
        sim = Simulator(
            jobs, "leafspine-64", profile="mild", config=SimConfig(queue_view=view), seed=2
        )
        out.append(sim.run(FirstCandidate()))
    assert out[0].metrics["mean_queueing_s"] > 0
    np.testing.assert_array_equal(out[0].records["finish_s"], out[1].records["finish_s"])
