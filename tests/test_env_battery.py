"""One battery over EVERY registered ``crop_gym/`` environment ID.

The IDs come from ``gymnasium.registry``, so an ID registered later is covered without editing this
file. Each test uses only the public Gymnasium API (and ``action_masks``), so the battery also runs
against an older checkout of the package.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from helpers import assert_same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crop_gym  # noqa: F401  (registers the IDs)
from crop_gym.errors import ConfigError

ALL_IDS = sorted(k for k in gym.registry if k.startswith("crop_gym/"))
BIG_IDS = {"crop_gym/Placement-512-v0", "crop_gym/Placement-1024-v0"}


def _steps(env_id: str, small: int, big: int) -> int:
    return big if env_id in BIG_IDS else small


def _random_action(rng: np.random.Generator, mask: np.ndarray) -> int:
    """A valid action; the last one (stop / defer) with probability 0.1."""
    valid = np.flatnonzero(mask[:-1])
    if len(valid) == 0 or rng.random() < 0.1:
        return len(mask) - 1
    return int(valid[rng.integers(len(valid))])


def _rollout(env: gym.Env[Any, Any], seed: int, steps: int) -> list[Any]:
    """``steps`` random masked steps (resetting at episode ends); everything seen."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out: list[Any] = [obs, info["action_mask"], info["F"]]
    for _ in range(steps):
        mask = env.unwrapped.action_masks()  # type: ignore[attr-defined]
        assert mask.dtype == np.bool_ and mask.any(), "empty mask"
        assert mask[-1], "stop / defer (the last action) must always be valid"
        np.testing.assert_array_equal(mask, info["action_mask"])
        obs, r, term, trunc, info = env.step(_random_action(rng, mask))
        out += [obs, float(r), term, trunc, info["action_mask"], info["F"]]
        if term or trunc:
            obs, info = env.reset()
            out += [obs, info["action_mask"]]
    return out


def _snapshot(env: gym.Env[Any, Any]) -> tuple[Any, ...]:
    """What an action can change: F, the queue, the placements, the picks, simulated time."""
    u: Any = env.unwrapped
    mask = u.action_masks().tobytes()
    sim = getattr(u, "sim", None)
    if sim is not None:  # online
        return (mask, sim.now, sim.queue_length, sim.running, sim.state.F)
    return (mask, u.state.F, len(u.pending), len(u.placed), tuple(getattr(u, "chosen", ())))


def _end_episode(env: gym.Env[Any, Any], seed: int) -> None:
    """Play masked random actions (stop-heavy) until the episode ends."""
    rng = np.random.default_rng(seed)
    for _ in range(10_000):
        mask = env.unwrapped.action_masks()  # type: ignore[attr-defined]
        valid = np.flatnonzero(mask[:-1])
        a = len(mask) - 1 if len(valid) == 0 or rng.random() < 0.5 else int(rng.choice(valid))
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            return
    raise AssertionError("the episode did not end")


# ------------------------------------------------------------------------------- checkers
@pytest.mark.parametrize("env_id", ALL_IDS)
def test_gymnasium_check_env(env_id: str) -> None:
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_sb3_check_env(env_id: str) -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env

    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, warn=True)
    env.close()


# --------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("env_id", ALL_IDS)
def test_seeded_determinism_and_masks(env_id: str) -> None:
    """Same seed and actions: same observations, rewards, ends, masks; every mask holds stop."""
    n = _steps(env_id, 40, 10)
    a = _rollout(gym.make(env_id), seed=5, steps=n)
    b = _rollout(gym.make(env_id), seed=5, steps=n)
    assert_same(a, b)


# ------------------------------------------------------------------------ invalid actions
def _bad_actions(n: int) -> st.SearchStrategy[Any]:
    """Actions that are never valid for ``Discrete(n)``."""
    fractional = st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda x: not float(x).is_integer()
    )
    return st.one_of(
        st.integers(min_value=n),
        st.integers(max_value=-1),
        st.integers(min_value=n, max_value=2**70),
        fractional,
        st.just(float("nan")),
        st.just(float("inf")),
        st.just(np.float32("nan")),
        st.text(max_size=3),
        st.none(),
        st.booleans(),
        st.sampled_from([np.bool_(True), np.bool_(False), np.array(True)]),
        st.lists(st.integers(0, n - 1), min_size=2, max_size=3).map(np.array),
        st.just(np.array([], dtype=np.int64)),
        st.just([0, 1]),
        st.just({"a": 0}),
    )


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_invalid_actions_never_raise_nor_change_the_state(env_id: str) -> None:
    env = gym.make(env_id)
    env.reset(seed=3)
    n = int(env.action_space.n)  # type: ignore[attr-defined]

    @settings(
        max_examples=_steps(env_id, 60, 20),
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(action=st.one_of(_bad_actions(n), st.integers(0, n - 1)))
    def check(action: Any) -> None:
        before = _snapshot(env)
        in_range = isinstance(action, int) and not isinstance(action, bool) and 0 <= action < n
        if in_range and env.unwrapped.action_masks()[action]:  # type: ignore[attr-defined]
            return  # a valid action: not this test's business
        _, reward, term, trunc, info = env.step(action)
        assert info["invalid_action"] is True, action
        assert float(reward) == 0.0
        assert _snapshot(env) == before, action
        if term or trunc:
            env.reset()

    check()


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_integral_float_is_that_action(env_id: str) -> None:
    """``3.0`` is action 3 (an integral float), ``np.int64`` too; both the same as the int."""
    runs = []
    for wrap in (int, float, np.int64):
        env = gym.make(env_id)
        env.reset(seed=1)
        a = int(env.action_space.n) - 1  # type: ignore[attr-defined]
        _, r, term, trunc, info = env.step(wrap(a))
        runs.append((float(r), term, trunc, info["invalid_action"], _snapshot(env)))
    assert runs[0] == runs[1] == runs[2] and runs[0][3] is False


# ---------------------------------------------------------------------------- episode end
@pytest.mark.parametrize("env_id", ALL_IDS)
def test_step_after_the_end_needs_a_reset(env_id: str) -> None:
    env = gym.make(env_id)
    env.reset(seed=2)
    _end_episode(env, seed=2)
    stop = int(env.action_space.n) - 1  # type: ignore[attr-defined]
    for action in (stop, 0, "junk"):
        with pytest.raises(gym.error.ResetNeeded):
            env.step(action)
    with pytest.raises(gym.error.ResetNeeded):
        env.unwrapped.step(stop)
    env.reset(seed=2)
    env.step(stop)  # playable again


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_step_before_reset_needs_a_reset(env_id: str) -> None:
    env = gym.make(env_id).unwrapped  # (gym.make's OrderEnforcing would catch it first)
    with pytest.raises(gym.error.ResetNeeded):
        env.step(int(env.action_space.n) - 1)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- arguments, options
def _count_params(env_id: str) -> list[str]:
    spec = gym.registry[env_id]
    assert isinstance(spec.entry_point, str)
    module, name = spec.entry_point.split(":")
    cls = getattr(__import__(module, fromlist=[name]), name)
    params = inspect.signature(cls).parameters
    counts = ("queue_view", "max_candidates", "max_steps", "window_jobs")
    return [p for p in counts if p in params]


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_counts_must_be_integers(env_id: str) -> None:
    names = _count_params(env_id)
    assert "queue_view" in names and "max_steps" in names
    for name in names:
        for bad in (2.5, 2.0, True, "3", 0, -1):
            with pytest.raises(ConfigError, match=name) as err:
                gym.make(env_id, **{name: bad})
            assert ">= 1" in str(err.value) or "[1, inf)" in str(err.value), str(err.value)
        gym.make(env_id, **{name: np.int64(3)})  # numpy integers are integers


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_unknown_reset_options_are_refused(env_id: str) -> None:
    env = gym.make(env_id)
    with pytest.raises(ConfigError, match="'bogus'") as err:
        env.reset(seed=0, options={"bogus": 1})
    allowed = "instance" if "Online" not in env_id else "jobs"
    assert allowed in str(err.value)
    env.reset(seed=0, options={})
    env.reset(seed=0, options=None)


# ------------------------------------------------------------------------ rewards, render
@pytest.mark.parametrize("env_id", [i for i in ALL_IDS if "Online" not in i])
def test_reward_terms_are_the_change_of_F(env_id: str) -> None:
    env = gym.make(env_id)
    rng = np.random.default_rng(4)
    _, info = env.reset(seed=4)
    placed = 0
    for _ in range(_steps(env_id, 40, 12)):
        F0 = info["F"]
        mask = env.unwrapped.action_masks()  # type: ignore[attr-defined]
        valid = np.flatnonzero(mask[:-1])
        a = int(rng.choice(valid)) if len(valid) else len(mask) - 1
        _, r, term, trunc, info = env.step(a)
        terms = info["reward_terms"]
        assert set(terms) == {"own_value", "interference"}
        assert float(r) == terms["own_value"] + terms["interference"]
        assert abs(float(r) - (info["F"] - F0)) <= 1e-9
        if info["placed"] is not None:
            placed += 1
            own = env.unwrapped.state.job_value(info["placed"])  # type: ignore[attr-defined]
            assert abs(terms["own_value"] - own) <= 1e-9
            assert terms["interference"] <= 1e-12
        else:
            assert terms == {"own_value": 0.0, "interference": 0.0}
        if term or trunc:
            _, info = env.reset()
    assert placed > 0


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_render_every_mode(env_id: str) -> None:
    for mode in gym.make(env_id).metadata["render_modes"]:
        env = gym.make(env_id, render_mode=mode)
        env.reset(seed=0)
        env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))  # type: ignore[attr-defined]
        frame = env.render()
        if mode == "ansi":
            assert isinstance(frame, str) and frame.strip()
        else:
            assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8
            assert frame.ndim == 3 and frame.shape[2] == 3 and frame.std() > 0
        env.close()
    plain = gym.make(env_id)
    plain.reset(seed=0)
    assert plain.render() is None
