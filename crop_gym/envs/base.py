"""What the placement environments share: argument checks, the episode guard, and the single
static environment's shell around its episode engine.

* Argument checks (:func:`check_count`, :func:`check_options`, :func:`check_render_mode`) validate
  constructor arguments and reset options the same way in every environment: one
  :class:`~crop_gym.errors.ConfigError` naming the parameter and what is allowed.
* :class:`EpisodeGuard` makes ``step`` raise :class:`gymnasium.error.ResetNeeded` before the first
  ``reset`` and after an episode ended.
* :class:`StaticPlacementBase` holds the parts of :class:`~crop_gym.envs.placement.PlacementEnv`
  (candidate mode) and :class:`~crop_gym.envs.gpu_placement.GPUPlacementEnv` (GPU mode) that do not
  depend on the action space: the scenario, the start of an episode (a sampled or given instance
  and the observed health), the action table of the current state, the observation, the common
  ``info`` entries and rendering. Each is a batch of one :class:`~crop_gym.envs.episodes.StaticEpisodes`
  (the engine the batched environment runs on ``N`` episodes).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import NDArray

from crop_gym.envs.actions import ActionTable, PendingQueue
from crop_gym.envs.episodes import StaticEpisodes
from crop_gym.envs.observation import ObservationBuilder
from crop_gym.envs.render import ClusterRenderer
from crop_gym.errors import ConfigError
from crop_gym.model.health import Health
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState, RegionMetrics
from crop_gym.scenario import PlacementInstance, Scenario, ScenarioSampler

__all__ = [
    "DEFAULT_QUEUE_VIEW",
    "RENDER_MODES",
    "EpisodeGuard",
    "StaticPlacementBase",
    "check_count",
    "check_options",
    "check_render_mode",
]

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


def check_count(name: str, value: Any, low: int = 1) -> int:
    """``value`` as an ``int`` if it is an integer ``>= low`` (not a bool, not a float).

    Raises:
        ConfigError: Naming ``name`` and the allowed range otherwise.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name}={value!r} must be an integer >= {low}")
    if value < low:
        raise ConfigError(f"{name}={value!r} is outside its allowed range [{low}, inf)")
    return int(value)


def check_options(options: Mapping[str, Any] | None, allowed: Collection[str]) -> dict[str, Any]:
    """``options`` as a dict (empty for ``None``), refusing keys outside ``allowed``.

    Raises:
        ConfigError: Naming the unknown key and the allowed ones.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"options must be a dict, got {type(options).__name__}")
    for key in options:
        if key not in allowed:
            raise ConfigError(f"unknown reset option {key!r}; allowed: {sorted(allowed) or 'none'}")
    return dict(options)


class EpisodeGuard:
    """Tracks whether the episode is running: ``step`` is refused before ``reset`` and after the end."""

    def __init__(self) -> None:
        self._running = False

    @property
    def running(self) -> bool:
        """Whether an episode is running."""
        return self._running

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


def check_instance(inst: Any, sampler: ScenarioSampler) -> PlacementInstance:
    """``options["instance"]`` checked: a :class:`~crop_gym.scenario.PlacementInstance` on the
    scenario's cluster."""
    if not isinstance(inst, PlacementInstance):
        raise ConfigError(
            f"options['instance'] must be a PlacementInstance, got {type(inst).__name__}"
        )
    topo = sampler.topology
    if inst.state.topology is not topo and inst.state.topology.num_gpus != topo.num_gpus:
        raise ConfigError("options['instance'] is on a different cluster than this environment")
    return inst


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
        episodes: The episode engine (a batch of one).
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

    def _start_engine(self) -> None:
        """Make the episode engine (the subclass's constructor calls it once ``features`` and
        ``privileged`` are set)."""
        self.episodes = StaticEpisodes(self.sampler, 1, self.features, self.table_options)
        self.episodes.rebuild([0])

    @staticmethod
    def _check_max_steps(max_steps: int | None, default: int) -> int:
        return check_count("max_steps", default if max_steps is None else max_steps)

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

    # ---------------------------------------------------------------- the episode
    @property
    def state(self) -> ClusterState:
        """The cluster state of the current episode."""
        return self.episodes.state

    @property
    def table(self) -> ActionTable:
        """The action table of the current state and pending jobs."""
        table = self.episodes.tables[0]
        assert table is not None
        return table

    @property
    def pending_queue(self) -> PendingQueue:
        """The episode's queue and which of its jobs are pending."""
        return self.episodes.queues[0]

    @property
    def pending(self) -> list[Job]:
        """The pending jobs, in queue order."""
        return self.pending_queue.jobs

    @property
    def placed(self) -> list[tuple[str, NDArray[np.int32]]]:
        """``(job id, GPUs)`` of the jobs placed in this episode, in order."""
        return self.episodes.placed[0]

    @property
    def initial_F(self) -> float:
        """F at the start of the episode."""
        return float(self.episodes.initial_F[0])

    @property
    def observed_health(self) -> Health:
        """The device health the agent observes this episode."""
        return self.episodes.observed[0]

    @property
    def instance(self) -> PlacementInstance:
        """The episode's instance as it started (a new state each time it is read)."""
        return self.episodes.instance(0)

    @property
    def episode_id(self) -> int:
        """The number of the current episode (1 for the first; the state object itself is reused
        from one episode to the next)."""
        return int(self.episodes.started[0])

    @property
    def steps(self) -> int:
        """Steps taken in the episode."""
        return int(self.episodes.steps[0])

    @property
    def episode_return(self) -> float:
        """``F(now) - F(start)``: the return so far."""
        return self.state.F - self.initial_F

    def begin_episode(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """:meth:`reset` up to the action table: seed, then take ``options["instance"]`` or draw
        one, and the observed health."""
        opts = check_options(options, self.RESET_OPTIONS)
        gym.Env.reset(self, seed=seed)
        inst = opts.get("instance")
        given = [None if inst is None else check_instance(inst, self.sampler)]
        self.episodes.start([0], [self.np_random], given)
        self._guard.start()

    def _start_episode(self, seed: int | None, options: dict[str, Any] | None) -> None:
        """Seed, start the episode and build its action table."""
        self.begin_episode(seed, options)
        self.episodes.rebuild([0])

    def _remove_pending(self, position: int) -> None:
        """The ``position``-th pending job leaves the queue (dropped)."""
        self.episodes.queues[0] = self.pending_queue.without(position)

    def _count_step(self) -> None:
        self._guard.check()
        self.episodes.steps[0] += 1

    def _observe(
        self, extra: NDArray[np.float64] | None = None, metrics: RegionMetrics | None = None
    ) -> Obs:
        """The observation of the current state (the one place that calls the builder;
        ``metrics``: the state's :meth:`~crop_gym.model.state.ClusterState.region_metrics` if the
        caller has them)."""
        x = None if extra is None else extra[None]
        obs = self.episodes.observe([0], metrics, max_steps=self.max_steps, extra=x)
        return {key: value[0] for key, value in obs.items()}

    def _base_info(
        self, mask: NDArray[np.bool_], metrics: RegionMetrics | None = None
    ) -> dict[str, Any]:
        """The ``info`` entries every static environment gives (``mask`` is copied)."""
        m = self.state.region_metrics() if metrics is None else metrics
        return self.episodes.info(0, mask, m)

    # ------------------------------------------------------------------ render
    def _status_line(self, mode: str = "") -> str:
        """The first header line: scenario, step, F, return and free GPUs."""
        topo = self.topology
        return (
            f"{self.scenario.name} ({topo.name}){mode}  step {self.steps}/{self.max_steps}  "
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
            d = self.episodes.draws[0]
            order = {} if d is None else {j.job_id: i for i, j in enumerate(d.queue)}
            jobs = {jid: order.get(jid, i) for i, (jid, _) in enumerate(self.placed)}
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
