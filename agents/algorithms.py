"""The algorithms an agent is trained with, and the policy network each one uses.

One table for the whole of ``crop_gym.agents``: the hyperparameter files (:mod:`crop_gym.agents.config`,
one per algorithm), the trainer (:mod:`crop_gym.agents.training`) and the checkpoint loader
(:mod:`crop_gym.agents.checkpoint`) all look an algorithm up here, so none of them imports another
for it. SB3 and torch are imported only when a class is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

from crop_gym.errors import ConfigError

__all__ = ["ALGOS", "ALGO_CLASSES", "POLICIES", "algo_class", "policy_class"]

#: Algorithm name → ``"module:Class"`` of its SB3 class.
ALGO_CLASSES: dict[str, str] = {
    "maskable_ppo": "sb3_contrib:MaskablePPO",
    "ppo": "stable_baselines3:PPO",
    "dqn": "crop_gym.agents.policies:MaskedDQN",
}
#: The algorithms, in the order the CLI and the docs list them (each has ``configs/<algo>.yml``).
ALGOS: tuple[str, ...] = tuple(ALGO_CLASSES)
#: Algorithm name → ``"module:Class"`` of its candidate-scoring policy (``policy: CandidateScorer``).
_SCORER_POLICIES: dict[str, str] = {
    "maskable_ppo": "crop_gym.agents.policies:MaskableScorerPolicy",
    "ppo": "crop_gym.agents.policies:ScorerPolicy",
    "dqn": "crop_gym.agents.policies:ScorerDQNPolicy",
}
#: The policy kinds an entry or a checkpoint may name.
POLICIES: tuple[str, ...] = ("CandidateScorer", "MultiInputPolicy")


def _check_algo(algo: object) -> str:
    if not isinstance(algo, str) or algo not in ALGO_CLASSES:
        raise ConfigError(f"unknown algorithm {algo!r}; algorithms: {', '.join(ALGOS)}")
    return algo


def _load(spec: str) -> Any:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def algo_class(algo: str) -> Any:
    """The SB3 algorithm class of ``algo`` (imports SB3).

    Raises:
        ConfigError: For a name that is not in :data:`ALGOS`.
    """
    return _load(ALGO_CLASSES[_check_algo(algo)])


def policy_class(algo: str, policy: str) -> Any:
    """The SB3 policy of ``policy`` (``CandidateScorer`` or ``MultiInputPolicy``) for ``algo``.

    ``CandidateScorer`` is :class:`~crop_gym.agents.policies.MaskableScorerPolicy` (MaskablePPO),
    :class:`~crop_gym.agents.policies.ScorerPolicy` (PPO) or
    :class:`~crop_gym.agents.policies.ScorerDQNPolicy` (DQN); ``MultiInputPolicy`` is SB3's name
    for its default network and is returned as that name.

    Raises:
        ConfigError: For an unknown algorithm or policy kind.
    """
    name = _check_algo(algo)
    if policy == "MultiInputPolicy":
        return policy
    if policy != "CandidateScorer":
        raise ConfigError(f"policy={policy!r} must be one of {', '.join(POLICIES)}")
    return _load(_SCORER_POLICIES[name])
