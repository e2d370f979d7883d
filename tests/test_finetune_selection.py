"""Model selection during RL fine-tuning (issue 32 item 4): which model a validation scores,
which model it keeps, and the seed ranges it uses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

import gymnasium as gym
import torch as th

import crop_gym  # noqa: F401
from crop_gym.agents.config import (
    EVAL_SEED_BASE,
    TRAIN_SEED_LIMIT,
    VALIDATION_SEED_BASE,
    check_entry,
)
from crop_gym.agents.networks import ObsSpec
from crop_gym.agents.policies import MaskableScorerPolicy
from crop_gym.agents.runstate import callbacks, keeps_later
from crop_gym.errors import ConfigError

TESTBED = "crop_gym/Placement-Testbed8-v0"


def test_keeps_later_hand_cases() -> None:
    assert keeps_later(0.99, None)  # the first validation is always kept
    assert keeps_later(1.0, 1.0)  # a tie goes to the later model (the strict rule kept step 0)
    assert keeps_later(1.0004, 0.9937)
    assert not keeps_later(0.9936, 0.9937)
    assert keeps_later(-0.98, -0.99)  # online: minus the JCT ratio, a lower JCT is better
    assert not keeps_later(-1.01, -1.0)


@given(st.floats(-10, 10), st.floats(-10, 10))
def test_keeps_later_is_at_least(score: float, best: float) -> None:
    assert keeps_later(score, best) == (score >= best)


def test_validation_seeds_are_disjoint_from_training_and_held_out() -> None:
    """The most validation episodes a config may ask for stay below the held-out seeds."""
    assert TRAIN_SEED_LIMIT <= VALIDATION_SEED_BASE
    check_entry("maskable_ppo", {"eval_episodes": 10**5}, "test")
    with pytest.raises(ConfigError, match="eval_episodes"):
        check_entry("maskable_ppo", {"eval_episodes": 10**5 + 1}, "test")
    assert VALIDATION_SEED_BASE + 10**5 <= EVAL_SEED_BASE


class _FakeRun:
    """The part of RunState the callback uses; records the policy each validation scores."""

    def __init__(self, eval_freq: int) -> None:
        self.eval_freq = eval_freq
        self.checkpoint_freq = 10**9
        self.curve: list[dict[str, Any]] = []
        self.scored: list[tuple[int, list[th.Tensor]]] = []

    def validate(self, model: Any, steps: int, phase: str = "rl") -> dict[str, Any]:
        params = [p.detach().clone() for p in model.policy.parameters()]
        self.scored.append((steps, params))
        row = {"steps": steps, "phase": phase, "ratio_to_crop": 1.0}
        self.curve.append(row)
        return row


def _same(a: list[th.Tensor], b: list[th.Tensor]) -> bool:
    return all(th.equal(x, y) for x, y in zip(a, b, strict=True))


def test_validations_score_the_model_after_each_update() -> None:
    """With SB3's real loop: every validation after step 0 sees the weights the rollout's update
    produced, and the last one scores the final model (the last update was never validated when
    validations ran inside the rollout's last step)."""
    from sb3_contrib import MaskablePPO

    env = gym.make(TESTBED)
    spec = {"scorer": {"hidden": 8, "embed": 8, "spec": ObsSpec.from_env(env).to_dict()}}
    model = MaskablePPO(
        MaskableScorerPolicy,
        env,
        seed=0,
        n_steps=32,
        batch_size=16,
        n_epochs=2,
        learning_rate=1e-2,
        policy_kwargs=spec,
    )
    run = _FakeRun(eval_freq=64)
    _, RunCallback = callbacks()
    model.learn(128, callback=[RunCallback(run)])
    steps = [s for s, _ in run.scored]
    assert steps == [0, 64, 128]
    final = [p.detach().clone() for p in model.policy.parameters()]
    assert _same(run.scored[-1][1], final)
    assert not _same(run.scored[0][1], final)  # the updates did move the weights
