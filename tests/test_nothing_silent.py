"""Issue 30, class 5: nothing silent.

Inputs that used to be quietly replaced by something else: a job size larger than the cluster
(jobs were drawn smaller), an online window longer than the trace (the window was shortened), a
boolean taken as a number (``bandwidth=True`` as 1 byte/s), and a misspelt optional trace column
(ignored, so every job got the default). Each is now refused with one line naming the field, or,
for a column name close to a known one, warned about (and refused with ``strict``).
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import small_tree

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.cli import main
from crop_gym.errors import ConfigError, TopologyError, TraceFormatError
from crop_gym.model.topology import Topology, make_topology
from crop_gym.scenario import Scenario
from crop_gym.workloads.loader import load_workload

# ----------------------------------------------------------------- sizes beyond the cluster
SIZES = [
    (cluster, field, extra)
    for cluster in ("testbed-8", "leafspine-64", "pollux-16x4")
    for field in ("max_job_gpus", "background_max_gpus", "queue_min_gpus")
    for extra in (1, 7, 1 << 19)
]


@pytest.mark.parametrize(("cluster", "field", "extra"), SIZES)
def test_a_job_size_larger_than_the_cluster_is_refused(
    cluster: str, field: str, extra: int
) -> None:
    n = make_topology(cluster).num_gpus
    with pytest.raises(ConfigError) as exc:
        Scenario.from_dict({"cluster": cluster, field: n + extra}, source="s.toml")
    message = str(exc.value)
    assert "s.toml" in message and f"{field}={n + extra}" in message and f"{n} GPUs" in message
    scenario = Scenario(cluster=cluster, **{field: n + extra})  # built in code: refused when drawn
    with pytest.raises(ConfigError, match=field):
        _ = scenario.job_size_limit
    Scenario.from_dict({"cluster": cluster, field: n})  # the whole cluster is allowed


def test_the_cli_refuses_a_job_size_larger_than_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = tmp_path / "s.toml"
    sc.write_text('cluster = "testbed-8"\nmax_job_gpus = 16\n')
    assert main(["compare", "--scenario", str(sc), "--seeds", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "max_job_gpus=16" in err and "8 GPUs" in err


# ----------------------------------------------------------------- windows beyond the trace
@pytest.mark.parametrize(
    ("env_id", "window"),
    [
        ("crop_gym/OnlinePlacement-v0", 10**6),
        ("crop_gym/OnlinePlacement-v1", 10**6),
        ("crop_gym/OnlinePlacement-v0", 196),
    ],
)
def test_a_window_longer_than_the_trace_is_refused(env_id: str, window: int) -> None:
    with pytest.raises(ConfigError) as exc:
        gym.make(env_id, trace="elasticflow:195job", window_jobs=window)
    assert f"window_jobs={window}" in str(exc.value) and "195job" in str(exc.value)


def test_a_window_as_long_as_the_trace_is_allowed() -> None:
    env = gym.make("crop_gym/OnlinePlacement-v0", trace="elasticflow:195job", window_jobs=195)
    env.reset(seed=0)
    env.close()


# ----------------------------------------------------------------- booleans taken as numbers
@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.bool_(False)], ids=repr)
@pytest.mark.parametrize("attr", ["bandwidth", "latency"])
def test_a_boolean_edge_attribute_is_not_a_number(attr: str, value: object) -> None:
    g = small_tree()
    g.edges["sw", "s0"][attr] = value
    with pytest.raises(TopologyError, match=rf"edge \('sw', 's0'\).*{attr}"):
        Topology.from_graph(g)


# ----------------------------------------------------------------- misspelt columns
GENERIC = ("job_id", "arrival_s", "model", "num_gpus", "batch_size", "iterations")
ROW = ("a", "0", "resnet50", "2", "64", "100")


def _misspell(name: str, rng: random.Random) -> str:
    """One edit of ``name``: swap two neighbours, drop, double or change a letter."""
    i = rng.randrange(len(name) - 1)
    kind = rng.choice(("swap", "drop", "double", "change"))
    if kind == "swap":
        return name[:i] + name[i + 1] + name[i] + name[i + 2 :]
    if kind == "drop":
        return name[:i] + name[i + 1 :]
    if kind == "double":
        return name[:i] + name[i] + name[i:]
    letter = rng.choice([c for c in "abcdefghijklmnopqrstuvwxyz" if c != name[i]])
    return name[:i] + letter + name[i + 1 :]


MISSPELT = [("weight", "wieght"), ("deadline_s", "dedline_s"), ("duration_s", "duration")]
_rng = random.Random(30)
for _column in ("weight", "deadline_s", "duration_s"):
    for _ in range(4):
        _bad = _misspell(_column, _rng)
        if _bad != _column and (_column, _bad) not in MISSPELT:
            MISSPELT.append((_column, _bad))


@pytest.mark.parametrize(("column", "misspelt"), MISSPELT)
def test_a_misspelt_optional_column_warns_and_strict_refuses(
    column: str, misspelt: str, tmp_path: Path
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(",".join((*GENERIC, misspelt)) + "\n" + ",".join((*ROW, "3")) + "\n")
    with pytest.warns(UserWarning, match=rf"'{misspelt}'.*did you mean '{column}'"):
        load_workload(path)
    with pytest.raises(TraceFormatError) as exc:
        load_workload(path, strict=True)
    assert exc.value.line == 1 and exc.value.field == misspelt


def test_a_column_far_from_any_known_name_is_ignored_unless_strict(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(",".join((*GENERIC, "comment")) + "\n" + ",".join((*ROW, "hello")) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_workload(path).jobs) == 1
    with pytest.raises(TraceFormatError, match="comment"):
        load_workload(path, strict=True)


def test_the_cli_warns_in_one_line_and_strict_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(",".join((*GENERIC, "wieght")) + "\n" + ",".join((*ROW, "3")) + "\n")
    assert main(["trace", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("crop-gym trace: warning:") and "'weight'" in err
    assert main(["trace", str(path), "--strict"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "wieght" in err and "error" in err
