"""RL agents for crop_gym: candidate-scoring policies, imitation of CROP, training and evaluation.

Needs the ``rl`` extra (torch, stable-baselines3, sb3-contrib). Modules:

* :mod:`crop_gym.agents.networks` — :class:`~crop_gym.agents.networks.CandidateScorer`, the permutation-invariant
  per-candidate scorer (pure torch), and the observation adapter that lets one trained policy run on
  clusters of other sizes;
* :mod:`crop_gym.agents.policies` — the scorer as SB3 policies (MaskablePPO, PPO, DQN with masked Q-values);
* :mod:`crop_gym.agents.imitation` — CROP demonstrations, behaviour cloning, DAgger;
* :mod:`crop_gym.agents.training` — ``crop-gym train`` (validation curve, checkpoints, resume);
* :mod:`crop_gym.agents.evaluation` — ``crop-gym eval`` (ratio to CROP and the baselines on held-out seeds);
* :mod:`crop_gym.agents.config` — rl-baselines3-zoo style YAML files (``agents/configs``) and seed ranges;
* :mod:`crop_gym.agents.checkpoint` — checkpoints with metadata, and the shipped ``default`` checkpoint.

Importing :mod:`agents` itself is cheap (no torch); names are loaded on first use.

Example:
    >>> from crop_gym.agents.checkpoint import load_checkpoint  # doctest: +SKIP
    >>> from crop_gym.agents.evaluation import PolicyAgent, evaluate
    >>> model, meta = load_checkpoint("default")
    >>> report = evaluate(PolicyAgent(model), meta["env_id"], episodes=5)
    >>> report["ratio_to_crop"]
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "CandidateScorer",
    "PolicyAgent",
    "ScorerConfig",
    "evaluate",
    "load_checkpoint",
    "train",
]

_WHERE = {
    "CandidateScorer": "crop_gym.agents.networks",
    "ScorerConfig": "crop_gym.agents.networks",
    "PolicyAgent": "crop_gym.agents.evaluation",
    "evaluate": "crop_gym.agents.evaluation",
    "load_checkpoint": "crop_gym.agents.checkpoint",
    "train": "crop_gym.agents.training",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
