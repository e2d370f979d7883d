"""What the placement environments share: the episode guard, and the static envs' episode start,
observation, info and rendering (argument checks: :mod:`crop_gym.envs.checks`).

:class:`EpisodeGuard` makes ``step`` raise :class:`gymnasium.error.ResetNeeded` before the first
``reset`` and after an episode ended. :class:`StaticPlacementBase` holds the parts of
:class:`~crop_gym.envs.placement.PlacementEnv` (candidate mode) and
:class:`~crop_gym.envs.gpu_placement.GPUPlacementEnv` (GPU mode) that do not depend on the action
space: the scenario and its sampler, the start of an episode (a sampled or given instance and the
observed health), the action table of the current state, the observation, the common ``info``
entries and rendering.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import NDArray

from crop_gym.envs.actions import ActionTable, PendingQueue, build_action_table
from crop_gym.envs.checks import (
    DEFAULT_QUEUE_VIEW,
    RENDER_MODES,
    check_count,
    check_options,
    check_render_mode,
)
from crop_gym.envs.observation import ObservationBuilder
from crop_gym.envs.render import ClusterRenderer
from crop_gym.errors import ConfigError
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.scenario import PlacementInstance, Scenario, ScenarioSampler

__all__ = ["EpisodeGuard", "StaticPlacementBase"]

Obs = dict[str, NDArray[np.float32]]


class EpisodeGuard:
    """Tracks whether the episode is running: ``step`` is refused before ``reset`` and after the end."""

    def __init__(self) -> None:
        self._running = False

    def start(self) -> None:
        """A new episode has begun."""
        self._running = True

    def check(self) -> None:
        """Raise :class:`gymnasium.error.ResetNeeded` unless an episode is running."""
        if not self._running:
            raise gym.error.ResetNeeded(
                "the episode has ended (or never started): call reset() before step()"
            )

    def end_if(self, terminated: bool, truncated: bool) -> None:
        """End the episode if it terminated or was truncated."""
        if terminated or truncated:
            self._running = False


class StaticPlacementBase(gym.Env[Obs, np.int64]):
    """Base class of the static placement environments (one instance per episode).

    The constructor's arguments are those of :class:`~crop_gym.envs.placement.PlacementEnv` of
    the same names (documented there).

    Attributes:
        sampler: Draws the episodes' instances.
        scenario: The scenario.
        topology: The cluster.
        queue_view: The view size ``Q`` after capping.
        max_candidates: ``C``.
        state: The cluster state of the current episode.
        pending_queue: The episode's queue and which of its jobs are pending.
        pending: Pending jobs, in queue order (a list made from :attr:`pending_queue`).
        table: The action table of the current state and pending jobs.
        placed: ``(job id, GPUs)`` of the jobs placed in this episode, in order.
        initial_F: F at the start of the episode.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}  # noqa: RUF012

    #: Reset options every static environment accepts.
    RESET_OPTIONS = ("instance",)

    #: Set by the subclass's constructor.
    features: ObservationBuilder
    max_steps: int
    #: Whether the observation holds privileged gains (the action tables then evaluate the
    #: interference of every row); set by the subclass's constructor.
    privileged: bool = False

    def __init__(
        self,
        scenario: Scenario | str | Path,
        *,
        queue_view: int | None,
        max_candidates: int | None,
        robust_candidates: bool,
        group_identical_jobs: bool,
        invalid_action: str,
        render_mode: str | None,
    ) -> None:
        self.render_mode = check_render_mode(render_mode)
        if invalid_action not in ("noop", "stop"):
            raise ConfigError(f"invalid_action={invalid_action!r} must be 'noop' or 'stop'")
        view = check_count("queue_view", DEFAULT_QUEUE_VIEW if queue_view is None else queue_view)
        self.sampler = ScenarioSampler(scenario)
        self.scenario = self.sampler.scenario
        self.topology = self.sampler.topology
        sc = self.scenario
        cands = sc.max_candidates if max_candidates is None else max_candidates
        self.max_candidates = check_count("max_candidates", cands)
        self.robust_candidates = bool(robust_candidates)
        self.group_identical_jobs = bool(group_identical_jobs)
        self.invalid_action = invalid_action
        self.queue_view = min(sc.queue_size, view)
        self._renderer = ClusterRenderer(self.topology)
        self._guard = EpisodeGuard()
        self.state: ClusterState = ClusterState(self.topology, perf=sc.perf)
        self.observed_health: Health = self.state.health
        self.pending_queue = PendingQueue.of(self.state, ())
        self.placed: list[tuple[str, NDArray[np.int32]]] = []
        self.initial_F = 0.0
        self._queue_index: dict[str, int] = {}
        self._steps = 0
        self.table = self._build_table()

    @staticmethod
    def _check_max_steps(max_steps: int | None, default: int) -> int:
        return check_count("max_steps", default if max_steps is None else max_steps)

    # ---------------------------------------------------------------- episodes
    def _start_episode(self, seed: int | None, options: dict[str, Any] | None) -> None:
        """Seed, then take ``options["instance"]`` (copied) or sample one; reset the episode's
        bookkeeping, draw the observed health and build the action table."""
        self.begin_episode(seed, options)
        self.table = self._build_table()

    def begin_episode(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """:meth:`reset` up to the action table, which the caller sets (a vector environment
        builds the tables of all its environments together; :meth:`table_options`)."""
        opts = check_options(options, self.RESET_OPTIONS)
        gym.Env.reset(self, seed=seed)
        inst = opts.get("instance")
        if inst is None:
            inst = self.sampler.sample(self.np_random)
        elif not isinstance(inst, PlacementInstance):
            raise ConfigError(
                f"options['instance'] must be a PlacementInstance, got {type(inst).__name__}"
            )
        elif (
            inst.state.topology is not self.topology
            and inst.state.topology.num_gpus != self.topology.num_gpus
        ):
            raise ConfigError("options['instance'] is on a different cluster than this environment")
        else:
            inst = PlacementInstance(inst.state.copy(), tuple(inst.queue), inst.scenario)
        self.instance = inst
        self.state = inst.state
        self.pending_queue = PendingQueue.of(self.state, inst.queue)
        self._queue_index = {j.job_id: i for i, j in enumerate(inst.queue)}
        self.placed = []
        self.initial_F = self.state.F
        self._steps = 0
        self.observed_health = self.state.health.observe(
            self.np_random, self.scenario.observation_noise
        )
        self._guard.start()

    @property
    def table_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~crop_gym.envs.actions.build_action_tables` for this
        environment's tables (view size, candidates, robustness, grouping, interference)."""
        return {
            "num_slots": self.queue_view,
            "max_candidates": self.max_candidates,
            "robust": self.robust_candidates,
            "group_identical": self.group_identical_jobs,
            "interference": self.privileged,
        }

    def _build_table(self) -> ActionTable:
        """The action table of the current state and pending jobs."""
        return build_action_table(self.state, self.pending_queue, **self.table_options)

    def _observe(self, extra: NDArray[np.float64] | None = None) -> Obs:
        """The observation of the current state (the one place that calls the builder)."""
        return self.features.build(
            self.state,
            self.observed_health,
            self.pending_queue,
            self.table,
            self._steps,
            self.max_steps,
            extra=extra,
        )

    @property
    def pending(self) -> list[Job]:
        """The pending jobs, in queue order."""
        return self.pending_queue.jobs

    def _remove_pending(self, position: int) -> None:
        """The ``position``-th pending job leaves the queue (placed or dropped)."""
        self.pending_queue = self.pending_queue.without(position)

    @property
    def episode_return(self) -> float:
        """``F(now) - F(start)``: the return so far."""
        return self.state.F - self.initial_F

    def _base_info(self, mask: NDArray[np.bool_]) -> dict[str, Any]:
        """The ``info`` entries every static environment gives (``mask`` is copied)."""
        m = self.features.last_metrics  # computed by the observation builder for this state
        assert m is not None
        return {
            "action_mask": mask.copy(),
            "F": m.F,
            "F_start": self.initial_F,
            "pending": len(self.pending_queue),
            "metrics": {
                "jobs_placed": m.jobs_placed,
                "gpus_busy": m.gpus_busy,
                "utilization": m.utilization,
                "comm_overhead": m.comm_overhead,
            },
        }

    # ------------------------------------------------------------------ render
    def _status_line(self, mode: str = "") -> str:
        """The first header line: scenario, step, F, return and free GPUs."""
        topo = self.topology
        return (
            f"{self.scenario.name} ({topo.name}){mode}  step {self._steps}/{self.max_steps}  "
            f"F={self.state.F:.3f}  return={self.episode_return:+.3f}  "
            f"free={self.state.num_free}/{topo.num_gpus}"
        )

    def _header(self) -> list[str]:
        """Header lines of the rendering (subclasses add a second line)."""
        return [self._status_line()]

    def _chosen(self) -> Sequence[int]:
        """GPUs to highlight as picked for the job being placed (GPU mode)."""
        return ()

    def render(self) -> Any:
        """``ansi``: a string; ``rgb_array``: ``uint8[H, W, 3]``; ``None`` without a render mode."""
        if self.render_mode == "ansi":
            return self._renderer.ansi(self.state, header=self._header(), chosen=self._chosen())
        if self.render_mode == "rgb_array":
            jobs = {jid: self._queue_index.get(jid, i) for i, (jid, _) in enumerate(self.placed)}
            return self._renderer.rgb(
                self.state,
                title="\n".join(self._header()),
                episode_jobs=jobs,
                chosen=self._chosen(),
            )
        return None

    def close(self) -> None:
        """Release the rendering figure."""
        self._renderer.close()
