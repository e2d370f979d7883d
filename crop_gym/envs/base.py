"""What the static placement environments share: scenario sampling, episode start, info, rendering.

:class:`StaticPlacementBase` holds the parts of :class:`~crop_gym.envs.placement.PlacementEnv`
(candidate mode) and :class:`~crop_gym.envs.gpu_placement.GPUPlacementEnv` (GPU mode) that do not
depend on the action space: the scenario and its sampler, argument checks, the start of an episode
(a sampled or given instance, the observed health), the common ``info`` entries, the return so far
and rendering. Subclasses build their action table and observation builder, then implement
``reset``, ``step`` and ``action_masks``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import NDArray

from crop_gym.envs.actions import CandidateActions
from crop_gym.envs.features import ObservationBuilder
from crop_gym.envs.render import ClusterRenderer
from crop_gym.errors import ConfigError
from crop_gym.jobs import Job
from crop_gym.objective import ClusterState
from crop_gym.scenario import PlacementInstance, Scenario, ScenarioSampler

__all__ = ["DEFAULT_QUEUE_VIEW", "RENDER_MODES", "StaticPlacementBase", "check_render_mode"]

Obs = dict[str, NDArray[np.float32]]

#: Default largest queue view (capped at the scenario's queue size).
DEFAULT_QUEUE_VIEW = 64
#: Render modes of every placement environment.
RENDER_MODES = ("ansi", "rgb_array")


def check_render_mode(render_mode: str | None) -> str | None:
    """``render_mode`` if it is ``None`` or one of :data:`RENDER_MODES`, else a :class:`ConfigError`."""
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ConfigError(f"render_mode={render_mode!r} is not one of {list(RENDER_MODES)}")
    return render_mode


class StaticPlacementBase(gym.Env[Obs, np.int64]):
    """Base class of the static placement environments (one instance per episode).

    Args:
        scenario: A :class:`~crop_gym.scenario.Scenario`, a built-in scenario name or a scenario
            file.
        queue_view: Largest queue view (``None``: :data:`DEFAULT_QUEUE_VIEW`); capped at the
            scenario's queue size.
        invalid_action: ``"noop"`` or ``"stop"``.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.

    Attributes:
        sampler: Draws the episodes' instances.
        scenario: The scenario.
        topology: The cluster.
        queue_view: The view size ``Q`` after capping.
        state: The cluster state of the current episode.
        pending: Pending jobs, in queue order.
        placed: ``(job id, GPUs)`` of the jobs placed in this episode, in order.
        initial_F: F at the start of the episode.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}  # noqa: RUF012

    #: Set by the subclass's constructor.
    actions: CandidateActions
    features: ObservationBuilder
    max_steps: int

    def __init__(
        self,
        scenario: Scenario | str | Path,
        *,
        queue_view: int | None,
        invalid_action: str,
        render_mode: str | None,
    ) -> None:
        self.sampler = ScenarioSampler(scenario)
        self.scenario = self.sampler.scenario
        self.topology = self.sampler.topology
        self.render_mode = check_render_mode(render_mode)
        if invalid_action not in ("noop", "stop"):
            raise ConfigError(f"invalid_action={invalid_action!r} must be 'noop' or 'stop'")
        self.invalid_action = invalid_action
        sc = self.scenario
        self.queue_view = min(
            sc.queue_size, queue_view if queue_view is not None else DEFAULT_QUEUE_VIEW
        )
        if self.queue_view < 1:
            raise ConfigError(f"queue_view={queue_view!r} must be >= 1")
        self._renderer = ClusterRenderer(self.topology)
        self.state: ClusterState = ClusterState(self.topology, perf=sc.perf)
        self.pending: list[Job] = []
        self.placed: list[tuple[str, NDArray[np.int32]]] = []
        self.initial_F = 0.0
        self._queue_index: dict[str, int] = {}
        self._steps = 0

    @staticmethod
    def _check_max_steps(max_steps: int | None, default: int) -> int:
        steps = int(max_steps) if max_steps is not None else default
        if steps < 1:
            raise ConfigError(f"max_steps={max_steps!r} must be >= 1")
        return steps

    # ---------------------------------------------------------------- episodes
    def _start_episode(self, seed: int | None, options: dict[str, Any] | None) -> None:
        """Seed, then take ``options["instance"]`` (copied) or sample one; reset the episode's
        bookkeeping and the caches, and draw the observed health."""
        gym.Env.reset(self, seed=seed)
        inst = (options or {}).get("instance")
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
        self.pending = list(inst.queue)
        self._queue_index = {j.job_id: i for i, j in enumerate(inst.queue)}
        self.placed = []
        self.initial_F = self.state.F
        self._steps = 0
        self.features.clear_jobs()
        self.actions.forget_jobs()
        self.features.set_health(
            self.state.health.observe(self.np_random, self.scenario.observation_noise)
        )

    @property
    def episode_return(self) -> float:
        """``F(now) - F(start)``: the return so far."""
        return self.state.F - self.initial_F

    def _base_info(self, mask: NDArray[np.bool_]) -> dict[str, Any]:
        """The ``info`` entries every static environment gives (``mask`` is copied)."""
        m = self.features.last_metrics  # computed by the observation builder for this state
        return {
            "action_mask": mask.copy(),
            "F": m.F,
            "F_start": self.initial_F,
            "pending": len(self.pending),
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
                title="   ".join(self._header()),
                episode_jobs=jobs,
                chosen=self._chosen(),
            )
        return None

    def close(self) -> None:
        """Release the rendering figure."""
        self._renderer.close()
