"""Environment construction for training and evaluation (wrappers, vector environments)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, SupportsFloat

import gymnasium as gym

import crop_gym  # noqa: F401  (registers the crop_gym/ IDs)
from crop_gym.agents.config import VEC_ENVS
from crop_gym.envs.online import OnlinePlacementEnv
from crop_gym.envs.registration import is_online_id, with_split

__all__ = [
    "ScaleReward",
    "ScorerObservation",
    "is_online",
    "is_online_id",
    "make_env",
    "make_vec_env",
    "with_split",
]


class ScaleReward(gym.Wrapper):  # type: ignore[type-arg]
    """Multiply rewards by a constant (keeps ``action_masks`` reachable through the wrapper).

    Evaluation never reads rewards (it reads F from the environment), so the scale only shapes
    learning: value targets of order 1 instead of tens of GPUs.

    Args:
        env: The environment.
        scale: The factor.
    """

    def __init__(self, env: gym.Env[Any, Any], scale: float) -> None:
        super().__init__(env)
        self.scale = float(scale)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward) * self.scale, terminated, truncated, info

    def action_masks(self) -> Any:
        """The wrapped environment's valid actions."""
        return self.env.unwrapped.action_masks()  # type: ignore[attr-defined]


class ScorerObservation(gym.ObservationWrapper):  # type: ignore[type-arg]
    """Observations as a candidate scorer trained elsewhere reads them.

    :func:`crop_gym.agents.networks.adapt_observation` maps each observation onto the scorer's columns and
    job-size normaliser, exactly as :class:`crop_gym.agents.evaluation.PolicyAgent` does when it plays the
    scorer on this environment; cloning a scorer on states of several environments
    (``bc.also_on``) records them through this wrapper, so it learns from what it will see.

    Args:
        env: A candidate-mode placement environment.
        scorer_spec: The scorer's :class:`crop_gym.agents.networks.ObsSpec`.
    """

    def __init__(self, env: gym.Env[Any, Any], scorer_spec: Any) -> None:
        import numpy as np

        from crop_gym.agents.networks import ObsSpec, adapt_observation

        super().__init__(env)
        self._adapt = adapt_observation
        self.env_spec = ObsSpec.from_env(env)
        self.scorer_spec = scorer_spec
        sample = self.observation(env.observation_space.sample())
        self.observation_space = gym.spaces.Dict(
            {
                k: gym.spaces.Box(-np.inf, np.inf, shape=v.shape, dtype=np.float32)
                for k, v in sample.items()
            }
        )

    def observation(self, observation: Any) -> dict[str, Any]:
        """The observation on the scorer's columns and scale."""
        return self._adapt(observation, self.env_spec, self.scorer_spec)

    def action_masks(self) -> Any:
        """The wrapped environment's valid actions."""
        return self.env.unwrapped.action_masks()  # type: ignore[attr-defined]


def is_online(env: gym.Env[Any, Any]) -> bool:
    """Whether ``env`` is the online (simulator) placement environment."""
    return isinstance(env.unwrapped, OnlinePlacementEnv)


def make_env(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    reward_scale: float = 1.0,
    monitor: bool = True,
) -> gym.Env[Any, Any]:
    """``gym.make(env_id)`` with an SB3 ``Monitor`` (raw episode returns) and reward scaling.

    Args:
        env_id: A registered ID (``crop_gym/...``).
        env_kwargs: Constructor arguments for the environment.
        reward_scale: Factor on rewards seen by the learner (outside the monitor).
        monitor: Wrap in ``Monitor`` (episode returns in the logs are raw ΔF).
    """
    env = gym.make(env_id, **dict(env_kwargs or {}))
    if monitor:
        from stable_baselines3.common.monitor import Monitor

        env = Monitor(env)
    if reward_scale != 1.0:
        env = ScaleReward(env, reward_scale)
    return env


def _factory(
    env_id: str, env_kwargs: Mapping[str, Any], reward_scale: float
) -> Callable[[], gym.Env[Any, Any]]:
    kwargs = dict(env_kwargs)

    def make() -> gym.Env[Any, Any]:
        return make_env(env_id, env_kwargs=kwargs, reward_scale=reward_scale)

    return make


def make_vec_env(
    env_id: str,
    *,
    n_envs: int = 1,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    reward_scale: float = 1.0,
    vec_env: str = "dummy",
) -> Any:
    """A seeded SB3 vector environment (``DummyVecEnv``, ``SubprocVecEnv`` or the batched one).

    Environment ``i`` is seeded with ``seed + i`` at its first reset; later episodes continue its
    RNG stream (all of it training data).

    Args:
        env_id: A registered ID.
        n_envs: Number of parallel environments.
        seed: Seed of the first environment.
        env_kwargs: Constructor arguments.
        reward_scale: Factor on rewards.
        vec_env: ``"dummy"`` (in-process), ``"subproc"`` (one process per environment; used only
            when ``n_envs > 1``) or ``"batched"`` (in-process, the environments stepped as one
            batch: :class:`crop_gym.agents.batched.BatchedVecEnv`, for the candidate-mode
            ``crop_gym/Placement-*`` IDs; the learner sees what ``"dummy"`` shows it).

    Raises:
        ValueError: If ``vec_env`` is none of these, or ``"batched"`` for an ID without a
            batched environment.
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from crop_gym.agents.batched import make_batched

    if vec_env not in VEC_ENVS:
        raise ValueError(f"vec_env={vec_env!r} must be one of {', '.join(map(repr, VEC_ENVS))}")
    venv: Any
    if vec_env == "batched":
        venv = make_batched(env_id, n_envs, env_kwargs or {}, reward_scale)
    else:
        fns = [_factory(env_id, env_kwargs or {}, reward_scale) for _ in range(n_envs)]
        venv = SubprocVecEnv(fns) if (vec_env == "subproc" and n_envs > 1) else DummyVecEnv(fns)
    venv.seed(seed)
    return venv
