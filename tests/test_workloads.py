"""Tests of crop_gym.workloads: loaders, bundled traces, errors, synthetic generator, summary, CLI."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crop_gym.cli import main as cli_main
from crop_gym.errors import ConfigError, TraceFormatError
from crop_gym.model.jobs import MODEL_ZOO
from crop_gym.workloads import (
    BUNDLED_TRACES,
    POLLUX_APPLICATIONS,
    SyntheticConfig,
    Workload,
    bundled_names,
    detect_format,
    format_summary,
    generate_synthetic,
    load_elasticflow,
    load_generic_csv,
    load_pollux,
    load_workload,
    resolve_bundled,
    sample_queue,
    save_generic_csv,
    summarize,
)

EF_HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration"
EF_ROWS = [
    "a,1000,500,resnet50,2000,64,2,700",
    "b,1010,800,bert,3000,128,8,900",
    "c,1005,300,vgg16,1600,256,1,650",
]
POLLUX_HEADER = "name,time,application,num_replicas,batch_size"
POLLUX_ROWS = [
    "cifar10-0,107,cifar10,6,2048",
    "ncf-1,110,ncf,1,32768",
    "imagenet-2,135,imagenet,32,6400",
    "bert-3,262,bert,12,384",
]
CSV_HEADER = "job_id,arrival_s,model,num_gpus,batch_size,iterations,weight,deadline_s"
CSV_ROWS = [
    "j1,50,resnet50,4,128,1000,2.5,",
    "j2,10.5,gpt2,8,256,250.5,,900",
    "j3,10.5,deepspeech2,1,32,42,1,",
]


def write(path: Path, header: str | None, rows: list[str]) -> Path:
    """Write a small CSV file (no trailing newline, like the bundled traces)."""
    lines = ([header] if header is not None else []) + rows
    path.write_text("\n".join(lines))
    return path


def csv_rows(name: str) -> int:
    """Data rows of a bundled trace, counted with the csv module."""
    res = resources.files("crop_gym").joinpath(BUNDLED_TRACES[name].resource)
    text = io.StringIO(res.read_text(encoding="utf-8"), newline="")
    return sum(1 for row in csv.reader(text) if row) - 1


# --------------------------------------------------------------------------------------------------
# Bundled traces


@pytest.fixture(scope="module")
def bundled() -> dict[str, Workload]:
    return {name: load_workload(name) for name in bundled_names()}


def test_bundled_names() -> None:
    names = bundled_names()
    assert len(names) == 11
    assert "elasticflow:cluster10" in names and "elasticflow:195job" in names
    assert resolve_bundled("cluster04") is BUNDLED_TRACES["elasticflow:cluster04"]
    assert resolve_bundled("nope") is None


@pytest.mark.parametrize("name", list(BUNDLED_TRACES))
def test_bundled_trace_loads_every_row(name: str, bundled: dict[str, Workload]) -> None:
    wl = bundled[name]
    assert len(wl) == csv_rows(name) == BUNDLED_TRACES[name].jobs
    arrival = wl.arrays.arrival
    assert arrival[0] == 0.0
    assert np.all(np.diff(arrival) >= 0)
    assert wl.time_offset > 0  # the ElasticFlow clock does not start at 0
    deadline = wl.arrays.deadline
    assert np.all(deadline >= arrival)
    assert wl.durations is not None and len(wl.durations) == len(wl)
    assert wl.format == "elasticflow" and wl.name == name


def test_bundled_known_counts(bundled: dict[str, Workload]) -> None:
    assert len(bundled["elasticflow:cluster10"]) == 260
    assert len(bundled["elasticflow:195job"]) == 195
    assert len(bundled["elasticflow:cluster04"]) == 15_802


def test_bundled_values_rebased(bundled: dict[str, Workload]) -> None:
    wl = bundled["elasticflow:cluster10"]
    first = wl.jobs[0]
    # First row of cluster10.csv: submitted at 2266647, deadline 2267101, 16 GPUs, bert, 6503 it.
    assert wl.time_offset == 2_266_647
    assert first.job_id == "5dc7d9cd-c300-9a4f-c3cd-dc2cc0935548"
    assert (first.model, first.num_gpus, first.batch_size) == ("bert", 16, 128)
    assert first.iterations == 6503 and first.deadline == 2267101 - 2266647
    assert wl.durations is not None and wl.durations[0] == 604


def test_bare_name_equals_canonical(bundled: dict[str, Workload]) -> None:
    assert load_workload("cluster10").jobs == bundled["elasticflow:cluster10"].jobs


def test_arrays_match_jobs(bundled: dict[str, Workload]) -> None:
    wl = bundled["elasticflow:195job"]
    a = wl.arrays
    assert a is wl.arrays  # cached
    assert a.num_gpus.dtype == np.int64 and a.arrival.dtype == np.float64
    assert [a.model_names[i] for i in a.model_index] == [j.model for j in wl.jobs]
    assert a.iterations.tolist() == [j.iterations for j in wl.jobs]
    assert a.batch_size.tolist() == [j.batch_size for j in wl.jobs]
    with pytest.raises(ValueError):
        a.arrival[0] = 1.0
    assert np.allclose(a.compute_time(), [j.compute_time for j in wl.jobs])
    assert np.allclose(a.grad_bytes(), [j.grad_bytes for j in wl.jobs])


def test_unknown_spec_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="bundled"):
        load_workload(str(tmp_path / "missing.csv"))
    with pytest.raises(ConfigError, match="format"):
        load_workload("cluster10", format="parquet")


# --------------------------------------------------------------------------------------------------
# Malformed input: file, line, field


BAD_CASES: list[tuple[str, str | None, list[str], int, str | None]] = [
    # (id, header, rows, line, field)
    ("missing column", EF_HEADER.replace(",num_gpu", ""), ["a,1,2,bert,9,64,10"], 1, "num_gpu"),
    ("non-numeric", EF_HEADER, [EF_ROWS[0], "b,1010,lots,bert,3000,128,8,900"], 3, "num_iteration"),
    ("zero GPUs", EF_HEADER, [*EF_ROWS[:2], "c,1005,300,vgg16,1600,256,0,650"], 4, "num_gpu"),
    ("negative GPUs", EF_HEADER, ["c,1005,300,vgg16,1600,256,-2,650"], 2, "num_gpu"),
    ("fractional GPUs", EF_HEADER, ["c,1005,300,vgg16,1600,256,1.5,650"], 2, "num_gpu"),
    (
        "negative time",
        EF_HEADER,
        [EF_ROWS[0], "b,-5,800,bert,3000,128,8,900"],
        3,
        "submission_time",
    ),
    ("unknown model", EF_HEADER, [*EF_ROWS, "d,1,2,resnet152,9,64,1,700"], 5, "model_name"),
    ("empty file", None, [], 1, "header"),
    ("nan", EF_HEADER, ["a,1000,nan,resnet50,2000,64,2,700"], 2, "num_iteration"),
    ("empty value", EF_HEADER, ["a,1000,500,resnet50,2000,,2,700"], 2, "batch_size"),
    ("short row", EF_HEADER, [EF_ROWS[0], "b,1010,800,bert"], 3, "deadline"),
    ("duplicate id", EF_HEADER, [EF_ROWS[0], EF_ROWS[0]], 3, "job_id"),
    ("deadline early", EF_HEADER, ["a,1000,500,resnet50,999,64,2,700"], 2, "deadline"),
]


@pytest.mark.parametrize(
    ("header", "rows", "line", "field"),
    [case[1:] for case in BAD_CASES],
    ids=[case[0] for case in BAD_CASES],
)
def test_malformed_elasticflow(
    tmp_path: Path, header: str | None, rows: list[str], line: int, field: str | None
) -> None:
    path = write(tmp_path / "bad.csv", header, rows)
    with pytest.raises(TraceFormatError) as info:
        load_workload(path, format="elasticflow")
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert str(path) in str(err) and f":{line}" in str(err) and "\n" not in str(err)


def test_header_only_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "hdr.csv", EF_HEADER, [])
    with pytest.raises(TraceFormatError) as info:
        load_elasticflow(path)
    assert info.value.line == 2


def test_blank_lines_are_not_rows_but_lines_count(tmp_path: Path) -> None:
    path = tmp_path / "blank.csv"
    path.write_text(f"{EF_HEADER}\n{EF_ROWS[0]}\n\n{EF_ROWS[1]}\nz,1,2,bert,9,64,x,5\n")
    with pytest.raises(TraceFormatError) as info:
        load_elasticflow(path)
    assert (info.value.line, info.value.field) == (5, "num_gpu")


@pytest.mark.parametrize(
    ("loader", "header", "row", "field"),
    [
        (load_pollux, POLLUX_HEADER, "x,10,cifar10,0,128", "num_replicas"),
        (load_pollux, POLLUX_HEADER, "x,-1,cifar10,1,128", "time"),
        (load_pollux, POLLUX_HEADER, "x,10,alexnet,1,128", "application"),
        (load_pollux, POLLUX_HEADER, "x,10,cifar10,1,big", "batch_size"),
        (load_generic_csv, CSV_HEADER, "x,1,resnet50,-1,64,10,,", "num_gpus"),
        (load_generic_csv, CSV_HEADER, "x,-3,resnet50,1,64,10,,", "arrival_s"),
        (load_generic_csv, CSV_HEADER, "x,1,resnet152,1,64,10,,", "model"),
        (load_generic_csv, CSV_HEADER, "x,1,resnet50,1,64,ten,,", "iterations"),
        (load_generic_csv, CSV_HEADER, "x,1,resnet50,1,64,10,0,", "weight"),
    ],
)
def test_malformed_other_formats(
    tmp_path: Path, loader: Callable[..., Workload], header: str, row: str, field: str
) -> None:
    good = POLLUX_ROWS[0] if loader is load_pollux else CSV_ROWS[0]
    path = write(tmp_path / "bad.csv", header, [good, row])
    with pytest.raises(TraceFormatError) as info:
        loader(path)
    assert (info.value.line, info.value.field) == (3, field)


def test_missing_column_other_formats(tmp_path: Path) -> None:
    path = write(tmp_path / "p.csv", "name,time,application,batch_size", ["a,1,ncf,64"])
    with pytest.raises(TraceFormatError) as info:
        load_workload(path, format="pollux")
    assert (info.value.line, info.value.field) == (1, "num_replicas")
    path = write(tmp_path / "g.csv", "job_id,arrival_s,model,num_gpus,batch_size", ["a,1,ncf,1,64"])
    with pytest.raises(TraceFormatError) as info:
        load_workload(path)
    assert (info.value.line, info.value.field) == (1, "iterations")


def test_undetectable_format(tmp_path: Path) -> None:
    path = write(tmp_path / "odd.csv", "a,b,c", ["1,2,3"])
    with pytest.raises(TraceFormatError) as info:
        load_workload(path)
    assert (info.value.line, info.value.field) == (1, "header")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.csv"
    path.write_bytes(f"{EF_HEADER}\n{EF_ROWS[0]}\n".encode() + b"\xff\xfe,1\n")
    with pytest.raises(TraceFormatError) as info:
        load_elasticflow(path)
    assert info.value.line == 3


# --------------------------------------------------------------------------------------------------
# Formats: round trips


def test_elasticflow_small_file(tmp_path: Path) -> None:
    wl = load_workload(write(tmp_path / "ef.csv", EF_HEADER, EF_ROWS))
    assert wl.format == "elasticflow" and wl.name == "ef"
    assert [j.job_id for j in wl.jobs] == ["a", "c", "b"]
    assert [j.arrival for j in wl.jobs] == [0.0, 5.0, 10.0]
    assert [j.deadline for j in wl.jobs] == [1000.0, 600.0, 2000.0]
    assert wl.durations == (700.0, 650.0, 900.0)
    assert wl.time_offset == 1000


def test_pollux_round_trip(tmp_path: Path) -> None:
    path = write(tmp_path / "workload-1.csv", POLLUX_HEADER, POLLUX_ROWS)
    assert detect_format(path) == "pollux"
    wl = load_workload(path)
    assert wl.format == "pollux" and wl.durations is None and wl.time_offset == 107
    by_id = {j.job_id: j for j in wl.jobs}
    assert [j.arrival for j in wl.jobs] == [0.0, 3.0, 28.0, 155.0]
    assert by_id["cifar10-0"].model == "resnet18"
    assert by_id["imagenet-2"].model == "resnet50"
    assert by_id["cifar10-0"].iterations == 100 * math.ceil(50_000 / 2048)
    assert by_id["imagenet-2"].iterations == 90 * math.ceil(1_281_167 / 6400)
    for j in wl.jobs:
        app = POLLUX_APPLICATIONS[j.job_id.split("-")[0]]
        assert j.iterations == app.iterations(j.batch_size)
    assert (by_id["imagenet-2"].num_gpus, by_id["imagenet-2"].batch_size) == (32, 6400)
    # Written back in the generic format and read again: the same jobs.
    out = tmp_path / "generic.csv"
    save_generic_csv(wl, out)
    again = load_workload(out)
    assert again.jobs == wl.jobs and again.durations is None


def test_generic_round_trip(tmp_path: Path) -> None:
    path = write(tmp_path / "jobs.csv", CSV_HEADER, CSV_ROWS)
    wl = load_workload(path)
    assert wl.format == "csv" and wl.time_offset == 10.5
    assert [j.job_id for j in wl.jobs] == ["j2", "j3", "j1"]  # stable on the tie
    j2, _, j1 = wl.jobs
    assert (j1.arrival, j1.weight, j1.deadline) == (39.5, 2.5, None)
    assert (j2.iterations, j2.weight, j2.deadline) == (250.5, 1.0, 889.5)
    out = tmp_path / "out.csv"
    save_generic_csv(wl, out)
    again = load_generic_csv(out)
    assert again.jobs == wl.jobs


def test_generic_round_trip_of_a_trace(tmp_path: Path, bundled: dict[str, Workload]) -> None:
    wl = bundled["elasticflow:cluster10"]
    out = tmp_path / "c10.csv"
    save_generic_csv(wl, out)
    again = load_workload(out)
    assert again.jobs == wl.jobs and again.durations == wl.durations


def test_generic_without_optional_columns(tmp_path: Path) -> None:
    header = "iterations,model,job_id,num_gpus,batch_size,arrival_s,comment"
    wl = load_workload(write(tmp_path / "g.csv", header, ["10,ncf,x,1,64,0,hello"]))
    assert wl.jobs[0].weight == 1.0 and wl.jobs[0].deadline is None and wl.durations is None


# --------------------------------------------------------------------------------------------------
# model_map


def test_model_map(tmp_path: Path) -> None:
    path = write(tmp_path / "m.csv", EF_HEADER, [*EF_ROWS, "d,1003,10,resnet152,2000,64,4,700"])
    with pytest.raises(TraceFormatError, match="resnet152"):
        load_workload(path)
    wl = load_workload(path, model_map={"resnet152": "resnet50"})
    assert {j.job_id: j.model for j in wl.jobs}["d"] == "resnet50"
    with pytest.raises(ConfigError, match="unknown model"):
        load_workload(path, model_map={"resnet152": "resnet9000"})


def test_model_map_pollux(tmp_path: Path) -> None:
    path = write(tmp_path / "p.csv", POLLUX_HEADER, ["x,0,cifar100,2,256"])
    wl = load_workload(path, model_map={"cifar100": "cifar10"})
    assert wl.jobs[0].model == "resnet18"
    assert wl.jobs[0].iterations == POLLUX_APPLICATIONS["cifar10"].iterations(256)


# --------------------------------------------------------------------------------------------------
# Synthetic generator and queue sampling


def test_synthetic_deterministic_and_seed_dependent() -> None:
    config = SyntheticConfig(num_jobs=200)
    a = generate_synthetic(config, np.random.default_rng(7))
    b = generate_synthetic(config, np.random.default_rng(7))
    c = generate_synthetic(config, np.random.default_rng(8))
    assert a == b
    assert a.jobs != c.jobs
    assert len(a) == 200 and a.jobs[0].arrival == 0.0 and a.format == "synthetic"


def test_synthetic_defaults_follow_elasticflow() -> None:
    wl = generate_synthetic(SyntheticConfig(num_jobs=5000), np.random.default_rng(0))
    share_1gpu = float(np.mean(wl.arrays.num_gpus == 1))
    assert 0.80 < share_1gpu < 0.86  # ElasticFlow: 83%
    rate = summarize(wl)["arrival_rate_per_h"]
    assert 9.0 < rate < 11.0
    assert set(wl.arrays.model_names) <= set(MODEL_ZOO)


def test_synthetic_static_batch_and_cap() -> None:
    config = SyntheticConfig(num_jobs=50, arrival_rate=math.inf, max_gpus=4)
    wl = generate_synthetic(config, np.random.default_rng(1))
    assert np.all(wl.arrays.arrival == 0.0)
    assert wl.arrays.num_gpus.max() <= 4


def test_synthetic_refuses_global_rng() -> None:
    with pytest.raises(ConfigError, match="Generator"):
        generate_synthetic(SyntheticConfig(num_jobs=3), 42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        SyntheticConfig(num_jobs=0)
    with pytest.raises(ConfigError):
        SyntheticConfig(model_mix=(("nope", 1.0),))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    num_jobs=st.integers(1, 60),
    rate=st.floats(1e-5, 10.0),
    max_gpus=st.one_of(st.none(), st.integers(1, 64)),
    sigma=st.floats(0.0, 3.0),
)
def test_synthetic_properties(
    seed: int, num_jobs: int, rate: float, max_gpus: int | None, sigma: float
) -> None:
    config = SyntheticConfig(
        num_jobs=num_jobs, arrival_rate=rate, max_gpus=max_gpus, duration_sigma=sigma
    )
    wl = generate_synthetic(config, np.random.default_rng(seed))
    a = wl.arrays
    assert len(wl) == num_jobs
    assert a.arrival[0] == 0.0 and np.all(a.arrival >= 0) and np.all(np.diff(a.arrival) >= 0)
    assert set(a.num_gpus.tolist()) <= set(config.gpu_counts)
    assert max_gpus is None or a.num_gpus.max() <= max_gpus
    assert np.all(a.iterations >= 1) and np.all(a.batch_size >= 1)
    assert len({j.job_id for j in wl.jobs}) == num_jobs


def test_sample_queue(bundled: dict[str, Workload]) -> None:
    wl = bundled["elasticflow:cluster10"]
    q1 = sample_queue(wl, 20, np.random.default_rng(3))
    q2 = sample_queue(wl, 20, np.random.default_rng(3))
    q3 = sample_queue(wl, 20, np.random.default_rng(4))
    assert q1 == q2 and q1 != q3
    assert len(q1) == 20 and len({j.job_id for j in q1}) == 20
    assert all(j.arrival == 0.0 and j.deadline is None for j in q1)
    originals = {(j.model, j.num_gpus, j.batch_size, j.iterations) for j in wl.jobs}
    assert all((j.model, j.num_gpus, j.batch_size, j.iterations) in originals for j in q1)
    small = sample_queue(wl, 30, np.random.default_rng(0), max_gpus=1)
    assert all(j.num_gpus == 1 for j in small)
    big = sample_queue(wl, 1000, np.random.default_rng(0), replace=True)
    assert len({j.job_id for j in big}) == 1000
    assert sample_queue(wl, 0, np.random.default_rng(0)) == ()
    with pytest.raises(ConfigError, match="replace"):
        sample_queue(wl, 1000, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="Generator"):
        sample_queue(wl, 2, None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Summary


def test_summary_elasticflow(bundled: dict[str, Workload]) -> None:
    wl = bundled["elasticflow:cluster10"]
    s = summarize(wl)
    assert s["jobs"] == 260 and s["gpu_hours_source"] == "duration"
    assert sum(s["gpus"]["histogram"].values()) == 260
    assert sum(s["models"].values()) == 260
    assert s["span_s"] == wl.jobs[-1].arrival
    expected = sum(d * j.num_gpus for d, j in zip(wl.durations or (), wl.jobs)) / 3600
    assert s["gpu_hours"] == pytest.approx(expected)
    assert s["gpu_hours"] == pytest.approx(sum(s["gpu_hours_by_gpus"].values()))
    json.dumps(s)  # JSON-ready
    text = format_summary(s)
    assert "GPU-hours" in text and "resnet50" in text


def test_summary_estimate_for_pollux(tmp_path: Path) -> None:
    wl = load_workload(write(tmp_path / "p.csv", POLLUX_HEADER, POLLUX_ROWS))
    s = summarize(wl)
    assert s["gpu_hours_source"] == "estimate" and "estimate" in s["gpu_hours_note"]
    expected = sum(j.iterations * j.compute_time * j.num_gpus for j in wl.jobs) / 3600
    assert s["gpu_hours"] == pytest.approx(expected)
    assert "(estimate)" in format_summary(s)


# --------------------------------------------------------------------------------------------------
# CLI


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["trace", "--list"]) == 0
    out = capsys.readouterr().out
    assert "elasticflow:cluster04" in out and "15,802" in out


def test_cli_summary_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "summary.json"
    assert cli_main(["trace", "elasticflow:195job", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "195" in out and "GPUs/job" in out
    data = json.loads(out_json.read_text())
    assert data["jobs"] == 195 and data["name"] == "elasticflow:195job"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left


def test_cli_map_and_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "m.csv", EF_HEADER, ["d,1,10,resnet152,2000,64,4,700"])
    args = ["trace", str(path), "--format", "elasticflow", "--map", "resnet152=resnet50"]
    assert cli_main(args) == 0
    assert "resnet50" in capsys.readouterr().out
    assert cli_main(["trace", str(path), "--map", "resnet152"]) == 2
    assert "OLD=NEW" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("header", "rows", "line", "field"),
    [case[1:] for case in BAD_CASES],
    ids=[case[0] for case in BAD_CASES],
)
def test_cli_malformed_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    header: str | None,
    rows: list[str],
    line: int,
    field: str | None,
) -> None:
    path = write(tmp_path / "bad.csv", header, rows)
    assert cli_main(["trace", str(path), "--format", "elasticflow"]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("crop-gym trace: error: ")
    assert f"{path}:{line}" in err and f"field '{field}'" in err


def test_cli_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["trace", str(tmp_path / "nope.csv")]) != 0
    assert capsys.readouterr().err.count("\n") == 1
    assert cli_main(["trace"]) != 0
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_module_import_is_light() -> None:
    code = (
        "import sys, crop_gym.workloads.cli as c; "
        "print(sorted(m for m in ('crop_gym.workloads.loader', 'scipy', 'torch') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
