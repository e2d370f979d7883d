"""The batched placement environment: ``N`` candidate-mode episodes stepped as one state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from numpy.typing import NDArray

from crop_gym.envs.base import Obs, check_count, check_instance, check_options
from crop_gym.envs.episodes import StaticEpisodes
from crop_gym.envs.placement import PlacementEnv, StepOutcome, candidate_steps
from crop_gym.errors import ConfigError
from crop_gym.model.state import RegionMetrics
from crop_gym.scenario import Scenario

__all__ = ["PlacementVectorEnv"]


class PlacementVectorEnv(VectorEnv[Obs, NDArray[np.int64], NDArray[Any]]):
    """``num_envs`` candidate-mode placement episodes stepped as one batch.

    What ``gymnasium.make_vec("crop_gym/Placement-v0", num_envs=N)`` returns (the registered
    ``vector_entry_point`` of every candidate-mode ``Placement-*`` ID). Sub-environment ``i`` is
    exactly :class:`~crop_gym.envs.placement.PlacementEnv`: with the same seeds and actions it
    gives the same observations, rewards, terminations, truncations and infos as
    ``gymnasium.make_vec(id, N, vectorization_mode="sync")`` (tests/test_batching.py checks this bit
    for bit, autoresets included). It runs the same code as the single environment
    (:class:`~crop_gym.envs.episodes.StaticEpisodes`, :func:`~crop_gym.envs.placement.candidate_steps`)
    on ``N`` episodes held as one state over ``N`` copies of the cluster, so that every step of all
    of them is one candidate generation, one facts look-up, one gains evaluation, one state update
    and one observation pass, and the instances of the episodes that start are drawn together and
    written straight into the state.

    **Spaces**: ``single_observation_space`` and ``single_action_space`` are the single
    environment's (``Dict`` of ``float32`` boxes, ``Discrete(Q * C + 1)``); ``observation_space`` and
    ``action_space`` are their batches (each key stacked on a leading axis of ``N``;
    ``MultiDiscrete``).

    **Masks**: :meth:`action_masks` is ``bool[N, Q * C + 1]``; ``info["action_mask"]`` holds the
    same rows.

    **Autoreset** (``autoreset_mode``, as in :class:`gymnasium.vector.SyncVectorEnv`): ``NEXT_STEP``
    (default): the step after an environment ended resets it, ignores its action and returns its
    first observation with reward 0; ``SAME_STEP``: the step that ends an episode resets the
    environment and returns the new episode's first observation, the last one and its info in
    ``info["final_obs"]`` and ``info["final_info"]``; ``DISABLED``: the caller resets ended
    environments (``options["reset_mask"]``); stepping one raises ``ResetNeeded``.

    **Seeding**: ``reset(seed=s)`` seeds environment ``i`` with ``s + i`` (a list gives one seed per
    environment); ``options`` go to every environment, and ``options["reset_mask"]``
    (``bool[N]``) resets only those marked, as in :class:`gymnasium.vector.SyncVectorEnv`.

    **Arguments**: ``num_envs`` (an integer >= 1), ``autoreset_mode`` (an
    :class:`~gymnasium.vector.AutoresetMode` or its value), then every keyword argument of
    :class:`~crop_gym.envs.placement.PlacementEnv` except ``render_mode`` (a batch does not
    render; render a single environment). ``max_episode_steps`` (what ``gym.make_vec`` passes from
    the ID's spec) caps each environment's episodes as Gymnasium's TimeLimit caps the single
    environment's: at the smaller of it and the environment's own ``max_steps``.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        num_envs: int = 8,
        scenario: Scenario | str | Path = "default",
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        n = check_count("num_envs", num_envs)
        try:
            self.autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in AutoresetMode)
            raise ConfigError(
                f"autoreset_mode={autoreset_mode!r} must be one of {allowed}"
            ) from None
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        if render_mode is not None:
            raise ConfigError(
                f"render_mode={render_mode!r}: the vector environment does not render; "
                "render a single environment"
            )
        # One single environment gives the spaces and the settings (it is not stepped).
        self.single = PlacementEnv(scenario, **kwargs)
        one = self.single
        if max_episode_steps is not None:  # the ID's cap, as TimeLimit applies it to one env
            cap = check_count("max_episode_steps", max_episode_steps)
            one.max_steps = min(one.max_steps, cap)
        self.num_envs = n
        self.render_mode = None
        self.single_observation_space = one.observation_space
        self.single_action_space = one.action_space
        self.observation_space = batch_space(one.observation_space, n)
        self.action_space = batch_space(one.action_space, n)
        self.episodes = StaticEpisodes(one.sampler, n, one.features, one.table_options)
        self.episodes.rebuild(range(n))  # (before the first reset: only stop is valid)
        self._rngs: list[np.random.Generator | None] = [None] * n
        self._running = np.zeros(n, dtype=bool)
        self._autoreset = np.zeros(n, dtype=bool)  # NEXT_STEP: the ones to reset at the next step
        self._obs: Obs = {}

    # ------------------------------------------------------------------ API
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Reset every environment (or those of ``options["reset_mask"]``)."""
        n = self.num_envs
        seeds = _seeds(seed, n)
        opts = dict(options or {})
        mask = _reset_mask(opts.pop("reset_mask", None), n)
        opts = check_options(opts or None, PlacementEnv.RESET_OPTIONS)
        inst = opts.get("instance")
        which = np.flatnonzero(mask).tolist()
        for i in which:
            if seeds[i] is not None or self._rngs[i] is None:
                self._rngs[i] = seeding.np_random(seeds[i])[0]
        given = None if inst is None else [check_instance(inst, self.episodes.sampler)] * len(which)
        self._start(which, given)
        self._running[which] = True
        self._autoreset &= ~mask
        m = self.episodes.state.region_metrics()
        fresh = self._observe(m, which)
        if mask.all():
            obs = fresh
        else:
            obs = {
                key: self._obs[key].copy() if self._obs else np.zeros((n, *v.shape[1:]), v.dtype)
                for key, v in fresh.items()
            }
            for key, value in fresh.items():
                obs[key][which] = value
        self._obs = obs
        infos = self._infos(m, which)
        return self._obs, infos

    def step(
        self, actions: Any
    ) -> tuple[Obs, NDArray[Any], NDArray[Any], NDArray[Any], dict[str, Any]]:
        """Step every environment (with ``NEXT_STEP``, resetting those whose episode ended at the
        last step instead; with ``SAME_STEP``, resetting those whose episode ends now)."""
        n = self.num_envs
        acts = np.asarray(actions)
        if acts.shape[:1] != (n,):
            raise ConfigError(f"actions of shape {acts.shape}; expected ({n},)")
        ended = np.flatnonzero(self._autoreset).tolist()
        stepped = np.flatnonzero(~self._autoreset).tolist()
        if any(not self._running[i] for i in stepped):
            raise gym.error.ResetNeeded(
                "an environment's episode has ended: reset it (options['reset_mask']) first"
            )
        ep = self.episodes
        out = candidate_steps(
            ep,
            stepped,
            [acts[i] for i in stepped],
            invalid_action=self.single.invalid_action,
            max_steps=self.single.max_steps,
        )
        self._start(ended, None)
        rewards = np.zeros(n)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        idx = np.asarray(stepped, dtype=np.int64)
        rewards[idx] = out.rewards
        terminated[idx] = out.terminated
        truncated[idx] = out.truncated
        done = terminated | truncated
        self._running = ~done
        m = ep.state.region_metrics()
        obs = self._observe(m)
        info = self._env_infos(m, ended, stepped, out)
        final: dict[int, dict[str, Any]] = {}
        if self.autoreset_mode == AutoresetMode.SAME_STEP and done.any():
            again = np.flatnonzero(done).tolist()
            final = {
                i: {
                    "final_obs": {key: value[i].copy() for key, value in obs.items()},
                    "final_info": info[i],
                }
                for i in again
            }
            self._start(again, None)
            self._running[again] = True
            m = ep.state.region_metrics()
            fresh = self._observe(m, again)
            for key in obs:
                obs[key][again] = fresh[key]
            for i in again:
                info[i] = self._reset_info(m, i)
        infos: dict[str, Any] = {}
        for i in range(n):
            if i in final:
                infos = self._add_info(infos, final[i], i)
            infos = self._add_info(infos, info[i], i)
        next_step = self.autoreset_mode == AutoresetMode.NEXT_STEP
        self._autoreset = done if next_step else np.zeros(n, dtype=bool)
        self._obs = obs
        return self._obs, rewards, terminated, truncated, infos

    def action_masks(self) -> NDArray[np.bool_]:
        """``bool[N, Q * C + 1]`` the valid actions of every environment."""
        return np.stack([t.mask for t in self.episodes.tables])  # type: ignore[union-attr]

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``action_masks`` of each environment (as a tuple of rows, as
        :meth:`gymnasium.vector.SyncVectorEnv.call` gives), or an attribute all environments
        share (a setting of :class:`~crop_gym.envs.placement.PlacementEnv`)."""
        if name == "action_masks":
            return tuple(self.action_masks())
        attr = getattr(self.single, name)
        value = attr(*args, **kwargs) if callable(attr) else attr
        return (value,) * self.num_envs

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every environment."""
        return self.call(name)

    # ------------------------------------------------------------------ internals
    def _start(self, which: list[int], given: list[Any] | None) -> None:
        """New episodes in environments ``which`` (drawn together from their generators)."""
        if not which:
            return
        rngs = [self._rngs[i] for i in which]
        for j, i in enumerate(which):
            if rngs[j] is None:
                rngs[j] = self._rngs[i] = seeding.np_random(None)[0]
        self.episodes.start(which, rngs, given)  # type: ignore[arg-type]
        self.episodes.rebuild(which)

    def _observe(self, metrics: RegionMetrics, which: list[int] | None = None) -> Obs:
        rows = list(range(self.num_envs)) if which is None else which
        return self.episodes.observe(rows, metrics, max_steps=self.single.max_steps)

    def _reset_info(self, m: RegionMetrics, i: int) -> dict[str, Any]:
        table = self.episodes.tables[i]
        assert table is not None
        return self.episodes.info(i, table.mask, m)

    def _env_infos(
        self, m: RegionMetrics, reset: list[int], stepped: list[int], out: StepOutcome
    ) -> list[dict[str, Any]]:
        """Each environment's ``info`` (a reset's for those in ``reset``, a step's for the
        others)."""
        info: list[dict[str, Any]] = [{}] * self.num_envs
        for i in reset:
            info[i] = self._reset_info(m, i)
        for j, i in enumerate(stepped):
            d = self._reset_info(m, i)
            d["invalid_action"] = out.invalid[j]
            d["reward_terms"] = out.terms[j]
            d["placed"] = out.placed[j]
            info[i] = d
        return info

    def _infos(self, m: RegionMetrics, which: list[int]) -> dict[str, Any]:
        infos: dict[str, Any] = {}
        for i in which:
            infos = self._add_info(infos, self._reset_info(m, i), i)
        return infos


def _seeds(seed: int | list[int | None] | None, n: int) -> list[int | None]:
    """One seed per environment: ``seed + i``, the list given, or ``None``."""
    if seed is None:
        return [None] * n
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_)):
        return [int(seed) + i for i in range(n)]
    seeds = list(seed)  # type: ignore[arg-type]
    if len(seeds) != n:
        raise ConfigError(f"seed: a list of {len(seeds)} seeds for {n} environments")
    return seeds


def _reset_mask(mask: Any, n: int) -> NDArray[np.bool_]:
    """``options["reset_mask"]`` checked (``None``: every environment)."""
    if mask is None:
        return np.ones(n, dtype=bool)
    arr = np.asarray(mask)
    if arr.shape != (n,) or arr.dtype != np.bool_ or not arr.any():
        raise ConfigError(
            f"options['reset_mask'] must be a bool array of shape ({n},) with a True value; "
            f"got {arr.dtype} of shape {arr.shape}"
        )
    return arr
