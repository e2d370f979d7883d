"""``crop-gym calibrate --profiles`` / ``--evaluate`` on a synthetic folder made from a known profile
(no raw Sia data needed), bad-input one-liners, and the honest Chronus marks."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from crop_gym.calibration.fit import predict_step_time
from crop_gym.calibration.measurements import load_measurements
from crop_gym.calibration.report import error_report
from crop_gym.cli import main
from crop_gym.model.hardware import ComputeCurve, HardwareProfile, LinkLevel, load_hardware

PLACEMENTS = ("1", "2", "4", "8", "11", "22", "44", "1111", "2222", "4444", "41", "42")
BATCHES = (8, 16, 32, 64)


def _known() -> HardwareProfile:
    """A profile of the fitted model's form (ring, hop latencies, last bucket, δ)."""
    return HardwareProfile(
        name="truth",
        citation="",
        gpus_per_node=8,
        gpu_type="v100",
        allreduce="ring",
        latency="hops",
        links=(LinkLevel("gpu", 1e13, 2e-5), LinkLevel("nic", 3e9, 1e-4)),
        fabric_bandwidth=30e9,
        nic_sharing=0.7,
        compute_sharing=0.05,
        overlap=0.5,
        overlap_cap=1.0,
        bucket_bytes=25e6,
        replica_overhead=0.003,
        compute={
            "bert": {"v100": ComputeCurve.affine(0.2, 0.012)},
            "resnet18": {"v100": ComputeCurve.affine(0.05, 0.0002)},
        },
        grad_bytes={"bert": 4.4e8, "resnet18": 4.5e7},
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """DIR/<app>/placements-syn.csv whose step times the known profile predicts exactly."""
    root = tmp_path / "meas"
    for app in ("bert", "cifar10"):
        (root / app).mkdir(parents=True)
        rows = ["placement,local_bsz,step_time"]
        rows += [f"{p},{b},1.0" for p in PLACEMENTS for b in BATCHES]
        (root / app / "placements-syn.csv").write_text("\n".join(rows) + "\n")
    meas = load_measurements(root, cluster="syn")
    times = predict_step_time(_known(), meas)
    for app in ("bert", "cifar10"):
        sel = meas.app == app
        rows = ["local_bsz,step_time,placement"]  # columns in another order
        rows += [
            f"{int(b)},{float(t)!r},{''.join(str(int(v)) for v in p if v)}"
            for p, b, t in zip(meas.placement[sel], meas.local_bsz[sel], times[sel])
        ]
        (root / app / "placements-syn.csv").write_text("\n".join(rows) + "\n")
    return root


def test_fit_then_evaluate_round_trip(folder: Path, tmp_path: Path) -> None:
    before = {p: p.read_bytes() for p in folder.glob("*/*.csv")}
    out, rep, ev = tmp_path / "p.json", tmp_path / "r.json", tmp_path / "e.json"
    fit = ["calibrate", "--profiles", str(folder), "--gpus-per-node", "8", "--gpu-type", "v100"]
    assert main([*fit, "--cluster", "syn", "--out", str(out), "--json", str(rep)]) == 0
    prof = load_hardware(out)
    assert prof.gpu_type == "v100" and prof.gpus_per_node == 8
    report = json.loads(rep.read_text())
    assert report["rows"] == 2 * len(PLACEMENTS) * len(BATCHES)
    assert report["median_abs_rel_error"] < 0.02, report
    assert set(report["per_app"]) == {"bert", "cifar10"}
    assert (
        main(["calibrate", "--hardware", str(out), "--evaluate", str(folder), "--json", str(ev)])
        == 0
    )
    data = json.loads(ev.read_text())
    for key in (
        "median_abs_rel_error",
        "p90_abs_rel_error",
        "max_abs_rel_error",
        "rows",
        "per_app",
        "bias_by_nodes",
        "ordering",
        "ordering_same_gpus",
        "spread",
    ):
        assert key in data
    for key in ("accuracy", "ties", "pairs"):
        assert key in data["ordering"] and key in data["per_app"]["bert"]["ordering_same_gpus"]
    assert set(data["bias_by_nodes"]) == {"1", "2", "4"}
    assert data["median_abs_rel_error"] == pytest.approx(report["median_abs_rel_error"], rel=1e-9)
    assert data["per_app"]["bert"]["rows"] == len(PLACEMENTS) * len(BATCHES)
    assert {p: p.read_bytes() for p in folder.glob("*/*.csv")} == before


def test_grad_prior_inf_pins_the_zoo_sizes(folder: Path, tmp_path: Path) -> None:
    """``--grad-prior inf``: every fitted gradient size is the zoo's (bert 110 M, resnet18 11.17 M
    parameters, 4 bytes each), 3 parameters per application; the default fits 4."""
    fit = ["calibrate", "--profiles", str(folder), "--gpus-per-node", "8", "--gpu-type", "v100"]
    pinned, free = tmp_path / "pinned.json", tmp_path / "free.json"
    assert main([*fit, "--grad-prior", "inf", "--out", str(pinned)]) == 0
    assert main([*fit, "--out", str(free)]) == 0
    got = load_hardware(pinned)
    assert got.grad_bytes == {"bert": 110.0e6 * 4, "resnet18": 11.17e6 * 4}
    assert got.fit["parameters"] == 8 + 3 * 2
    assert load_hardware(free).fit["parameters"] == 8 + 4 * 2
    # --latency-overlap pins ψ (one shared parameter fewer); 0 is the model without the term.
    psi = tmp_path / "psi.json"
    assert main([*fit, "--latency-overlap", "0", "--out", str(psi)]) == 0
    assert load_hardware(psi).latency_overlap == 0.0
    assert load_hardware(psi).fit["parameters"] == 7 + 4 * 2


def test_evaluating_the_true_profile_has_no_error(folder: Path, tmp_path: Path) -> None:
    truth = tmp_path / "truth.json"
    truth.write_text(_known().to_json())
    ev = tmp_path / "e.json"
    assert (
        main(["calibrate", "--hardware", str(truth), "--evaluate", str(folder), "--json", str(ev)])
        == 0
    )
    assert json.loads(ev.read_text())["max_abs_rel_error"] < 1e-12


def test_predictions_file_has_one_row_per_measured_row(folder: Path, tmp_path: Path) -> None:
    truth = tmp_path / "truth.json"
    truth.write_text(_known().to_json())
    pred = tmp_path / "pred.csv"
    args = ["calibrate", "--hardware", str(truth), "--evaluate", str(folder)]
    assert main([*args, "--predictions", str(pred)]) == 0
    lines = pred.read_text().splitlines()
    assert lines[0] == "app,placement,local_bsz,measured_s,predicted_s"
    assert len(lines) == 1 + 2 * len(PLACEMENTS) * len(BATCHES)
    app, placement, batch, meas, got = lines[1].split(",")
    assert app == "bert" and placement in PLACEMENTS and int(batch) in BATCHES
    assert float(meas) == pytest.approx(float(got))


def test_fit_within_nodes_and_leave_one_app_out(folder: Path, tmp_path: Path) -> None:
    ev, pred = tmp_path / "w.json", tmp_path / "w.csv"
    base = ["calibrate", "--evaluate", str(folder), "--gpus-per-node", "8", "--gpu-type", "v100"]
    assert (
        main([*base, "--fit-within-nodes", "2", "--json", str(ev), "--predictions", str(pred)]) == 0
    )
    data = json.loads(ev.read_text())
    # Held out: the 4-node rows (1111, 2222, 4444) of both applications.
    assert data["rows"] == 2 * 3 * len(BATCHES) and set(data["bias_by_nodes"]) == {"4"}
    assert data["median_abs_rel_error"] < 0.05, data
    assert {row.split(",")[1] for row in pred.read_text().splitlines()[1:]} == {
        "1111",
        "2222",
        "4444",
    }
    assert data["network"] == "fitted"
    # Fitted on one node, no row crosses the network: the output says its terms are not fitted.
    one = tmp_path / "one.json"
    assert main([*base, "--fit-within-nodes", "1", "--json", str(one)]) == 0
    assert json.loads(one.read_text())["network"].startswith("not identified: no row crosses")
    lo = tmp_path / "l.json"
    assert main([*base, "--leave-one-app-out", "--json", str(lo)]) == 0
    data = json.loads(lo.read_text())
    assert set(data["per_app_left_out"]) == {"bert", "cifar10"}
    # Scored: each application's multi-GPU rows, predicted from its 1-GPU rows alone.
    assert data["rows"] == 2 * (len(PLACEMENTS) - 1) * len(BATCHES)


def test_new_app_from_its_one_gpu_rows(folder: Path, tmp_path: Path) -> None:
    truth = _known()
    only_bert = dataclasses.replace(
        truth,
        compute={"bert": truth.compute["bert"]},
        grad_bytes={"bert": truth.grad_bytes["bert"]},
    )
    src, out = tmp_path / "bert.json", tmp_path / "both.json"
    src.write_text(only_bert.to_json())
    args = ["calibrate", "--hardware", str(src), "--new-app", str(folder / "cifar10")]
    assert main([*args, "--cluster", "syn", "--out", str(out), "--grad-bytes", "4.5e7"]) == 0
    both = load_hardware(out)
    curve = both.compute["resnet18"]["v100"]
    assert curve.local_batch == tuple(float(b) for b in BATCHES)
    # The knots are the 1-GPU step times (the truth's affine curve at those batches).
    assert curve.time == pytest.approx([0.05 + 0.0002 * b for b in BATCHES], rel=1e-12)
    assert both.model_grad_bytes("resnet18") == 4.5e7
    meas = load_measurements(folder, cluster="syn", apps=["cifar10"])
    rel = np.abs(predict_step_time(both, meas) / meas.step_time - 1)
    assert rel.max() < 1e-9  # the truth's shared κ, δ: exact
    assert main([*args, "--out", str(tmp_path / "x.txt")]) == 2
    assert main(["calibrate", "--new-app", str(folder / "cifar10"), "--out", str(out)]) == 2


def test_error_report_by_hand() -> None:
    r = error_report([1.1, 0.5, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0], ["a", "a", "b", "b"])
    assert r.overall.max_abs_rel_error == pytest.approx(1.0)
    assert r.per_app["a"].median_abs_rel_error == pytest.approx(0.3)
    assert r.to_mapping()["per_app"]["b"] == {
        "median_abs_rel_error": pytest.approx(0.5),
        "p90_abs_rel_error": pytest.approx(0.9),
        "rows": 2,
    }


def _one_line(err: str, *needles: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)


@pytest.mark.parametrize(
    ("bad_row", "needles"),
    [
        ("2a2,8,1.0", ("placements-syn.csv:3", "placement")),
        ("22,8,-1.0", ("placements-syn.csv:3", "step_time")),
        ("22,eight,1.0", ("placements-syn.csv:3", "local_bsz")),
        ("22,8", ("placements-syn.csv:3",)),
    ],
)
def test_malformed_rows_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad_row: str, needles: tuple[str, ...]
) -> None:
    root = tmp_path / "m"
    (root / "bert").mkdir(parents=True)
    text = "placement,local_bsz,step_time\n1,8,0.5\n" + bad_row + "\n"
    (root / "bert" / "placements-syn.csv").write_text(text)
    out = tmp_path / "p.json"
    args = ["calibrate", "--profiles", str(root), "--gpus-per-node", "8", "--out", str(out)]
    assert main(args) == 2
    _one_line(capsys.readouterr().err, *needles)
    assert not out.exists()


def test_fuzzed_files_never_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    good = "placement,local_bsz,step_time\n" + "".join(
        f"{p},16,0.{i + 1}\n" for i, p in enumerate(PLACEMENTS)
    )
    for trial in range(12):
        data = bytearray(good.encode())
        for _ in range(int(rng.integers(1, 6))):
            data[int(rng.integers(len(data)))] = int(rng.integers(0, 256))
        root = tmp_path / f"f{trial}"
        (root / "bert").mkdir(parents=True)
        (root / "bert" / "placements.csv").write_bytes(bytes(data))
        hw = ["calibrate", "--hardware", "azure-v100", "--evaluate", str(root)]
        code = main(hw)
        err = capsys.readouterr().err
        assert code in (0, 2), err
        if code == 2:
            _one_line(err)


def test_option_errors(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = next(folder.glob("bert/*.csv"))
    base = ["calibrate", "--profiles", str(folder), "--gpus-per-node", "8"]
    cases = [
        ([*base, "--out", str(csv)], "--profiles needs --out PROFILE.json"),
        ([*base, "--out", str(tmp_path / "p.json"), "--json", str(csv)], "is an input"),
        (
            ["calibrate", "--profiles", str(folder), "--out", str(tmp_path / "p.json")],
            "--gpus-per-node",
        ),
        ([*base, "--out", str(tmp_path / "p.json"), "--write"], "--write cannot be combined"),
        ([*base, "--out", str(tmp_path / "p.json"), "--app-map", "bert"], "APP=MODEL"),
        ([*base, "--out", str(tmp_path / "p.json"), "--app-map", "bert=nomodel"], "not a model"),
        (["calibrate", "--evaluate", str(folder)], "go together"),
        (["calibrate", "--out", str(tmp_path / "p.json")], "--out needs --profiles"),
        (["calibrate", "--grad-prior", "inf"], "--grad-prior needs --profiles"),
        (["calibrate", "--latency-overlap", "0.5"], "--latency-overlap needs --profiles"),
        (["calibrate", "--hardware", "nope", "--evaluate", str(folder)], "unknown hardware"),
        (["calibrate", "--evaluate", str(folder), "--fit-within-nodes", "2"], "--gpus-per-node"),
        (
            [
                "calibrate",
                "--evaluate",
                str(folder),
                "--gpus-per-node",
                "8",
                "--fit-within-nodes",
                "4",
            ],
            "nothing is held out",
        ),
        (
            [
                "calibrate",
                "--hardware",
                "azure-v100",
                "--evaluate",
                str(folder),
                "--leave-one-app-out",
            ],
            "--hardware cannot be combined with --leave-one-app-out",
        ),
        (
            [
                "calibrate",
                "--evaluate",
                str(folder),
                "--gpus-per-node",
                "8",
                "--leave-one-app-out",
                "--fit-within-nodes",
                "1",
            ],
            "give one",
        ),
        (["calibrate", "--predictions", str(tmp_path / "p.csv")], "--predictions needs --profiles"),
        (
            [
                "calibrate",
                "--hardware",
                "azure-v100",
                "--new-app",
                str(tmp_path / "nope"),
                "--out",
                str(tmp_path / "p.json"),
            ],
            "not a folder",
        ),
    ]
    for args, needle in cases:
        assert main(args) == 2, args
        _one_line(capsys.readouterr().err, needle)
    with pytest.raises(SystemExit) as exc:  # argparse's own refusal of the value
        main([*base, "--out", str(tmp_path / "p.json"), "--grad-prior", "-1"])
    assert exc.value.code == 2
    _one_line(capsys.readouterr().err, "argument --grad-prior: expected a finite number >= 0")
    with pytest.raises(SystemExit) as exc:
        main([*base, "--out", str(tmp_path / "p.json"), "--latency-overlap", "2"])
    assert exc.value.code == 2
    _one_line(capsys.readouterr().err, "argument --latency-overlap: expected a number in [0, 1]")
    (folder / "mystery").mkdir()
    (folder / "mystery" / "placements-syn.csv").write_text("placement,local_bsz,step_time\n1,8,1\n")
    assert main([*base, "--out", str(tmp_path / "p.json")]) == 2
    _one_line(capsys.readouterr().err, "'mystery' is not mapped")


def test_chronus_marks_are_honest() -> None:
    from crop_gym.calibration import fit_all
    from crop_gym.calibration_cli import CHRONUS_TOLERANCE, format_result

    text = format_result(fit_all(("hierarchical",))["hierarchical"])
    assert f"within {CHRONUS_TOLERANCE:g}" in text
    for line in text.splitlines():
        if line.rstrip().endswith("[ok]"):
            pairs = re.findall(r"s=\d+: ([\d.]+) vs ([\d.]+)", line)
            assert pairs and all(abs(float(p) - float(m)) <= CHRONUS_TOLERANCE for p, m in pairs)
    assert "off by" in text  # the shipped calibration is far off on some (issue 12)


def test_new_app_needs_two_one_gpu_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = tmp_path / "m" / "bert"
    app.mkdir(parents=True)
    (app / "placements-syn.csv").write_text("placement,local_bsz,step_time\n1,8,0.5\n11,8,0.7\n")
    args = ["calibrate", "--hardware", "azure-v100", "--new-app", str(app)]
    assert main([*args, "--out", str(tmp_path / "p.json")]) == 2
    _one_line(capsys.readouterr().err, "placements-syn.csv", "1 1-GPU local batch")
    assert not (tmp_path / "p.json").exists()
