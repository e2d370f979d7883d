"""Tests of ``crop-gym simulate``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from crop_gym.cli import main
from crop_gym.sim_cli import default_cluster

REQUIRED_KEYS = (
    "mean_jct_s",
    "p95_jct_s",
    "makespan_s",
    "mean_utilization",
    "mean_effective_gpus",
    "comm_overhead",
    "jobs_completed",
)


def test_simulate_writes_json_csv_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    js, cs, png = tmp_path / "m.json", tmp_path / "r.csv", tmp_path / "p.png"
    rc = main(
        [
            "simulate",
            "--trace",
            "elasticflow:cluster10",
            "--jobs",
            "25",
            "--policy",
            "crop",
            "--abnormal",
            "mild",
            "--seed",
            "1",
            "--checkpoint-interval",
            "600",
            "--json",
            str(js),
            "--csv",
            str(cs),
            "--plot",
            str(png),
            "--no-progress",
        ]
    )
    assert rc == 0
    data = json.loads(js.read_text())
    for key in REQUIRED_KEYS:
        assert key in data, key
    assert data["jobs_completed"] == 25
    assert data["cluster"] == "n32g8"  # ElasticFlow's size for cluster10
    assert data["policy"] == "crop" and data["profile"] == "mild" and data["seed"] == 1
    rows = list(csv.DictReader(cs.open()))
    assert len(rows) == 25 and float(rows[0]["jct_s"]) > 0
    assert png.stat().st_size > 1000
    out = capsys.readouterr().out
    assert "JCT" in out and "wrote" in out


def test_simulate_refuses_oversized_jobs_with_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "simulate",
        "--trace",
        "elasticflow:cluster10",
        "--cluster",
        "testbed-8",
        "--jobs",
        "40",
    ]
    rc = main([*args, "--policy", "first-fit", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "more GPUs than the cluster testbed-8 has (8)" in err and "--skip-oversized" in err
    js = tmp_path / "m.json"
    rc = main(
        [*args, "--policy", "first-fit", "--no-progress", "--skip-oversized", "--json", str(js)]
    )
    assert rc == 0
    data = json.loads(js.read_text())
    assert data["jobs_skipped"] > 0
    assert data["jobs_total"] + data["jobs_skipped"] == 40
    assert "skipping" in capsys.readouterr().out


def test_simulate_rejects_unknown_policy(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", "--trace", "elasticflow:cluster10", "--policy", "nope", "--no-progress"])
    assert rc == 2
    assert "unknown policy" in capsys.readouterr().err


def test_default_clusters_follow_elasticflow() -> None:
    assert default_cluster("elasticflow:cluster10") == "n32g8"
    assert default_cluster("cluster04") == "n128g8"
    assert default_cluster("elasticflow:cluster01") == "n64g8"
