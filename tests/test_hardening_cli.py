"""Hardening of the non-agent commands: outputs never destroy inputs, one-line errors, Ctrl-C,
``--json -``, CR-only traces and the policy registry's rules (tests/test_plugins.py: how the
registry and the commands find their providers, and the layering)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from helpers import null_device

import crop_gym
from crop_gym.cli import main, run_cli, write_outputs
from crop_gym.errors import ConfigError
from crop_gym.policy import make_policy, policy_names, register_policy, unregister_policy

EF_HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration"
EF_ROWS = (
    "a,1000,500,resnet50,2000,64,2,700",
    "b,1010,800,bert,3000,128,8,900",
    "c,1005,300,vgg16,1600,256,1,650",
)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("\n".join((EF_HEADER, *EF_ROWS)) + "\n")
    return path


def _sim(trace: Path, *extra: str) -> list[str]:
    return ["simulate", "--trace", str(trace), "--cluster", "testbed-8", "--no-progress", *extra]


def _one_error_line(err: str, *needles: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert ": error: " in err
    for needle in needles:
        assert needle in err, (needle, err)


# --------------------------------------------------------------------------- outputs vs inputs
def test_json_equal_to_the_trace_is_refused_and_the_trace_kept(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = trace.read_bytes()
    assert main(_sim(trace, "--json", str(trace))) == 2
    _one_error_line(capsys.readouterr().err, f"--json {trace}", "is an input")
    assert main(["trace", str(trace), "--json", str(trace)]) == 2
    _one_error_line(capsys.readouterr().err, "is an input")
    assert trace.read_bytes() == before


def test_json_equal_to_csv_is_refused(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o.txt"
    assert main(_sim(trace, "--json", str(out), "--csv", str(out))) == 2
    _one_error_line(capsys.readouterr().err, f"--csv {out}", "also the output of --json")
    assert not out.exists()


def test_special_outputs_are_never_replaced(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "target.json"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    null = null_device(tmp_path)
    for path, needle in (
        (link, "symbolic link"),
        (fifo, "not a regular file"),
        (null, "not a regular file"),
        (tmp_path, "is a directory"),
        (tmp_path / "missing" / "o.json", "does not exist"),
    ):
        assert main(_sim(trace, "--json", str(path))) == 2
        _one_error_line(capsys.readouterr().err, f"--json {path}", needle)
    assert link.is_symlink() and not target.exists()
    assert fifo.is_fifo()
    assert null.is_char_device()


def test_calibrate_outputs_never_replace_the_package_data(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = Path(crop_gym.__file__).parent / "data"
    for path in (data / "calibration.json", data / "chronus" / "model_info.json"):
        assert main(["calibrate", "--json", str(path)]) == 2
        _one_error_line(capsys.readouterr().err, "is an input")


def test_compare_refuses_json_over_the_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = tmp_path / "sc.toml"
    sc.write_text('name = "mini"\ncluster = "testbed-8"\nqueue_size = 2\n')
    assert main(["compare", "--scenario", str(sc), "--json", str(sc)]) == 2
    _one_error_line(capsys.readouterr().err, "is an input")
    assert "mini" in sc.read_text()


def test_json_to_stdout_puts_the_report_on_stderr(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_sim(trace, "--json", "-")) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["jobs_completed"] == 3
    assert "JCT" in cap.err
    assert main(["trace", str(trace), "--json", "-"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["jobs"] == 3 and "GPUs/job" in cap.err


# --------------------------------------------------------------------------- errors and Ctrl-C
def test_unknown_names_list_the_known_ones(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_sim(trace, "--policy", "nope")) == 2
    _one_error_line(capsys.readouterr().err, "unknown policy 'nope'", "first-fit")
    assert main(["compare", "--scenario", "nope"]) == 2
    _one_error_line(capsys.readouterr().err, "unknown scenario 'nope'", "testbed-8")


def test_argument_errors_are_one_line(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        _sim(trace, "--max-hours", "1e400"),
        _sim(trace, "--seed", "-1"),
        ["compare", "--seeds", "0"],
        ["calibrate", "--min-latency-ratio", "nan"],
        ["simulate", "--bogus"],
        [],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        _one_error_line(capsys.readouterr().err, "--help")


def test_scenario_file_errors_name_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe")
    assert main(["compare", "--scenario", str(bad)]) == 2
    _one_error_line(capsys.readouterr().err, f"{bad}: not UTF-8")
    assert main(["compare", "--scenario", str(tmp_path)]) == 2
    _one_error_line(capsys.readouterr().err, "is a directory")


def test_calibrate_ratio_beyond_the_fitted_range_is_a_config_error() -> None:
    from crop_gym.calibration import fit_all

    with pytest.raises(ConfigError, match=r"min_latency_ratio=1e\+300 must be a ratio in \[0, "):
        fit_all(("ring",), min_latency_ratio=1e300)


def test_ctrl_c_is_one_line_130_and_no_output(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from crop_gym.sim import Simulator

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Simulator, "run", interrupted)
    js = tmp_path / "o.json"
    assert main(_sim(trace, "--json", str(js))) == 130
    assert capsys.readouterr().err == "crop-gym simulate: interrupted\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_write_outputs_is_all_or_none(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.csv"
    first.write_text("old")

    def interrupted(path: Path) -> None:
        path.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_outputs({str(first): lambda p: p.write_text("new"), str(second): interrupted})
    assert first.read_text() == "old" and not second.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]  # no temporary left
    assert write_outputs({str(first): lambda p: p.write_text("new")}) == [str(first)]
    assert first.read_text() == "new"


def test_run_cli_maps_user_errors_and_keeps_bugs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def raise_(exc: BaseException) -> int:
        raise exc

    assert run_cli(lambda: raise_(ConfigError("bad\nvalue")), "p") == 2
    assert capsys.readouterr().err == "p: error: bad; value\n"
    assert (
        run_cli(lambda: raise_(FileNotFoundError(errno.ENOENT, "No such file", "x.csv")), "p") == 2
    )
    assert capsys.readouterr().err == "p: error: x.csv: No such file\n"
    assert run_cli(lambda: raise_(OSError(errno.ENOSPC, "No space left", "o.json")), "p") == 1
    with pytest.raises(RuntimeError):
        run_cli(lambda: raise_(RuntimeError("a bug")), "p")
    monkeypatch.setenv("CROP_GYM_TRACEBACK", "1")
    with pytest.raises(ConfigError):
        run_cli(lambda: raise_(ConfigError("bad")), "p")


# --------------------------------------------------------------------------- CR-only traces
@pytest.mark.parametrize("eol", ["\r", "\r\n", "\n"])
def test_format_detection_accepts_every_line_ending(
    tmp_path: Path, eol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from crop_gym.workloads.loader import detect_format, load_workload

    path = tmp_path / "t.csv"
    path.write_bytes(eol.join((EF_HEADER, *EF_ROWS)).encode() + eol.encode())
    assert detect_format(path) == "elasticflow"
    assert [j.job_id for j in load_workload(path).jobs] == ["a", "c", "b"]
    assert main(["trace", str(path)]) == 0
    assert "3" in capsys.readouterr().out


# --------------------------------------------------------------------------- policy registry
def test_registry_builds_every_baseline_policy() -> None:
    names = policy_names()
    for name in ("crop", "crop-plain", "crop-nonrobust", "random", "first-fit", "best-fit"):
        assert name in names
    assert make_policy("random", seed=3).name == "random"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown policy 'nope'; policies: crop, "):
        make_policy("nope")


def test_register_policy_rules() -> None:
    def factory(**kwargs: object) -> object:
        return ("dummy", kwargs)

    register_policy("test-dummy", factory, description="a test policy")  # type: ignore[arg-type]
    try:
        register_policy("test-dummy", factory, description="a test policy")  # type: ignore[arg-type]
        assert make_policy("test-dummy", k=1) == ("dummy", {"k": 1})
        assert "test-dummy" in policy_names()
        with pytest.raises(ConfigError, match="already registered"):
            register_policy("test-dummy", lambda: None, description="other")  # type: ignore[arg-type,return-value]
    finally:
        unregister_policy("test-dummy")
    assert "test-dummy" not in policy_names()
    for name, desc in (("Bad Name", "x"), ("a,b", "x"), ("ok", ""), ("ok", "two\nlines")):
        with pytest.raises(ConfigError):
            register_policy(name, factory, description=desc)  # type: ignore[arg-type]
