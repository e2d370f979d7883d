"""Hardware profiles wired into topologies, scenarios, environments, compare, simulate and the study
grid; heterogeneous clusters (hand-computed iteration times)."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest

from crop_gym.cli import main
from crop_gym.errors import ConfigError
from crop_gym.model.hardware import (
    DEFAULT_HARDWARE,
    ComputeCurve,
    HardwareProfile,
    LinkLevel,
    apply_hardware,
    combine_profiles,
    resolve_hardware,
)
from crop_gym.model.jobs import MODEL_ZOO, Job
from crop_gym.model.objective import evaluate_from_scratch
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import JOB_COLUMNS, PerfConfig, job_constants, model_constants
from crop_gym.model.topology import build_tree, make_topology
from crop_gym.scenario import Scenario, ScenarioSampler, get_scenario

BUNDLED = Path(__file__).resolve().parents[1] / "crop_gym" / "data" / "hardware"


def _copy_default(tmp_path: Path) -> Path:
    """The default profile as a file: resolved and applied like any user profile."""
    path = tmp_path / "mine.json"
    path.write_text((BUNDLED / f"{DEFAULT_HARDWARE}.json").read_text())
    return path


# ------------------------------------------------------------------------- default = today
def test_default_profile_is_the_zoo_bit_for_bit() -> None:
    topo = apply_hardware(make_topology("leafspine-64"), DEFAULT_HARDWARE)
    plain = make_topology("leafspine-64")
    assert np.array_equal(topo.link_bw, plain.link_bw)
    assert np.array_equal(topo.link_lat, plain.link_lat)
    assert np.array_equal(topo.gpu_speed, plain.gpu_speed)
    for name in MODEL_ZOO:
        for b in (1.0, 7.0, 32.0, 333.0):
            job = Job("j", name, 4, int(4 * b))
            assert model_constants(topo, job) == model_constants(plain, job)
    assert resolve_hardware(DEFAULT_HARDWARE).perf() == PerfConfig()


def test_state_on_the_default_profile_is_bit_identical() -> None:
    topo = apply_hardware(make_topology("leafspine-64"), DEFAULT_HARDWARE)
    jobs = [Job("a", "vgg16", 16, 512), Job("b", "bert", 8, 64), Job("c", "ncf", 4, 256)]
    states = [ClusterState(t) for t in (make_topology("leafspine-64"), topo)]
    gpus = [np.arange(4, 20), np.arange(24, 32), np.array([40, 41, 48, 49])]
    for st in states:
        for j, g in zip(jobs, gpus):
            st.add(j, g)
    assert states[0].F == states[1].F
    assert states[0].iteration_times() == states[1].iteration_times()


def test_a_profile_changes_links_compute_and_options() -> None:
    hw = resolve_hardware("azure-v100")
    topo = hw.topology("leafspine-64")
    assert topo.hardware is hw.profile and topo is hw.topology("leafspine-64")  # cached
    nic = hw.profile.links[1].bandwidth
    assert topo.link_bw[topo.server_node].tolist() == [nic] * 8
    tor = [i for i in range(1, topo.num_nodes) if topo.depth[i] == 1]
    assert topo.link_bw[tor].tolist() == pytest.approx([2 * nic] * 2)  # 4 servers, 2:1 kept
    job = Job("a", "bert", 4, 128)
    assert model_constants(topo, job) == (
        hw.profile.model_grad_bytes("bert"),
        float(hw.profile.compute_time("bert", 32.0)),
    )
    assert hw.perf().nic_sharing == 1.0


def test_per_model_compute_sharing_reaches_the_state(tmp_path: Path) -> None:
    # A profile with κ = 0.2 for bert only: a bert job on g co-located GPUs computes
    # t_c · (1 + 0.2 (g - 1)) in the state, the objective and T*; vgg16 keeps the shared κ (0).
    prof = json.loads((BUNDLED / "azure-v100.json").read_text())
    prof["model_compute_sharing"] = {"bert": 0.2}
    prof["compute_sharing"] = 0.0
    (tmp_path / "k.json").write_text(json.dumps(prof))
    hw = resolve_hardware(str(tmp_path / "k.json"))
    topo, perf = hw.topology("leafspine-64"), hw.perf()
    bert, vgg = Job("a", "bert", 4, 128), Job("b", "vgg16", 4, 128)
    const = job_constants(topo, perf, [bert, vgg])
    assert const[:, JOB_COLUMNS.index("compute_sharing")].tolist() == [0.2, 0.0]
    st = ClusterState(topo, perf=perf)
    st.add(bert, np.arange(4))  # 4 GPUs on one server: g = 4
    t_c = model_constants(topo, bert)[1]
    assert st.iteration_times()["a"] >= t_c * (1 + 0.2 * 3) * (1 - 1e-12)
    scratch = evaluate_from_scratch(topo, st.health, perf, [bert], [np.arange(4)])
    assert pytest.approx(scratch.F, rel=1e-12) == st.F
    # Alone on a compact placement the job runs at its ideal time: T* carries κ too.
    tstar = const[0, JOB_COLUMNS.index("tstar")]
    assert st.iteration_times()["a"] == pytest.approx(tstar, rel=1e-12)


def test_whole_placement_terms_reach_the_state(tmp_path: Path) -> None:
    # A ring profile with hop latencies inflated by co-located GPUs (χ = 1 for bert), a 25 MB
    # last bucket and a single-replica overhead (no overlap, so that no difference hides): the
    # state's times are job_times of its facts, and two placements with equal k, s and g (3311 vs
    # 3221) get different times.
    prof = json.loads((BUNDLED / "azure-v100.json").read_text())
    prof.update(
        allreduce="ring",
        latency="hops",
        model_latency_inflation={"bert": 1.0},
        bucket_bytes=25e6,
        model_replica_overhead={"bert": 0.002},
        overlap=0.0,
    )
    prof.pop("overlap_cap", None)
    prof["links"][0]["latency"], prof["links"][1]["latency"] = 5e-6, 2e-5
    (tmp_path / "h.json").write_text(json.dumps(prof))
    hw = resolve_hardware(str(tmp_path / "h.json"))
    topo, perf = hw.topology("leafspine-64"), hw.perf()
    bert = Job("a", "bert", 8, 256)
    const = job_constants(topo, perf, [bert])
    assert const[0, JOB_COLUMNS.index("latency_inflation")] == 1.0
    assert const[0, JOB_COLUMNS.index("replica_overhead")] == 0.002
    times = []
    for spread in ((3, 3, 1, 1), (3, 2, 2, 1)):
        gpus = np.concatenate([np.arange(8 * i, 8 * i + c) for i, c in enumerate(spread)])
        st = ClusterState(topo, perf=perf)
        st.add(bert, gpus)
        scratch = evaluate_from_scratch(topo, st.health, perf, [bert], [gpus])
        assert pytest.approx(scratch.F, rel=1e-12) == st.F
        times.append(st.iteration_times()["a"])
    assert times[0] != times[1]
    # Hop latency behind compute (ψ = 1): the state follows, and the step is shorter.
    prof["latency_overlap"] = 1.0
    (tmp_path / "psi.json").write_text(json.dumps(prof))
    hw_psi = resolve_hardware(str(tmp_path / "psi.json"))
    topo_psi, perf_psi = hw_psi.topology("leafspine-64"), hw_psi.perf()
    assert perf_psi.latency_overlap == 1.0
    gpus = np.concatenate([np.arange(8 * i, 8 * i + c) for i, c in enumerate((3, 3, 1, 1))])
    st = ClusterState(topo_psi, perf=perf_psi)
    st.add(bert, gpus)
    scratch = evaluate_from_scratch(topo_psi, st.health, perf_psi, [bert], [gpus])
    assert pytest.approx(scratch.F, rel=1e-12) == st.F
    assert st.iteration_times()["a"] < times[0]
    # The bundled profiles set none of these terms: zeros, and no compute saturation (inf).
    plain = resolve_hardware("azure-v100")
    c = job_constants(plain.topology("leafspine-64"), plain.perf(), [bert])
    assert c[0, JOB_COLUMNS.index("latency_inflation") :].tolist() == [0.0, 0.0, math.inf]


# ------------------------------------------------------------------------- scenarios
def test_scenario_hardware_field(tmp_path: Path) -> None:
    sc = get_scenario("default")
    assert sc.hardware == DEFAULT_HARDWARE and sc.topology is make_topology("leafspine-64")
    assert sc.perf == PerfConfig()
    v100 = sc.replace(hardware="azure-v100")
    assert v100.perf == resolve_hardware("azure-v100").perf()
    assert v100.replace(overlap=0.25).perf.overlap == 0.25
    assert Scenario.from_dict(v100.to_dict()) == v100
    for bad, needle in [
        ("nope", "unknown hardware 'nope'"),
        (3, "hardware=3 must be a string"),
        ("missing.json", "missing.json"),
    ]:
        with pytest.raises(ConfigError, match="scenario default: ") as e:
            sc.replace(hardware=bad)
        assert needle in str(e.value) and "\n" not in str(e.value)
    prof = json.loads((BUNDLED / "azure-v100.json").read_text())
    prof["overlap"] = 2.0
    (tmp_path / "bad.json").write_text(json.dumps(prof))
    (tmp_path / "s.toml").write_text('cluster = "testbed-8"\nhardware = "bad.json"\n')
    with pytest.raises(ConfigError, match=r"s\.toml: .*bad\.json: overlap"):
        Scenario.from_file(tmp_path / "s.toml")
    (tmp_path / "mine.json").write_text((BUNDLED / "rtx-2080ti.json").read_text())
    (tmp_path / "s.toml").write_text('cluster = "testbed-8"\nhardware = "mine.json"\n')
    sc2 = Scenario.from_file(tmp_path / "s.toml")  # relative to the scenario file
    assert sc2.topology.hardware is not None and sc2.topology.hardware.name == "rtx-2080ti"


def test_env_kwarg_hardware() -> None:
    import gymnasium as gym

    import crop_gym  # noqa: F401  (registers the environments)

    env = gym.make("crop_gym/Placement-v0", scenario="testbed-8", hardware="rtx-2080ti")
    assert env.unwrapped.scenario.hardware == "rtx-2080ti"
    assert env.unwrapped.state.topology.hardware.name == "rtx-2080ti"
    env.close()


# ------------------------------------------------------------------------- heterogeneous
def _two_type_profile() -> HardwareProfile:
    return HardwareProfile(
        name="two",
        citation="",
        gpus_per_node=4,
        gpu_type="fast",
        gpu_speeds={"fast": 1.0, "slow": 0.5},
        links=(LinkLevel("gpu", 100e9, 1e-5), LinkLevel("nic", 10e9, 1e-4)),
        compute={"resnet50": {"fast": ComputeCurve.affine(0.01, 0.001)}},
        grad_bytes={"resnet50": 1e8},
    )


def test_heterogeneous_iteration_time_by_hand() -> None:
    prof = _two_type_profile()
    topo = apply_hardware(build_tree([2, 4], [1.0, 1.0], [0.0, 0.0]), prof, ("fast", "slow"))
    assert topo.gpu_speed.tolist() == [1.0] * 4 + [0.5] * 4
    st = ClusterState(topo, perf=prof.perf())
    st.add(Job("across", "resnet50", 8, 256), np.arange(8))
    # t_c = 0.01 + 0.001 * 32, doubled by the slow server; hierarchical all-reduce, g = 4, s = 2.
    t = (0.01 + 0.032) / 0.5
    c = 2 * 3 / 4 * 1e8 / 100e9 + 2 * 1 / 2 * 1e8 / 10e9 + 2 * 3 * 1e-5 + 2 * 1 * 1e-4
    assert math.isclose(st.job_record("across").T, t + c, rel_tol=1e-12)
    st2 = ClusterState(topo, perf=prof.perf())
    st2.add(Job("slow", "resnet50", 4, 128), np.arange(4, 8))
    st2.add(Job("fast", "resnet50", 4, 128), np.arange(4))
    intra = 2 * 3 / 4 * 1e8 / 100e9 + 2 * 3 * 1e-5
    assert math.isclose(st2.job_record("slow").T, 0.042 / 0.5 + intra, rel_tol=1e-12)
    assert math.isclose(st2.job_record("fast").T, 0.042 + intra, rel_tol=1e-12)


def test_mixed_profiles_speed_is_the_geometric_mean_ratio() -> None:
    base = _two_type_profile()
    other = HardwareProfile(
        name="old",
        citation="",
        gpus_per_node=4,
        gpu_type="old",
        links=base.links,
        compute={
            # base: resnet50 0.042 s at b = 32; bert from the zoo.
            "resnet50": {"old": ComputeCurve.affine(0.084, 0.0)},  # 2x slower
            "bert": {"old": ComputeCurve.affine(8 * float(base.compute_time("bert", 32.0)), 0)},
        },
    )
    mix = combine_profiles(base, other)
    assert mix.gpu_speeds["old"] == pytest.approx(1 / math.sqrt(2 * 8), rel=1e-12)
    assert mix.curve("bert", "old") is not None and mix.name == "two+old"
    with pytest.raises(ConfigError, match="appears twice"):
        combine_profiles(base, base)
    sc = get_scenario("default").replace(hardware="dgx-a100+azure-v100")
    topo = sc.topology
    v100 = sc.cluster_hardware.profile.gpu_speeds["v100"]
    assert topo.gpu_speed.tolist() == [1.0] * 32 + [v100] * 32 and v100 < 1.0


# ------------------------------------------------------------------------- commands
def _compare(tmp_path: Path, name: str, *hw: str) -> dict:
    out = tmp_path / f"{name}.json"
    args = ["compare", "--scenario", "testbed-8", "--seeds", "2", "--policies", "crop,first-fit"]
    assert main([*args, "--no-progress", "--json", str(out), *hw]) == 0
    data = json.loads(out.read_text())
    for runs in data["policies"].values():
        runs.pop("solve_time_s")
    data.pop("hardware", None)
    return data


def test_compare_hardware(tmp_path: Path) -> None:
    default = _compare(tmp_path, "d")
    same = _compare(tmp_path, "s", "--hardware", str(_copy_default(tmp_path)))
    other = _compare(tmp_path, "o", "--hardware", "rtx-2080ti")
    assert same == default
    # Slower links: more time communicating, and a spread placement loses F.
    assert other["policies"]["crop"]["comm_overhead"] > default["policies"]["crop"]["comm_overhead"]
    assert other["policies"]["first-fit"]["F"] != default["policies"]["first-fit"]["F"]


def _simulate(tmp_path: Path, name: str, *hw: str) -> dict:
    out = tmp_path / f"{name}.json"
    args = ["simulate", "--trace", "elasticflow:195job", "--jobs", "25", "--no-progress"]
    assert main([*args, "--json", str(out), *hw]) == 0
    return {
        k: v
        for k, v in json.loads(out.read_text()).items()
        if "wall" not in k and "_per_s" not in k
    }


def test_simulate_hardware(tmp_path: Path) -> None:
    default = _simulate(tmp_path, "d")
    assert _simulate(tmp_path, "s", "--hardware", str(_copy_default(tmp_path))) == default
    other = _simulate(tmp_path, "o", "--hardware", "azure-v100")
    assert other["mean_jct_s"] != default["mean_jct_s"]


def test_hardware_option_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = _copy_default(tmp_path)
    sim = ["simulate", "--trace", "elasticflow:195job", "--jobs", "5", "--no-progress"]
    assert main([*sim, "--hardware", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown hardware 'nope'" in err
    assert main([*sim, "--hardware", str(prof), "--json", str(prof)]) == 2
    assert "is an input" in capsys.readouterr().err


def test_study_grid_hardware_axis() -> None:
    from crop_gym.sim import SimConfig
    from crop_gym.study.grid import apply_hardware as grid_apply
    from crop_gym.study.grid import cluster_on
    from crop_gym.study.spec import HARDWARE_PROFILES

    assert {"default", "azure-v100", DEFAULT_HARDWARE} <= set(HARDWARE_PROFILES)
    config = SimConfig()
    assert grid_apply(config, "default") is config and cluster_on("n32g8", "default") == "n32g8"
    assert grid_apply(config, "azure-v100").perf == resolve_hardware("azure-v100").perf()
    assert cluster_on("n32g8", "azure-v100").hardware.name == "azure-v100"
    with pytest.raises(ConfigError, match="unknown hardware profile"):
        grid_apply(config, "nope")


def test_sampler_uses_the_scenario_topology() -> None:
    sc = get_scenario("testbed-8").replace(hardware="quadro-rtx6000")
    inst = ScenarioSampler(sc).sample(np.random.default_rng(0))
    assert inst.state.topology is sc.topology and inst.state.perf == sc.perf
    back = pickle.loads(pickle.dumps(inst))
    assert back.scenario == sc and back.state.F == inst.state.F
    assert back.state.topology.hardware.to_mapping() == sc.topology.hardware.to_mapping()
