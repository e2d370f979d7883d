"""Hardware profiles: bundled ones load, a100-elasticflow equals the shipped calibration, bad input
is refused with one line naming file and field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from crop_gym.errors import ConfigError
from crop_gym.model.hardware import ComputeCurve, HardwareProfile, bundled_hardware, get_hardware
from crop_gym.model.jobs import MODEL_ZOO, calibration_data
from crop_gym.model.timing import PerfConfig


def test_a100_elasticflow_is_the_shipped_calibration() -> None:
    p = get_hardware("a100-elasticflow")
    cal = calibration_data()
    assert p.perf() == PerfConfig()
    assert p.links[0].bandwidth == cal["links"]["intra_bandwidth"]
    assert p.links[0].latency == cal["links"]["intra_latency"]
    assert p.links[1].bandwidth == cal["links"]["inter_bandwidth"]
    assert p.links[1].latency == cal["links"]["inter_latency"]
    for m, coef in cal["models"].items():
        b = np.array([1.0, 32.0])
        assert np.array_equal(p.compute_time(m, b), MODEL_ZOO[m].t0 + MODEL_ZOO[m].per_sample * b)
        assert coef["t0"] == p.compute[m]["a100"].t0
    assert p.model_grad_bytes("vgg16") == MODEL_ZOO["vgg16"].grad_bytes


def test_every_bundled_profile_loads_and_round_trips(tmp_path: Path) -> None:
    names = bundled_hardware()
    assert "a100-elasticflow" in names
    for name in names:
        p = get_hardware(name)
        assert p.citation
        f = tmp_path / f"{name}.json"
        f.write_text(p.to_json())
        q = get_hardware(str(f))
        assert q.to_mapping() == p.to_mapping()
        topo = p.topology(2) if len(p.links) == 2 else None
        assert topo is None or topo.num_gpus == 2 * p.gpus_per_node


TOML = """
name = "toy"
citation = "made up"
gpus_per_node = 4
gpu_type = "t4"
fabric_bandwidth = 2e10
nic_sharing = 1.0
overlap = 0.3
overlap_cap = 1.0
[gpu_speeds]
t4 = 1.0
v100 = 2.0
[[links]]
level = "gpu"
bandwidth = 1e13
[[links]]
level = "nic"
bandwidth = 1.25e9
latency = 5e-5
[compute.resnet50.t4]
t0 = 0.02
per_sample = 0.004
[compute.bert.t4]
local_batch = [4, 8, 16]
time = [0.1, 0.2, 0.6]
[grad_bytes]
bert = 1e9
"""


def test_toml_profile(tmp_path: Path) -> None:
    f = tmp_path / "toy.toml"
    f.write_text(TOML)
    p = get_hardware(f)
    assert p.perf() == PerfConfig(
        allreduce="hierarchical",
        overlap=0.3,
        overlap_cap=1.0,
        fabric_bandwidth=2e10,
        nic_sharing=1.0,
    )
    assert p.compute_time("resnet50", 10.0) == pytest.approx(0.06)
    assert p.compute_time("resnet50", 10.0, "v100") == pytest.approx(0.03)  # scaled by speed
    assert p.compute_time("bert", 12.0) == pytest.approx(0.4)
    assert p.model_grad_bytes("bert") == 1e9
    zoo = MODEL_ZOO["vgg16"]
    assert p.compute_time("vgg16", 2.0, "v100") == pytest.approx((zoo.t0 + 2 * zoo.per_sample) / 2)
    topo = p.topology(3)
    assert topo.num_gpus == 12 and topo.num_servers == 3


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"gpus_per_node": True}, "gpus_per_node"),
        ({"links": [{"level": "gpu", "bandwidth": 1e9}]}, "links must start"),
        (
            {"links": [{"level": "gpu", "bandwidth": -1}, {"level": "nic", "bandwidth": 1}]},
            "links[0].bandwidth",
        ),
        ({"nic_sharing": 2}, "nic_sharing"),
        ({"overlap": "x"}, "overlap"),
        ({"colour": 1}, "unknown field 'colour'"),
        ({"allreduce": "tree"}, "allreduce"),
        ({"gpu_type": "h100"}, "gpu_type"),
        ({"compute": {"bert": {"h100": {"t0": 1, "per_sample": 1}}}}, "compute.bert.h100"),
        ({"compute": {"bert": {"v100": {"t0": -1, "per_sample": 1}}}}, "compute.bert.v100.t0"),
        (
            {"compute": {"bert": {"v100": {"local_batch": [2, 1], "time": [1, 2]}}}},
            "strictly increasing",
        ),
        ({"grad_bytes": {"bert": 0}}, "grad_bytes.bert"),
        ({"model_compute_sharing": {"bert": -0.1}}, "model_compute_sharing.bert"),
        ({"model_compute_sharing": [0.1]}, "model_compute_sharing"),
        ({"compute_saturation": -1}, "compute_saturation"),
        ({"model_compute_saturation": {"bert": -0.1}}, "model_compute_saturation.bert"),
    ],
)
def test_bad_profiles_one_line(tmp_path: Path, edit: dict, needle: str) -> None:
    data = get_hardware("a100-elasticflow").to_mapping()
    data["gpu_speeds"] = (
        {"a100": 1.0, "v100": 0.5} if "gpu_type" not in edit else data["gpu_speeds"]
    )
    data.update(edit)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:
        get_hardware(f)
    msg = str(e.value)
    assert "\n" not in msg and needle in msg
    assert str(f) in msg


def test_missing_and_unknown() -> None:
    with pytest.raises(ConfigError, match="unknown hardware 'nope'"):
        get_hardware("nope")
    with pytest.raises(ConfigError, match="missing field 'links'"):
        HardwareProfile.from_mapping({"name": "x", "gpus_per_node": 1, "gpu_type": "a"}, "f.json")
    with pytest.raises(ConfigError, match="not found"):
        get_hardware("/nonexistent/x.json")


def test_affine_curve_matches_zoo_formula() -> None:
    c = ComputeCurve.affine(0.01, 0.002)
    assert c.is_affine and c(5.0) == pytest.approx(0.02)
    assert ComputeCurve.affine(0.01, 0.002).to_mapping() == {"t0": 0.01, "per_sample": 0.002}


def test_per_model_compute_sharing_round_trips_and_falls_back() -> None:
    data = get_hardware("a100-elasticflow").to_mapping()
    data.update(compute_sharing=0.02, model_compute_sharing={"yolov3": 0.3})
    p = HardwareProfile.from_mapping(data, "x.json")
    assert p.model_kappa("yolov3") == 0.3 and p.model_kappa("bert") == 0.02
    back = HardwareProfile.from_mapping(p.to_mapping(), "y.json")
    assert dict(back.model_compute_sharing) == {"yolov3": 0.3}


def test_compute_saturation_round_trips_falls_back_and_is_off_by_default() -> None:
    base = get_hardware("a100-elasticflow")
    assert base.compute_saturation == math.inf and base.perf().compute_saturation == math.inf
    assert "compute_saturation" not in base.to_mapping()  # older profiles round-trip unchanged
    data = base.to_mapping()
    data.update(compute_saturation=0.5, model_compute_saturation={"yolov3": 1.3})
    p = HardwareProfile.from_mapping(data, "x.json")
    assert p.model_kappa_max("yolov3") == 1.3 and p.model_kappa_max("bert") == 0.5
    assert p.perf().compute_saturation == 0.5
    back = HardwareProfile.from_mapping(p.to_mapping(), "y.json")
    assert dict(back.model_compute_saturation) == {"yolov3": 1.3}
    assert back.compute_saturation == 0.5


def test_whole_placement_terms_round_trip_and_fall_back(tmp_path: Path) -> None:
    base = get_hardware("a100-elasticflow").to_mapping()
    assert not {
        "latency",
        "latency_inflation",
        "bucket_bytes",
        "replica_overhead",
        "latency_overlap",
    } & set(base)
    data = {
        **base,
        "allreduce": "ring",
        "latency": "hops",
        "latency_inflation": 0.3,
        "model_latency_inflation": {"bert": 2.0},
        "bucket_bytes": 25e6,
        "replica_overhead": 0.004,
        "model_replica_overhead": {"bert": 0.01},
        "latency_overlap": 0.4,
    }
    p = HardwareProfile.from_mapping(data, "x.json")
    assert (p.model_chi("bert"), p.model_chi("vgg16")) == (2.0, 0.3)
    assert (p.model_delta("bert"), p.model_delta("vgg16")) == (0.01, 0.004)
    perf = p.perf()
    assert (perf.latency, perf.bucket_bytes, perf.replica_overhead) == ("hops", 25e6, 0.004)
    assert perf.latency_overlap == 0.4
    f = tmp_path / "p.json"
    f.write_text(p.to_json())
    assert get_hardware(str(f)).to_mapping() == p.to_mapping()
    for edit, needle in (
        ({"latency": "hops", "allreduce": "hierarchical"}, "needs allreduce='ring'"),
        ({"model_latency_inflation": {"bert": -1}}, "model_latency_inflation.bert"),
        ({"model_replica_overhead": [1]}, "model_replica_overhead must be a table"),
        ({"bucket_bytes": -5}, "bucket_bytes"),
        ({"latency_overlap": 1.5}, "latency_overlap"),
        ({"latency": "max"}, "latency_overlap > 0 .* needs latency='hops'"),
    ):
        with pytest.raises(ConfigError, match=needle) as info:
            HardwareProfile.from_mapping({**data, **edit}, "x.json")
        assert str(info.value).startswith("x.json") and "\n" not in str(info.value)
