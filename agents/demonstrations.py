"""Demonstrations: expert-labelled states of placement episodes, and the rollouts that record them.

A :class:`Demonstrations` set stacks, for every visited state, the observation, the teacher's action
(:func:`crop_gym.agents.teachers.teacher_of`), the action mask and the return-to-go. :func:`rollouts` plays
one episode per seed, choosing each step's action from the state and the teacher's label (the
teacher itself for plain demonstrations, the learner or a mix for DAgger). Observations of one set
share one environment's layout; a policy for several environments is cloned from one set per
environment (:func:`crop_gym.agents.imitation.behaviour_cloning` takes a list).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from crop_gym.agents.teachers import teacher_of
from crop_gym.envs.placement import PlacementEnv
from crop_gym.io import atomic_write_with

__all__ = ["Demonstrations", "rollouts"]


@dataclass
class Demonstrations:
    """Expert-labelled states (stacked arrays).

    Attributes:
        obs: Observation arrays by key, ``(N, ...)``, in the environment's layout.
        actions: Expert actions ``int64[N]``.
        masks: Action masks ``bool[N, A]``.
        returns: Return-to-go of the episode from each state (raw ΔF, discounted by ``gamma``).
        value_weight: 1 where ``returns`` is the expert's own return-to-go (expert-driven episodes),
            0 for DAgger states visited by the learner.
        episode: Episode index of each state.
        seeds: Reset seed of each episode.
        ties: ``bool[N, A]`` the actions of the same job with the same ΔF as the expert's in each
            state (:meth:`crop_gym.envs.placement.PlacementEnv.equal_gain_actions`; the expert's
            among them), recorded on static environments; ``None``: the expert's action alone
            (online environments, sets saved before ties were recorded).
    """

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    masks: np.ndarray
    returns: np.ndarray
    value_weight: np.ndarray
    episode: np.ndarray
    seeds: list[int]
    ties: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.ties is not None and self.ties.shape != self.masks.shape:
            raise ValueError(f"ties of shape {self.ties.shape} for masks of {self.masks.shape}")

    @property
    def targets(self) -> np.ndarray:
        """``bool[N, A]``: :attr:`ties`, or the expert's action alone where none were recorded."""
        if self.ties is not None:
            return self.ties
        out = np.zeros(self.masks.shape, dtype=bool)
        out[np.arange(len(self.actions)), self.actions] = True
        return out

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def num_episodes(self) -> int:
        """Number of episodes."""
        return len(self.seeds)

    def extend(self, other: Demonstrations) -> Demonstrations:
        """A new set with ``other``'s states appended (episode indices shifted)."""
        return Demonstrations(
            {k: np.concatenate([v, other.obs[k]]) for k, v in self.obs.items()},
            np.concatenate([self.actions, other.actions]),
            np.concatenate([self.masks, other.masks]),
            np.concatenate([self.returns, other.returns]),
            np.concatenate([self.value_weight, other.value_weight]),
            np.concatenate([self.episode, other.episode + self.num_episodes]),
            [*self.seeds, *other.seeds],
            None
            if self.ties is None and other.ties is None
            else np.concatenate([self.targets, other.targets]),
        )

    def subset(self, episodes: Sequence[int]) -> Demonstrations:
        """The states of the given episodes (renumbered in the given order)."""
        eps = [int(e) for e in episodes]
        where = {e: i for i, e in enumerate(eps)}
        idx = np.flatnonzero(np.isin(self.episode, eps))
        return Demonstrations(
            {k: v[idx] for k, v in self.obs.items()},
            self.actions[idx],
            self.masks[idx],
            self.returns[idx],
            self.value_weight[idx],
            np.asarray([where[int(e)] for e in self.episode[idx]], dtype=np.int64),
            [self.seeds[e] for e in eps],
            None if self.ties is None else self.ties[idx],
        )

    def save(self, path: str | Path) -> Path:
        """Write to a compressed ``.npz`` (atomically)."""
        arrays = {f"obs/{k}": v for k, v in self.obs.items()}
        arrays.update(
            actions=self.actions,
            masks=self.masks,
            returns=self.returns,
            value_weight=self.value_weight,
            episode=self.episode,
            seeds=np.asarray(self.seeds, dtype=np.int64),
        )
        if self.ties is not None:
            arrays["ties"] = self.ties

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]

        return atomic_write_with(path, write)

    @classmethod
    def load(cls, path: str | Path) -> Demonstrations:
        """Read a set written by :meth:`save`."""
        with np.load(path) as z:
            obs = {k[4:]: z[k] for k in z.files if k.startswith("obs/")}
            return cls(
                obs,
                z["actions"],
                z["masks"],
                z["returns"],
                z["value_weight"],
                z["episode"],
                [int(s) for s in z["seeds"]],
                z["ties"] if "ties" in z.files else None,
            )


def _discounted(rewards: Sequence[float], gamma: float) -> np.ndarray:
    out = np.empty(len(rewards))
    acc = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        acc = rewards[i] + gamma * acc
        out[i] = acc
    return out


def rollouts(
    env: gym.Env[Any, Any],
    seeds: Sequence[int],
    choose: Callable[[Any, np.ndarray, int], int],
    *,
    gamma: float,
    expert_driven: bool,
    progress: bool,
    desc: str,
    expert_rule: str = "best",
    teacher: str = "crop",
) -> Demonstrations:
    """Run one episode per seed; ``choose(obs, mask, expert_action)`` picks the action taken."""
    expert_action = teacher_of(env, teacher, expert_rule)
    u: Any = env.unwrapped
    record_ties = isinstance(u, PlacementEnv)
    obs_buf: dict[str, list[np.ndarray]] = {}
    actions: list[int] = []
    masks: list[np.ndarray] = []
    ties: list[np.ndarray] = []
    rets: list[np.ndarray] = []
    eps: list[int] = []
    it: Any = seeds
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(seeds, desc=desc, unit="ep", dynamic_ncols=True)
    for e, seed in enumerate(it):
        obs, info = env.reset(seed=int(seed))
        rewards: list[float] = []
        done = False
        while not done:
            mask = np.asarray(info["action_mask"], dtype=bool)
            a_exp = int(expert_action())
            for k, v in obs.items():
                obs_buf.setdefault(k, []).append(np.asarray(v, dtype=np.float32))
            actions.append(a_exp)
            masks.append(mask)
            if record_ties:
                ties.append(u.equal_gain_actions(a_exp))
            eps.append(e)
            a = choose(obs, mask, a_exp)
            obs, r, term, trunc, info = env.step(a)
            rewards.append(float(r))
            done = bool(term or trunc)
        rets.append(_discounted(rewards, gamma))
    n = len(actions)
    return Demonstrations(
        {k: np.stack(v) for k, v in obs_buf.items()},
        np.asarray(actions, dtype=np.int64),
        np.stack(masks) if masks else np.zeros((0, int(env.action_space.n)), bool),  # type: ignore[attr-defined]
        np.concatenate(rets) if rets else np.zeros(0),
        np.full(n, 1.0 if expert_driven else 0.0),
        np.asarray(eps, dtype=np.int64),
        [int(s) for s in seeds],
        np.stack(ties) if record_ties and ties else None,
    )
