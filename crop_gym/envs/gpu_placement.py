"""The static placement environment, GPU mode: pick the GPUs of the head-of-queue job one at a time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, SupportsFloat

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.envs.actions import CandidateActions, _as_index
from crop_gym.envs.base import Obs, StaticPlacementBase
from crop_gym.envs.features import ObservationBuilder
from crop_gym.jobs import Job
from crop_gym.scenario import Scenario

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

    **Invalid actions** never raise: with ``invalid_action="noop"`` (default) nothing changes, the
    reward is 0 and ``info["invalid_action"]`` is ``True``; with ``"stop"`` the episode also
    terminates.

    **Observation** ``Dict`` of ``float32`` boxes in ``[0, 1]`` (tables flattened row-major to
    1-D unless ``table_layout=True``): ``"gpus"`` ``(G, 11)`` (the
    candidate-mode GPU columns plus ``chosen``: picked for the head job), ``"head"`` ``(5,)``
    (present, size, share of its GPUs already picked, gradient size, compute time), ``"queue"``
    ``(Q, 8)`` (the head job first, then the next placeable jobs; the ``best_eta`` column is 0 in
    this mode) and ``"summary"`` ``(10,)``. With ``privileged=True`` also ``"hint"`` ``(G,)``: the
    GPUs of the head job's candidate placement with the highest ΔF (what a greedy expert would pick)
    and ``"gain"`` ``(1,)`` in ``[-1, 1]``: that ΔF divided by the largest job size.

    **Reward**: ΔF when a job is placed, else 0; the return is ``F(end) - F(start)``.
    ``info["reward_terms"]`` splits it into ``own_value`` and ``interference``.

    **Episode end**: *terminated* when no pending job fits (including an empty queue) or on an
    invalid action under ``invalid_action="stop"``; *truncated* after ``max_steps`` steps.

    **Info**: as candidate mode (``action_mask``, ``F``, ``F_start``, ``metrics``, ``pending``,
    ``invalid_action``, ``reward_terms``, ``placed``) plus ``head`` (the head job's id or ``None``)
    and ``chosen`` (GPUs picked so far).

    **Arguments**:
        scenario: Scenario, built-in scenario name or scenario file (default ``"default"``).
        privileged: Add ``"hint"`` and ``"gain"`` (see above).
        queue_view: Rows of the ``"queue"`` key (default 64, capped at ``K``).
        max_steps: Step cap (default ``2 * (K + K * max_job_gpus)``, never reached by valid play).
        table_layout: Return the tables ``"gpus"``, ``"candidates"`` and ``"queue"`` as 2-D
            ``(rows, columns)`` arrays (for custom per-row policies) instead of row-major 1-D
            vectors (default; what SB3's checker and ``MultiInputPolicy`` expect).
        invalid_action: ``"noop"`` or ``"stop"``.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.

    **Reset options**: ``{"instance": PlacementInstance}`` plays a given instance.

    **Version history**:
        v0: Initial version.
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
    ) -> None:
        super().__init__(
            scenario, queue_view=queue_view, invalid_action=invalid_action, render_mode=render_mode
        )
        sc, topo = self.scenario, self.topology
        q = self.queue_view
        limit = sc.job_size_limit
        self.max_steps = self._check_max_steps(max_steps, 2 * sc.queue_size * (limit + 1))
        self.privileged = bool(privileged)
        self.actions = CandidateActions(q, sc.max_candidates, robust=True, group_identical=False)
        self.features = ObservationBuilder(
            topo,
            self.actions,
            sc.perf,
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
        self._chosen_col = len(self.features.gpu_features) - 1
        self._head = np.zeros(len(HEAD_FEATURES), dtype=np.float32)
        self._hint = np.zeros(G, dtype=np.float32)
        self._gain = np.zeros(1, dtype=np.float32)
        self.chosen: list[int] = []
        self.dropped: list[str] = []

    # ------------------------------------------------------------------ API
    @property
    def head(self) -> Job | None:
        """The job whose GPUs are being picked (``None`` when the episode is over)."""
        view = self.actions.view
        return view[0] if view else None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Start an episode on a new instance (or on ``options["instance"]``)."""
        self._start_episode(seed, options)
        self.chosen = []
        self.dropped = []
        self._new_head()
        return self._obs(), self._info()

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        """Pick one GPU for the head job, or defer it."""
        self._steps += 1
        a = _as_index(action)
        reward = own = 0.0
        invalid = False
        placed: str | None = None
        terminated = False
        head = self.head
        if a is not None and 0 <= a < len(self._mask) and self._mask[a] and head is not None:
            if a == self.defer_action:
                del self.pending[self.actions.positions[0]]
                self.dropped.append(head.job_id)
                self._new_head()
            else:
                self.chosen.append(a)
                self._mask[a] = False
                self.features.gpu_buffer[a, self._chosen_col] = 1.0
                if len(self.chosen) == head.num_gpus:
                    gpus = np.sort(np.asarray(self.chosen, dtype=np.int32))
                    reward = self.state.add(head, gpus)
                    own = self.state.job_record(head.job_id)["value"]
                    del self.pending[self.actions.positions[0]]
                    self.placed.append((head.job_id, gpus))
                    placed = head.job_id
                    self._new_head()
            terminated = self.head is None
        elif a == self.defer_action:  # defer after the end: harmless
            terminated = self.head is None
        else:
            invalid = True
            terminated = self.invalid_action == "stop" or self.head is None
        truncated = not terminated and self._steps >= self.max_steps
        obs = self._obs()
        info = self._info()
        info["invalid_action"] = invalid
        info["reward_terms"] = {"own_value": own, "interference": reward - own}
        info["placed"] = placed
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> NDArray[np.bool_]:
        """Valid actions, ``bool[G + 1]``."""
        return self._mask.copy()

    # -------------------------------------------------------------- internals
    def _new_head(self) -> None:
        """Rebuild the view after the queue or the state changed; reset the picks and the mask."""
        self.chosen = []
        self.actions.build(self.state, self.pending)
        self.features.gpu_buffer[:, self._chosen_col] = 0.0
        mask = self._mask
        mask[:-1] = self.state.free_mask if self.head is not None else False
        mask[-1] = True
        if self.privileged:
            self._hint.fill(0.0)
            self._gain.fill(0.0)
            head = self.head
            cs = self.actions.sets[0]
            if head is not None and cs is not None and len(cs):
                gains = np.array([self.state.gain(head, g) for g in cs.gpus])
                best = int(np.argmax(gains))
                self._hint[cs.gpus[best]] = 1.0
                self._gain[0] = np.clip(gains[best] / self.features.max_job_gpus, -1.0, 1.0)

    def _obs(self) -> Obs:
        obs = self.features.build(
            self.state, self.pending, step=self._steps, max_steps=self.max_steps
        )
        head = self.head
        h = self._head
        h.fill(0.0)
        if head is not None:
            row = self.features.queue_buffer[0]
            h[0] = 1.0
            h[1] = row[1]
            h[2] = len(self.chosen) / head.num_gpus
            h[3] = row[2]
            h[4] = row[3]
        obs["head"] = h.copy()
        if self.privileged:
            obs["hint"] = self._hint.copy()
            obs["gain"] = self._gain.copy()
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
