"""Calibration of the performance model (docs/MODEL.md, calibration) and the all-reduce formulas it relies on."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import crop_gym
from crop_gym.calibration import (
    LINK_KEYS,
    CalibrationResult,
    choose_default,
    chronus_check,
    fit_all,
    fit_calibration,
    load_chronus,
    load_profiles,
    model_coefficients,
    predict_iteration_time,
    profile_placement,
)
from crop_gym.cli import main
from crop_gym.errors import ConfigError
from crop_gym.model import timing as perf
from crop_gym.model.health import Health
from crop_gym.model.jobs import MODEL_ZOO, calibration_data
from crop_gym.model.topology import build_tree


@pytest.fixture(scope="module")
def results() -> dict[str, CalibrationResult]:
    return fit_all()


def _close(a: float, b: float, rel: float = 1e-3, abs_: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


# ------------------------------------------------------------------------------ comm_time by hand
M = 100e6
BI, BE, AI, AE = 50e9, 10e9, 5e-6, 40e-6


def test_ring_two_gpus_one_server() -> None:
    got = perf.comm_time("ring", M, 2, 2, 1, BI, np.inf, AI, 0.0)
    assert float(got) == pytest.approx(2 * (1 / 2) * M / BI + 2 * AI, rel=1e-12)


def test_hierarchical_four_gpus_on_two_servers() -> None:
    got = perf.comm_time("hierarchical", M, 8, 4, 2, BI, BE, AI, AE)
    want = 2 * (3 / 4) * M / BI + 2 * (1 / 2) * M / BE + 2 * 3 * AI + 2 * 1 * AE
    assert float(got) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("algo", ["ring", "hierarchical"])
def test_single_gpu_has_no_communication(algo: str) -> None:
    assert float(perf.comm_time(algo, M, 1, 1, 1, np.inf, np.inf, 0.0, 0.0)) == 0.0


def test_ring_cannot_tell_two_servers_from_four_but_hierarchical_can() -> None:
    ring2 = perf.comm_time("ring", M, 8, 4, 2, BI, BE, AI, AE)
    ring4 = perf.comm_time("ring", M, 8, 2, 4, BI, BE, AI, AE)
    assert float(ring2) == float(ring4)
    hier2 = perf.comm_time("hierarchical", M, 8, 4, 2, BI, BE, AI, AE)
    hier4 = perf.comm_time("hierarchical", M, 8, 2, 4, BI, BE, AI, AE)
    assert float(hier4) > float(hier2)


def test_ring_and_hierarchical_agree_on_one_server() -> None:
    ring = perf.comm_time("ring", M, 4, 4, 1, BI, np.inf, AI, 0.0)
    hier = perf.comm_time("hierarchical", M, 4, 4, 1, BI, np.inf, AI, 0.0)
    assert float(ring) == pytest.approx(float(hier), rel=1e-12)


# ------------------------------------------------------------------------------------------ data
def test_profiles_loaded_with_unmeasured_cells_skipped() -> None:
    pts = load_profiles()
    by_model = {m: sum(p.model == m for p in pts) for m in {p.model for p in pts}}
    assert by_model["resnet50_cifar10"] == 12  # 16/32/64 columns are 0 = not measured
    assert by_model["deepspeech2"] == 13  # one empty cell
    assert by_model["resnet50"] == 21
    assert len(pts) == 109
    assert all(p.throughput > 0 for p in pts)
    r50 = {(p.batch, p.gpus): p.throughput for p in pts if p.model == "resnet50"}
    assert r50[(64, 1)] == pytest.approx(6.8429775823889685)


def test_unknown_profile_and_algorithm_are_refused() -> None:
    with pytest.raises(ConfigError, match="no bundled profile"):
        load_profiles(["nope"])
    with pytest.raises(ConfigError, match="allreduce"):
        fit_calibration("tree")
    with pytest.raises(ConfigError, match="ratio"):
        fit_calibration("ring", min_latency_ratio=-1.0)


# ---------------------------------------------------------------------------------- the fit
def test_fit_reproduces_shipped_calibration(results: dict[str, CalibrationResult]) -> None:
    shipped = calibration_data()
    fit = results[shipped["allreduce"]]
    for key in LINK_KEYS:
        assert _close(fit.links[key], shipped["links"][key]), key
    assert set(fit.models) == set(shipped["models"])
    for name, coef in shipped["models"].items():
        assert _close(fit.models[name].t0, coef["t0"]), name
        assert _close(fit.models[name].per_sample, coef["per_sample"]), name
    for algo, errs in shipped["errors"].items():
        assert _close(results[algo].median_abs_rel_error, errs["median_abs_rel_error"], abs_=1e-4)
        assert _close(results[algo].chronus_rank_agreement, errs["chronus_rank_agreement"])


def test_fit_meets_targets_and_default_is_chosen_by_evidence(
    results: dict[str, CalibrationResult],
) -> None:
    for r in results.values():
        assert r.median_abs_rel_error <= 0.15
        assert len(r.points) == 109
        assert "resnet50_cifar10" in r.models
    default, reason = choose_default(results)
    assert default == calibration_data()["allreduce"] == "hierarchical"
    assert results[default].chronus_rank_agreement >= 0.9
    assert results[default].meets_targets
    # A ring ties 2 and 4 servers, so every (model, k) measured at both is a mismatch.
    assert results["ring"].chronus_rank_agreement <= 0.5
    assert "ring" in reason


def test_fit_is_deterministic(results: dict[str, CalibrationResult]) -> None:
    again = fit_calibration("hierarchical")
    assert again.links == results["hierarchical"].links
    assert again.coefficients == results["hierarchical"].coefficients


def test_fit_respects_constraints(results: dict[str, CalibrationResult]) -> None:
    for r in results.values():
        assert r.links["inter_bandwidth"] <= r.links["intra_bandwidth"] * (1 + 1e-12)
        assert r.links["inter_latency"] >= 4.0 * r.links["intra_latency"] * (1 - 1e-12)
        assert all(f.t0 >= 0 and f.per_sample >= 0 for f in r.models.values())


@pytest.mark.parametrize("algo", ["ring", "hierarchical"])
def test_closed_form_matches_real_topology(
    algo: str, results: dict[str, CalibrationResult]
) -> None:
    fit = results[algo]
    lk = fit.links
    for p, pred in zip(fit.points, fit.predicted):
        g, s = profile_placement(p.gpus)
        topo = build_tree(
            [int(s), 8],
            [lk["inter_bandwidth"], lk["intra_bandwidth"]],
            [lk["inter_latency"], lk["intra_latency"]],
        )
        stats = perf.placement_facts(topo, Health.healthy(topo), [np.arange(p.gpus)])
        assert (stats.k[0], stats.g[0], stats.s[0]) == (p.gpus, int(g), int(s))
        b_inter = perf.inter_bandwidth(topo.link_bw, 1, stats.inter_links)
        spec = fit.models[p.model]
        comm = float(
            perf.comm_time(
                algo,
                MODEL_ZOO[p.model].grad_bytes,
                stats.k,
                stats.g,
                stats.s,
                stats.b_intra,
                b_inter,
                stats.a_intra,
                stats.a_inter,
            )[0]
        )
        via_topology = float(
            perf.iteration_time(spec.t0 + spec.per_sample * p.batch / p.gpus, comm, 0.0)
        )
        closed = float(
            predict_iteration_time(
                algo,
                spec.t0,
                spec.per_sample,
                MODEL_ZOO[p.model].grad_bytes,
                p.batch / p.gpus,
                p.gpus,
                g,
                s,
                lk,
            )
        )
        assert closed == pytest.approx(via_topology, rel=1e-12, abs=0.0)
        assert closed == pytest.approx(pred, rel=1e-12)


# ---------------------------------------------------------------------------------- Chronus
def test_chronus_models_scaled_like_the_zoo() -> None:
    shipped = calibration_data()["models"]
    for name in load_chronus():
        t0, per_sample, grad = model_coefficients(name, shipped)
        spec = MODEL_ZOO[name]
        assert (t0, per_sample, grad) == pytest.approx((spec.t0, spec.per_sample, spec.grad_bytes))


def test_chronus_predicted_tie_counts_as_mismatch(results: dict[str, CalibrationResult]) -> None:
    fit = results["ring"]
    data = {"vgg16": {8: {1: 1.0, 2: 0.6, 4: 0.3}, 2: {1: 1.0, 2: 0.9}}}
    rows, agreement, mae = chronus_check("ring", fit.links, fit.coefficients, data=data)
    by_k = {r.gpus: r for r in rows}
    assert by_k[8].predicted[1] == by_k[8].predicted[2]  # ring: 2 servers == 4 servers
    assert not by_k[8].order_matches
    assert by_k[2].order_matches
    assert agreement == 0.5
    assert mae > 0
    hier = results["hierarchical"]
    rows, agreement, _ = chronus_check("hierarchical", hier.links, hier.coefficients, data=data)
    assert agreement == 1.0
    assert rows[0].servers == (1, 2)


# ------------------------------------------------------------------------------------------ CLI
def test_cli_writes_json_and_calibration(tmp_path, capsys) -> None:
    out = tmp_path / "cal.json"
    regenerated = tmp_path / "calibration.json"
    assert main(["calibrate", "--json", str(out), "--write", str(regenerated)]) == 0
    text = capsys.readouterr().out
    assert "resnet50_cifar10" in text and "rank agreement" in text and "default all-reduce" in text
    data = json.loads(out.read_text())
    for key in ("median_abs_rel_error", "per_model", "chronus_rank_agreement", "algorithms"):
        assert key in data
    assert set(data["algorithms"]) == {"ring", "hierarchical"}
    assert data["default_allreduce"] == "hierarchical"
    assert data["median_abs_rel_error"] <= 0.15 and data["chronus_rank_agreement"] >= 0.9
    written = json.loads(regenerated.read_text())
    shipped = calibration_data()
    assert set(written) >= {"comment", "allreduce", "links", "models", "errors"}
    assert written["allreduce"] == shipped["allreduce"]
    for key in LINK_KEYS:
        assert _close(written["links"][key], shipped["links"][key])
    assert not list(tmp_path.glob(".*.tmp"))


def test_cli_single_algorithm(tmp_path, capsys) -> None:
    out = tmp_path / "ring.json"
    assert main(["calibrate", "--allreduce", "ring", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert list(data["algorithms"]) == ["ring"]
    assert "only one algorithm" in capsys.readouterr().out


def test_cli_module_import_is_light() -> None:
    code = "import sys, crop_gym.calibration_cli; sys.exit('scipy' in sys.modules)"
    root = str(Path(crop_gym.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root}
    assert subprocess.run([sys.executable, "-c", code], env=env, check=False).returncode == 0
