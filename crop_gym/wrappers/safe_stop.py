"""``SafeStop``: a static candidate-mode environment in which stop cannot end an episode early.

Why: in ``Placement-*`` stop is always valid and ends the episode, so an agent that has not yet
learnt to place (or a sampled exploratory action) can give up an instance with good placements
left — the shipped policy did so on 34 of 200 ``Placement-Severe-v0`` episodes. The registered IDs
keep that stop (their recorded behaviour is the benchmark's ``v0``); this wrapper is the safe
variant to learn on.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from numpy.typing import NDArray

from crop_gym.envs.placement import PlacementEnv
from crop_gym.errors import ConfigError

__all__ = ["STOP_MODES", "SafeStop"]

#: When stop is valid under :class:`SafeStop`.
STOP_MODES: tuple[str, ...] = ("positive_gain", "exhausted")


class SafeStop(gym.Wrapper[Any, Any, Any, Any]):
    """Mask stop while stopping would leave value on the table.

    * ``mode="positive_gain"`` (default): stop is valid only when no valid placement has a
      marginal gain ``ΔF > min_gain`` (every placement left would lower F or add nothing); so
      the episode ends by stop only once greedy improvement is over, and by itself when nothing
      is placeable.
    * ``mode="exhausted"``: stop is never valid while any placement is; the episode ends when no
      pending job has a candidate (the environment terminates then by itself).

    The mask is never empty: when stop is masked, a placement is valid. Choosing stop while it is
    masked is an invalid action: the wrapped environment gets an out-of-range action and treats
    it as it treats every invalid action (with its default ``invalid_action="noop"``: nothing
    happens, reward 0, ``info["invalid_action"]`` is ``True``, the step counts toward the step
    cap). ``action_masks()`` and ``info["action_mask"]`` are the wrapper's mask. Rewards,
    observations and episode ends are otherwise the environment's.

    Args:
        env: A candidate-mode placement environment (:class:`PlacementEnv`, possibly wrapped).
        mode: One of :data:`STOP_MODES`.
        min_gain: Gains at or below this count as no gain (GPU units, >= 0).

    Raises:
        ConfigError: For another environment, an unknown mode or a negative ``min_gain``.
    """

    def __init__(
        self, env: gym.Env[Any, Any], mode: str = "positive_gain", min_gain: float = 1e-9
    ) -> None:
        if not isinstance(env.unwrapped, PlacementEnv):
            raise ConfigError(
                f"SafeStop needs a candidate-mode PlacementEnv, got {type(env.unwrapped).__name__}"
            )
        if mode not in STOP_MODES:
            raise ConfigError(f"mode={mode!r} must be one of {', '.join(STOP_MODES)}")
        if not isinstance(min_gain, (int, float)) or not 0.0 <= float(min_gain) < np.inf:
            raise ConfigError(f"min_gain={min_gain!r} must be a finite number >= 0")
        super().__init__(env)
        self.mode = mode
        self.min_gain = float(min_gain)

    @property
    def base(self) -> PlacementEnv:
        """The unwrapped environment."""
        base = self.env.unwrapped
        assert isinstance(base, PlacementEnv)
        return base

    def stop_allowed(self) -> bool:
        """Whether stop is valid in the current state."""
        table = self.base.table
        if not table.has_placement:
            return True
        if self.mode == "exhausted":
            return False
        gains = table.gains
        if gains.interference is None:  # the table skipped it (non-privileged view)
            total = gains.own + self.base.state.interference(table.facts)
        else:
            total = gains.total
        return not bool((total > self.min_gain).any())

    def action_masks(self) -> NDArray[np.bool_]:
        """The environment's mask with stop cleared while it is not allowed."""
        mask = self.base.action_masks()
        mask[-1] = self.stop_allowed()
        return mask

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset the environment; ``info["action_mask"]`` is the wrapper's."""
        obs, info = self.env.reset(**kwargs)
        info["action_mask"] = self.action_masks()
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step; a masked stop reaches the environment as an invalid (out-of-range) action."""
        table = self.base.table
        if table.is_stop(action) and not self.stop_allowed():
            action = table.stop_action + 1  # out of range: the env's invalid-action path
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["action_mask"] = self.action_masks()
        return obs, reward, terminated, truncated, info
