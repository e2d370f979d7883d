"""Issue 30, item 9: ``crop-gym --version``, and ``--quiet`` on every command.

``--quiet`` (``-q``) prints nothing but errors and warnings: no report, no progress bar. The files
the options name, and ``-`` outputs (``--json -``), are still written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import crop_gym
from crop_gym.cli import build_parser, main

EF = (
    "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration",
    "a,1000,500,resnet50,2000,64,2,700",
    "b,1010,800,bert,3000,128,8,900",
)


def test_version_is_the_package_version() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from crop_gym.cli import main; sys.exit(main())",
            "--version",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == f"crop-gym {crop_gym.__version__}"


def test_every_command_takes_quiet() -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # (argparse has no public accessor)
    assert {"compare", "calibrate", "trace", "simulate", "study"} <= set(commands)
    for name, command in commands.items():
        assert "--quiet" in command.format_help() and "-q" in command.format_help(), name


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("\n".join(EF) + "\n")
    return path


QUIET_RUNS = {
    "trace": "trace {T} --json {O}",
    "trace-list": "trace --list",
    "simulate": "simulate --trace {T} --cluster testbed-8 --json {O}",
    "compare": "compare --scenario testbed-8 --seeds 1 --policies first-fit --json {O}",
    "calibrate": "calibrate --allreduce ring --json {O}",
    "study": "study --traces {T} --cluster testbed-8 --policies first-fit --seeds 3 --workers 1 "
    "--no-plot --out {D} --json {O}",
}


@pytest.mark.parametrize("flag", ["--quiet", "-q"])
@pytest.mark.parametrize("command", sorted(QUIET_RUNS))
def test_quiet_prints_nothing_and_still_writes(
    command: str, flag: str, trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o.json"
    line = QUIET_RUNS[command].format(T=trace, O=out, D=tmp_path / "study")
    argv = line.split()
    assert main([*argv, flag]) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err == "", printed
    if "{O}" in QUIET_RUNS[command]:
        json.loads(out.read_text())
    assert main(argv) == 0  # and without it, the report
    assert capsys.readouterr().out != ""


def test_quiet_keeps_json_on_stdout_and_warnings(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["study", "--traces", str(trace), "--cluster", "testbed-8", "--policies", "first-fit"]
    argv += ["--seeds", "1", "--workers", "1", "--no-plot", "--out", str(trace.parent / "s")]
    assert main([*argv, "--json", "-", "-q"]) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out)["settings"]
    assert printed.err.startswith("crop-gym study: warning:") and printed.err.count("\n") == 1


@pytest.mark.rl
def test_eval_and_train_dry_run_are_quiet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("sb3_contrib")
    out = tmp_path / "e.json"
    argv = ["eval", "--episodes", "1", "--baselines", "crop", "--seed", "1000000000"]
    assert main([*argv, "--json", str(out), "-q"]) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err == "", printed
    assert json.loads(out.read_text())["episodes"] == 1
    assert main(["train", "--dry-run", "--out", str(tmp_path / "r"), "-q"]) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err == "", printed
