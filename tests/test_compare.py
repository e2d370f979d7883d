"""``crop-gym compare``: the table, the JSON shape, the plot, --exact and its refusal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from crop_gym.baselines.compare import DEFAULT_POLICIES, METRICS, format_table, run_compare, to_json
from crop_gym.cli import main
from crop_gym.errors import ConfigError

KEYS = {"F", "jobs_placed", "comm_overhead", "utilization", "solve_time_s"}


def test_cli_default_scenario_json_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, fig = tmp_path / "r.json", tmp_path / "r.png"
    rc = main(
        [
            "compare",
            "--seeds",
            "2",
            "--first-seed",
            "5",
            "--json",
            str(out),
            "--plot",
            str(fig),
            "--no-progress",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert (
        "scenario 'default' (leafspine-64, mild abnormalities, 16 pending jobs), 2 seeds (5..6)"
        in text
    )
    for name in DEFAULT_POLICIES:
        assert f"\n{name} " in text
    data = json.loads(out.read_text())
    assert set(data) >= {"policies", "optimum"}
    assert data["optimum"] is None
    assert data["seeds"] == [5, 6] and data["scenario"] == "default"
    assert list(data["policies"]) == list(DEFAULT_POLICIES)
    for runs in data["policies"].values():
        assert set(runs) >= KEYS
        assert all(len(v) == 2 for v in runs.values())
    assert fig.read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary file


def test_cli_exact_on_testbed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "e.json"
    rc = main(
        [
            "compare",
            "--scenario",
            "testbed-8",
            "--seeds",
            "3",
            "--exact",
            "--policies",
            "crop,first-fit",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "F/opt" in text and "optimum (all)" in text and "min-comm MILP" in text
    data = json.loads(out.read_text())
    assert set(data["optimum"]) >= KEYS and len(data["optimum"]["F"]) == 3
    for name in ("crop", "first-fit"):
        assert all(
            f <= o + 1e-9
            for f, o in zip(data["policies"][name]["F"], data["optimum"]["F"], strict=True)
        )
    assert data["optimum_space"] == "all"


def test_cli_exact_refuses_large_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["compare", "--exact", "--seeds", "1"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "too large for the exact solver" in err and "limit 10^" in err and "testbed-8" in err


def test_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--policies", "crop,nope", "--seeds", "1"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--seeds", "0"])
    assert exc.value.code == 2
    assert "--seeds: expected an integer >= 1, got 0" in capsys.readouterr().err
    assert main(["compare", "--scenario", "no-such-scenario"]) == 2
    assert "unknown scenario" in capsys.readouterr().err


def test_same_instance_for_every_policy_and_reproducible() -> None:
    a = run_compare("testbed-8", seeds=2, policies=["crop", "random"], progress=False)
    b = run_compare("testbed-8", seeds=2, policies=["crop", "random"], progress=False)
    ja, jb = to_json(a), to_json(b)
    for name in ("crop", "random"):
        assert ja["policies"][name]["F"] == jb["policies"][name]["F"]
    # F counts background jobs; gain = F - initial F.
    for name, runs in a.policies.items():
        assert np.allclose(np.subtract(runs.F, a.initial_F), runs.gain), name
    table = format_table(a)
    assert "F/CROP" in table and "1.000" in table
    assert set(METRICS) >= KEYS


def test_scenario_file_and_bad_arguments(tmp_path: Path) -> None:
    f = tmp_path / "sc.json"
    f.write_text(
        json.dumps(
            {
                "name": "mini",
                "cluster": "testbed-8",
                "abnormal": "severe",
                "workload": "elasticflow:195job",
                "queue_size": 3,
                "background_load": 0.0,
                "max_job_gpus": 4,
            }
        )
    )
    r = run_compare(str(f), seeds=1, policies=["crop"], progress=False)
    assert r.scenario.name == "mini" and len(r.policies["crop"].F) == 1
    with pytest.raises(ConfigError, match="twice"):
        run_compare("testbed-8", seeds=1, policies=["crop", "crop"])
