"""``crop-gym study``: the spec, the grid's run ids, atomic per-run results, resume, the summary's
bootstrap intervals, the local pool and (when Ray is installed) the Ray backend."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crop_gym.cli import main
from crop_gym.errors import ConfigError
from crop_gym.study import LocalBackend, Run, StudySpec, expand, load_study, run_study
from crop_gym.study.report import bootstrap_interval, summarize
from crop_gym.study.results import TIMING_FIELDS, run_path
from crop_gym.study.worker import CRASH_ONCE_ENV

#: Tiny runs: the first JOBS jobs of cluster10 take well under a second each.
JOBS = 120
TINY = StudySpec(
    traces=("elasticflow:cluster10",),
    clusters=("n32g8",),
    policies=("crop", "best-fit"),
    abnormal=("mild",),
    seeds=(0, 1),
    jobs=JOBS,
)


def same_numbers(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal records but for the wall-clock timings."""
    keys = set(a) | set(b)
    return all(a.get(k) == b.get(k) for k in keys - TIMING_FIELDS)


def records_of(out: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))}


class CountingBackend:
    """The in-process backend, counting which runs it executed."""

    name = "counting"

    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, runs: Sequence[Run]) -> Iterator[tuple[Run, dict[str, Any]]]:
        for run, record in LocalBackend(workers=1).execute(runs):
            self.executed.append(run.run_id)
            yield run, record


# --------------------------------------------------------------------------- command line
def test_cli_example_writes_one_json_per_run_with_the_fields_of_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    argv = [
        "study",
        "--traces",
        "elasticflow:cluster10",
        "--cluster",
        "n32g8",
        "--policies",
        "crop,best-fit",
        "--abnormal",
        "mild",
        "--seeds",
        "2",
        "--backend",
        "local",
        "--workers",
        "1",
        "--jobs",
        str(JOBS),
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    recs = records_of(out)
    assert len(recs) == 4
    assert {(r["policy"], r["seed"]) for r in recs.values()} == {
        (p, s) for p in ("crop", "best-fit") for s in (0, 1)
    }
    for rid, r in recs.items():
        assert r["run_id"] == rid and r["mean_jct_s"] > 0 and r["jobs_total"] == JOBS
        assert r["trace"] == "elasticflow:cluster10" and r["hardware"] == "default"
        assert 0 < r["cpu_s"] < 120  # the worker's own CPU time for the run
    # The same run through `simulate --json` gives the same numbers.
    sim_json = tmp_path / "sim.json"
    rc = main(
        [
            "simulate",
            "--trace",
            "elasticflow:cluster10",
            "--cluster",
            "n32g8",
            "--policy",
            "crop",
            "--abnormal",
            "mild",
            "--seed",
            "1",
            "--jobs",
            str(JOBS),
            "--no-progress",
            "--json",
            str(sim_json),
        ]
    )
    assert rc == 0
    sim = json.loads(sim_json.read_text())
    mine = next(r for r in recs.values() if r["policy"] == "crop" and r["seed"] == 1)
    assert set(sim) <= set(mine)
    assert same_numbers(sim, {k: mine[k] for k in sim})
    for name in ("results.json", "results.csv", "summary.csv", "summary.md", "summary.png"):
        assert (out / name).stat().st_size > 0, name
    assert len(json.loads((out / "results.json").read_text())["runs"]) == 4
    assert "[" in (out / "summary.md").read_text()  # intervals over the two seeds
    capsys.readouterr()
    # A re-run skips every finished run.
    assert main(argv) == 0
    assert "0 run(s) executed" in capsys.readouterr().out
    assert records_of(out) == recs


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--policies", "crop,nosuch"], "unknown policy 'nosuch'"),
        (["--policies", "crop", "--abnormal", "awful"], "unknown profile 'awful'"),
        (["--policies", "crop", "--hardware", "h100"], "unknown profile 'h100'"),
        (["--policies", "crop", "--cluster", "n3g1"], "unknown preset 'n3g1'"),
        (["--policies", "crop", "--seeds", "0"], "expected an integer >= 1"),
        (["--policies", "crop", "--address", "auto"], "--address is for --backend ray"),
        ([], "--policies is required"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    argv = ["study", "--traces", "cluster10", "--out", str(tmp_path / "o"), *extra]
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse errors
        rc = int(exc.code or 0)
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "o" / "runs").exists()


def test_outputs_never_overwrite_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    out.mkdir()
    trace = out / "results.csv"  # a trace where a merged output would go
    trace.write_text("name\n")
    rc = main(["study", "--traces", str(trace), "--policies", "crop", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "is an input" in err and err.count("\n") == 1
    assert trace.read_text() == "name\n"


# --------------------------------------------------------------------------- spec and grid
@pytest.mark.parametrize(
    ("suffix", "text"),
    [
        (
            ".yaml",
            "traces: [cluster10]\nclusters: n32g8\npolicies: [crop, first-fit]\n"
            "abnormal: [none, mild]\nseeds: 3\njobs: 50\nsim: {checkpoint_interval_s: 600}\n",
        ),
        (
            ".json",
            '{"traces": ["cluster10"], "clusters": ["n32g8"], "policies": ["crop", "first-fit"],'
            ' "abnormal": ["none", "mild"], "seeds": [0, 1, 2], "jobs": 50,'
            ' "sim": {"checkpoint_interval_s": 600.0}}',
        ),
        (
            ".toml",
            'traces = ["cluster10"]\nclusters = ["n32g8"]\npolicies = ["crop", "first-fit"]\n'
            'abnormal = ["none", "mild"]\nseeds = 3\njobs = 50\n[sim]\ncheckpoint_interval_s = 600\n',
        ),
    ],
)
def test_study_files_load_to_the_same_spec(tmp_path: Path, suffix: str, text: str) -> None:
    path = tmp_path / f"s{suffix}"
    path.write_text(text)
    spec = load_study(path)
    assert spec.traces == ("elasticflow:cluster10",)  # canonical names
    assert spec.seeds == (0, 1, 2) and spec.size == 12
    assert dict(spec.sim) == {"checkpoint_interval_s": 600.0, "skip_oversized": True}
    assert StudySpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("traces: [cluster10]\n", "policies is missing"),
        ("traces: [cluster10]\npolicies: [crop]\ncolour: red\n", "unknown field(s) ['colour']"),
        ("traces: [cluster10]\npolicies: [crop]\nseeds: -1\n", "seeds=-1"),
        ("traces: [cluster10]\npolicies: [crop]\nseeds: [1, 1]\n", "names a seed twice"),
        ("traces: [nosuch]\npolicies: [crop]\n", "'nosuch' is neither a file nor a bundled"),
        ("traces: [cluster10]\npolicies: [crop]\nsim: {speed: 2}\n", "sim: unknown field 'speed'"),
        ("traces: [cluster10]\npolicies: [crop]\nsim: {mean_repair_s: 0}\n", "mean_repair_s=0"),
        ("traces: [cluster10]\npolicies: [crop]\njobs: 0\n", "jobs=0"),
        ("traces: [cluster10, cluster10]\npolicies: [crop]\n", "is given twice"),
        ("traces: [cluster10\n", "invalid YAML"),
    ],
)
def test_bad_study_file_is_one_line_naming_file_and_field(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_study(path)
    msg = str(err.value)
    assert msg.startswith(str(path)) and needle in msg and "\n" not in msg, msg


def test_run_ids_are_stable_distinct_and_change_with_every_coordinate() -> None:
    runs = expand(TINY)
    ids = [r.run_id for r in runs]
    assert len(set(ids)) == len(ids) == TINY.size == 4
    assert ids == [r.run_id for r in expand(TINY.replace())]
    assert ids[0].startswith("cluster10-n32g8-default-crop-mild-s0-")
    for change in (
        {"jobs": JOBS + 1},
        {"arrival_scale": 0.5},
        {"sim": (("checkpoint_interval_s", 600.0),)},
    ):
        assert not set(ids) & {r.run_id for r in expand(TINY.replace(**change))}, change
    # auto resolves per trace and never duplicates an explicit cluster
    auto = expand(TINY.replace(clusters=("auto", "n32g8")))
    assert {r.cluster for r in auto} == {"n32g8"} and len(auto) == 4


# --------------------------------------------------------------------------- results and resume
def test_resume_reruns_only_missing_or_broken_run_files(tmp_path: Path) -> None:
    first = CountingBackend()
    outcome = run_study(TINY, tmp_path, first)
    assert outcome.executed == 4 and len(first.executed) == 4
    before = records_of(tmp_path)
    ids = [r.run_id for r in outcome.runs]
    run_path(tmp_path, ids[0]).unlink()  # never written
    run_path(tmp_path, ids[1]).write_text('{"run_id": "')  # torn (not from us, but be safe)
    run_path(tmp_path, ids[2]).write_text(json.dumps({"run_id": "someone-else"}))
    stale = tmp_path / "runs" / f".{ids[3]}.json.abc123.tmp"  # a driver killed mid-write
    stale.write_text("{")
    again = CountingBackend()
    outcome = run_study(TINY, tmp_path, again)
    assert sorted(again.executed) == sorted(ids[:3])
    assert outcome.skipped == 1 and outcome.executed == 3
    assert not stale.exists()
    after = records_of(tmp_path)
    assert after.keys() == before.keys()
    assert all(same_numbers(before[k], after[k]) for k in before)
    none = CountingBackend()
    assert run_study(TINY, tmp_path, none).executed == 0 and none.executed == []


def test_local_pool_matches_in_process_and_retries_a_killed_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = TINY.replace(seeds=(0,))
    serial = run_study(spec, tmp_path / "serial", LocalBackend(workers=1))
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    monkeypatch.setenv(CRASH_ONCE_ENV, str(crashes))  # every run's first attempt dies
    pooled = run_study(spec, tmp_path / "pool", LocalBackend(workers=2, retries=3))
    assert len(list(crashes.iterdir())) == 2  # both runs were killed once
    assert pooled.records.keys() == serial.records.keys()
    for rid, rec in serial.records.items():
        assert same_numbers(rec, pooled.records[rid])
    assert records_of(tmp_path / "pool").keys() == serial.records.keys()


# --------------------------------------------------------------------------- summary
def test_bootstrap_interval_is_seeded_and_brackets_the_mean() -> None:
    values = [3.1, 5.7, 4.2, 10.3, 6.6, 2.9, 7.4, float("nan")]
    a = bootstrap_interval(values, np.random.default_rng(1))
    b = bootstrap_interval(values, np.random.default_rng(1))
    c = bootstrap_interval(values, np.random.default_rng(2))
    assert a == b and a != c
    assert a.n == 7 and a.mean == pytest.approx(np.mean(values[:-1]))
    assert 2.9 <= a.low < a.mean < a.high <= 10.3
    assert a.high - a.low < 10.3 - 2.9  # the interval of the mean, not the spread of the values
    one = bootstrap_interval([7.0], np.random.default_rng(0))
    assert (one.mean, one.low, one.high, one.n) == (7.0, 7.0, 7.0, 1)
    assert bootstrap_interval([], np.random.default_rng(0)).n == 0


def test_summary_groups_over_seeds_and_is_independent_of_other_settings() -> None:
    def rec(policy: str, seed: int, jct: float) -> dict[str, Any]:
        r = {"policy": policy, "seed": seed, "mean_jct_s": jct, "trace": "t", "cluster": "c"}
        return r | {"hardware": "default", "abnormal": "none", "jobs": None}

    recs = [rec("a", s, 10.0 + s) for s in range(5)] + [rec("b", s, 1.0) for s in range(5)]
    rows = summarize(recs, ["mean_jct_s"], seed=3)
    assert [r.setting["policy"] for r in rows] == ["a", "b"]
    assert rows[0].seeds == (0, 1, 2, 3, 4) and rows[0].stats["mean_jct_s"].mean == 12.0
    alone = summarize(recs[:5], ["mean_jct_s"], seed=3)
    assert alone[0].stats == rows[0].stats


# --------------------------------------------------------------------------- Ray
def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
def test_ray_backend_matches_local_and_retries_killed_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = pytest.importorskip("ray")
    from crop_gym.study import RayBackend

    local = run_study(TINY, tmp_path / "local", LocalBackend(workers=1))
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    monkeypatch.setenv(CRASH_ONCE_ENV, str(crashes))  # inherited by the Ray workers
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token written to ~/.ray
    # A short private temp dir (Ray's socket paths are length-limited), removed by pytest.
    ray_tmp = Path("/tmp") / f"rt{os.getpid()}"
    assert not ray.is_initialized()
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(ray_tmp), log_to_driver=False)
    try:
        remote = run_study(TINY, tmp_path / "ray", RayBackend(retries=2))
    finally:
        ray.shutdown()
    try:
        assert len(list(crashes.iterdir())) == 4  # every run's first attempt was killed
        assert remote.executed == 4
        assert remote.records.keys() == local.records.keys()
        for rid, rec in local.records.items():
            assert same_numbers(rec, remote.records[rid]), rid
        assert records_of(tmp_path / "ray").keys() == local.records.keys()  # once each
        deadline = time.monotonic() + 20
        while _processes_mentioning(str(ray_tmp)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_mentioning(str(ray_tmp)) == []
    finally:
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_the_full_study_file_is_valid() -> None:
    spec = load_study(Path(__file__).resolve().parents[1] / "docs/studies/elasticflow_full.yaml")
    assert len(spec.traces) == 10 and spec.abnormal == ("none", "mild", "severe")
    assert spec.seeds == (0, 1, 2) and "crop" in spec.policies and spec.jobs is None
