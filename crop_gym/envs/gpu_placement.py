"""The static placement environment, GPU mode: pick the GPUs of the head-of-queue job one at a time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, SupportsFloat

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.envs.actions import action_index
from crop_gym.envs.base import Obs, StaticPlacementBase
from crop_gym.envs.observation import ObservationBuilder
from crop_gym.envs.rewards import NO_TERMS, placement_terms, total
from crop_gym.model.jobs import Job
from crop_gym.scenario import Scenario, with_hardware

__all__ = ["HEAD_FEATURES", "GPUPlacementEnv"]

#: Columns of the ``"head"`` key.
HEAD_FEATURES: tuple[str, ...] = ("present", "job_gpus", "chosen", "grad_size", "compute_time")


class GPUPlacementEnv(StaticPlacementBase):
    """Static multi-job placement, one GPU per step (the harder, unstructured action space).

    The episode is the same static problem as :class:`~crop_gym.envs.placement.PlacementEnv`: a
    cluster with background jobs and a queue of ``K`` pending jobs drawn from a scenario. The
    *head job* is the first pending job, in queue order, that fits in the free usable GPUs (jobs
    that no longer fit are skipped; in a static episode GPUs are never freed, so they never will).
    The agent picks the head job's ``k`` GPUs one at a time, in any order; when the ``k``-th is
    picked the job is placed on them (gang placement, ring in DFS order) and the reward is ΔF.

    **Action space** ``Discrete(G + 1)``: action ``g < G`` picks GPU ``g`` for the head job; action
    ``G`` is **defer**: the head job is dropped from this episode (not placed, the GPUs picked for it
    are released) and the next job becomes the head. Deferring every job is how to stop.

    **Action mask** ``action_masks()`` and ``info["action_mask"]``: ``bool[G + 1]``; GPU ``g`` is
    valid when it is free, usable and not yet picked for the head job; defer is always valid.

    **Invalid actions** (masked, out of range, or not one integer: floats with a fraction, NaN,
    strings, ``None``, arrays of several elements, and booleans) never raise: with
    ``invalid_action="noop"`` (default) nothing changes, the reward is 0 and
    ``info["invalid_action"]`` is ``True``; with ``"stop"`` the episode also terminates.

    **Observation** ``Dict`` of ``float32`` boxes in ``[0, 1]`` (tables flattened row-major to
    1-D unless ``table_layout=True``): ``"gpus"`` ``(G, 11)`` (the
    candidate-mode GPU columns plus ``chosen``: picked for the head job), ``"head"`` ``(5,)``
    (present, size, share of its GPUs already picked, gradient size, compute time), ``"queue"``
    ``(Q, 8)`` (the head job first, then the next placeable jobs; the ``best_eta`` column is 0 in
    this mode) and ``"summary"`` ``(10,)``. With ``privileged=True`` also ``"hint"`` ``(G,)``: the
    GPUs of the head job's candidate placement with the highest ΔF (what a greedy expert would pick)
    and ``"gain"`` ``(1,)`` in ``[-1, 1]``: that ΔF divided by the largest job size.

    **Reward**: ΔF when a job is placed, else 0; the return is ``F(end) - F(start)``.
    ``info["reward_terms"]`` splits it into ``own_value`` and ``interference``
    (:mod:`crop_gym.envs.rewards`).

    **Episode end**: *terminated* when no pending job fits (including an empty queue) or on an
    invalid action under ``invalid_action="stop"``; *truncated* after ``max_steps`` steps. After
    the end, ``step`` raises :class:`gymnasium.error.ResetNeeded` until ``reset`` is called.

    **Info**: as candidate mode (``action_mask``, ``F``, ``F_start``, ``metrics``, ``pending``,
    ``invalid_action``, ``reward_terms``, ``placed``) plus ``head`` (the head job's id or ``None``)
    and ``chosen`` (GPUs picked so far).

    **Arguments**:
        scenario: Scenario, built-in scenario name or scenario file (default ``"default"``).
        privileged: Add ``"hint"`` and ``"gain"`` (see above).
        queue_view: Rows of the ``"queue"`` key, an integer >= 1 (default 64, capped at ``K``).
        max_steps: Step cap, an integer >= 1 (default ``2 * (K + K * max_job_gpus)``, never
            reached by valid play).
        table_layout: Return the tables ``"gpus"``, ``"candidates"`` and ``"queue"`` as 2-D
            ``(rows, columns)`` arrays (for custom per-row policies) instead of row-major 1-D
            vectors (default; what SB3's checker and ``MultiInputPolicy`` expect).
        invalid_action: ``"noop"`` or ``"stop"``.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.
        hardware: Hardware spec replacing the scenario's (:attr:`Scenario.hardware`); ``None``:
            the scenario's.

    **Reset options**: ``{"instance": PlacementInstance}`` plays a given instance; other keys are
    refused (:class:`~crop_gym.errors.ConfigError`).

    **Version history**:
        v0: Initial version.
        v0 (core rebuild): ``step`` after the end raises ``ResetNeeded``; booleans are invalid
        actions (``True`` used to pick GPU 1); non-integer ``queue_view`` / ``max_steps`` and
        unknown reset options are refused.
    """

    def __init__(
        self,
        scenario: Scenario | str | Path = "default",
        *,
        privileged: bool = False,
        queue_view: int | None = None,
        max_steps: int | None = None,
        invalid_action: Literal["noop", "stop"] = "noop",
        table_layout: bool = False,
        render_mode: str | None = None,
        hardware: str | None = None,
    ) -> None:
        super().__init__(
            with_hardware(scenario, hardware),
            queue_view=queue_view,
            max_candidates=None,
            robust_candidates=True,
            group_identical_jobs=False,
            invalid_action=invalid_action,
            render_mode=render_mode,
        )
        sc, topo = self.scenario, self.topology
        limit = sc.job_size_limit
        self.max_steps = self._check_max_steps(max_steps, 2 * sc.queue_size * (limit + 1))
        self.privileged = bool(privileged)
        self.features = ObservationBuilder(
            topo,
            sc.perf,
            num_slots=self.queue_view,
            max_candidates=self.max_candidates,
            queue_size=sc.queue_size,
            max_job_gpus=limit,
            gpu_extra=("chosen",),
            with_candidates=False,
            table_layout=table_layout,
        )
        G = topo.num_gpus
        self.defer_action = G
        self.action_space = spaces.Discrete(G + 1)
        obs_spaces = dict(self.features.observation_space.spaces)
        obs_spaces["head"] = spaces.Box(0.0, 1.0, (len(HEAD_FEATURES),), np.float32)
        if self.privileged:
            obs_spaces["hint"] = spaces.Box(0.0, 1.0, (G,), np.float32)
            obs_spaces["gain"] = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = spaces.Dict(obs_spaces)  # type: ignore[assignment]
        self._mask = np.zeros(G + 1, dtype=bool)
        self.chosen: list[int] = []
        self.dropped: list[str] = []
        self._start_engine()

    # ------------------------------------------------------------------ API
    @property
    def head(self) -> Job | None:
        """The job whose GPUs are being picked (``None`` when nothing fits)."""
        jobs = self.table.jobs
        return jobs[0] if jobs else None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Start an episode on a new instance (or on ``options["instance"]``)."""
        self._start_episode(seed, options)
        self.dropped = []
        self._new_head(rebuild=False)
        return self._obs(), self._info()

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        """Pick one GPU for the head job, or defer it."""
        self._count_step()
        a = action_index(action)
        terms = dict(NO_TERMS)
        invalid = False
        placed: str | None = None
        head = self.head
        if a is not None and 0 <= a < len(self._mask) and self._mask[a]:
            if a == self.defer_action:
                if head is not None:
                    self._remove_pending(self.table.positions[0])
                    self.dropped.append(head.job_id)
                    self._new_head()
            else:
                assert head is not None  # (GPUs are masked when there is no head job)
                self.chosen.append(a)
                self._mask[a] = False
                if len(self.chosen) == head.num_gpus:
                    terms = self._place(head)
                    placed = head.job_id
            terminated = self.head is None
        else:
            invalid = True
            terminated = self.invalid_action == "stop" or self.head is None
        truncated = not terminated and self.steps >= self.max_steps
        self._guard.end_if(terminated, truncated)
        obs = self._obs()
        info = self._info()
        info["invalid_action"] = invalid
        info["reward_terms"] = terms
        info["placed"] = placed
        return obs, total(terms), terminated, truncated, info

    def action_masks(self) -> NDArray[np.bool_]:
        """Valid actions, ``bool[G + 1]``."""
        return self._mask.copy()

    # -------------------------------------------------------------- internals
    def _place(self, head: Job) -> dict[str, float]:
        """Place the head job on the picked GPUs; return the reward terms."""
        gpus = np.sort(np.asarray(self.chosen, dtype=np.int32))
        facts = self.state.facts_for(gpus)
        own = self.state.gains(head, facts, interference=False).own
        delta = self.state.place([head], [gpus], facts, checked=True)  # (free GPUs only: masked)
        terms = placement_terms(float(own[0]), float(delta[0]))
        self._remove_pending(self.table.positions[0])
        self.placed.append((head.job_id, self.state.placement(head.job_id)))
        self._new_head()
        return terms

    def _new_head(self, rebuild: bool = True) -> None:
        """Rebuild the table after the queue or the state changed; reset the picks and the mask."""
        if rebuild:
            self.episodes.rebuild([0])
        self.chosen = []
        mask = self._mask
        mask[:-1] = self.state.free_mask if self.head is not None else False
        mask[-1] = True

    def _privileged(self) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """``hint`` (the GPUs of the head job's candidate with the highest ΔF) and ``gain``."""
        hint = np.zeros(self.topology.num_gpus, dtype=np.float32)
        gain = np.zeros(1, dtype=np.float32)
        t = self.table
        if self.head is not None:
            gains = t.gains.total[t.row_slot == 0]
            best = int(np.argmax(gains))
            hint[t.gpus(0, best)] = 1.0
            gain[0] = np.clip(gains[best] / self.features.max_job_gpus, -1.0, 1.0)
        return hint, gain

    def _obs(self) -> Obs:
        chosen = np.zeros((self.topology.num_gpus, 1))
        chosen[self.chosen, 0] = 1.0  # (the extra "chosen" column)
        obs = self._observe(extra=chosen)
        head = self.head
        h = np.zeros(len(HEAD_FEATURES), dtype=np.float32)
        if head is not None:
            row = self.features.rows(obs, "queue")[0]
            h[:] = (1.0, row[1], len(self.chosen) / head.num_gpus, row[2], row[3])
        obs["head"] = h
        if self.privileged:
            obs["hint"], obs["gain"] = self._privileged()
        return obs

    def _info(self) -> dict[str, Any]:
        info = self._base_info(self._mask)
        head = self.head
        info["head"] = None if head is None else head.job_id
        info["chosen"] = list(self.chosen)
        return info

    # ---------------------------------------------------------------- render
    def _header(self) -> list[str]:
        head = self.head
        what = (
            "none"
            if head is None
            else f"{head.job_id}:{head.model}x{head.num_gpus} picked {len(self.chosen)}"
        )
        return [
            self._status_line(" GPU mode"),
            f"head job: {what}   pending {len(self.pending)}   dropped {len(self.dropped)}",
        ]

    def _chosen(self) -> Sequence[int]:
        return self.chosen
