"""crop_gym: multi-job placement of deep-learning training jobs on GPU clusters as Gymnasium envs."""

from __future__ import annotations

__version__ = "0.1.0"

from crop_gym.envs.registration import register_envs as _register_envs

_register_envs()
