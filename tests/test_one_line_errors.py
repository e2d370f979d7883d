"""Issue 30, class 4: one line, never a traceback.

Fuzz tables, one per sub-class seen from outside: a count option far beyond any machine
(``compare --seeds 10**12``), Ctrl-C while the command is still starting (building its parser,
reading its arguments), edge attributes of every wrong kind (each names the edge), every kind of
key in a scenario's ``[abnormal]`` table (each names ``abnormal.KEY``), and a quote or bracket that
is never closed, in every file format, at several places (each names the line it opened on).
"""

from __future__ import annotations

import itertools
import math
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import no_hang, small_tree

import crop_gym.cli
from crop_gym.cli import main
from crop_gym.errors import TopologyError
from crop_gym.model.topology import Topology

EF_HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        with no_hang(120):
            rc = main(argv)
    except SystemExit as e:
        rc = int(e.code or 0)
    except KeyboardInterrupt:  # (left to propagate, it would stop the whole test session)
        pytest.fail("KeyboardInterrupt escaped crop_gym.cli.main: a traceback for the user")
    return rc, capsys.readouterr().err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ----------------------------------------------------------------- counts beyond any machine
@pytest.mark.parametrize("seeds", ["1000000000000", "100000000000000000000"])
def test_a_seed_count_beyond_memory_is_one_line(
    seeds: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, err = _run(["compare", "--seeds", seeds, "--no-progress"], capsys)
    assert rc != 0 and "crop-gym compare" in _one_line(err)


def test_a_seed_count_beyond_the_cap_is_refused_as_input(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, err = _run(["compare", "--seeds", "1000000000000", "--no-progress"], capsys)
    assert rc == 2 and "seeds" in _one_line(err) and "10000" in err.replace(",", "")


# ----------------------------------------------------------------- Ctrl-C while starting
@pytest.mark.parametrize("stage", range(4))
def test_ctrl_c_while_the_parser_is_built_is_one_line(
    stage: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The parser loads each installed command through its entry point: interrupt the stage-th.
    real = EntryPoint.load
    calls = itertools.count()

    def load(self: EntryPoint) -> Any:
        if next(calls) == stage:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(EntryPoint, "load", load)
    rc, err = _run(["trace", "--list"], capsys)
    assert rc == 130 and _one_line(err) == "crop-gym: interrupted"


def test_ctrl_c_while_the_arguments_are_read_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(crop_gym.cli.CliParser, "parse_args", interrupted)
    rc, err = _run(["trace", "--list"], capsys)
    assert rc == 130 and _one_line(err) == "crop-gym: interrupted"


# ----------------------------------------------------------------- edge attributes
BAD_VALUES: list[Any] = [
    "fast",
    "1e9",
    "",
    None,
    True,
    False,
    [1e9],
    {"v": 1},
    b"1",
    complex(1, 0),
    math.nan,
    math.inf,
    -math.inf,
    -1.0,
    np.float64(math.nan),
]


@pytest.mark.parametrize("attr", ["bandwidth", "latency"])
@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
@pytest.mark.parametrize("edge", [("sw", "s1"), ("s0", "s0g1")])
def test_a_bad_edge_attribute_names_the_edge(attr: str, value: Any, edge: tuple[str, str]) -> None:
    g = small_tree()
    g.edges[edge][attr] = value
    with pytest.raises(TopologyError) as exc:
        Topology.from_graph(g)
    message = str(exc.value)
    assert f"edge {edge!r}" in message and attr in message and "\n" not in message, message


@pytest.mark.parametrize("value", [1, 2.5e9, np.float32(1e9), np.int64(7)], ids=repr)
def test_real_numbers_of_any_type_are_edge_attributes(value: Any) -> None:
    g = small_tree()
    g.edges["sw", "s1"]["bandwidth"] = value
    assert Topology.from_graph(g).num_gpus == 4


def test_a_zero_bandwidth_is_refused_and_a_zero_latency_taken() -> None:
    g = small_tree()
    g.edges["sw", "s1"]["latency"] = 0
    Topology.from_graph(g)
    g.edges["sw", "s1"]["bandwidth"] = 0
    with pytest.raises(TopologyError, match=r"edge \('sw', 's1'\) has bandwidth"):
        Topology.from_graph(g)


# ----------------------------------------------------------------- [abnormal] keys
ABNORMAL_KEYS: list[tuple[str, str, str | None]] = [
    # (id, TOML line in [abnormal], the field the refusal names; None = the scenario loads)
    ("name", 'name = "my-profile"', None),
    ("name-number", "name = 3", "abnormal.name"),
    ("misspelt", "slow_gpu_fac = 0.1", "abnormal.slow_gpu_fac"),
    ("unknown", "colour = 1", "abnormal.colour"),
    ("pair-text", 'slow_factor = "x"', "abnormal.slow_factor"),
    ("pair-short", "slow_factor = [1.0]", "abnormal.slow_factor"),
    ("frac-text", 'slow_gpu_frac = "a lot"', "abnormal.slow_gpu_frac"),
    ("gpus-float", "abnormal_gpus = 1.5", "abnormal.abnormal_gpus"),
    ("table", "onset_rate_per_gpu_hour = {x = 1}", "abnormal.onset_rate_per_gpu_hour"),
]


def test_an_abnormal_profile_that_is_not_a_name_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = tmp_path / "s.toml"
    sc.write_text('cluster = "testbed-8"\n[abnormal]\nprofile = 3\n')
    rc, err = _run(["compare", "--scenario", str(sc), "--seeds", "1", "--no-progress"], capsys)
    assert rc == 2 and "abnormal.profile" in _one_line(err)


@pytest.mark.parametrize(
    ("line", "field"), [c[1:] for c in ABNORMAL_KEYS], ids=[c[0] for c in ABNORMAL_KEYS]
)
def test_every_abnormal_key_names_its_field(
    line: str, field: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = tmp_path / "s.toml"
    sc.write_text(f'cluster = "testbed-8"\nqueue_size = 2\n[abnormal]\nprofile = "mild"\n{line}\n')
    rc, err = _run(
        [
            "compare",
            "--scenario",
            str(sc),
            "--seeds",
            "1",
            "--policies",
            "first-fit",
            "--no-progress",
        ],
        capsys,
    )
    if field is None:
        assert rc == 0, err
    else:
        message = _one_line(err)
        assert rc == 2 and str(sc) in message and field in message, message


# ----------------------------------------------------------------- unterminated quotes
def _csv(opened: int, after: int) -> str:
    rows = [EF_HEADER] + [
        f"j{i},{1000 + i},500,resnet50,9000,64,2,700" for i in range(1, opened - 1)
    ]
    rows.append('"broken,1000,500,resnet50,9000,64,2,700')
    rows += [f"k{i},{2000 + i},500,resnet50,9000,64,2,700" for i in range(after)]
    return "\n".join(rows) + "\n"


def _yaml(opened: int, after: int, bracket: bool = False) -> str:
    rows = ['cluster: "testbed-8"'] + [f"# filler {i}" for i in range(opened - 2)]
    rows.append("name: [a, b" if bracket else 'name: "mini')
    rows += ["queue_size: 2"] + [f"# more {i}" for i in range(after)]
    return "\n".join(rows) + "\n"


def _toml(opened: int, after: int, multi: bool = False) -> str:
    rows = ['cluster = "testbed-8"'] + [f"# filler {i}" for i in range(opened - 2)]
    rows.append('name = """mini' if multi else 'name = "mini')
    rows += ["queue_size = 2"] + [f"# more {i}" for i in range(after)]
    return "\n".join(rows) + "\n"


def _json(opened: int, after: int) -> str:
    rows = ["{", '"cluster": "testbed-8",'] + ['"queue_size": 2,' for _ in range(opened - 3)]
    rows.append('"name": "mini,')
    rows += ['"x": 1' for _ in range(after)] + ["}"]
    return "\n".join(rows) + "\n"


QUOTES = [
    (kind, opened, after)
    for kind in ("csv", "yaml", "yaml-bracket", "toml", "toml-multiline", "json")
    for opened, after in ((3, 0), (5, 3), (9, 40))
]


@pytest.mark.parametrize(
    ("kind", "opened", "after"), QUOTES, ids=[f"{k}-line{o}-then{a}" for k, o, a in QUOTES]
)
def test_an_unterminated_quote_names_the_line_it_opened_on(
    kind: str, opened: int, after: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if kind == "csv":
        path = tmp_path / "t.csv"
        path.write_text(_csv(opened, after))
        argv = ["trace", str(path)]
    else:
        suffix = kind.split("-")[0]
        text = {
            "yaml": lambda: _yaml(opened, after),
            "yaml-bracket": lambda: _yaml(opened, after, bracket=True),
            "toml": lambda: _toml(opened, after),
            "toml-multiline": lambda: _toml(opened, after, multi=True),
            "json": lambda: _json(opened, after),
        }[kind]()
        path = tmp_path / f"s.{suffix}"
        path.write_text(text)
        argv = ["compare", "--scenario", str(path), "--seeds", "1", "--no-progress"]
    assert text_line(path, opened).count('"') % 2 == 1 or "[" in text_line(path, opened)
    rc, err = _run(argv, capsys)
    message = _one_line(err)
    assert rc == 2 and f"{path}:{opened}:" in message, message


def text_line(path: Path, n: int) -> str:
    return path.read_text().splitlines()[n - 1]
