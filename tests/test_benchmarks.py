"""Smoke tests of the benchmarks: they must keep running as the code moves.

The benchmark scripts print figures and assert nothing about speed; these only check that each
runs end to end on small inputs, prints (and writes) its table, and refuses bad arguments with one
line and exit status 2: ``bench_envs.py`` (compiled and reference paths), ``bench_kernels.py``,
``bench_vector.py``, ``bench_checkouts.py``, ``bench_training_share.py``.
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


def _one_line_error(out: subprocess.CompletedProcess[str], text: str) -> None:
    assert out.returncode == 2, out.stderr[-2000:]
    assert text in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_bench_envs_runs(tmp_path: Path) -> None:
    """The env benchmark measures each ID on both paths (the reference in a subprocess) and
    writes its rows."""
    out_json = tmp_path / "envs.json"
    ids = ["crop_gym/Placement-Testbed8-v0", "crop_gym/PlacementGPU-Testbed8-v0"]
    args = ["--steps", "40", "--cartpole-seconds", "0.05", "--json", str(out_json), "--ids"]
    out = _run("bench_envs.py", *args, *ids)
    assert out.returncode == 0, out.stderr[-2000:]
    assert all(i in out.stdout for i in ids) and "x ref" in out.stdout
    rows = json.loads(out_json.read_text())
    assert [r["id"] for r in rows] == ids
    for r in rows:
        for key in ("step_per_s", "best_per_s", "e2e_per_s", "x_cartpole", "ref_step_per_s"):
            assert r[key] > 0, key
        assert r["reset_ms"] > 0 and r["peak_mib"] > 0
        assert r["x_ref"] == pytest.approx(r["step_per_s"] / r["ref_step_per_s"])
    _one_line_error(_run("bench_envs.py", "--steps", "0", timeout=60), "--steps 0: must be >= 1")
    _one_line_error(
        _run("bench_envs.py", "--ids", "crop_gym/NoSuch-v0", timeout=60), "unknown environment ID"
    )


def test_bench_kernels_runs(tmp_path: Path) -> None:
    """The kernel benchmark prints every section and writes them; memo counts add up."""
    pytest.importorskip("numba")
    out_json = tmp_path / "kernels.json"
    args = ["--repeat", "1", "--rounds", "1", "--calls", "2", "--call-steps", "5"]
    out = _run("bench_kernels.py", *args, "--memo-steps", "25", "--json", str(out_json))
    assert out.returncode == 0, out.stderr[-2000:]
    for text in ("import crop_gym", "per kernel", "calls per env.step", "memo hit rates"):
        assert text in out.stdout, text
    (payload,) = json.loads(out_json.read_text())
    assert payload["import"]["numba_imported_by_crop_gym"] is False
    assert len(payload["kernels"]) == 7
    assert all(r["compiled_us"] > 0 and r["reference_us"] > 0 for r in payload["kernels"])
    assert {r["path"] for r in payload["calls"]} == {"numba", "numpy"}
    memos = payload["memos"]
    assert [(m["id"], m["crop_every"]) for m in memos] == [
        ("crop_gym/Placement-v0", 0),
        ("crop_gym/Placement-v0", 10),
        ("crop_gym/OnlinePlacement-v1", 0),
        ("crop_gym/OnlinePlacement-v1", 10),
    ]
    for m in memos:
        assert m["facts_hits"] >= 0 and m["facts_misses"] >= 0 and m["conditions"] >= 1
        assert 0 <= m["pool_new"] <= m["pool_asked"]
        # Every step looks up the job class of the jobs it places: the memo is asked.
        assert m["job_class_hits"] + m["job_class_misses"] > 0
        assert 0 <= m["job_class_hit_rate"] <= 1
        assert (m["pool_asked"] > 0) == (m["crop_every"] > 0)
    _one_line_error(_run("bench_kernels.py", "--rounds", "0", timeout=60), "--rounds 0")


def test_bench_vector_runs(tmp_path: Path) -> None:
    """The vector benchmark prints its table (single, sync, vector rows) and writes its JSON."""
    out_json = tmp_path / "rows.json"
    args = ["--ids", "crop_gym/Placement-Testbed8-v0", "--num-envs", "1", "3", "--steps", "12"]
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
    _one_line_error(_run("bench_vector.py", "--num-envs", "0", timeout=60), "--num-envs 0")
    _one_line_error(
        _run("bench_vector.py", "--ids", "crop_gym/PlacementGPU-v0", timeout=60),
        "no vector entry point",
    )


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
