"""Tests of the online placement environment (crop_gym/OnlinePlacement-v0)."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.envs.online import ONLINE_FEATURES, OnlinePlacementEnv

ENV_ID = "crop_gym/OnlinePlacement-v0"


def masked_rollout(env: Any, seed: int, steps: int, stop_p: float = 0.3) -> list[Any]:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace = [obs]
    for _ in range(steps):
        mask = info["action_mask"]
        assert mask.any() and mask[-1]
        valid = np.flatnonzero(mask)
        a = int(valid[-1]) if rng.random() < stop_p else int(rng.choice(valid))
        obs, r, term, trunc, info = env.step(a)
        trace.append((obs, r, term, trunc, info["time_s"]))
        if term or trunc:
            obs, info = env.reset()
            trace.append(obs)
    return trace


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def test_registered_and_gymnasium_checker_passes() -> None:
    from gymnasium.utils.env_checker import check_env

    env = gym.make(ENV_ID)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    obs, _info = env.reset(seed=0)
    assert obs["online"].shape == (len(ONLINE_FEATURES),)
    assert env.observation_space.contains(obs)


def test_sb3_checker_passes() -> None:
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(OnlinePlacementEnv(), warn=True)
    assert sb3 is not None


def test_deterministic_under_a_seed() -> None:
    a = masked_rollout(gym.make(ENV_ID), seed=5, steps=100)
    b = masked_rollout(gym.make(ENV_ID), seed=5, steps=100)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert_same(x, y)
    c = masked_rollout(gym.make(ENV_ID), seed=6, steps=5)
    assert not all(np.array_equal(c[0][k], a[0][k]) for k in a[0]) or c[1][4] != a[1][4]


def test_pickle_mid_episode_continues_identically() -> None:
    env = OnlinePlacementEnv(render_mode="ansi")
    _obs, info = env.reset(seed=2)
    for _ in range(10):
        valid = np.flatnonzero(info["action_mask"])
        _obs, _r, term, trunc, info = env.step(int(valid[0]))
        if term or trunc:
            _obs, info = env.reset()
    clone = pickle.loads(pickle.dumps(env))
    for _ in range(20):
        a = int(np.flatnonzero(info["action_mask"])[-1])
        out1 = env.step(a)
        out2 = clone.step(a)
        for x, y in zip(out1[:4], out2[:4], strict=True):
            assert_same(x, y)
        info = out1[4]
        if out1[2] or out1[3]:
            break


def test_effective_reward_integrates_F() -> None:
    env = OnlinePlacementEnv(window_jobs=12, horizon_hours=12.0)
    _obs, info = env.reset(seed=1)
    total = 0.0
    while True:
        mask = info["action_mask"]
        a = int(np.flatnonzero(mask)[0])  # place the first candidate of the first job, else stop
        _obs, r, term, trunc, info = env.step(a)
        total += r
        if term or trunc:
            break
    sim = env.sim
    assert sim is not None
    assert total == pytest.approx(sim.int_F / (env.topology.num_gpus * 3600.0), rel=1e-9)
    assert total > 0
    assert "sim_metrics" in info and info["sim_metrics"]["jobs_total"] == 12


def test_jct_reward_is_minus_mean_jct_when_all_finish() -> None:
    env = OnlinePlacementEnv(window_jobs=8, horizon_hours=1000.0, reward="jct", profile="none")
    _obs, info = env.reset(seed=4)
    total = 0.0
    while True:
        _obs, r, term, trunc, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
        total += r
        if term or trunc:
            break
    assert term
    assert info["sim_metrics"]["jobs_completed"] == 8
    assert total == pytest.approx(-info["sim_metrics"]["mean_jct_s"] / 3600.0, rel=1e-9)


def test_invalid_actions_do_not_crash_and_stop_advances_time() -> None:
    env = OnlinePlacementEnv()
    _obs, info = env.reset(seed=0)
    n = env.action_space.n
    for bad in (-1, n, 10**9, 2.5, "x"):
        _obs, r, _term, _trunc, info2 = env.step(bad)  # type: ignore[arg-type]
        assert info2["invalid_action"] and r == 0.0
    t0 = info["time_s"]
    _obs, r, term, trunc, info = env.step(n - 1)
    assert info["time_s"] > t0 or term or trunc


def test_render_modes() -> None:
    env = OnlinePlacementEnv(render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and "online" in text
    env = OnlinePlacementEnv(render_mode="rgb_array")
    env.reset(seed=0)
    img = env.render()
    assert isinstance(img, np.ndarray) and img.ndim == 3 and img.dtype == np.uint8
    env.close()


def test_vector_env() -> None:
    venv = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID) for _ in range(2)])
    venv.reset(seed=0)
    for _ in range(5):
        _obs, _r, _term, _trunc, _info = venv.step(np.array([venv.single_action_space.n - 1] * 2))
    venv.close()


def test_sjf_crop_plays_the_v0_env_whose_table_has_no_interference() -> None:
    """v0 observes no interference, so its table's gains lack it; the sjf-crop rule then adds it
    from the state (the row of the largest ΔF in full), rather than failing."""
    from crop_gym.baselines.online import make_online_policy, play

    env = gym.make("crop_gym/OnlinePlacement-v0")
    env.reset(seed=10**9)
    assert env.unwrapped.table.gains.interference is None
    ep = play(env, make_online_policy("sjf-crop", np.random.default_rng(0)), 10**9)
    assert ep.decisions > 0 and np.isfinite(ep.mean_jct_h)
