"""Issue 30, class 7: ``crop-gym study`` cleans up.

A driver that gets a signal that ends it (SIGTERM, SIGHUP, and SIGKILL, which no handler sees)
leaves no worker process running, local or Ray, and running the same command again resumes: the
runs finished before the signal are not run again.

Each case starts a real ``crop-gym study`` with two workers on a grid of a fast run and a slow one,
waits for the fast run's record, signals the driver while the slow run is in flight, and then
watches every process the driver had started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.slow

#: A grid of two runs: first-fit (seconds) and CROP (half a minute) on 600 jobs of cluster04.
GRID = [
    "--traces", "elasticflow:cluster04", "--jobs", "600", "--cluster", "n64g8",
    "--policies", "first-fit,crop", "--abnormal", "severe", "--seeds", "1",
    "--no-progress", "--no-plot",
]  # fmt: skip
CROP_GYM = [sys.executable, "-c", "import sys; from crop_gym.cli import main; sys.exit(main())"]


ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ, RAY_AUTH_MODE="disabled")  # no token written to ~/.ray
    # The policy registry still finds CROP and the baselines through a top-level ``baselines``
    # module name, which only resolves from the repository's root (test_study_workers_find_...
    # below): give the workers that path, so that these tests see signals, not that.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _start(out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CROP_GYM, "study", *GRID, "--out", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        start_new_session=True,  # its own process group: the test's Ctrl-C stays out of it
    )


def _wait_for_record(out: Path, proc: subprocess.Popen[str], timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list((out / "runs").glob("*.json")):
            return
        if proc.poll() is not None:
            pytest.fail(f"the study ended before its first record: {proc.communicate()}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail("no record within the time allowed")


def _alive(procs: list[object]) -> list[object]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:  # type: ignore[attr-defined]
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _signal_and_watch(proc: subprocess.Popen[str], sig: int) -> list[object]:
    """Send ``sig`` to the driver; return the descendants still alive 10 s after it exited."""
    descendants = psutil.Process(proc.pid).children(recursive=True)
    assert descendants, "the study started no worker process"
    os.kill(proc.pid, sig)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the driver did not end within 60 s of {signal.Signals(sig).name}")
    deadline = time.monotonic() + 10
    while _alive(descendants) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _alive(descendants)
    for p in left:  # never leave them behind, whatever the verdict
        p.kill()  # type: ignore[attr-defined]
    return left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_driver_stops_its_workers_and_a_rerun_resumes(
    sig: int, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = _start(out, "--workers", "2")
    _wait_for_record(out, proc)
    left = _signal_and_watch(proc, sig)
    assert not left, f"worker processes outlived the driver: {left}"
    assert proc.returncode == 128 + sig
    err = proc.stderr.read() if proc.stderr else ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and signal.Signals(sig).name in lines[0] and "resume" in lines[0], err
    if sig == signal.SIGTERM:
        finished = len(list((out / "runs").glob("*.json")))
        rerun = subprocess.run(
            [*CROP_GYM, "study", *GRID, "--out", str(out), "--workers", "2"],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=600,
        )
        assert rerun.returncode == 0, rerun.stderr
        assert f"{finished} already finished" in rerun.stdout, rerun.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal")
def test_workers_die_with_a_killed_driver(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _start(out, "--workers", "2")
    _wait_for_record(out, proc)
    left = _signal_and_watch(proc, signal.SIGKILL)
    assert not left, f"worker processes outlived the killed driver: {left}"


@pytest.mark.skipif(shutil.which("ray") is None, reason="needs the cluster extra (Ray)")
def test_sigterm_to_a_ray_driver_leaves_no_ray_process(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "out"
    proc = _start(out, "--backend", "ray", "--workers", "2")
    _wait_for_record(out, proc, timeout=400)
    left = _signal_and_watch(proc, signal.SIGTERM)
    assert not left, f"Ray processes outlived the driver: {[p.name() for p in left]}"  # type: ignore[attr-defined]
    assert proc.returncode == 128 + signal.SIGTERM


def test_study_workers_find_the_policies_outside_the_repository(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; from crop_gym.cli import main; sys.exit(main())",
         "study", "--traces", "elasticflow:195job", "--jobs", "10", "--cluster", "n32g8",
         "--policies", "first-fit", "--seeds", "2", "--no-progress", "--no-plot",
         "--out", str(tmp_path / "out"), "--workers", "2"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
