"""The Pollux/Sia measurement loader: layout, mapping, and one-line errors on bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crop_gym.calibration.measurements import POLLUX_APPLICATIONS, load_measurements
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
