"""The batched placement environment as a Stable-Baselines3 vector environment.

``gymnasium.make_vec(id, N)`` of a candidate-mode ``crop_gym/Placement-*`` ID returns
:class:`~crop_gym.envs.vector.PlacementVectorEnv`, which steps ``N`` environments as one
batch (their action tables built together). SB3 learns through its own ``VecEnv`` interface, so
:class:`BatchedVecEnv` adapts one to the other: it is what ``make_vec_env(..., vec_env="batched")``
returns, and a learner sees exactly what ``DummyVecEnv`` of ``N`` monitored, reward-scaled single
environments shows it (observations, scaled ``float32`` rewards, dones, masks, ``info["episode"]``,
``terminal_observation`` and ``TimeLimit.truncated``; tests/test_batched_sb3.py checks this step
for step), in less time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from numpy.typing import NDArray
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn

from crop_gym.errors import ConfigError

__all__ = ["BatchedVecEnv", "make_batched"]


def make_batched(
    env_id: str, n_envs: int, env_kwargs: Mapping[str, Any], reward_scale: float
) -> BatchedVecEnv:
    """:class:`BatchedVecEnv` over ``gymnasium.make_vec(env_id, n_envs)``.

    Raises:
        ConfigError: If ``env_id`` has no batched environment (only the candidate-mode static IDs
            have one).
    """
    spec = gym.spec(env_id)
    if spec.vector_entry_point is None:
        raise ConfigError(
            f"vec_env='batched': {env_id} has no batched environment (the candidate-mode "
            "crop_gym/Placement-* IDs have one); use 'dummy' or 'subproc'"
        )
    venv = gym.make_vec(
        env_id,
        num_envs=n_envs,
        vectorization_mode="vector_entry_point",
        autoreset_mode=AutoresetMode.SAME_STEP,
        **dict(env_kwargs),
    )
    return BatchedVecEnv(venv, reward_scale=reward_scale)


class BatchedVecEnv(VecEnv):
    """An SB3 ``VecEnv`` over a Gymnasium vector environment that resets on the same step.

    What each environment reports is what SB3's ``Monitor`` and ``DummyVecEnv`` would add to the
    single environment's step: rewards times ``reward_scale`` as ``float32``, ``dones`` as
    terminated or truncated, and in its info dict ``TimeLimit.truncated`` (truncated and not
    terminated), and at the end of an episode ``terminal_observation`` (the last observation; the
    returned one is the next episode's first) and ``episode`` (``r``: the unscaled return rounded
    to 6 digits, ``l``: its length, ``t``: seconds since this adapter was made).

    Args:
        venv: A Gymnasium vector environment with ``autoreset_mode`` ``SAME_STEP`` and Dict or Box
            observations (for example ``PlacementVectorEnv``).
        reward_scale: Factor on the rewards the learner sees (the episode returns stay raw).

    Raises:
        ValueError: If ``venv`` does not reset on the same step.
    """

    def __init__(
        self, venv: gym.vector.VectorEnv[Any, Any, Any], reward_scale: float = 1.0
    ) -> None:
        mode = venv.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"BatchedVecEnv needs autoreset_mode SAME_STEP; the env has {mode}")
        self.venv = venv
        self.reward_scale = float(reward_scale)
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions: NDArray[Any] = np.zeros(venv.num_envs, dtype=np.int64)
        self._returns = np.zeros(venv.num_envs)
        self._lengths = np.zeros(venv.num_envs, dtype=np.int64)
        self._t0 = time.time()

    # ------------------------------------------------------------------ VecEnv
    def reset(self) -> Any:
        """Reset every environment (with the seeds of :meth:`seed`, once)."""
        seeds = list(self._seeds) if any(s is not None for s in self._seeds) else None
        obs, info = self.venv.reset(seed=seeds)  # type: ignore[arg-type]
        self.reset_infos = _split(info, self.num_envs)
        self._reset_seeds()
        self._reset_options()
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return obs

    def step_async(self, actions: NDArray[Any]) -> None:
        """Store the actions for :meth:`step_wait`."""
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        """Step every environment; one whose episode ended returns its next first observation."""
        obs, rewards, terminated, truncated, info = self.venv.step(self._actions)
        rewards = np.asarray(rewards, dtype=np.float64)
        self._returns += rewards
        self._lengths += 1
        dones = np.asarray(terminated) | np.asarray(truncated)
        infos = _split(info, self.num_envs)
        final = _split(info["final_info"], self.num_envs) if "final_info" in info else None
        for i in range(self.num_envs):
            if dones[i]:
                assert final is not None
                self.reset_infos[i] = infos[i]  # (the next episode's reset info)
                infos[i] = final[i]
                # (``final_obs`` is an object array of the environments' own observations.)
                infos[i]["terminal_observation"] = info["final_obs"][i]
                infos[i]["episode"] = {
                    "r": round(float(self._returns[i]), 6),
                    "l": int(self._lengths[i]),
                    "t": round(time.time() - self._t0, 6),
                }
                self._returns[i] = 0.0
                self._lengths[i] = 0
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        scaled = (rewards * self.reward_scale).astype(np.float32)
        return obs, scaled, dones, infos

    def close(self) -> None:
        """Close the vector environment."""
        self.venv.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Attribute ``attr_name`` of the environments ``indices``."""
        values = self.venv.get_attr(attr_name)
        return [values[i] for i in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Not supported: the batched environments share their configuration."""
        raise NotImplementedError(
            "BatchedVecEnv.set_attr: the batched environments share one set-up"
        )

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        """Method ``method_name`` of the environments ``indices``."""
        values = self.venv.call(method_name, *method_args, **method_kwargs)
        return [values[i] for i in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """No environment is wrapped (the adapter itself does what ``Monitor`` would)."""
        return [False for _ in self._get_indices(indices)]


def _split(info: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """Gymnasium's vector info (values stacked, ``_key`` marking who has ``key``) as one dict
    per environment, nested dicts included."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in info.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        has: Sequence[bool] = info.get(f"_{key}", np.ones(n, dtype=bool))
        parts = _split(value, n) if isinstance(value, Mapping) else None
        for i in range(n):
            if has[i]:
                out[i][key] = parts[i] if parts is not None else _item(value[i])
    return out


def _item(value: Any) -> Any:
    """One environment's entry of a stacked info value (numpy scalars as Python values)."""
    return value.item() if isinstance(value, np.generic) else value
