"""Smoke test of the environment benchmark: it must keep running as the code moves.

The benchmark scripts print figures and assert nothing about speed; this only checks that
``benchmarks/bench_envs.py`` (which wraps internal functions to split the step time) still runs
end to end on a couple of environments and prints its table.
"""

from __future__ import annotations

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
