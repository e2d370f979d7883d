"""fit_chronus: recovers a model it generated, scores through chronus_check, refuses bad input;
scripts/chronus_feasibility.py writes its table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from crop_gym.calibration import chronus_check
from crop_gym.calibration.chronus_fit import NIC_SHARING, fit_chronus
from crop_gym.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
LINKS = {
    "intra_bandwidth": 5e10,
    "inter_bandwidth": 2e9,
    "intra_latency": 1e-5,
    "inter_latency": 1e-3,
}
COEFFS = {
    "vgg16": {"t0": 0.2, "per_sample": 0.0},
    "resnet101": {"t0": 0.3, "per_sample": 0.0},
}
SHAPE = {2: (2,), 4: (2, 4), 8: (2, 4)}


def _synthetic() -> dict[str, dict[int, dict[int, float]]]:
    """Spread penalties produced by the model itself (hierarchical, ν = 1) with LINKS/COEFFS."""
    skeleton = {m: {k: {1: 1.0, **{s: 0.5 for s in ss}} for k, ss in SHAPE.items()} for m in COEFFS}
    rows, _, _ = chronus_check(
        "hierarchical", LINKS, COEFFS, data=skeleton, nic_sharing=NIC_SHARING
    )
    return {
        m: {r.gpus: dict(zip(r.servers, r.predicted, strict=True)) for r in rows if r.model == m}
        for m in COEFFS
    }


def test_recovers_the_model_that_made_the_data() -> None:
    data = _synthetic()
    fit = fit_chronus(data=data, starts=6, seed=0)
    assert fit.mean_abs_error < 2e-3
    assert fit.rank_agreement == 1.0
    assert fit.shared_params == 4 and fit.per_model_params == 1
    assert set(fit.coefficients) == set(COEFFS)
    # The score is chronus_check's own on the fitted values.
    _, agreement, mae = chronus_check(
        "hierarchical", fit.links, fit.coefficients, data=data, nic_sharing=fit.nic_sharing
    )
    assert (agreement, mae) == (fit.rank_agreement, fit.mean_abs_error)


def test_grad_scale_adds_a_parameter_per_model_and_never_fits_worse() -> None:
    data = _synthetic()
    data["vgg16"][8][4] = 0.05  # a point the model cannot reach with the shared links
    one = fit_chronus(data=data, starts=4)
    two = fit_chronus(data=data, starts=4, grad_scale=True)
    assert two.per_model_params == 2
    assert all("grad_bytes" in c for c in two.coefficients.values())
    assert two.mean_abs_error <= one.mean_abs_error + 1e-3
    assert one.mean_abs_error > 1e-3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"starts": 0}, "starts=0"),
        ({"data": {"nosuchnet": {2: {1: 1.0, 2: 0.9}}}}, "nosuchnet"),
        ({"data": {"vgg16": {2: {1: 1.0}}}}, "no point spread"),
    ],
)
def test_refuses_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        fit_chronus(**kwargs)


def test_feasibility_script_writes_its_table(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/chronus_feasibility.py",
            "--starts",
            "1",
            "--loo-starts",
            "1",
            "--out-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "chronus_feasibility.json").read_text())
    assert [r["variant"] for r in rows] == ["checked", "fitted-1", "fitted-2"]
    assert rows[0]["mean_abs_error"] == pytest.approx(0.229, abs=0.002)  # docs/MODEL.md §2.4
    assert rows[0]["rank_agreement"] == pytest.approx(0.95)
    for r in rows[1:]:
        assert np.isfinite(r["leave_one_out"]["mean_abs_error"])
        assert r["mean_abs_error"] < rows[0]["mean_abs_error"]
    assert "held-out MAE" in (tmp_path / "chronus_feasibility.txt").read_text()
