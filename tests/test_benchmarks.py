"""Smoke tests of the benchmarks: they must keep running as the code moves.

The benchmark scripts print figures and assert nothing about speed; these only check that each
runs end to end on small inputs and prints (and writes) its table: ``bench_envs.py`` (which wraps
internal functions to split the step time), ``step_path_lines.py``, ``bench_vector.py`` and
``bench_env_axis.py``, ``bench_training_share.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/<script>`` with ``args`` from the repository root."""
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_bench_envs_runs() -> None:
    ids = ["crop_gym/Placement-Testbed8-v0", "crop_gym/PlacementGPU-Testbed8-v0"]
    out = _run("bench_envs.py", "--steps", "60", "--cartpole-seconds", "0.05", "--ids", *ids)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "crop_gym/Placement-Testbed8-v0" in out.stdout
    assert "step time: add / candidates / env" in out.stdout


def test_step_path_lines_lists_the_step_modules() -> None:
    """The step-path census finds the modules ``env.step`` runs (and no gymnasium or numpy)."""
    out = _run("step_path_lines.py", "--steps", "20")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines()]
    # Step modules: lines, lines of the functions that ran, path; compiled inputs: lines, path.
    step = {
        r[2]: (int(r[0]), int(r[1])) for r in rows if len(r) == 3 and r[2].startswith("crop_gym/")
    }
    inputs = [r[1] for r in rows if "(compiled" in r]
    for module in (
        "crop_gym/envs/placement.py",
        "crop_gym/model/state.py",
        "crop_gym/model/candidates.py",
    ):
        assert module in step
    assert "crop_gym/model/topology.py" in inputs
    assert "crop_gym/envs/render.py" not in step  # rendering is not on the step path
    assert all(0 < ran < n for n, ran in step.values())  # some of each module ran, not all
    total = next(r for r in rows if "total," in r)
    assert int(total[0]) == sum(n for n, _ in step.values())
    assert int(total[1]) == sum(ran for _, ran in step.values())


def test_bench_vector_runs(tmp_path: Path) -> None:
    """The vector benchmark prints its table (single, sync, vector rows) and writes its JSON."""
    out_json = tmp_path / "rows.json"
    args = ["--ids", "crop_gym/Placement-Testbed8-v0", "--num-envs", "3", "--steps", "12"]
    out = _run("bench_vector.py", *args, "--json", str(out_json))
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out_json.read_text())
    kinds = {(r["id"], r["kind"]) for r in rows}
    for env_id in ("CartPole-v1", "crop_gym/Placement-Testbed8-v0"):
        assert {(env_id, k) for k in ("single", "sync", "vector")} <= kinds
    assert all(r["rate"] > 0 for r in rows)
    # Step-only rates (resets outside the timed steps) for every placement row and single CartPole.
    alone = {(r["id"], r["kind"]) for r in rows if r["rate_step_only"] is not None}
    assert alone == {("CartPole-v1", "single")} | {
        ("crop_gym/Placement-Testbed8-v0", k) for k in ("single", "sync", "vector")
    }
    assert all(r["rate_step_only"] > 0 for r in rows if r["rate_step_only"] is not None)
    assert "crop_gym/Placement-Testbed8-v0" in out.stdout


def test_bench_env_axis_runs(tmp_path: Path) -> None:
    """The environment-axis premise benchmark prints both ways per N and writes its JSON; bad
    arguments get one line and exit 2."""
    out_json = tmp_path / "axis.json"
    args = ["--scenario", "testbed-8", "--num-envs", "2", "3", "--repeat", "3"]
    out = _run("bench_env_axis.py", *args, "--json", str(out_json))
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out_json.read_text())
    assert [r["num_envs"] for r in rows] == [2, 3]
    for r in rows:
        assert r["rows"] > 0
        assert all(r[k] > 0 for k in r if k.endswith("_us"))
    bad = _run("bench_env_axis.py", "--num-envs", "0", timeout=60)
    assert bad.returncode == 2 and "must be >= 1" in bad.stderr
    bad = _run("bench_env_axis.py", "--scenario", "no-such-scenario", timeout=60)
    assert bad.returncode == 2 and "unknown scenario" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_bench_checkouts_runs(tmp_path: Path) -> None:
    """The before/after benchmark measures two checkouts alternately (here this one twice) and
    writes its JSON; a path that is not a checkout, or a bad ``--ids``, gets one line."""
    out_json = tmp_path / "checkouts.json"
    args = ["--other", str(ROOT), "--rounds", "1", "--cartpole-seconds", "0.05"]
    out = _run(
        "bench_checkouts.py",
        *args,
        "--ids",
        "crop_gym/Placement-Testbed8-v0:30",
        "--json",
        str(out_json),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out_json.read_text())
    assert [r["checkout"] for r in rows] == ["other", "this"]
    assert all(r["step_per_s"] > 0 and r["x_cartpole"] > 0 for r in rows)
    bad = _run("bench_checkouts.py", "--other", str(tmp_path), timeout=60)
    assert bad.returncode != 0 and "not a crop_gym checkout" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    bad = _run(
        "bench_checkouts.py", "--other", str(ROOT), "--ids", "crop_gym/Placement-v0", timeout=60
    )
    assert bad.returncode != 0 and "expected ID:STEPS" in bad.stderr


def test_bench_training_share_runs(tmp_path: Path) -> None:
    """The training-share benchmark trains a few steps both ways and writes its row."""
    pytest.importorskip("sb3_contrib")
    for kind in ("dummy", "batched"):
        out_json = tmp_path / f"{kind}.json"
        args = ("--steps", "64", "--n-envs", "2", "--vec-env", kind, "--json", str(out_json))
        out = _run("bench_training_share.py", *args)
        assert out.returncode == 0, out.stderr[-2000:]
        assert f"2 env(s) {kind}" in out.stdout
        (row,) = json.loads(out_json.read_text())
        assert row["steps"] >= 64 and 0.0 < row["env_share"] < 1.0
    bad = _run("bench_training_share.py", "--n-envs", "0")
    assert bad.returncode == 2 and "--n-envs 0: must be in [1, 64]" in bad.stderr
