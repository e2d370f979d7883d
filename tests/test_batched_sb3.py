"""The batched placement environment under SB3 (agents/batched.py): what a learner sees is what
``DummyVecEnv`` of monitored, reward-scaled single environments shows it, step for step."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

from crop_gym.agents.batched import BatchedVecEnv
from crop_gym.agents.envs import make_vec_env
from crop_gym.errors import ConfigError

pytestmark = pytest.mark.rl

IDS = ("crop_gym/Placement-Testbed8-v0", "crop_gym/Placement-v0")


def _same_info(a: dict[str, Any], b: dict[str, Any], where: str) -> None:
    assert list(a) == list(b) or set(a) == set(b), (where, set(a) ^ set(b))
    for key, x in a.items():
        y = b[key]
        if key == "episode":
            assert (x["r"], x["l"]) == (y["r"], y["l"]), where
            assert isinstance(y["t"], float)
        elif isinstance(x, dict):
            _same_info(x, y, f"{where}/{key}")
        else:
            assert type(np.asarray(x).dtype) is type(np.asarray(y).dtype), (where, key)
            np.testing.assert_array_equal(x, y, err_msg=f"{where}: {key}")


@pytest.mark.parametrize("env_id", IDS)
def test_batched_shows_what_dummy_shows(env_id: str) -> None:
    n, scale = 3, 0.05
    dummy = make_vec_env(env_id, n_envs=n, seed=11, reward_scale=scale)
    batched = make_vec_env(env_id, n_envs=n, seed=11, reward_scale=scale, vec_env="batched")
    assert isinstance(batched, BatchedVecEnv)
    assert batched.observation_space == dummy.observation_space
    assert batched.action_space == dummy.action_space
    obs_d, obs_b = dummy.reset(), batched.reset()
    rng = np.random.default_rng(0)
    episodes = 0
    for t in range(250):
        for key in obs_d:
            np.testing.assert_array_equal(obs_d[key], obs_b[key], err_msg=f"step {t}: {key}")
        masks = np.stack(dummy.env_method("action_masks"))
        np.testing.assert_array_equal(masks, np.stack(batched.env_method("action_masks")))
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        obs_d, rew_d, done_d, infos_d = dummy.step(actions)
        obs_b, rew_b, done_b, infos_b = batched.step(actions)
        assert rew_b.dtype == rew_d.dtype == np.float32
        np.testing.assert_array_equal(rew_d, rew_b)
        np.testing.assert_array_equal(done_d, done_b)
        for i, (x, y) in enumerate(zip(infos_d, infos_b, strict=True)):
            _same_info(x, y, f"step {t} env {i}")
            episodes += int("episode" in y)
        for i in np.flatnonzero(done_d):
            _same_info(dummy.reset_infos[i], batched.reset_infos[i], f"reset {t} env {i}")
    assert episodes >= 6  # autoresets were exercised
    dummy.close()
    batched.close()


def test_batched_trains_maskable_ppo() -> None:
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported

    venv = make_vec_env("crop_gym/Placement-Testbed8-v0", n_envs=4, seed=0, vec_env="batched")
    assert is_masking_supported(venv)
    assert get_action_masks(venv).shape == (4, venv.action_space.n)
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0)
    model.learn(128)
    assert model.num_timesteps == 128
    assert len(model.ep_info_buffer) > 0  # episodes reached the logger through info["episode"]
    assert venv.get_attr("max_steps", indices=[1, 2]) == [venv.get_attr("max_steps")[1]] * 2
    assert venv.env_is_wrapped(gym.Wrapper) == [False] * 4
    with pytest.raises(NotImplementedError):
        venv.set_attr("max_steps", 3)
    venv.close()


def test_batched_refuses_what_it_cannot_batch() -> None:
    with pytest.raises(ConfigError, match="no batched environment"):
        make_vec_env("crop_gym/OnlinePlacement-v1", n_envs=2, vec_env="batched")
    with pytest.raises(ValueError, match="must be one of"):
        make_vec_env("crop_gym/Placement-v0", n_envs=2, vec_env="threads")
    venv = gym.make_vec("crop_gym/Placement-Testbed8-v0", num_envs=2)  # NEXT_STEP autoreset
    with pytest.raises(ValueError, match="SAME_STEP"):
        BatchedVecEnv(venv)
    venv.close()
