"""Smoke test of the environment benchmark: it must keep running as the code moves.

The benchmark scripts print figures and assert nothing about speed; this only checks that
``benchmarks/bench_envs.py`` (which wraps internal functions to split the step time) still runs
end to end on a couple of environments and prints its table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_envs_runs() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_envs.py"),
            "--steps",
            "60",
            "--cartpole-seconds",
            "0.05",
            "--ids",
            "crop_gym/Placement-Testbed8-v0",
            "crop_gym/PlacementGPU-Testbed8-v0",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "crop_gym/Placement-Testbed8-v0" in out.stdout
    assert "step time: add / candidates / env" in out.stdout


def test_step_path_lines_lists_the_step_modules() -> None:
    """The step-path census finds the modules ``env.step`` runs (and no gymnasium or numpy)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "step_path_lines.py"), "--steps", "20"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    listed = [line.split()[1] for line in out.stdout.splitlines() if "crop_gym/" in line.split()[1]]
    for module in (
        "crop_gym/envs/placement.py",
        "crop_gym/model/state.py",
        "crop_gym/candidates.py",
    ):
        assert module in listed
    assert "crop_gym/envs/render.py" not in listed  # rendering is not on the step path
    total = next(line for line in out.stdout.splitlines() if "total, step path" in line)
    counted = [line for line in out.stdout.splitlines() if "compiled input" not in line]
    assert int(total.split()[0]) == sum(
        int(line.split()[0]) for line in counted if line.split()[1].startswith("crop_gym/")
    )


def test_bench_vector_runs(tmp_path: Path) -> None:
    """The vector benchmark prints its table (single, sync, vector rows) and writes its JSON."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out_json = tmp_path / "rows.json"
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_vector.py"),
            "--ids",
            "crop_gym/Placement-Testbed8-v0",
            "--num-envs",
            "3",
            "--steps",
            "12",
            "--json",
            str(out_json),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out_json.read_text())
    kinds = {(r["id"], r["kind"]) for r in rows}
    for env_id in ("CartPole-v1", "crop_gym/Placement-Testbed8-v0"):
        assert {(env_id, k) for k in ("single", "sync", "vector")} <= kinds
    assert all(r["rate"] > 0 for r in rows)
    assert "crop_gym/Placement-Testbed8-v0" in out.stdout
