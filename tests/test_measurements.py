"""The Pollux/Sia measurement loader: layout, mapping, and one-line errors on bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crop_gym.calibration.measurements import KINDS, POLLUX_APPLICATIONS, load_measurements
from crop_gym.errors import ConfigError, CropGymError, TraceFormatError

SIA = Path(__file__).resolve().parents[2] / "shared" / "data" / "sia-profiles"


def _write(root: Path, app: str, name: str, text: str) -> Path:
    (root / app).mkdir(parents=True, exist_ok=True)
    path = root / app / name
    path.write_text(text)
    return path


def test_reads_both_kinds_by_header(tmp_path: Path) -> None:
    _write(tmp_path, "bert", "placements.csv", "step_time,placement,local_bsz\n0.5,22,8\n0.2,1,8\n")
    _write(
        tmp_path,
        "bert",
        "scalability.csv",
        "local_bsz,step_time,sync_time,num_nodes,num_replicas\n8,0.7,0.1,3,4\n",
    )
    m = load_measurements(tmp_path)
    assert len(m) == 3
    assert list(m.kind) == ["placements", "placements", "scalability"]
    # Largest first, zero-padded; 4 GPUs over 3 nodes put the extra GPU on one node.
    assert m.placement.tolist() == [[2, 2, 0], [1, 0, 0], [2, 1, 1]]
    assert m.num_gpus.tolist() == [4, 1, 4]
    assert m.num_nodes.tolist() == [2, 1, 3]
    assert np.isnan(m.sync_time[:2]).all() and m.sync_time[2] == 0.1
    assert set(m.model) == {"bert"}
    assert m.source[0].endswith("placements.csv:2")


def test_cluster_suffix_is_chosen_or_required(tmp_path: Path) -> None:
    for c in ("a", "b"):
        _write(tmp_path, "ncf", f"placements-{c}.csv", "placement,local_bsz,step_time\n1,4,0.1\n")
    with pytest.raises(ConfigError, match="several clusters"):
        load_measurements(tmp_path)
    assert len(load_measurements(tmp_path, cluster="b")) == 1
    with pytest.raises(ConfigError, match="no placements/scalability files of cluster 'c'"):
        load_measurements(tmp_path, cluster="c")


def test_unknown_application_is_refused_unless_mapped(tmp_path: Path) -> None:
    _write(tmp_path, "mystery", "placements.csv", "placement,local_bsz,step_time\n1,4,0.1\n")
    with pytest.raises(ConfigError, match="'mystery' is not mapped"):
        load_measurements(tmp_path)
    m = load_measurements(tmp_path, app_map={"mystery": "vgg16"})
    assert list(m.model) == ["vgg16"]
    with pytest.raises(ConfigError, match="not a model of the zoo"):
        load_measurements(tmp_path, app_map={"mystery": "nope"})


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("placement,local_bsz\n1,4\n", 1, "step_time"),
        ("placement,local_bsz,step_time\n1,4,0.1\n102,4,0.1\n", 3, "placement"),
        ("placement,local_bsz,step_time\n2x,4,0.1\n", 2, "placement"),
        ("placement,local_bsz,step_time\n1,-4,0.1\n", 2, "local_bsz"),
        ("placement,local_bsz,step_time\n1,4,nan\n", 2, "step_time"),
        ("placement,local_bsz,step_time\n1,4,0\n", 2, "step_time"),
        ("placement,local_bsz,step_time,sync_time\n1,4,0.1,-1\n", 2, "sync_time"),
        ("placement,local_bsz,step_time\n1,4\n", 2, "step_time"),
    ],
)
def test_bad_rows_name_file_line_and_column(
    tmp_path: Path, text: str, line: int, field: str | None
) -> None:
    path = _write(tmp_path, "bert", "placements.csv", text)
    with pytest.raises(TraceFormatError) as info:
        load_measurements(tmp_path)
    assert info.value.line == line and info.value.field == field
    assert str(info.value).startswith(f"{path}:{line}")
    assert "\n" not in str(info.value)


def test_scalability_needs_at_least_one_gpu_per_node(tmp_path: Path) -> None:
    _write(
        tmp_path, "bert", "scalability.csv", "num_nodes,num_replicas,local_bsz,step_time\n4,3,8,1\n"
    )
    with pytest.raises(TraceFormatError, match="num_replicas"):
        load_measurements(tmp_path)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="measurement folder not found"):
        load_measurements(tmp_path / "nope")
    with pytest.raises(ConfigError, match="no placements/scalability files"):
        load_measurements(tmp_path)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_bytes_give_a_one_line_error_or_rows(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "bert").mkdir()
    (root / "bert" / "placements.csv").write_bytes(b"placement,local_bsz,step_time\n" + data)
    try:
        m = load_measurements(root)
    except CropGymError as e:
        assert "\n" not in str(e) and str(e)
    else:
        assert (m.step_time > 0).all() and (m.placement >= 0).all()


@pytest.mark.skipif(not SIA.is_dir(), reason="the Sia measurements are not on this machine")
def test_sia_row_counts_match_its_readme() -> None:
    counts = {"azure": 2852, "dgx": 2362, "dgx-ext": 2940, "quad": 260, "rtx": 2337}
    for cluster, rows in counts.items():
        m = load_measurements(SIA, cluster=cluster, kinds=("placements",))
        assert len(m) == rows
        assert set(m.app) <= set(POLLUX_APPLICATIONS)


# ------------------------------------------------------------------ which placement a row measured
def test_scalability_placement_column_is_used_and_checked(tmp_path: Path) -> None:
    head = "num_nodes,num_replicas,local_bsz,step_time,placement\n"
    _write(tmp_path, "bert", "scalability.csv", head + "3,5,8,0.7,311\n2,4,8,0.5,22\n")
    m = load_measurements(tmp_path)
    assert m.placement.tolist() == [[3, 1, 1], [2, 2, 0]]
    assert m.sources.tolist() == ["file", "file"]
    assert m.placement_notes() == []
    _write(tmp_path, "bert", "scalability.csv", head + "3,5,8,0.7,32\n")
    with pytest.raises(TraceFormatError, match="not 5 GPUs on 3 nodes") as info:
        load_measurements(tmp_path)
    assert (info.value.line, info.value.field) == (2, "placement")


def _copies(root: Path) -> None:
    _write(
        root,
        "bert",
        "placements.csv",
        "placement,local_bsz,step_time,sync_time\n31,8,0.5,0.1\n22,8,0.4,0.1\n",
    )
    _write(
        root,
        "bert",
        "scalability.csv",
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
        "2,4,8,0.5,0.1\n"  # a copy of the 31 row: its placement is 31, not the even 22
        "2,4,8,0.45,0.1\n"  # measured nowhere else: assumed even
        "3,4,8,0.5,0.1\n",  # same times as 31, but 3 nodes: not that measurement
    )


def test_a_copied_row_takes_the_measured_placement(tmp_path: Path) -> None:
    _copies(tmp_path)
    m = load_measurements(tmp_path, duplicates="keep")
    assert m.placement.tolist() == [[3, 1, 0], [2, 2, 0], [3, 1, 0], [2, 2, 0], [2, 1, 1]]
    assert m.sources.tolist() == ["file", "file", "copy", "even", "even"]
    assert m.duplicated().tolist() == [False, False, True, False, False]
    notes = m.placement_notes()
    assert len(notes) == 1 and "scalability.csv: 3 rows without a placement column" in notes[0]
    assert "1 placed as the identical placements row" in notes[0] and "2 assumed" in notes[0]
    dropped = load_measurements(tmp_path)
    assert len(dropped) == 4 and dropped.sources.tolist() == ["file", "file", "even", "even"]
    with pytest.raises(ConfigError, match="duplicates"):
        load_measurements(tmp_path, duplicates="maybe")


def test_an_ambiguous_copy_stays_even(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "ncf",
        "placements.csv",
        "placement,local_bsz,step_time,sync_time\n31,8,0.5,0.1\n22,8,0.5,0.1\n",
    )
    _write(
        tmp_path,
        "ncf",
        "scalability.csv",
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,4,8,0.5,0.1\n",
    )
    m = load_measurements(tmp_path, duplicates="keep")
    assert m.sources.tolist() == ["file", "file", "even"]


@pytest.mark.skipif(not SIA.is_dir(), reason="the Sia measurements are not on this machine")
def test_sia_dgx_ext_copies_get_their_measured_placement() -> None:
    m = load_measurements(SIA, cluster="dgx-ext", kinds=KINDS, duplicates="keep")
    sc = m.select(m.kind == "scalability")
    copy = sc.sources == "copy"
    assert (len(sc), int(copy.sum())) == (2184, 2016)
    k, n = sc.num_gpus, sc.num_nodes
    even_max = -(-k // n)  # the even spread's largest node
    assert int((copy & (sc.placement.max(axis=1) != even_max)).sum()) == 940
    assert len(load_measurements(SIA, cluster="dgx-ext")) == 2940 + 2184 - 2016
