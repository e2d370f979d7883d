"""The Sia-format fit: placement facts as on a real tree, recovery of known parameters from
synthetic data, and (when the raw data are present) the fitted error figures."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from crop_gym.calibration.fit import fit_profile, predict_step_time
from crop_gym.calibration.measurements import Measurements
from crop_gym.calibration.spread import even_spread, spread_facts
from crop_gym.errors import ConfigError
from crop_gym.model.facts import placement_facts
from crop_gym.model.hardware import ComputeCurve, HardwareProfile, LinkLevel
from crop_gym.model.health import Health
from crop_gym.model.jobs import MODEL_ZOO

GB = 1e9
SPREADS = [(1,), (2,), (4,), (1, 1), (2, 2), (1, 3), (4, 4), (1, 1, 1, 1), (2, 2, 2, 2), (3, 1)]


def synthetic(profile: HardwareProfile, noise: float = 0.0, seed: int = 0) -> Measurements:
    rows = [
        (m, p, b)
        for m, p, b in itertools.product(["bert", "resnet50"], SPREADS, [4, 8, 16, 32, 64])
    ]
    width = max(len(p) for _, p, _ in rows)
    placement = np.array([sorted(p, reverse=True) + [0] * (width - len(p)) for _, p, _ in rows])
    n = len(rows)
    m = Measurements(
        app=np.array([r[0] for r in rows]),
        model=np.array([r[0] for r in rows]),
        kind=np.full(n, "placements"),
        placement=placement,
        local_bsz=np.array([float(r[2]) for r in rows]),
        step_time=np.ones(n),
        sync_time=np.full(n, np.nan),
        source=np.array([f"synthetic:{i}" for i in range(n)]),
    )
    t = predict_step_time(profile, m)
    rng = np.random.default_rng(seed)
    t = t * np.exp(noise * rng.standard_normal(n))
    return Measurements(m.app, m.model, m.kind, m.placement, m.local_bsz, t, m.sync_time, m.source)


def truth() -> HardwareProfile:
    return HardwareProfile(
        name="truth",
        citation="synthetic",
        gpus_per_node=4,
        gpu_type="x",
        links=(LinkLevel("gpu", 1e13), LinkLevel("nic", 5 * GB, 0.0)),
        fabric_bandwidth=20 * GB,
        nic_sharing=1.0,
        compute_sharing=0.03,
        overlap=0.3,
        overlap_cap=1.0,
        compute={
            "bert": {"x": ComputeCurve.affine(0.05, 0.01)},
            "resnet50": {"x": ComputeCurve.affine(0.02, 0.002)},
        },
        grad_bytes={m: MODEL_ZOO[m].grad_bytes for m in ("bert", "resnet50")},
    )


def test_even_spread_by_hand() -> None:
    got = even_spread([16, 5, 8, 12], [8, 5, 4, 4], [2, 1, 2, 3])
    assert got.tolist() == [[8, 8, 0], [5, 0, 0], [4, 4, 0], [4, 4, 4]]
    assert even_spread(6, 4, 2).tolist() == [[4, 2]]


def test_spread_facts_match_a_real_tree() -> None:
    p = truth()
    topo = p.topology(4)
    spreads = [(1,), (3,), (2, 2), (3, 1), (1, 1, 1, 1), (4, 2, 1)]
    placements = [
        np.concatenate([np.arange(4 * i, 4 * i + c) for i, c in enumerate(s)]) for s in spreads
    ]
    real = placement_facts(topo, Health.healthy(topo), placements)
    pl = np.array([list(s) + [0] * (4 - len(s)) for s in spreads])
    facts, b_inter = spread_facts(pl, p.links[0], p.links[1])
    cols = ["k", "g", "s", "b_intra", "a_intra", "a_inter", "slowdown", "survival"]
    for c in cols:
        assert np.array_equal(getattr(facts, c), getattr(real, c)), c
    expect = np.where(real.s > 1, 5 * GB, np.inf)
    assert np.array_equal(b_inter, expect)


def test_fit_recovers_known_parameters() -> None:
    true = truth()
    data = synthetic(true)
    got = fit_profile(data, gpus_per_node=4, gpu_type="x", compute="affine")
    assert got.fit["median_abs_rel_error"] < 1e-3
    assert got.fit["parameters"] == 4 + 3 * 2
    assert got.fabric_bandwidth == pytest.approx(20 * GB, rel=0.02)
    assert got.links[1].bandwidth == pytest.approx(5 * GB, rel=0.02)
    assert got.overlap == pytest.approx(0.3, rel=0.02)
    assert got.compute_sharing == pytest.approx(0.03, rel=0.05)
    for m in ("bert", "resnet50"):
        c, t = got.compute[m]["x"], true.compute[m]["x"]
        assert c.t0 == pytest.approx(t.t0, rel=0.02) and c.per_sample == pytest.approx(
            t.per_sample, rel=0.02
        )
        assert got.grad_bytes[m] == pytest.approx(true.grad_bytes[m], rel=0.02)
    # Noisy data: still close, and deterministic.
    noisy = synthetic(true, noise=0.03)
    a = fit_profile(noisy, gpus_per_node=4, gpu_type="x", compute="affine")
    b = fit_profile(noisy, gpus_per_node=4, gpu_type="x", compute="affine")
    assert a.to_mapping() == b.to_mapping()
    assert a.links[1].bandwidth == pytest.approx(5 * GB, rel=0.15)


def _with_latency(
    base: HardwareProfile, kappas: dict[str, float], compute: dict[str, dict[str, ComputeCurve]]
) -> HardwareProfile:
    """``base``'s links with a 4 ms step latency, φ = 0.3, the given κ per model and curves."""
    return HardwareProfile(
        **{
            **{f: getattr(base, f) for f in ("name", "citation", "gpus_per_node", "gpu_type")},
            "links": base.links,
            "fabric_bandwidth": base.fabric_bandwidth,
            "nic_sharing": 1.0,
            "overlap": 0.3,
            "overlap_cap": 1.0,
            "step_latency": 0.004,
            "model_compute_sharing": kappas,
            "compute": compute,
            "grad_bytes": dict(base.grad_bytes),
        }
    )


def test_measured_curve_fit_recovers_per_model_kappa() -> None:
    # Truth: knot curves, κ per model (none shared), a per-step latency. The fit takes the curve
    # from the 1-GPU rows and recovers level (1), κ per model, the links, φ and λ.
    base = truth()
    knots = {
        "bert": ComputeCurve(local_batch=(4, 8, 16, 32, 64), time=(0.09, 0.12, 0.2, 0.33, 0.7)),
        "resnet50": ComputeCurve(
            local_batch=(4, 8, 16, 32, 64), time=(0.03, 0.031, 0.06, 0.09, 0.15)
        ),
    }
    true = _with_latency(
        base, {"bert": 0.01, "resnet50": 0.2}, {m: {"x": c} for m, c in knots.items()}
    )
    data = synthetic(true)
    got = fit_profile(data, gpus_per_node=4, gpu_type="x")
    assert got.fit["compute"] == "measured" and got.fit["parameters"] == 4 + 3 * 2
    assert got.fit["median_abs_rel_error"] < 1e-3
    assert got.model_kappa("bert") == pytest.approx(0.01, rel=0.05)
    assert got.model_kappa("resnet50") == pytest.approx(0.2, rel=0.05)
    assert got.step_latency == pytest.approx(0.004, rel=0.05)
    assert got.links[1].bandwidth == pytest.approx(5 * GB, rel=0.05)
    for m, c in knots.items():
        assert got.compute[m]["x"].local_batch == c.local_batch
        assert got.compute[m]["x"].time == pytest.approx(c.time, rel=0.01)
    # The fitted profile predicts through the same job_times path, from its own fields.
    again = HardwareProfile.from_mapping(got.to_mapping())
    assert np.array_equal(predict_step_time(again, data), predict_step_time(got, data))
    # An application without two 1-GPU batches cannot take the measured curve.
    one = data.select(~((data.model == "bert") & (data.num_gpus == 1) & (data.local_bsz > 4)))
    with pytest.raises(ConfigError, match="bert: 1 1-GPU local batch"):
        fit_profile(one, gpus_per_node=4, gpu_type="x")


def test_mixed_fit_gives_each_application_its_better_curve() -> None:
    # Truth: bert's compute is affine with a shared κ-free model, resnet50's a staircase that no
    # line fits. A mapping fits each with its own variant; "mixed" finds the same choice itself.
    base = truth()
    stairs = ComputeCurve(local_batch=(4, 8, 16, 32, 64), time=(0.03, 0.031, 0.08, 0.081, 0.2))
    true = _with_latency(
        base,
        {"bert": 0.0, "resnet50": 0.1},
        {"bert": {"x": ComputeCurve.affine(0.05, 0.01)}, "resnet50": {"x": stairs}},
    )
    data = synthetic(true)
    choice = {"bert": "affine", "resnet50": "measured"}
    got = fit_profile(data, gpus_per_node=4, gpu_type="x", compute=choice)
    assert got.fit["compute"] == "mixed" and got.fit["compute_by_app"] == choice
    assert got.fit["parameters"] == 4 + 3 * 2
    assert got.fit["median_abs_rel_error"] < 1e-3
    assert got.compute["bert"]["x"].t0 == pytest.approx(0.05, rel=0.02)
    assert got.compute["resnet50"]["x"].time == pytest.approx(stairs.time, rel=0.01)
    assert got.model_kappa("resnet50") == pytest.approx(0.1, rel=0.05)
    assert "bert" not in got.fit["compute_scale"]
    auto = fit_profile(data, gpus_per_node=4, gpu_type="x", compute="mixed")
    assert auto.fit["compute_by_app"]["resnet50"] == "measured"
    assert auto.fit["median_abs_rel_error"] < 1e-3
    again = HardwareProfile.from_mapping(got.to_mapping())
    assert np.array_equal(predict_step_time(again, data), predict_step_time(got, data))
    with pytest.raises(ConfigError, match=r"compute\['resnet50'\]=None"):
        fit_profile(data, gpus_per_node=4, gpu_type="x", compute={"bert": "affine"})


def test_fit_refuses_bad_arguments() -> None:
    data = synthetic(truth())
    with pytest.raises(ConfigError, match="at most 4"):
        fit_profile(
            data,
            gpus_per_node=4,
            gpu_type="x",
            free=("fabric", "nic", "overlap", "compute_sharing", "step_latency"),
        )
    with pytest.raises(ConfigError, match="not one of"):
        fit_profile(data, gpus_per_node=4, gpu_type="x", free=("colour",))
    with pytest.raises(ConfigError, match="gpus_per_node=2"):
        fit_profile(data, gpus_per_node=2, gpu_type="x")
    with pytest.raises(ConfigError, match="compute='measured'"):
        fit_profile(data, gpus_per_node=4, gpu_type="x", free=("nic", "compute_sharing"))
    with pytest.raises(ConfigError, match="compute='cubic'"):
        fit_profile(data, gpus_per_node=4, gpu_type="x", compute="cubic")


RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "sia_validation.json"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "sia-profiles"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/sia-profiles")


@pytest.mark.skipif(not DATA.is_dir(), reason="Sia measurements are not in the repository")
def test_fitted_errors_reproduce_the_published_table() -> None:
    """Refit one cluster and compare with docs/results/sia_validation.json (the figures in MODEL.md)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "validate_sia", Path(__file__).resolve().parents[1] / "scripts" / "validate_sia.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    published = {
        (r["cluster"], r["compute"]): r for r in json.loads(RESULTS.read_text())["clusters"]
    }
    got, _ = mod.run_cluster(DATA, "quad", "measured")
    want = published[("quad", "measured")]
    for split in ("in_sample", "out_of_sample"):
        assert got[split]["median_abs_rel_error"] == pytest.approx(
            want[split]["median_abs_rel_error"], rel=1e-3
        )
    assert got["parameters"] == want["parameters"]
