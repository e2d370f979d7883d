"""Gymnasium environments: static placement (candidate and GPU mode), online placement, and their
shared parts (the action table, the observation builder, the rewards, rendering).

Classes are imported lazily so that ``import crop_gym`` (which registers the IDs) stays cheap.

>>> import gymnasium as gym, crop_gym
>>> env = gym.make("crop_gym/Placement-Testbed8-v0")
>>> obs, info = env.reset(seed=0)
>>> bool(info["action_mask"][-1])  # stop is always valid
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crop_gym.envs.actions import ActionTable, build_action_tables
    from crop_gym.envs.gpu_placement import GPUPlacementEnv
    from crop_gym.envs.observation import (
        CANDIDATE_FEATURES,
        GPU_FEATURES,
        JOB_FEATURES,
        SUMMARY_FEATURES,
        ObservationBuilder,
    )
    from crop_gym.envs.online import OnlinePlacementEnv
    from crop_gym.envs.placement import PlacementEnv
    from crop_gym.envs.registration import ENV_IDS, register_envs
    from crop_gym.envs.render import ClusterRenderer, draw_placement

__all__ = [
    "CANDIDATE_FEATURES",
    "ENV_IDS",
    "GPU_FEATURES",
    "JOB_FEATURES",
    "SUMMARY_FEATURES",
    "ActionTable",
    "ClusterRenderer",
    "GPUPlacementEnv",
    "ObservationBuilder",
    "OnlinePlacementEnv",
    "PlacementEnv",
    "build_action_tables",
    "draw_placement",
    "register_envs",
]

_WHERE = {
    "CANDIDATE_FEATURES": "observation",
    "GPU_FEATURES": "observation",
    "JOB_FEATURES": "observation",
    "SUMMARY_FEATURES": "observation",
    "ActionTable": "actions",
    "build_action_tables": "actions",
    "ObservationBuilder": "observation",
    "ClusterRenderer": "render",
    "draw_placement": "render",
    "GPUPlacementEnv": "gpu_placement",
    "OnlinePlacementEnv": "online",
    "PlacementEnv": "placement",
    "ENV_IDS": "registration",
    "register_envs": "registration",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'crop_gym.envs' has no attribute {name!r}")
    return getattr(importlib.import_module(f"crop_gym.envs.{module}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
