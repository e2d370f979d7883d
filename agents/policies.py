"""Stable-Baselines3 policies built on :class:`~crop_gym.agents.networks.CandidateScorer`.

* :class:`MaskableScorerPolicy` (MaskablePPO) and :class:`ScorerPolicy` (PPO): actor-critic
  policies whose "MLP extractor" is the scorer: ``latent_pi`` *is* the ``(M + 1)`` masked logits and
  ``latent_vf`` the value, so ``action_net`` and ``value_net`` are identities. The features
  extractor passes the observation ``Dict`` through untouched, so the network never depends on the
  observation's sizes (only SB3's input checks do).
* :class:`ScorerDQNPolicy` (DQN): the scorer's logits are used as Q-values; invalid rows get
  :data:`~crop_gym.agents.networks.MASKED_LOGIT`, so the greedy action and the TD target's ``max`` only
  consider valid actions. :class:`MaskedDQN` also explores with masks (ε-greedy over the valid
  actions, read from the observation's ``candidates[..., 0]`` column).

With SB3's default ``MultiInputPolicy`` (the comparison) PPO and DQN see no masks: an invalid action
is handled by the environment (``invalid_action="noop"``: nothing happens, reward 0, the step counts
toward the step cap).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3 import DQN
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.dqn.policies import DQNPolicy, QNetwork
from torch import nn

from crop_gym.agents.networks import CandidateScorer, ObsSpec, ScorerConfig

__all__ = [
    "DictPassthrough",
    "MaskableScorerPolicy",
    "MaskedDQN",
    "ScorerDQNPolicy",
    "ScorerExtractor",
    "ScorerPolicy",
    "scorer_of",
]


class DictPassthrough(BaseFeaturesExtractor):
    """A features extractor that returns the (preprocessed) observation dict unchanged."""

    def __init__(self, observation_space: spaces.Dict) -> None:
        super().__init__(observation_space, features_dim=1)

    def forward(self, observations: Any) -> Any:
        return observations


class ScorerExtractor(nn.Module):
    """The SB3 ``mlp_extractor`` role: ``latent_pi`` = masked logits, ``latent_vf`` = value.

    Args:
        num_actions: ``M + 1`` (only recorded; the scorer itself works for any ``M``).
        config: The scorer's options.
    """

    def __init__(self, num_actions: int, config: ScorerConfig) -> None:
        super().__init__()
        self.scorer = CandidateScorer(config)
        self.latent_dim_pi = int(num_actions)
        self.latent_dim_vf = 1

    def forward(self, features: Any) -> tuple[th.Tensor, th.Tensor]:
        return self.scorer(features)

    def forward_actor(self, features: Any) -> th.Tensor:
        return self.scorer.logits(features)

    def forward_critic(self, features: Any) -> th.Tensor:
        return self.scorer.value(features)


class _ScorerMixin:
    """Shared construction of the scorer actor-critic policies."""

    scorer_config: ScorerConfig

    def _init_scorer(self, scorer: dict[str, Any] | ScorerConfig | None) -> None:
        if isinstance(scorer, ScorerConfig):
            self.scorer_config = scorer
        else:
            self.scorer_config = ScorerConfig.from_dict(scorer or {})

    def _build_mlp_extractor(self) -> None:
        n = int(self.action_space.n)  # type: ignore[attr-defined]
        self.mlp_extractor = ScorerExtractor(n, self.scorer_config)

    def _finish_build(self, lr_schedule: Schedule) -> None:
        # The scorer produces the logits and the value itself: identity heads, then rebuild the
        # optimizer so that it holds exactly the parameters in use.
        self.action_net = nn.Identity()
        self.value_net = nn.Identity()
        self.optimizer = self.optimizer_class(  # type: ignore[attr-defined]
            self.parameters(),  # type: ignore[attr-defined]
            lr=lr_schedule(1),
            **self.optimizer_kwargs,  # type: ignore[attr-defined]
        )


def _scorer_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.setdefault("ortho_init", False)  # the scorer initialises itself
    kwargs.setdefault("features_extractor_class", DictPassthrough)
    kwargs["share_features_extractor"] = True
    kwargs.pop("net_arch", None)
    return kwargs


class _ScorerPolicyMixin(_ScorerMixin):
    """Constructor, build and saved parameters shared by the scorer actor-critic policies."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        scorer: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._init_scorer(scorer)
        super().__init__(  # type: ignore[call-arg]
            observation_space, action_space, lr_schedule, **_scorer_kwargs(kwargs)
        )

    def _build(self, lr_schedule: Schedule) -> None:
        super()._build(lr_schedule)  # type: ignore[misc]
        self._finish_build(lr_schedule)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data: dict[str, Any] = super()._get_constructor_parameters()  # type: ignore[misc]
        data["scorer"] = self.scorer_config.to_dict()
        data.pop("net_arch", None)
        return data


class MaskableScorerPolicy(_ScorerPolicyMixin, MaskableActorCriticPolicy):
    """MaskablePPO policy over :class:`CandidateScorer` (``policy_kwargs={"scorer": {...}}``)."""


class ScorerPolicy(_ScorerPolicyMixin, ActorCriticPolicy):
    """PPO policy over :class:`CandidateScorer`: the logits are masked from the observation."""


class ScorerQNetwork(QNetwork):
    """Q-values = the scorer's masked logits (invalid rows at :data:`MASKED_LOGIT`)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Discrete,
        features_extractor: BaseFeaturesExtractor,
        features_dim: int,
        scorer: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["net_arch"] = []
        super().__init__(
            observation_space, action_space, features_extractor, features_dim, **kwargs
        )
        self.scorer_config = ScorerConfig.from_dict(scorer or {})
        self.q_net = CandidateScorer(self.scorer_config)

    def forward(self, obs: Any) -> th.Tensor:
        return self.q_net.logits(self.extract_features(obs, self.features_extractor))

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["scorer"] = self.scorer_config.to_dict()
        return data


class ScorerDQNPolicy(DQNPolicy):
    """DQN policy whose Q-network is :class:`ScorerQNetwork`."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Discrete,
        lr_schedule: Schedule,
        scorer: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.scorer_config = ScorerConfig.from_dict(scorer or {})
        kwargs.setdefault("features_extractor_class", DictPassthrough)
        kwargs.pop("net_arch", None)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def make_q_net(self) -> QNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        net_args["scorer"] = self.scorer_config.to_dict()
        return ScorerQNetwork(**net_args).to(self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["scorer"] = self.scorer_config.to_dict()
        data.pop("net_arch", None)
        return data


class MaskedDQN(DQN):
    """DQN whose ε-greedy exploration draws only valid actions.

    Valid actions are read from the observation (``candidates[..., 0]`` marks real rows; stop is
    always valid), so no environment call is needed. The exploration draws come from a generator
    seeded with the model's seed (not the global NumPy RNG). With a policy other than
    :class:`ScorerDQNPolicy` greedy actions are not masked (the environment handles invalid ones).
    """

    def _explore_rng(self) -> np.random.Generator:
        rng = getattr(self, "_masked_rng", None)
        if rng is None:
            rng = np.random.default_rng(None if self.seed is None else [int(self.seed), 7])
            self._masked_rng = rng
        return rng

    def _random_valid(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        """A uniformly drawn valid action per batch entry (``observation`` is batched)."""
        rng = self._explore_rng()
        spec = getattr(self.policy, "scorer_config", None)
        names = (
            spec.obs_spec.candidate_features
            if spec is not None
            else ObsSpec.default().candidate_features
        )
        cand = np.asarray(observation["candidates"])
        cand = cand.reshape(cand.shape[0], -1, len(names))
        valid = cand[..., names.index("valid")] > 0.5
        actions = np.empty(len(valid), dtype=np.int64)
        for i, row in enumerate(valid):
            choices = np.append(np.flatnonzero(row), len(row))  # + stop, always valid
            actions[i] = rng.choice(choices)
        return actions

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        rng = self._explore_rng()
        if (
            deterministic
            or not isinstance(observation, dict)
            or rng.random() >= self.exploration_rate
        ):
            return self.policy.predict(observation, state, episode_start, deterministic)
        batched = np.asarray(observation["summary"]).ndim == 2
        obs = observation if batched else {k: np.asarray(v)[None] for k, v in observation.items()}
        actions = self._random_valid(obs)
        return (actions if batched else actions[0]), state

    def _sample_action(
        self, learning_starts: int, action_noise: Any = None, n_envs: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.num_timesteps < learning_starts and isinstance(self._last_obs, dict):
            action = self._random_valid(self._last_obs)  # masked warm-up
            return action, action
        return super()._sample_action(learning_starts, action_noise, n_envs)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_masked_rng"]


def scorer_of(model: Any) -> CandidateScorer | None:
    """The :class:`CandidateScorer` inside an SB3 model (``None`` for other policies)."""
    policy = getattr(model, "policy", model)
    ext = getattr(policy, "mlp_extractor", None)
    if isinstance(ext, ScorerExtractor):
        return ext.scorer
    q = getattr(policy, "q_net", None)
    if isinstance(q, ScorerQNetwork):
        return q.q_net
    return None
