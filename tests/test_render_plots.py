"""The figures: ``compare --plot``, ``simulate --plot`` and the study's bars and JCT CDFs.

Inspects the matplotlib objects: every axis is labelled (with units), bar axes start at 0, legends
exist, utilisation and F are on separate axes, and CROP's CDF line is on top and distinct.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from crop_gym.baselines.compare import plot_figure, run_compare
from crop_gym.policy import make_policy
from crop_gym.sim import Simulator
from crop_gym.study.figures import bars_figure, jct_cdf_figure, write_setting_figures
from crop_gym.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]


def _labelled(ax: Any) -> None:
    assert ax.get_xlabel().strip() and ax.get_ylabel().strip()


def _legend_texts(fig: Any) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends, "no legend"
    return [t.get_text() for leg in legends for t in leg.get_texts()]


def test_compare_plot_bars_start_at_zero_with_a_legend() -> None:
    result = run_compare(
        "testbed-8", seeds=2, policies=["crop", "crop-nonrobust", "first-fit"], progress=False
    )
    fig = plot_figure(result)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        _labelled(ax)
        assert ax.get_ylim()[0] == 0.0
        assert "(" in ax.get_ylabel()  # a unit
    assert {"CROP", "CROP ablation", "baseline"} <= set(_legend_texts(fig))


def test_simulate_plot_has_separate_utilisation_and_F_axes() -> None:
    jobs = [
        dataclasses.replace(
            j, iterations=max(1.0, j.iterations * 0.02), num_gpus=min(j.num_gpus, 8)
        )
        for j in load_workload("elasticflow:cluster10").jobs[:30]
    ]
    res = Simulator(jobs, "leafspine-64", profile="mild", seed=0).run(make_policy("first-fit"))
    fig = res.figure()
    assert len(fig.axes) == 3
    by_label = {ax.get_ylabel(): ax for ax in fig.axes}
    util = next(ax for label, ax in by_label.items() if "utilisation" in label)
    eff = next(ax for label, ax in by_label.items() if "effective GPUs" in label)
    assert util is not eff and "%" in util.get_ylabel() and "GPUs" in eff.get_ylabel()
    assert util.get_ylim()[0] == 0.0 and eff.get_ylim()[0] == 0.0
    for ax in fig.axes:
        assert ax.get_ylabel().strip()
        assert ax.get_legend() is not None
    assert "hours" in eff.get_xlabel() and "hours" in fig.axes[0].get_xlabel()


def _records() -> list[dict[str, Any]]:
    """Synthetic study records: CROP and two baselines, two profiles, two seeds."""
    out = []
    for seed in (0, 1):
        for prof in ("none", "severe"):
            for k, policy in enumerate(("first-fit", "crop", "crop-plain", "random")):
                base = np.geomspace(600.0, 2e5, 101) * (1 + 0.2 * k + 0.1 * seed)
                out.append(
                    {
                        "trace": "elasticflow:cluster10",
                        "jobs": None,
                        "cluster": "n32g8",
                        "arrival_scale": 1.0,
                        "abnormal": prof,
                        "policy": policy,
                        "seed": seed,
                        "mean_jct_s": float(base.mean()),
                        "mean_efficiency": 0.9 - 0.1 * k,
                        "mean_effective_gpus": 5.0 - k,
                        "jct_quantiles_s": base.tolist(),
                    }
                )
    return out


def test_study_bars_start_at_zero_with_a_legend() -> None:
    fig = bars_figure(_records(), "cluster10 on n32g8")
    assert len(fig.axes) == 3
    for ax in fig.axes:
        _labelled(ax)
        assert ax.get_ylim()[0] == 0.0
    assert {"none", "severe"} <= set(_legend_texts(fig))
    # CROP leads the policy axis.
    assert fig.axes[0].get_xticklabels()[0].get_text() == "crop"


def test_study_bars_accept_seeds_with_equal_values() -> None:
    # Three seeds of one value: their mean can sit a rounding error above the minimum, which
    # matplotlib refuses as a negative error bar unless it is clipped.
    base = {"policy": "crop", "abnormal": "none", "mean_effective_gpus": 1.0}
    recs = [{**base, "seed": s, "mean_jct_s": 3600.0, "mean_efficiency": 0.1} for s in range(3)]
    assert max([0.1] * 3) - np.mean([0.1] * 3) < 0  # the case
    assert len(bars_figure(recs).axes) == 3


def test_jct_cdf_draws_crop_under_the_others_and_distinct() -> None:
    # CROP is a wide band under the other lines (issue 30: on top, its thick line hid a policy
    # with the same curve).
    fig = jct_cdf_figure(_records(), "cluster10 on n32g8")
    assert len(fig.axes) == 2  # one panel per profile
    for ax in fig.axes:
        _labelled(ax)
        assert "hours" in ax.get_xlabel()
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        crop = lines["crop"]
        others = [ln for name, ln in lines.items() if name != "crop"]
        assert all(crop.get_zorder() < ln.get_zorder() for ln in others)
        assert all(crop.get_linewidth() > ln.get_linewidth() for ln in others)
        assert lines["crop-plain"].get_linestyle() != crop.get_linestyle()
        assert ax.get_lines()[0] is crop  # drawn first
    assert set(_legend_texts(fig)) == {"crop", "crop-plain", "first-fit", "random"}


def test_docs_figures_are_made_from_the_stored_runs(tmp_path: Path) -> None:
    runs = json.loads((ROOT / "docs/results/study/results.json").read_text())["runs"]
    runs = [r for r in runs if r["trace"] == "elasticflow:cluster10"]
    written = write_setting_figures(runs, tmp_path, prefix="study_")
    names = sorted(p.name for p in written)
    assert names == ["study_cluster10_on_n32g8_bars.png", "study_cluster10_on_n32g8_jct_cdf.png"]
    assert all((ROOT / "docs/figures" / n).exists() for n in names)
    assert all(p.stat().st_size > 10_000 for p in written)
