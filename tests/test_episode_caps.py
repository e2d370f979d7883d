"""Issue 30, item 13: ``spec.max_episode_steps`` is set for every ID, and is the env's own cap.

Wrappers, SB3 and rl-zoo3 read the cap from the spec. The environment truncates itself at the same
step, so Gymnasium's TimeLimit never changes an episode: played with the same seed and actions,
``gym.make(ID)`` and ``gym.make(ID, max_episode_steps=-1)`` (no TimeLimit) give the same episode,
step for step, and one that runs to the cap ends truncated at exactly that step.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.envs.registration import ENV_IDS, EPISODE_CAPS

IDS = sorted(ENV_IDS)
#: IDs small enough to play every step of an episode that runs to the cap in the suite.
SMALL = [i for i in IDS if EPISODE_CAPS[i] <= 128 and "512" not in i and "1024" not in i]


@pytest.mark.parametrize("env_id", IDS)
def test_the_spec_cap_is_the_envs_own(env_id: str) -> None:
    spec = gym.spec(env_id)
    assert spec.max_episode_steps == EPISODE_CAPS[env_id]
    env = gym.make(env_id)
    assert env.spec is not None and env.spec.max_episode_steps == spec.max_episode_steps
    assert env.unwrapped.max_steps == spec.max_episode_steps  # type: ignore[attr-defined]
    env.close()


def _play(env: gym.Env, seed: int, policy: str) -> list[tuple[float, bool, bool]]:
    """One episode: (reward, terminated, truncated) per step; ``policy`` picks valid actions."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    trail = []
    while True:
        mask = np.asarray(env.unwrapped.action_masks(), dtype=bool)  # type: ignore[attr-defined]
        valid = np.flatnonzero(mask)
        if policy == "never-stop" and len(valid) > 1:
            valid = valid[valid != len(mask) - 1] if mask[-1] else valid
        action = int(rng.choice(valid))
        _, reward, terminated, truncated, _ = env.step(action)
        trail.append((float(reward), bool(terminated), bool(truncated)))
        if terminated or truncated:
            return trail


@pytest.mark.parametrize("env_id", SMALL)
@pytest.mark.parametrize("policy", ["random", "never-stop"])
def test_time_limit_changes_no_episode(env_id: str, policy: str) -> None:
    wrapped, bare = gym.make(env_id), gym.make(env_id, max_episode_steps=-1)
    for seed in range(3):
        a, b = _play(wrapped, seed, policy), _play(bare, seed, policy)
        assert a == b
        assert len(a) <= EPISODE_CAPS[env_id]
        if len(a) == EPISODE_CAPS[env_id]:
            assert a[-1][1] or a[-1][2]  # the env itself ended it there
    wrapped.close()
    bare.close()


def test_the_vector_env_of_an_id_keeps_the_cap() -> None:
    vec = gym.make_vec("crop_gym/Placement-Testbed8-v0", num_envs=2)
    single = vec.unwrapped.single  # type: ignore[attr-defined]
    assert single.max_steps == EPISODE_CAPS["crop_gym/Placement-Testbed8-v0"]
    vec.close()
