"""Hardening of the scenario and trace loaders (issue 13): typed scenario values, non-regular and
huge traces, numbers that would wrap or mean something else, parallel topology edges."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from helpers import no_hang

from crop_gym.cli import main as cli_main
from crop_gym.errors import ConfigError, TopologyError, TraceFormatError
from crop_gym.model.topology import Topology, make_topology
from crop_gym.scenario import Scenario, get_scenario
from crop_gym.workloads import (
    BUNDLED_TRACES,
    load_elasticflow,
    load_generic_csv,
    load_pollux,
    load_workload,
)

EF_HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration"
EF_ROW = "a,1000,500,resnet50,2000,64,2,700"
CSV_HEADER = "job_id,arrival_s,model,num_gpus,batch_size,iterations,weight,deadline_s,duration_s"
CSV_ROW = "j1,50,resnet50,4,128,1000,2.5,,"
POLLUX_HEADER = "name,time,application,num_replicas,batch_size"
POLLUX_ROW = "cifar10-0,107,cifar10,6,2048"


def one_line(exc: BaseException, *parts: str) -> None:
    msg = str(exc)
    assert "\n" not in msg, msg
    for part in parts:
        assert part in msg, (part, msg)


# --------------------------------------------------------------------------------------------------
# 1. Scenario values

SCENARIO_BAD_TOML = [
    ("queue_size = true", "queue_size"),
    ("queue_size = 4.0", "queue_size"),
    ("queue_size = 1e400", "queue_size"),
    ("queue_size = 1000000000", "queue_size"),
    ('queue_size = "4"', "queue_size"),
    ("max_candidates = 0", "max_candidates"),
    ("max_job_gpus = 9223372036854775807", "max_job_gpus"),
    ("background_load = true", "background_load"),
    ('background_load = "0.3"', "background_load"),
    ("background_load = nan", "background_load"),
    ("overlap = inf", "overlap"),
    ("observation_noise = 1e400", "observation_noise"),
    ("name = 3", "name"),
    ("cluster = 3", "cluster"),
    ("cluster = {preset = 'testbed-8'}", "cluster"),
    ("workload = ['a', 'b']", "workload"),
    ('workload_format = "parquet"', "workload_format"),
    ("allreduce = 1", "allreduce"),
    ("abnormal = 5", "abnormal"),
    ("[abnormal]\nabnormal_gpus = 1.5", "abnormal_gpus"),
    ("[abnormal]\nabnormal_gpus = true", "abnormal_gpus"),
    ("[abnormal]\nabnormal_gpus = -1", "abnormal_gpus"),
    ("[abnormal]\nslow_factor = 3", "slow_factor"),
    ('[abnormal]\nslow_factor = "ab"', "slow_factor"),
    ("[abnormal]\nslow_factor = [1.5, 2.0, 3.0]", "slow_factor"),
    ("[abnormal]\nslow_factor = [1.5, true]", "slow_factor"),
    ("[abnormal]\nslow_gpu_frac = true", "slow_gpu_frac"),
    ('[abnormal]\nslow_gpu_frac = "0.1"', "slow_gpu_frac"),
    ("[abnormal]\nonset_rate_per_gpu_hour = inf", "onset_rate_per_gpu_hour"),
    ("[abnormal]\nprofile = 3", "profile"),
]


@pytest.mark.parametrize(
    ("body", "field"), SCENARIO_BAD_TOML, ids=[b for b, _ in SCENARIO_BAD_TOML]
)
def test_scenario_wrong_types_are_refused(tmp_path: Path, body: str, field: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text('cluster = "testbed-8"\n' * ("cluster" not in body) + body + "\n")
    with pytest.raises(ConfigError) as info:
        Scenario.from_file(p)
    one_line(info.value, str(p), field)


def test_scenario_int_fields_refuse_bools_and_floats_directly() -> None:
    for value in (True, 4.0, 4.5):
        with pytest.raises(ConfigError, match="queue_size"):
            Scenario(queue_size=value)  # type: ignore[arg-type]
    assert Scenario(queue_size=4).queue_size == 4
    assert Scenario(background_load=0).background_load == 0.0  # an int is a number


@pytest.mark.parametrize(
    ("suffix", "body", "words"),
    [
        (".json", '{"queue_size": 4, "queue_size": 5}', "duplicate key"),
        (".yaml", "queue_size: 4\nqueue_size: 5\n", "duplicate key"),
        (".yaml", "abnormal:\n  profile: mild\n  profile: none\n", "duplicate key"),
        (".yaml", "name: &a x\nworkload: *a\n", "alias"),
        (".yaml", "queue_size: 1e9\n", "queue_size"),  # YAML 1.1: a string, not a number
        (".yaml", "abnormal: [1, 2]\n", "abnormal"),
        (".json", '{"abnormal": {"abnormal_gpus": 1.5}}', "abnormal_gpus"),
        (".json", '{"queue_size": 1e400}', "queue_size"),
        (".json", '{"queue_size": NaN}', "NaN"),
        (".json", "[1, 2]", "top level"),
    ],
)
def test_scenario_json_yaml_refusals(tmp_path: Path, suffix: str, body: str, words: str) -> None:
    p = tmp_path / f"bad{suffix}"
    p.write_text(body)
    with pytest.raises(ConfigError) as info:
        get_scenario(str(p))
    one_line(info.value, str(p), words)


def test_scenario_fifo_is_refused_not_read(tmp_path: Path) -> None:
    p = tmp_path / "pipe.toml"
    os.mkfifo(p)
    with no_hang(), pytest.raises(ConfigError) as info:
        Scenario.from_file(p)
    one_line(info.value, str(p), "not a regular file")


def test_scenario_round_trip_still_works(tmp_path: Path) -> None:
    p = tmp_path / "ok.yaml"
    p.write_text(
        "cluster: testbed-8\nqueue_size: 5\nabnormal:\n  profile: mild\n  abnormal_gpus: 2\n"
        "  slow_factor: [2, 3]\n"
    )
    s = get_scenario(str(p))
    assert s.abnormal.abnormal_gpus == 2 and s.abnormal.slow_factor == (2.0, 3.0)
    assert Scenario.from_dict(s.to_dict()) == s


# --------------------------------------------------------------------------------------------------
# 2. Traces: non-regular files, streaming with max_jobs


@pytest.mark.parametrize("fmt", [None, "elasticflow"])
def test_trace_dev_zero_and_fifo_and_dir_are_refused(tmp_path: Path, fmt: str | None) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo), str(tmp_path)):
        with no_hang(), pytest.raises(ConfigError) as info:
            load_workload(path, format=fmt)
        one_line(info.value, path)
    with no_hang(), pytest.raises(ConfigError):
        load_elasticflow(fifo)


def write_generic(path: Path, rows: int) -> Path:
    with path.open("w") as fh:
        fh.write("job_id,arrival_s,model,num_gpus,batch_size,iterations\n")
        fh.writelines(f"j{i},{i},resnet50,1,64,{100 + i % 7}\n" for i in range(rows))
    return path


def test_max_jobs_streams_a_large_trace(tmp_path: Path) -> None:
    path = write_generic(tmp_path / "big.csv", 200_000)  # about 7 MB
    assert path.stat().st_size > 5_000_000
    load_workload(path, max_jobs=1)  # warm imports outside the measurement
    tracemalloc.start()
    try:
        wl = load_workload(path, max_jobs=100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(wl) == 100 and wl.jobs[-1].job_id == "j99"
    assert peak < 1_000_000, peak  # the whole file would be > 5 MB of bytes alone


@pytest.mark.parametrize("name", ["elasticflow:cluster10", "elasticflow:195job"])
def test_max_jobs_equals_the_first_jobs(name: str) -> None:
    full = load_workload(name)
    for k in (1, 7, 100, len(full), len(full) + 5):
        part = load_workload(name, max_jobs=k)
        assert part.jobs == full.jobs[:k]
        assert part.time_offset == full.time_offset
        assert part.durations == (full.durations or ())[:k]


def test_bundled_traces_are_sorted_by_submission_time() -> None:
    """``max_jobs`` reads the first rows; on the bundled traces those are the earliest jobs."""
    import csv
    from importlib import resources

    for trace in BUNDLED_TRACES.values():
        text = resources.files("crop_gym").joinpath(trace.resource).read_text()
        times = [float(r["submission_time"]) for r in csv.DictReader(text.splitlines())]
        assert times == sorted(times), trace.name


def test_max_jobs_refuses_unsorted_rows(tmp_path: Path) -> None:
    path = tmp_path / "u.csv"
    path.write_text(f"{EF_HEADER}\n{EF_ROW}\nb,900,500,bert,2000,64,2,700\n")
    assert len(load_workload(path)) == 2  # a full load sorts
    with pytest.raises(TraceFormatError) as info:
        load_workload(path, max_jobs=2)
    assert (info.value.line, info.value.field) == (3, "submission_time")
    one_line(info.value, str(path), "sorted")


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3"])
def test_max_jobs_is_validated(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_jobs"):
        load_workload("elasticflow:cluster10", max_jobs=bad)  # type: ignore[arg-type]


def test_simulate_jobs_on_unsorted_trace_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "u.csv"
    path.write_text(f"{EF_HEADER}\n{EF_ROW}\nb,900,500,bert,2000,64,2,700\n")
    rc = cli_main(["simulate", "--trace", str(path), "--jobs", "2", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "\n" not in err and f"{path}:3" in err


def test_utf8_error_line_beyond_the_first_chunk(tmp_path: Path) -> None:
    rows = [f"é{i},{i},resnet50,1,64,10" for i in range(20_000)]  # > 64 KiB, 2-byte characters
    path = tmp_path / "u.csv"
    body = "job_id,arrival_s,model,num_gpus,batch_size,iterations\n" + "\n".join(rows) + "\n"
    path.write_text(body)
    assert len(load_workload(path)) == 20_000  # characters straddling chunk ends are fine
    data = body.encode()
    cut = data.index(b"\xc3\xa915000,")
    path.write_bytes(data[:cut] + b"\xff" + data[cut + 2 :])
    with pytest.raises(TraceFormatError) as info:
        load_workload(path)
    assert info.value.line == 15_002
    one_line(info.value, f"byte {cut}")


def test_cr_only_and_crlf_line_endings_with_a_given_format(tmp_path: Path) -> None:
    for sep in ("\r", "\r\n"):
        path = tmp_path / "cr.csv"
        path.write_bytes((EF_HEADER + sep + EF_ROW + sep + "b,1001,5,bert,3000,64,1,9").encode())
        assert [j.job_id for j in load_elasticflow(path)] == ["a", "b"]
        assert len(load_elasticflow(path, max_jobs=1)) == 1


# --------------------------------------------------------------------------------------------------
# 3. No wrong numbers

EF_BAD = [
    ("1_6", "num_gpu", "b,1010,800,bert,3000,128,1_6,900"),
    ("arabic digit", "num_gpu", "b,1010,800,bert,3000,128,٨,900"),
    ("full-width", "num_gpu", "b,1010,800,bert,3000,128,８,900"),
    ("underscore time", "submission_time", "b,1_010,800,bert,3000,128,8,900"),
    ("arabic time", "submission_time", "b,١٠١٠,800,bert,3000,128,8,900"),
    ("2**63 gpus", "num_gpu", "b,1010,800,bert,3000,128,9223372036854775808,900"),
    ("1e19 gpus", "num_gpu", "b,1010,800,bert,3000,128,1e19,900"),
    ("2**64 batch", "batch_size", "b,1010,800,bert,3000,18446744073709551616,8,900"),
    ("batch < gpus", "batch_size", "b,1010,800,bert,3000,4,8,900"),
    ("NUL id", "job_id", "b\x00x,1010,800,bert,3000,128,8,900"),
    ("NUL model", "model_name", "b,1010,800,be\x00rt,3000,128,8,900"),
    ("tab id", "job_id", '"b\tc",1010,800,bert,3000,128,8,900'),
    ("iterations 1e300", "num_iteration", "b,1010,1e300,bert,3000,128,8,900"),
    ("time 1e300", "submission_time", "b,1e300,800,bert,1e301,128,8,900"),
    ("duration 1e300", "duration", "b,1010,800,bert,3000,128,8,1e300"),
    ("huge cell", "num_gpu", "b,1010,800,bert,3000,128," + "9" * 5000 + ",900"),
]


@pytest.mark.parametrize(("field", "row"), [c[1:] for c in EF_BAD], ids=[c[0] for c in EF_BAD])
def test_elasticflow_wrong_numbers_are_refused(tmp_path: Path, field: str, row: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(f"{EF_HEADER}\n{EF_ROW}\n{row}\n", encoding="utf-8")
    with pytest.raises(TraceFormatError) as info:
        load_workload(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 3, field)
    one_line(info.value, f"{path}:3", field)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize(
    ("loader", "header", "good", "row", "field"),
    [
        (load_generic_csv, CSV_HEADER, CSV_ROW, "x,1,resnet50,1,64,10,1e308,,", "weight"),
        (load_generic_csv, CSV_HEADER, CSV_ROW, "x,1,resnet50,1,64,10,1_0,,", "weight"),
        (load_generic_csv, CSV_HEADER, CSV_ROW, "x,1,resnet50,8,4,10,,,", "batch_size"),
        (load_generic_csv, CSV_HEADER, CSV_ROW, "x,1,resnet50,1e19,1e20,10,,,", "num_gpus"),
        (load_generic_csv, CSV_HEADER, CSV_ROW, "x,1,resnet50,1,64,10,,1e300,", "deadline_s"),
        (load_generic_csv, CSV_HEADER, CSV_ROW, "x,1,resnet50,1,64,10,,,1e300", "duration_s"),
        (load_generic_csv, CSV_HEADER, CSV_ROW, "x\x00,1,resnet50,1,64,10,,,", "job_id"),
        (load_pollux, POLLUX_HEADER, POLLUX_ROW, "y,10,cifar10,8,4", "batch_size"),
        (load_pollux, POLLUX_HEADER, POLLUX_ROW, "y,10,cifar10,٨,64", "num_replicas"),
        (
            load_pollux,
            POLLUX_HEADER,
            POLLUX_ROW,
            "y,10,cifar10,1,18446744073709551616",
            "batch_size",
        ),
        (load_pollux, POLLUX_HEADER, POLLUX_ROW, "y\x00,10,cifar10,1,64", "name"),
    ],
)
def test_other_formats_wrong_numbers_are_refused(
    tmp_path: Path, loader: Any, header: str, good: str, row: str, field: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(f"{header}\n{good}\n{row}\n", encoding="utf-8")
    with pytest.raises(TraceFormatError) as info:
        loader(path)
    assert (info.value.line, info.value.field) == (3, field)
    one_line(info.value, f"{path}:3")


def test_largest_allowed_values_load_exactly(tmp_path: Path) -> None:
    path = tmp_path / "max.csv"
    path.write_text(
        "job_id,arrival_s,model,num_gpus,batch_size,iterations,weight\n"
        "x,1000000000000,resnet50,1048576,2147483647,1e15,1000000\n"
    )
    (job,) = load_workload(path).jobs
    assert (job.num_gpus, job.batch_size, job.weight) == (1 << 20, (1 << 31) - 1, 1e6)


def parallel_graphs() -> Iterator[tuple[str, nx.Graph]]:
    base = make_topology("testbed-8").graph
    u, v = next(iter(base.edges()))
    bw = base.edges[u, v]["bandwidth"]
    multi = nx.MultiDiGraph(base)
    multi.add_edge(u, v, bandwidth=bw / 2)
    yield "MultiDiGraph", multi
    und = nx.MultiGraph(base.to_undirected() if base.is_directed() else base)
    und.add_edge(u, v, bandwidth=bw / 2)
    yield "MultiGraph", und
    both = nx.DiGraph(base)
    both.add_edge(v, u, bandwidth=bw / 2)
    yield "DiGraph both ways", both


@pytest.mark.parametrize("kind", ["MultiDiGraph", "MultiGraph", "DiGraph both ways"])
def test_parallel_edges_are_refused(kind: str) -> None:
    graph = dict(parallel_graphs())[kind]
    root = make_topology("testbed-8").node_names[0]
    with pytest.raises(TopologyError, match="more than once") as info:
        Topology.from_graph(graph, root=root)
    assert "\n" not in str(info.value)


def test_multidigraph_without_parallel_edges_still_loads() -> None:
    topo = make_topology("testbed-8")
    again = Topology.from_graph(nx.MultiDiGraph(topo.graph), root=topo.node_names[0])
    assert again.num_gpus == topo.num_gpus
    assert list(again.link_bw) == list(topo.link_bw)


def test_json_scenario_file_name_appears_once(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"queue_size": True}))
    with pytest.raises(ConfigError) as info:
        get_scenario(str(p))
    assert str(info.value).count(str(p)) == 1


@pytest.mark.parametrize(
    "header",
    ['"job_id\nx",arrival_s,model,num_gpus,batch_size,iterations', "job\x00id,arrival_s,model"],
)
def test_header_with_control_characters_is_one_line(tmp_path: Path, header: str) -> None:
    path = tmp_path / "h.csv"
    path.write_text(header + "\nj1,5,resnet50,4,128,1000\n")
    with pytest.raises(TraceFormatError) as info:
        load_workload(path, format="csv")
    assert (info.value.line, info.value.field) == (1, "header")
    one_line(info.value, f"{path}:1")
