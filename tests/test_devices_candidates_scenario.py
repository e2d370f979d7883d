"""Abnormality profiles, candidate placements and scenarios."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from crop_gym.errors import ConfigError
from crop_gym.model.candidates import candidate_placements
from crop_gym.model.health import PROFILES, Health, get_profile
from crop_gym.model.jobs import MODEL_ZOO, Job, get_model
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import make_topology
from crop_gym.scenario import SCENARIOS, Scenario, ScenarioSampler, get_scenario


# ----------------------------------------------------------------------------------- devices
def test_profiles_are_seeded_and_in_range() -> None:
    t = make_topology("leafspine-64")
    for name, prof in PROFILES.items():
        a = prof.sample(t, np.random.default_rng(3))
        b = prof.sample(t, np.random.default_rng(3))
        assert np.array_equal(a.gpu_slowdown, b.gpu_slowdown), name
        assert (a.gpu_slowdown >= 1).all() and (a.link_degradation <= 1).all()
        assert a.link_degradation[0] == 1.0 and a.link_fail_prob[0] == 0.0
        assert not (a.link_degradation[t.gpu_node] < 1).any()  # only links above GPUs degrade
    none = PROFILES["none"].sample(t, np.random.default_rng(0))
    assert not none.is_abnormal_gpu.any()
    sev = [
        PROFILES["severe"].sample(t, np.random.default_rng(s)).is_abnormal_gpu.sum()
        for s in range(5)
    ]
    mild = [
        PROFILES["mild"].sample(t, np.random.default_rng(s)).is_abnormal_gpu.sum() for s in range(5)
    ]
    assert np.mean(sev) > np.mean(mild) > 0


def test_testbed_profile_has_exactly_one_abnormal_gpu() -> None:
    t = make_topology("testbed-8")
    for s in range(10):
        h = PROFILES["testbed"].sample(t, np.random.default_rng(s))
        assert h.is_abnormal_gpu.sum() == 1


def test_profile_overrides_and_errors() -> None:
    p = get_profile("mild", slow_gpu_frac=0.5, slow_factor=(2, 2))
    assert p.slow_gpu_frac == 0.5 and p.slow_factor == (2.0, 2.0)
    with pytest.raises(ConfigError, match="unknown abnormality field"):
        get_profile("mild", bogus=1)
    with pytest.raises(ConfigError, match="unknown abnormality profile"):
        get_profile("awful")
    with pytest.raises(
        ConfigError, match=r"slow_gpu_frac=1.5 is outside its allowed range \[0, 1\]"
    ):
        get_profile("mild", slow_gpu_frac=1.5)
    with pytest.raises(ConfigError, match="degradation"):
        get_profile("mild", degradation=(0.0, 0.5))


def test_health_validation_and_observation() -> None:
    t = make_topology("testbed-8")
    h = Health.healthy(t)
    with pytest.raises(ConfigError, match="gpu_slowdown"):
        h.replace(gpu_slowdown=np.full(8, 0.5))
    with pytest.raises(ConfigError, match="link_degradation"):
        h.replace(link_degradation=np.zeros(t.num_nodes))
    sev = PROFILES["severe"].sample(t, np.random.default_rng(1))
    assert sev.observe(np.random.default_rng(0), 0.0) is sev
    noisy = sev.observe(np.random.default_rng(0), 0.3)
    assert (noisy.gpu_failed == sev.gpu_failed).all()
    assert (noisy.gpu_slowdown >= 1).all()


# --------------------------------------------------------------------------------------- jobs
def test_model_zoo_covers_elasticflow_and_pollux() -> None:
    for m in (
        "resnet50",
        "vgg16",
        "inception3",
        "bert",
        "gpt2",
        "deepspeech2",
        "resnet18",
        "ncf",
        "yolov3",
    ):
        spec = get_model(m)
        assert spec.grad_bytes == 4 * spec.params
        assert spec.compute_time(64) > spec.compute_time(32) > 0
    assert "scaled" in MODEL_ZOO["yolov3"].source
    with pytest.raises(ConfigError, match="unknown model 'alexnet2'"):
        get_model("alexnet2")
    with pytest.raises(ConfigError, match="num_gpus"):
        Job("x", "vgg16", 0, 64)


# ---------------------------------------------------------------------------------- candidates
def test_candidates_are_free_usable_distinct_and_compact() -> None:
    t = make_topology("leafspine-64")
    h = PROFILES["severe"].sample(t, np.random.default_rng(5))
    st = ClusterState(t, h)
    st.add(
        Job("a", "vgg16", 6, 128),
        [2, 3, 4, 5, 6, 7] if h.usable[2:8].all() else np.flatnonzero(h.usable)[:6],
    )
    for k in (1, 2, 3, 4, 8, 12, 16, 32):
        c = candidate_placements(st, k, max_candidates=6)
        assert 0 < len(c) <= 6
        for row in c.gpus:
            assert len(np.unique(row)) == k
            assert st.free_mask[row].all()
        rows = {tuple(r) for r in c.gpus}
        assert len(rows) == len(c)
        # The best candidate uses the fewest servers possible for its size.
        assert c.num_servers[0] == c.num_servers.min()
        assert c.num_servers[0] == len(np.unique(t.gpu_server[c.gpus[0]]))


def test_robust_candidates_avoid_abnormal_gpus() -> None:
    t = make_topology("testbed-8")
    slow = np.ones(8)
    slow[0] = 3.0
    st = ClusterState(t, Health.healthy(t).replace(gpu_slowdown=slow))
    best = candidate_placements(st, 3, robust=True).gpus[0]
    assert 0 not in best
    naive = candidate_placements(st, 3, robust=False).gpus
    assert any(0 in r for r in naive)


def test_no_candidates_when_full_and_cache_invalidation() -> None:
    t = make_topology("testbed-8")
    st = ClusterState(t)
    assert len(candidate_placements(st, 8)) == 1
    st.add(Job("a", "vgg16", 4, 64), [0, 1, 2, 3])
    assert len(candidate_placements(st, 8)) == 0
    assert candidate_placements(st, 4).gpus.tolist() == [[4, 5, 6, 7]]
    with pytest.raises(ConfigError, match="k=9"):
        candidate_placements(st, 9)


# ---------------------------------------------------------------------------------- scenarios
def test_builtin_scenarios_sample_deterministically() -> None:
    for name in ("default", "testbed-8", "default-severe"):
        s = ScenarioSampler(name)
        a = s.sample(np.random.default_rng(11))
        b = s.sample(np.random.default_rng(11))
        c = s.sample(np.random.default_rng(12))
        assert [j.job_id for j in a.queue] == [j.job_id for j in b.queue]
        assert [(j.model, j.num_gpus) for j in a.queue] == [(j.model, j.num_gpus) for j in b.queue]
        assert a.state.F == b.state.F
        assert len(a.queue) == s.scenario.queue_size
        assert all(j.num_gpus <= s.scenario.job_size_limit for j in a.queue)
        if name != "testbed-8":
            assert a.state.F != c.state.F or [j.model for j in a.queue] != [
                j.model for j in c.queue
            ]
    inst = ScenarioSampler("default").sample(np.random.default_rng(0))
    busy = inst.state.metrics().gpus_busy
    assert abs(busy - 0.3 * 64) <= 8
    pickle.loads(pickle.dumps(inst))


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_scenario_files(tmp_path, suffix: str) -> None:  # type: ignore[no-untyped-def]
    body = {
        ".toml": 'cluster = "testbed-8"\nqueue_size = 5\nbackground_load = 0.0\n[abnormal]\nprofile = "mild"\nslow_gpu_frac = 0.25\nslow_factor = [2.0, 3.0]\n',
        ".yaml": "cluster: testbed-8\nqueue_size: 5\nbackground_load: 0.0\nabnormal:\n  profile: mild\n  slow_gpu_frac: 0.25\n  slow_factor: [2.0, 3.0]\n",
        ".json": json.dumps(
            {
                "cluster": "testbed-8",
                "queue_size": 5,
                "background_load": 0.0,
                "abnormal": {"profile": "mild", "slow_gpu_frac": 0.25, "slow_factor": [2.0, 3.0]},
            }
        ),
    }[suffix]
    p = tmp_path / f"mine{suffix}"
    p.write_text(body)
    s = get_scenario(str(p))
    assert s.name == "mine" and s.cluster == "testbed-8" and s.queue_size == 5
    assert s.abnormal.slow_gpu_frac == 0.25 and s.abnormal.slow_factor == (2.0, 3.0)
    assert Scenario.from_dict(s.to_dict()) == s


def test_scenario_errors_name_file_and_field(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "bad.toml"
    p.write_text('cluster = "testbed-8"\nqueue_size = 0\n')
    with pytest.raises(ConfigError, match=r"bad.toml.*queue_size=0 is outside"):
        get_scenario(str(p))
    p.write_text('clusterr = "testbed-8"\n')
    with pytest.raises(ConfigError, match=r"bad.toml: unknown field\(s\) \['clusterr'\]"):
        get_scenario(str(p))
    p.write_text('cluster = "testbed-8\n')
    with pytest.raises(ConfigError, match=r"bad\.toml:\d+: invalid TOML"):
        get_scenario(str(p))
    p.write_text('[abnormal]\nprofile = "mild"\nslow_gpu_frac = 2\n')
    with pytest.raises(ConfigError, match="slow_gpu_frac"):
        get_scenario(str(p))
    with pytest.raises(ConfigError, match="unknown scenario"):
        get_scenario("no-such-scenario")
    with pytest.raises(ConfigError, match="background_load"):
        SCENARIOS["default"].replace(background_load=0.99)


def test_fragmented_scenario_scatters_small_background_jobs_and_queues_large_ones() -> None:
    s = ScenarioSampler("fragmented")
    sc = s.scenario
    for seed in range(5):
        inst = s.sample(np.random.default_rng(seed))
        sizes = [j.num_gpus for j in inst.state.placed_jobs()]
        assert sizes and all(1 <= k <= sc.background_max_gpus for k in sizes)
        assert len(inst.queue) == sc.queue_size
        assert all(sc.queue_min_gpus <= j.num_gpus <= sc.job_size_limit for j in inst.queue)
        busy = inst.state.topology.num_gpus - int(inst.state.free_mask.sum())
        assert abs(busy - sc.background_load * inst.state.topology.num_gpus) <= 2
        # Fragmented: no server is left whole, so a large job must span servers.
        per_server = np.bincount(
            inst.state.topology.gpu_server[inst.state.free_mask],
            minlength=inst.state.topology.num_servers,
        )
        assert per_server.max() < inst.state.topology.max_gpus_per_server


def test_the_default_pools_are_unchanged_by_the_new_fields() -> None:
    a, b = ScenarioSampler("default"), ScenarioSampler(SCENARIOS["default"].replace(name="x"))
    assert a.pool == b.pool
    x, y = a.sample(np.random.default_rng(3)), b.sample(np.random.default_rng(3))
    assert [j.num_gpus for j in x.queue] == [j.num_gpus for j in y.queue]
    assert x.initial_F == y.initial_F


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"queue_min_gpus": 0}, r"queue_min_gpus=0 is outside"),
        ({"background_max_gpus": -1}, r"background_max_gpus=-1 is outside"),
    ],
)
def test_bad_pool_limits_are_refused_in_one_line(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        Scenario(name="bad", **changes)
    assert "\n" not in str(e.value)


def test_a_queue_minimum_no_job_reaches_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"no job of workload .* has between queue_min_gpus=33"):
        ScenarioSampler(Scenario(name="big", max_job_gpus=32, queue_min_gpus=33))
