"""scripts/publish_study.py: docs/RESULTS.md's trace section is rebuilt from a study folder alone."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from crop_gym.cli import main as crop_gym

ROOT = Path(__file__).resolve().parents[1]


def _publisher():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "publish_study", ROOT / "scripts/publish_study.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("study")
    argv = ["study", "--traces", "elasticflow:cluster10", "--policies", "crop,best-fit,random"]
    argv += ["--abnormal", "none,severe", "--seeds", "3", "--jobs", "60", "--workers", "1"]
    assert crop_gym([*argv, "--no-progress", "--out", str(out)]) == 0
    return out


def test_paired_change_is_the_mean_of_per_seed_ratios() -> None:
    mean, low, high = _publisher().paired_change([2.0, 3.0, 4.0], [4.0, 3.0, 2.0], seed=0)
    assert mean == pytest.approx(((0.5 - 1) + 0 + (2 - 1)) / 3)
    assert low <= mean <= high and low >= -0.5 and high <= 1.0


def test_section_is_rewritten_from_the_stored_runs(study: Path, tmp_path: Path) -> None:
    pub = _publisher()
    md = tmp_path / "RESULTS.md"
    md.write_text(f"# Results\n\nbefore\n\n{pub.BEGIN} old -->\nold text\n{pub.END}\n\nafter\n")
    argv = ["--study-dir", str(study), "--results", str(md), "--figures", str(tmp_path / "fig")]
    argv += ["--shipped", str(tmp_path / "shipped"), "--wall-s", "7200", "--command", "CMD X"]
    assert pub.main(argv) == 0
    text = md.read_text()
    assert text.startswith("# Results\n\nbefore\n\n") and text.endswith(f"{pub.END}\n\nafter\n")
    assert "old text" not in text and "CMD X" in text and "2.00 hours" in text
    assert "**18 runs**" in text and "3 seeds (0, 1, 2)" in text
    recs = json.loads((study / "results.json").read_text())["runs"]
    cpu = sum(r["cpu_s"] for r in recs) / 3600
    assert f"{cpu:.2f} CPU-hours in all" in text
    # Headline rows carry paired intervals; the per-trace table has one row per run setting.
    head = [ln for ln in text.splitlines() if ln.startswith("| cluster10[:60] on n32g8 |")]
    assert len(head) == 2 and all(ln.count("[") >= 3 for ln in head)
    assert text.count("| severe | random |") == 1
    figs = sorted(p.name for p in (tmp_path / "fig").iterdir())
    assert figs == [
        "study_cluster10__60__on_n32g8_bars.png",
        "study_cluster10__60__on_n32g8_jct_cdf.png",
    ]
    assert (tmp_path / "shipped" / "results.csv").exists()


def test_a_folder_without_results_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pub = _publisher()
    assert pub.main(["--study-dir", str(tmp_path), "--results", str(tmp_path / "R.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a finished study folder" in err
