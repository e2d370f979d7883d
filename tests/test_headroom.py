"""The headroom machinery (agents/headroom.py) in its fast mode, and the proven upper bound."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from crop_gym.agents.headroom import main
from crop_gym.baselines.crop import crop_greedy
from crop_gym.baselines.exact import optimum, upper_bound
from crop_gym.scenario import ScenarioSampler


@pytest.mark.parametrize("scenario", ["testbed-8", "default", "default-severe"])
def test_upper_bound_bounds_crop_and_the_optimum(scenario: str) -> None:
    sampler = ScenarioSampler(scenario)
    for seed in range(3):
        inst = sampler.sample(np.random.default_rng(seed))
        ub = upper_bound(inst.state, inst.queue)
        assert ub >= crop_greedy(inst.state, inst.queue).F - 1e-9
        if scenario == "testbed-8":
            assert ub >= optimum(inst.state, inst.queue).F - 1e-9


def test_fast_mode_writes_the_table(tmp_path: Path) -> None:
    ids = ["crop_gym/Placement-Testbed8-v0", "crop_gym/OnlinePlacement-v1"]
    assert main(["--fast", "--learned", "none", "--out", str(tmp_path), "--ids", *ids]) == 0
    md = (tmp_path / "BENCHMARK.md").read_text()
    assert all(f"`{i}`" in md for i in ids)
    rows = json.loads((tmp_path / "results" / "headroom.json").read_text())
    static, online = rows
    assert static["bound_kind"] == "exact" and static["bound"] >= static["crop"] - 1e-9
    assert static["random"] <= static["bound"] + 1e-9
    reach = static["reach"]
    assert static["crop"] - 1e-9 <= reach["best"] <= static["bound"] + 1e-9
    assert reach["exact"] == 2 and reach["within_5pct"] == 2 and reach["proven_optimal"] == 2
    assert reach["gap"] == pytest.approx(0) and reach["violations"] == 0
    assert reach["missed"] == []  # exact bounds are never missed
    assert reach["gap_ci"][0] <= reach["gap"] <= reach["gap_ci"][1]
    assert "How far the best achieved F is from the bound" in md
    assert online["bound"] <= online["crop"] + 1e-9  # the best rollout includes CROP's
    assert online["extra"]["hindsight_lower_bound_h"] <= online["bound"] + 1e-9
    # The lookahead on the best JCT heuristic is one of the rollouts, and never worse than its base.
    e = online["extra"]
    assert online["bound"] <= e["lookahead_h"] + 1e-9
    assert e["lookahead_top"] == 1  # --fast
    low, high = e["lookahead_over_best_heuristic_low"], e["lookahead_over_best_heuristic_high"]
    assert low <= e["lookahead_over_best_heuristic"] <= high
    if online["best_heuristic_name"] == online["lookahead_base"]:
        assert e["lookahead_over_best_heuristic"] <= 1 + 1e-9
    assert f"({online['lookahead_base']}, top 1)" in md
    assert (tmp_path / "results" / "headroom.csv").read_text().startswith("env_id,")


def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--ids", "crop_gym/Nope-v0", "--out", "/tmp/unused-headroom"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("headroom:") and "\n" not in err


def test_static_reach_on_a_64_gpu_task(tmp_path: Path) -> None:
    """On Severe the sharing bound is used, and the best achieved F lies between CROP's and it."""
    ids = ["crop_gym/Placement-Severe-v0"]
    argv = ["--fast", "--learned", "none", "--search-depth", "1", "--out", str(tmp_path)]
    assert main([*argv, "--ids", *ids]) == 0
    (row,) = json.loads((tmp_path / "results" / "headroom.json").read_text())
    reach = row["reach"]
    assert set(reach["bound_kinds"]) <= {"milp", "milp dual", "lp", "knapsack"}
    assert reach["crop_rollout"] is not None and reach["search"] is not None
    assert row["crop"] - 1e-9 <= reach["best"] <= row["bound"] + 1e-9
    assert reach["violations"] == 0
    assert len(reach["missed"]) == row["seeds"] - reach["within_5pct"]
    assert all(m[0] >= 10**9 and m[1] > 1 - 1 / 1.05 for m in reach["missed"])
    assert reach["best"] >= max(reach["crop_rollout"], reach["search"]) - 1e-9
    # --ids merges: a second ID keeps the first row, and the rows read back.
    assert main([*argv, "--ids", "crop_gym/Placement-Testbed8-v0"]) == 0
    rows = json.loads((tmp_path / "results" / "headroom.json").read_text())
    assert [r["env_id"] for r in rows] == [*ids, "crop_gym/Placement-Testbed8-v0"]
    assert rows[0]["reach"] == reach


def test_static_learned_column_plays_the_checkpoint_trained_on_the_id(tmp_path: Path) -> None:
    pytest.importorskip("sb3_contrib")
    ids = ["crop_gym/Placement-Severe-v0"]
    assert main(["--fast", "--out", str(tmp_path), "--ids", *ids]) == 0
    (row,) = json.loads((tmp_path / "results" / "headroom.json").read_text())
    assert row["learned_name"] == "default-severe" and row["learned"] is not None
    assert "`Placement-Severe-v0`: `default-severe`" in (tmp_path / "BENCHMARK.md").read_text()


def test_baselines_never_import_or_name_agents() -> None:
    """The headroom table sits above both layers: ``baselines`` names no ``agents`` module."""
    import ast

    import crop_gym.baselines

    root = Path(crop_gym.baselines.__file__).parent
    offenders = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if "crop_gym.agents" in node.value else []
            offenders += [
                f"{path.name}:{node.lineno}: {n}"
                for n in names
                if n.startswith(("crop_gym.agents", "agents")) or "crop_gym.agents" in n
            ]
    assert len(list(root.glob("*.py"))) > 10
    assert not offenders, offenders


def test_mean_ci_brackets_the_mean_and_narrows_with_more_values() -> None:
    from crop_gym.agents.stats import mean_ci

    rng = np.random.default_rng(3)
    small, large = rng.normal(1.0, 1.0, 10), rng.normal(1.0, 1.0, 1000)
    lo, hi = mean_ci(small)
    assert lo <= small.mean() <= hi
    lo2, hi2 = mean_ci(large)
    assert hi2 - lo2 < (hi - lo) / 3
    assert mean_ci([2.0]) == [2.0, 2.0]
    with pytest.raises(ValueError):
        mean_ci([])
