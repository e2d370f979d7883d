"""The static evaluation report gives the ratio to CROP with its paired bootstrap interval."""

from __future__ import annotations

from typing import Any

import pytest

from crop_gym.agents.evaluation import summarize


def _records(policy_F: list[float], crop_F: list[float]) -> list[dict[str, Any]]:
    return [
        {
            "seed": 10**9 + i,
            "F_start": 0.0,
            "policy": {"F": p, "gain": p, "invalid_actions": 0},
            "baselines": {"crop": {"F": c, "gain": c, "seconds": 0.0}},
        }
        for i, (p, c) in enumerate(zip(policy_F, crop_F, strict=True))
    ]


def test_equal_play_has_a_point_interval_at_one() -> None:
    out = summarize(
        _records([5.0, 7.0, 9.0], [5.0, 7.0, 9.0]), env_id="x", first_seed=10**9, kind="static"
    )
    assert out["ratio_to_crop"] == 1.0
    assert out["ratio_to_crop_ci"] == [1.0, 1.0]


def test_a_policy_above_crop_on_every_instance_has_its_interval_above_one() -> None:
    crop = [10.0, 20.0, 30.0, 40.0]
    policy = [11.0, 21.0, 31.0, 44.0]  # ratios of resampled means lie in [1.025, 1.1]
    out = summarize(_records(policy, crop), env_id="x", first_seed=10**9, kind="static")
    assert out["ratio_to_crop"] == pytest.approx(107 / 100)
    low, high = out["ratio_to_crop_ci"]
    assert 1.025 <= low <= out["ratio_to_crop"] <= high <= 1.1
