"""Issue 30, items 11 and 12 (the warning): ``crop-gym study``'s own summary.

The headline compares CROP with the other policies, not with its own variants (``crop-plain``
places as CROP does, so every row read +0.0 %), as docs/RESULTS.md does; ``--json`` writes the
summary; a summary with fewer than three seeds warns.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crop_gym.cli import main
from crop_gym.study.report import Interval, SummaryRow, headline, is_variant, summary_markdown


def _row(policy: str, jct: float, eta: float, seeds: tuple[int, ...] = (0, 1, 2)) -> SummaryRow:
    setting = {
        "trace": "elasticflow:cluster04",
        "cluster": "n64g8",
        "hardware": "default",
        "policy": policy,
        "abnormal": "mild",
        "jobs": None,
        "arrival_scale": 1.0,
        "sim": {},
    }
    stats = {
        "mean_jct_s": Interval(jct, jct, jct, 3),
        "mean_efficiency": Interval(eta, eta, eta, 3),
    }
    return SummaryRow(setting, seeds, stats)


ROWS = [
    _row("crop", 100.0, 0.90),
    _row("crop-plain", 100.0, 0.90),  # the same placements as CROP
    _row("crop-nonrobust", 101.0, 0.95),  # the ablation: better η̄, not a baseline
    _row("comm-greedy", 110.0, 0.80),
    _row("best-fit", 125.0, 0.85),
]


def test_variants_are_named_after_the_reference() -> None:
    assert is_variant("crop-plain", "crop") and is_variant("crop-nonrobust", "crop")
    assert not is_variant("crop", "crop") and not is_variant("comm-greedy", "crop")
    assert not is_variant("cropper", "crop")


def test_the_headline_compares_with_the_best_baseline_not_a_variant() -> None:
    (row,) = headline(ROWS, "crop")
    cells = {c.metric: c for c in row.cells}
    assert cells["mean_jct_s"].policy == "comm-greedy"
    assert cells["mean_jct_s"].change == pytest.approx(100.0 / 110.0 - 1.0)
    assert cells["mean_efficiency"].policy == "best-fit"
    assert cells["mean_efficiency"].change == pytest.approx(0.90 / 0.85 - 1.0)
    text = summary_markdown(ROWS)
    assert "-9.1% (comm-greedy)" in text and "+5.9% (best-fit)" in text and "+0.0%" not in text
    assert "| mild | crop-plain |" in text  # the tables still show every policy


def test_fewer_than_three_seeds_warn_in_the_summary() -> None:
    assert "Warning" not in summary_markdown(ROWS)
    few = [_row(p.setting["policy"], 100.0, 0.9, seeds=(0, 1)) for p in ROWS]
    assert "**Warning:** the summary has settings with 2 seed(s)" in summary_markdown(few)


def test_study_writes_its_summary_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["study", "--traces", "elasticflow:195job", "--jobs", "20", "--cluster", "n32g8"]
    argv += ["--policies", "crop,crop-plain,first-fit", "--seeds", "2", "--workers", "1"]
    argv += [
        "--no-plot",
        "--no-progress",
        "--out",
        str(tmp_path / "s"),
        "--json",
        str(tmp_path / "s.json"),
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.startswith("crop-gym study: warning: the summary has settings with 2 seed(s)")
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["seeds"] == [0, 1] and data["reference"] == "crop" and len(data["warnings"]) == 1
    (head,) = data["headline"]
    assert head["mean_jct_s"]["policy"] == "first-fit"  # crop-plain is left out
    policies = {s["setting"]["policy"] for s in data["settings"]}
    assert policies == {"crop", "crop-plain", "first-fit"}
    stats = data["settings"][0]["stats"]["mean_jct_s"]
    assert set(stats) == {"mean", "low", "high", "n"} and stats["n"] == 2
