"""The batched placement environment: ``N`` candidate-mode environments stepped together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, create_empty_array
from numpy.typing import NDArray

from crop_gym.envs.actions import build_action_tables
from crop_gym.envs.base import Obs
from crop_gym.envs.checks import check_count
from crop_gym.envs.placement import PlacementEnv, StepStart
from crop_gym.errors import ConfigError
from crop_gym.scenario import Scenario

__all__ = ["PlacementVectorEnv"]


class PlacementVectorEnv(VectorEnv[Obs, NDArray[np.int64], NDArray[Any]]):
    """``num_envs`` copies of :class:`~crop_gym.envs.placement.PlacementEnv` stepped as one batch.

    What ``gymnasium.make_vec("crop_gym/Placement-v0", num_envs=N)`` returns (the registered
    ``vector_entry_point`` of every candidate-mode ``Placement-*`` ID). Sub-environment ``i`` is
    exactly the single environment: with the same seeds and actions it gives the same
    observations, rewards, terminations, truncations and infos as
    ``gymnasium.make_vec(id, N, vectorization_mode="sync")`` (tests/test_batching.py checks this bit
    for bit, autoresets included). What is shared is the work: after every step the action tables
    of all environments that changed are built together (:func:`~crop_gym.envs.actions.build_action_tables`:
    one candidate generation and one placement-facts evaluation for all of them) instead of one
    environment at a time.

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
        first = PlacementEnv(scenario, **kwargs)
        # The others share the first's compiled scenario (and so its topology object).
        rest = {key: value for key, value in kwargs.items() if key != "hardware"}
        self.envs = [first] + [PlacementEnv(first.scenario, **rest) for _ in range(n - 1)]
        if max_episode_steps is not None:  # the ID's cap, as TimeLimit applies it to one env
            cap = check_count("max_episode_steps", max_episode_steps)
            for env in self.envs:
                env.max_steps = min(env.max_steps, cap)
        self.num_envs = n
        self.render_mode = None
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(first.observation_space, n)
        self.action_space = batch_space(first.action_space, n)
        self._table_options = first.table_options
        self._keys = tuple(first.features.observation_space.spaces)
        empty = create_empty_array(first.observation_space, n, fn=np.zeros)
        self._obs: Obs = dict(empty)  # type: ignore[arg-type]  # (a Dict space: a dict of arrays)
        self._autoreset = np.zeros(n, dtype=bool)  # NEXT_STEP: the ones to reset at the next step

    # ------------------------------------------------------------------ API
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Reset every environment (or those of ``options["reset_mask"]``)."""
        n = self.num_envs
        seeds = _seeds(seed, n)
        opts = dict(options or {})
        mask = _reset_mask(opts.pop("reset_mask", None), n)
        which = np.flatnonzero(mask).tolist()
        for i in which:
            self.envs[i].begin_episode(seeds[i], opts or None)
        obs: list[Obs | None] = [None] * n
        infos: dict[str, Any] = {}
        for i, table in zip(which, self._tables(which), strict=True):
            obs[i], info = self.envs[i].finish_reset(table)
            infos = self._add_info(infos, info, i)
        self._autoreset = self._autoreset & ~mask
        self._obs = self._stack(obs)
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
        starts: list[StepStart | None] = [None] * n
        for i, env in enumerate(self.envs):
            if not self._autoreset[i]:
                starts[i] = env.begin_step(acts[i])
        self._begin_episodes(ended)
        rebuild = [i for i, s in enumerate(starts) if s is None or s.placed is not None]
        tables = dict(zip(rebuild, self._tables(rebuild), strict=True))
        obs: list[Obs | None] = [None] * n
        info: list[dict[str, Any]] = [{}] * n
        rewards = np.zeros(n)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        for i, (env, start) in enumerate(zip(self.envs, starts, strict=True)):
            if start is None:
                obs[i], info[i] = env.finish_reset(tables[i])
            else:
                obs[i], r, terminated[i], truncated[i], info[i] = env.finish_step(
                    start, tables.get(i)
                )
                rewards[i] = float(r)
        done = terminated | truncated
        final: dict[int, dict[str, Any]] = {}
        if self.autoreset_mode == AutoresetMode.SAME_STEP and done.any():
            again = np.flatnonzero(done).tolist()
            final = {i: {"final_obs": obs[i], "final_info": info[i]} for i in again}
            self._begin_episodes(again)
            for i, table in zip(again, self._tables(again), strict=True):
                obs[i], info[i] = self.envs[i].finish_reset(table)
        infos: dict[str, Any] = {}
        for i in range(n):
            if i in final:
                infos = self._add_info(infos, final[i], i)
            infos = self._add_info(infos, info[i], i)
        next_step = self.autoreset_mode == AutoresetMode.NEXT_STEP
        self._autoreset = done if next_step else np.zeros(n, dtype=bool)
        self._obs = self._stack(obs)
        return self._obs, rewards, terminated, truncated, infos

    def _begin_episodes(self, which: list[int]) -> None:
        """Environments ``which`` start a new episode (no seed): their instances are drawn
        together, each from its own generator (what its own reset would draw)."""
        rngs = [self.envs[i].np_random for i in which]
        for i, inst in zip(which, self.envs[0].sampler.sample_many(rngs), strict=True):
            self.envs[i].begin_episode(None, {"instance": inst})

    def action_masks(self) -> NDArray[np.bool_]:
        """``bool[N, Q * C + 1]`` the valid actions of every environment."""
        return np.stack([env.action_masks() for env in self.envs])

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every environment (or read the attribute), as
        :meth:`gymnasium.vector.SyncVectorEnv.call` does."""
        out = []
        for env in self.envs:
            attr = getattr(env, name)
            out.append(attr(*args, **kwargs) if callable(attr) else attr)
        return tuple(out)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every environment."""
        return self.call(name)

    def close_extras(self, **kwargs: Any) -> None:
        """Close every environment."""
        for env in self.envs:
            env.close()

    # ------------------------------------------------------------------ batching
    def _tables(self, which: list[int]) -> list[Any]:
        """The action tables of environments ``which``, built together."""
        envs = [self.envs[i] for i in which]
        states = [env.state for env in envs]
        queues = [env.pending_queue for env in envs]
        return build_action_tables(states, queues, **self._table_options)

    def _stack(self, obs: list[Obs | None]) -> Obs:
        """Each key's arrays stacked (environments not reset keep their last observation)."""
        out: Obs = {}
        for key in self._keys:
            rows = [o[key] if o is not None else self._obs[key][i] for i, o in enumerate(obs)]
            out[key] = np.stack(rows)
        return out


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
