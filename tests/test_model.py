"""The iteration-time model and the objective against hand-computed numbers (docs/MODEL.md §1)."""

from __future__ import annotations

import numpy as np
import pytest

from crop_gym.errors import ConfigError
from crop_gym.model.candidates import candidate_placements
from crop_gym.model.health import Health, get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.objective import evaluate_from_scratch
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import PerfConfig, comm_time, iteration_time
from crop_gym.model.topology import build_tree, make_topology

INTER, INTRA = 1e9, 4e9  # bytes/s


def cluster(latency: float = 0.0):  # type: ignore[no-untyped-def]
    """2 servers x 4 GPUs under one switch; round numbers."""
    return build_tree([2, 4], [INTER, INTRA], [latency, latency])


def job(jid: str, k: int, model: str = "vgg16", batch: int = 64) -> Job:
    return Job(jid, model, k, batch)


@pytest.mark.parametrize("algo", ["ring", "hierarchical"])
def test_single_gpu_job_spans_nothing(algo: str) -> None:
    t = cluster(latency=1e-3)
    st = ClusterState(t, perf=PerfConfig(algo))
    j = job("a", 1)
    st.add(j, [3])
    rec = st.job_record("a")
    assert rec.C == 0.0
    assert pytest.approx(j.compute_time) == rec.T
    assert rec.eta == 1.0 and pytest.approx(1.0) == st.F
    assert st.link_load.sum() == 0


def test_ring_inside_one_server_uses_gpu_links_only() -> None:
    t = cluster(latency=1e-5)
    st = ClusterState(t, perf=PerfConfig("ring"))
    j = job("a", 4)
    st.add(j, [0, 1, 2, 3])
    M = j.grad_bytes
    expected = 2 * 3 / 4 * M / INTRA + 2 * 3 * 1e-5
    assert pytest.approx(expected, rel=1e-12) == st.job_record("a").C
    assert st.link_load[t.server_node].sum() == 0  # no inter-server link is loaded


def test_two_rings_sharing_an_uplink_get_half_each() -> None:
    t = cluster()
    for algo in ("ring", "hierarchical"):
        st = ClusterState(t, perf=PerfConfig(algo))
        a, b = job("a", 2), job("b", 2)
        st.add(a, [0, 4])
        alone = 2 * 1 / 2 * a.grad_bytes / INTER  # k=2 over two servers: bottleneck = uplink
        assert pytest.approx(alone, rel=1e-12) == st.job_record("a").C
        st.add(b, [1, 5])
        shared = 2 * 1 / 2 * a.grad_bytes / (INTER / 2)
        assert pytest.approx(shared, rel=1e-12) == st.job_record("a").C
        assert pytest.approx(shared, rel=1e-12) == st.job_record("b").C
        assert list(st.link_load[t.server_node]) == [2, 2]


def test_degraded_link_scales_the_bottleneck() -> None:
    t = cluster()
    rho = np.ones(t.num_nodes)
    rho[t.server_node[1]] = 0.25
    h = Health.healthy(t).replace(link_degradation=rho)
    st = ClusterState(t, h, PerfConfig("ring"))
    a = job("a", 2)
    st.add(a, [0, 4])
    assert pytest.approx(a.grad_bytes / (0.25 * INTER), rel=1e-12) == st.job_record("a").C


def test_hierarchical_formula_by_hand() -> None:
    t = cluster(latency=2e-5)
    st = ClusterState(t, perf=PerfConfig("hierarchical"))
    a = job("a", 6)
    st.add(a, [0, 1, 2, 4, 5, 6])  # g = 3 per server, s = 2 servers
    M = a.grad_bytes
    expected = 2 * 2 / 3 * M / INTRA + 2 * 1 / 2 * M / INTER + 2 * 2 * 2e-5 + 2 * 1 * 2e-5
    assert pytest.approx(expected, rel=1e-12) == st.job_record("a").C


def test_comm_time_vectorised_and_degenerate_cases() -> None:
    c = comm_time(
        "ring",
        np.array([1e8, 1e8]),
        np.array([1, 4]),
        np.array([1, 4]),
        np.array([1, 1]),
        np.array([np.inf, 4e9]),
        np.array([np.inf, np.inf]),
        np.zeros(2),
        np.zeros(2),
    )
    assert c[0] == 0.0 and c[1] == pytest.approx(1.5 * 1e8 / 4e9)


def test_stragglers_and_speed_set_compute_time() -> None:
    t = build_tree([2, 4], [INTER, INTRA], [0.0, 0.0], server_speeds=[1.0, 0.5])
    slow = np.ones(8)
    slow[1] = 3.0
    st = ClusterState(t, Health.healthy(t).replace(gpu_slowdown=slow))
    a = job("a", 2)
    st.add(a, [0, 1])  # straggler σ=3 on a speed-1 GPU
    b = job("b", 1)
    st.add(b, [4])  # speed 0.5: twice as slow
    assert pytest.approx(3 * a.compute_time) == st.job_record("a").T - st.job_record("a").C
    assert pytest.approx(2 * b.compute_time) == st.job_record("b").T
    assert st.job_record("b").eta == pytest.approx(0.5)


def test_overlap() -> None:
    assert iteration_time(2.0, 1.0, 0.0) == 3.0
    assert iteration_time(2.0, 1.0, 1.0) == 2.0
    assert iteration_time(2.0, 1.0, 0.5) == pytest.approx(2.5)
    with pytest.raises(ConfigError, match="overlap"):
        PerfConfig("ring", 1.5)
    with pytest.raises(ConfigError, match="allreduce"):
        PerfConfig("butterfly")


def test_survival_multiplies() -> None:
    t = cluster()
    pg = np.zeros(8)
    pg[[0, 4]] = [0.1, 0.2]
    pl = np.zeros(t.num_nodes)
    pl[t.server_node[0]] = 0.5
    st = ClusterState(t, Health.healthy(t).replace(gpu_fail_prob=pg, link_fail_prob=pl))
    st.add(job("a", 2), [0, 4])
    assert st.job_record("a").survival == pytest.approx(0.9 * 0.8 * 0.5)
    st.add(job("b", 1), [1])
    assert st.job_record("b").survival == 1.0  # a single GPU spans no link


def test_value_and_F() -> None:
    t = cluster()
    st = ClusterState(t)
    a = Job("a", "vgg16", 2, 64, weight=2.0)
    st.add(a, [0, 4])
    rec = st.job_record("a")
    assert rec.value == pytest.approx(2.0 * 2 * rec.eta * rec.survival)
    assert rec.eta == pytest.approx(rec.T_star / rec.T)
    assert pytest.approx(rec.value) == st.F
    # The ideal time is the compact placement: both GPUs on one server.
    st2 = ClusterState(t)
    st2.add(a, [0, 1])
    assert pytest.approx(rec.T_star) == st2.job_record("a").T
    assert st2.job_record("a").eta == 1.0


def test_metrics() -> None:
    st = ClusterState(cluster())
    st.add(job("a", 2), [0, 4])
    st.add(job("b", 1), [1])
    m = st.metrics()
    assert m.jobs_placed == 2 and m.gpus_busy == 3
    assert m.utilization == pytest.approx(3 / 8)
    ra = st.job_record("a")
    assert m.comm_overhead == pytest.approx(2 * ra.C / ra.T / 3)


def test_bad_placements_are_refused() -> None:
    st = ClusterState(cluster())
    st.add(job("a", 2), [0, 1])
    with pytest.raises(ConfigError, match="busy"):
        st.add(job("b", 1), [1])
    with pytest.raises(ConfigError, match="needs 2 GPUs"):
        st.add(job("c", 2), [2])
    with pytest.raises(ConfigError, match="already placed"):
        st.add(job("a", 1), [5])
    with pytest.raises(ConfigError, match="repeated"):
        st.add(job("d", 2), [3, 3])
    with pytest.raises(ConfigError, match="outside"):
        st.add(job("e", 1), [8])
    failed = np.zeros(8, bool)
    failed[7] = True
    st.set_health(Health.healthy(st.topology).replace(gpu_failed=failed))
    with pytest.raises(ConfigError, match="failed"):
        st.add(job("f", 1), [7])
    with pytest.raises(ConfigError, match="holds a failed GPU"):
        st.set_health(Health.healthy(st.topology).replace(gpu_failed=np.eye(8, dtype=bool)[0]))


def test_gain_matches_add_and_does_not_mutate() -> None:
    st = ClusterState(cluster())
    st.add(job("a", 2), [0, 4])
    F0, version = st.F, st.version
    g = float(st.gains(job("b", 2), st.facts_for(np.array([1, 5]))).total[0])
    assert st.F == F0 and st.version == version
    delta = st.add(job("b", 2), [1, 5])
    assert g == pytest.approx(delta, rel=1e-12)
    assert g < st.job_record("b").value  # b slows a down


def test_copy_is_independent() -> None:
    st = ClusterState(cluster())
    st.add(job("a", 2), [0, 4])
    c = st.copy()
    c.add(job("b", 1), [1])
    assert len(st.jobs) == 1 and len(c.jobs) == 2
    assert st.gpu_owner[1] == -1
    c.remove("a")
    assert "a" in st.jobs and pytest.approx(st.evaluate()) == st.F


def test_slot_growth() -> None:
    t = build_tree([4, 40], [INTER, INTRA])
    st = ClusterState(t)
    for i in range(100):  # more jobs than the initial 64 slots; many links per job
        st.add(job(f"j{i}", 1), [i])
    st.add(job("wide", 20), np.arange(100, 160, 3)[:20])
    assert pytest.approx(st.evaluate()) == st.F


def test_set_health_with_changed_devices_matches_full_recompute() -> None:
    topo = make_topology("leafspine-64")
    rng = np.random.default_rng(0)
    prof = get_profile("severe")
    for trial in range(5):
        h0 = prof.sample(topo, rng).replace(gpu_failed=np.zeros(topo.num_gpus, bool))
        st = ClusterState(topo, h0)
        for i in range(8):
            k = int(rng.choice([1, 2, 4, 8, 16]))
            c = candidate_placements(st, k)
            if len(c):
                st.add(Job(f"j{trial}-{i}", "vgg16", k, 256), c.gpus[rng.integers(len(c))])
        # Change a few devices (not failing a held GPU).
        sig = h0.gpu_slowdown.copy()
        rho = h0.link_degradation.copy()
        cg = rng.choice(topo.num_gpus, 4, replace=False)
        sig[cg] = rng.uniform(1, 3, 4)
        links = np.flatnonzero(~topo.is_intra)[1:]
        cl = rng.choice(links, 3, replace=False)
        rho[cl] = rng.uniform(0.2, 1, 3)
        h1 = h0.replace(gpu_slowdown=sig, link_degradation=rho)
        st.set_health(h1)
        jobs = st.placed_jobs()
        ref = evaluate_from_scratch(topo, h1, st.perf, jobs, [st.placement(j.job_id) for j in jobs])
        assert pytest.approx(ref.F, rel=1e-12) == st.F
        for i, j in enumerate(jobs):
            rec = st.job_record(j.job_id)
            assert pytest.approx(ref.times.T[i], rel=1e-12) == rec.T
            assert rec.eta == pytest.approx(ref.times.eta[i], rel=1e-12)
            assert rec.survival == pytest.approx(ref.survival[i], rel=1e-12)
