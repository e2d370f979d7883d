"""A table of hostile ``crop-gym`` invocations, run in-process.

Each case is run through :func:`crop_gym.cli.main` and ends in one of three verdicts:

* ``usage``: argparse refuses the arguments: ``SystemExit(2)`` after exactly one line on stderr;
* ``error``: the command refuses its input: exit status 2 after exactly one line on stderr;
* ``ok``: the command runs (small inputs, a few seconds at most) and exits 0.

Whatever the verdict: no traceback, the inputs are unchanged, a symlink, FIFO or device at an output
path is still what it was, no temporary file is left, and no case hangs (a FIFO opened for reading
would block forever: each case runs under an alarm that turns a hang into a failure). Device outputs
use a copy of /dev/null made in the test's folder (see :func:`null_device`), never /dev/null itself.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import no_hang, null_device

import crop_gym
from crop_gym.cli import main

EF = (
    "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration",
    "a,1000,500,resnet50,2000,64,2,700",
    "b,1010,800,bert,3000,128,8,900",
    "c,1005,300,vgg16,1600,256,1,650",
)
SIM = "simulate --trace {T} --cluster testbed-8 --no-progress"
CMP = "compare --scenario testbed-8 --seeds 1 --policies first-fit --no-progress"
CALIBRATION = str(Path(crop_gym.__file__).parent / "data" / "calibration.json")

#: (id, verdict, command line with placeholders; see ``files``).
CASES: list[tuple[str, str, str]] = [
    # ---- top level
    ("no-command", "usage", ""),
    ("unknown-command", "usage", "bogus"),
    ("unknown-top-flag", "usage", "--bogus"),
    # ---- simulate: runs
    ("sim-ok", "ok", SIM),
    ("sim-ok-outputs", "ok", SIM + " --json {O} --csv {O2}"),
    ("sim-ok-json-stdout", "ok", SIM + " --json -"),
    ("sim-ok-cr-only-trace", "ok", "simulate --trace {CR} --cluster testbed-8 --no-progress"),
    ("sim-ok-huge-jobs", "ok", SIM + " --jobs 1000000000000"),
    # ---- simulate: arguments
    ("sim-no-trace", "usage", "simulate"),
    ("sim-unknown-flag", "usage", SIM + " --bogus"),
    ("sim-jobs-negative", "usage", SIM + " --jobs -1"),
    ("sim-jobs-zero", "usage", SIM + " --jobs 0"),
    ("sim-jobs-float", "usage", SIM + " --jobs 1.5"),
    ("sim-jobs-word", "usage", SIM + " --jobs many"),
    ("sim-seed-nan", "usage", SIM + " --seed nan"),
    ("sim-seed-negative", "usage", SIM + " --seed -1"),
    ("sim-seed-exponent", "usage", SIM + " --seed 1e3"),
    ("sim-max-hours-overflow", "usage", SIM + " --max-hours 1e400"),
    ("sim-max-hours-nan", "usage", SIM + " --max-hours nan"),
    ("sim-max-hours-inf", "usage", SIM + " --max-hours inf"),
    ("sim-max-hours-zero", "usage", SIM + " --max-hours 0"),
    ("sim-max-hours-negative", "usage", SIM + " --max-hours -2"),
    ("sim-checkpoint-nan", "usage", SIM + " --checkpoint-interval nan"),
    ("sim-checkpoint-zero", "usage", SIM + " --checkpoint-interval 0"),
    ("sim-horizon-word", "usage", SIM + " --failure-horizon soon"),
    ("sim-repair-negative", "usage", SIM + " --repair-time -1"),
    ("sim-queue-view-zero", "usage", SIM + " --max-queue-view 0"),
    ("sim-queue-view-choice", "usage", SIM + " --queue-view bogus"),
    ("sim-format-choice", "usage", SIM + " --format bogus"),
    ("sim-horizon-never", "error", SIM + " --failure-horizon never"),
    ("sim-repair-never", "error", SIM + " --repair-time never"),
    # ---- simulate: names
    ("sim-unknown-policy", "error", SIM + " --policy nope"),
    ("sim-unknown-cluster", "error", SIM + " --cluster nope"),
    ("sim-unknown-profile", "error", SIM + " --abnormal nope"),
    ("sim-bad-map", "error", SIM + " --map foo"),
    ("sim-map-to-unknown", "error", SIM + " --map resnet50=nope"),
    ("sim-unknown-bundled", "error", "simulate --trace elasticflow:nope --no-progress"),
    # ---- simulate: inputs
    ("sim-missing-trace", "error", "simulate --trace {M} --no-progress"),
    ("sim-dir-trace", "error", "simulate --trace {D} --no-progress"),
    ("sim-devnull-trace", "error", "simulate --trace {N} --no-progress"),
    ("sim-devnull-trace-format", "error", "simulate --trace {N} --format csv --no-progress"),
    ("sim-fifo-trace", "error", "simulate --trace {F} --no-progress"),
    ("sim-fifo-trace-format", "error", "simulate --trace {F} --format elasticflow --no-progress"),
    ("sim-binary-trace", "error", "simulate --trace {BIN} --no-progress"),
    ("sim-empty-trace", "error", "simulate --trace {E} --no-progress"),
    ("sim-wrong-format", "error", SIM + " --format pollux"),
    # ---- simulate: outputs
    ("sim-json-is-trace", "error", SIM + " --json {T}"),
    ("sim-csv-is-trace", "error", SIM + " --csv {T}"),
    ("sim-plot-is-trace", "error", SIM + " --plot {T}"),
    ("sim-json-is-csv", "error", SIM + " --json {O} --csv {O}"),
    ("sim-csv-is-plot", "error", SIM + " --csv {P} --plot {P}"),
    ("sim-json-dir", "error", SIM + " --json {D}"),
    ("sim-json-symlink", "error", SIM + " --json {L}"),
    ("sim-json-fifo", "error", SIM + " --json {F}"),
    ("sim-json-devnull", "error", SIM + " --json {NUL}"),
    ("sim-json-missing-folder", "error", SIM + " --json {MD}"),
    ("sim-json-empty", "error", SIM + " --json="),
    ("sim-two-stdouts", "error", SIM + " --json - --csv -"),
    ("sim-plot-stdout", "error", SIM + " --plot -"),
    ("sim-plot-format", "error", SIM + " --plot {D}/x.gif"),
    ("sim-csv-symlink-to-trace", "error", SIM + " --csv {LT}"),
    # ---- trace
    ("trace-ok", "ok", "trace {T}"),
    ("trace-ok-cr-only", "ok", "trace {CR}"),
    ("trace-ok-json", "ok", "trace {T} --json {O}"),
    ("trace-ok-json-stdout", "ok", "trace {T} --json -"),
    ("trace-ok-list", "ok", "trace --list"),
    ("trace-unknown-flag", "usage", "trace {T} --bogus"),
    ("trace-format-choice", "usage", "trace {T} --format bogus"),
    ("trace-nothing", "error", "trace"),
    ("trace-list-and-json", "error", "trace --list --json {O}"),
    ("trace-missing", "error", "trace {M}"),
    ("trace-dir", "error", "trace {D}"),
    ("trace-devnull", "error", "trace {N}"),
    ("trace-fifo", "error", "trace {F}"),
    ("trace-binary", "error", "trace {BIN}"),
    ("trace-empty", "error", "trace {E}"),
    ("trace-unknown-bundled", "error", "trace elasticflow:nope"),
    ("trace-bad-map", "error", "trace {T} --map =x"),
    ("trace-json-is-trace", "error", "trace {T} --json {T}"),
    ("trace-json-dir", "error", "trace {T} --json {D}"),
    ("trace-json-symlink", "error", "trace {T} --json {L}"),
    ("trace-json-fifo", "error", "trace {T} --json {F}"),
    ("trace-json-devnull", "error", "trace {T} --json {NUL}"),
    ("trace-json-missing-folder", "error", "trace {T} --json {MD}"),
    # ---- compare
    ("cmp-ok", "ok", CMP),
    ("cmp-ok-json", "ok", CMP + " --json {O}"),
    ("cmp-ok-json-stdout", "ok", CMP + " --json -"),
    ("cmp-ok-scenario-file", "ok", "compare --scenario {SC} --seeds 1 --policies first-fit"),
    ("cmp-seeds-zero", "usage", "compare --seeds 0"),
    ("cmp-seeds-negative", "usage", "compare --seeds -1"),
    ("cmp-seeds-nan", "usage", "compare --seeds nan"),
    ("cmp-first-seed-negative", "usage", "compare --first-seed -1"),
    ("cmp-unknown-flag", "usage", "compare --bogus"),
    ("cmp-unknown-scenario", "error", "compare --scenario nope"),
    ("cmp-missing-scenario-file", "error", "compare --scenario {M}"),
    ("cmp-dir-scenario", "error", "compare --scenario {D}"),
    ("cmp-devnull-scenario", "error", "compare --scenario {N}"),
    ("cmp-fifo-scenario", "error", "compare --scenario {F}"),
    ("cmp-binary-scenario", "error", "compare --scenario {SCBIN}"),
    ("cmp-syntax-scenario", "error", "compare --scenario {SCSYN}"),
    ("cmp-bad-field-scenario", "error", "compare --scenario {SCBAD} --seeds 1"),
    ("cmp-unknown-policy", "error", "compare --scenario testbed-8 --seeds 1 --policies crop,nope"),
    ("cmp-no-policy", "error", "compare --scenario testbed-8 --seeds 1 --policies ,"),
    ("cmp-exact-too-large", "error", "compare --exact --seeds 1 --no-progress"),
    ("cmp-json-is-scenario", "error", "compare --scenario {SC} --json {SC}"),
    ("cmp-json-is-plot", "error", CMP + " --json {P} --plot {P}"),
    ("cmp-json-dir", "error", CMP + " --json {D}"),
    ("cmp-json-symlink", "error", CMP + " --json {L}"),
    ("cmp-json-fifo", "error", CMP + " --json {F}"),
    ("cmp-json-devnull", "error", CMP + " --json {NUL}"),
    ("cmp-plot-stdout", "error", CMP + " --plot -"),
    ("cmp-plot-format", "error", CMP + " --plot {D}/x.gif"),
    # ---- calibrate
    ("cal-ok", "ok", "calibrate --allreduce ring --json {O}"),
    ("cal-ratio-nan", "usage", "calibrate --min-latency-ratio nan"),
    ("cal-ratio-negative", "usage", "calibrate --min-latency-ratio -1"),
    ("cal-ratio-word", "usage", "calibrate --min-latency-ratio big"),
    ("cal-allreduce-choice", "usage", "calibrate --allreduce bogus"),
    ("cal-unknown-flag", "usage", "calibrate --bogus"),
    ("cal-ratio-huge", "error", "calibrate --min-latency-ratio 1e300"),
    ("cal-json-dir", "error", "calibrate --json {D}"),
    ("cal-json-devnull", "error", "calibrate --json {NUL}"),
    ("cal-json-symlink", "error", "calibrate --json {L}"),
    ("cal-json-package-data", "error", "calibrate --json " + CALIBRATION),
    ("cal-json-is-write", "error", "calibrate --json {O} --write {O}"),
    ("cal-write-stdout", "error", "calibrate --write -"),
    ("cal-write-missing-folder", "error", "calibrate --write {MD}"),
]


@pytest.fixture
def alarm() -> Iterator[None]:
    """Turn a case that blocks (e.g. on a FIFO) into a failure instead of a hung test run."""
    with no_hang(120):
        yield


def files(tmp: Path) -> dict[str, str]:
    """Create the inputs and special files the placeholders name."""
    (tmp / "t.csv").write_text("\n".join(EF) + "\n")
    (tmp / "cr.csv").write_bytes(("\r".join(EF) + "\r").encode())
    (tmp / "bin.csv").write_bytes(b"\x00\xff\xfe" * 50)
    (tmp / "empty.csv").write_bytes(b"")
    (tmp / "sc.toml").write_text('name = "mini"\ncluster = "testbed-8"\nqueue_size = 2\n')
    (tmp / "scbin.toml").write_bytes(b"\xff\xfe\x00")
    (tmp / "scsyn.toml").write_text("queue_size = [1,\n")
    (tmp / "scbad.toml").write_text('cluster = "testbed-8"\nqueue_size = -3\n')
    (tmp / "dir").mkdir()
    os.mkfifo(tmp / "fifo")
    (tmp / "link.json").symlink_to(tmp / "target.json")
    (tmp / "link-to-trace.csv").symlink_to(tmp / "t.csv")
    return {
        "T": str(tmp / "t.csv"),
        "CR": str(tmp / "cr.csv"),
        "BIN": str(tmp / "bin.csv"),
        "E": str(tmp / "empty.csv"),
        "SC": str(tmp / "sc.toml"),
        "SCBIN": str(tmp / "scbin.toml"),
        "SCSYN": str(tmp / "scsyn.toml"),
        "SCBAD": str(tmp / "scbad.toml"),
        "D": str(tmp / "dir"),
        "F": str(tmp / "fifo"),
        "L": str(tmp / "link.json"),
        "LT": str(tmp / "link-to-trace.csv"),
        "N": os.devnull,  # as an input only
        "NUL": str(null_device(tmp)),
        "M": str(tmp / "missing.csv"),
        "MD": str(tmp / "no-such-folder" / "out.json"),
        "O": str(tmp / "out.json"),
        "O2": str(tmp / "out.csv"),
        "P": str(tmp / "out.png"),
    }


def _digest(tmp: Path) -> dict[str, str]:
    out = {}
    for p in sorted(tmp.iterdir()):
        if p.is_file() and not p.is_symlink() and not p.name.startswith("out."):
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_the_table_covers_every_command_and_verdict() -> None:
    assert len({case[0] for case in CASES}) == len(CASES)
    verdicts = {v for _, v, _ in CASES}
    assert verdicts == {"usage", "error", "ok"}
    for command in ("simulate", "trace", "compare", "calibrate"):
        kinds = {v for _, v, line in CASES if line.startswith(command)}
        assert kinds == {"usage", "error", "ok"}, command


@pytest.mark.parametrize(("verdict", "line"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cli_case(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    alarm: None,
    verdict: str,
    line: str,
) -> None:
    names = files(tmp_path)
    argv = [token.format(**names) for token in line.split()]
    before = _digest(tmp_path)
    try:
        rc: int | str | None = main(argv)
        exited = False
    except SystemExit as exc:
        rc, exited = exc.code, True
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    if verdict == "ok":
        assert (rc, exited) == (0, False), err
    else:
        assert (rc, exited) == (2, verdict == "usage"), err
        assert err.count("\n") == 1 and err.endswith("\n"), err
        assert ": error: " in err, err
    assert _digest(tmp_path) == before  # inputs unchanged
    assert Path(names["F"]).is_fifo()
    assert Path(names["L"]).is_symlink() and not (tmp_path / "target.json").exists()
    assert Path(names["LT"]).is_symlink()
    assert Path(names["NUL"]).is_char_device() and Path(os.devnull).is_char_device()
    left = [*tmp_path.rglob(".tmp-*"), *tmp_path.rglob(".*.tmp"), *tmp_path.rglob(".crop-gym-*")]
    assert not [p.name for p in left]  # no temporary or probe file left
    if verdict != "ok":
        assert not (tmp_path / "out.json").exists() and not (tmp_path / "out.png").exists()
