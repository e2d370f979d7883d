"""The online placement environment: the candidate action interface inside the discrete-event simulator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.envs.actions import ActionTable, PendingQueue, action_space, build_action_tables
from crop_gym.envs.base import RENDER_MODES, EpisodeGuard, check_count, check_render_mode
from crop_gym.envs.observation import ObservationBuilder, ObservedHealth
from crop_gym.envs.online_common import (
    ONLINE_FEATURES,
    OnlineRendering,
    TraceWindows,
    jobs_option,
    online_cluster,
    progress_features,
)
from crop_gym.envs.render import ClusterRenderer
from crop_gym.envs.rewards import HOUR, online_reward
from crop_gym.errors import ConfigError, check_range
from crop_gym.model.health import AbnormalityProfile, get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.timing import PerfConfig
from crop_gym.model.topology import Topology
from crop_gym.sim import SimConfig, SimulationError, Simulator

__all__ = ["ONLINE_FEATURES", "OnlinePlacementEnv"]

Obs = dict[str, NDArray[np.float32]]


class OnlinePlacementEnv(OnlineRendering, gym.Env[Obs, np.int64]):
    """Online multi-job placement: jobs arrive from a trace, the agent places them as time goes on.

    An episode is a **trace window**: ``window_jobs`` consecutive jobs of the trace, starting at a
    job drawn with ``np_random`` (jobs larger than the cluster are left out of the pool), arrivals
    rebased to 0 and multiplied by ``arrival_scale`` (``< 1`` compresses the trace to load a small
    cluster). They run in the discrete-event simulator (:class:`crop_gym.sim.Simulator`): the
    cluster is empty at time 0; abnormal devices come and go and failures happen as the ``profile``
    says, with a health timeline seeded from ``np_random``.

    **Actions** are those of the static environment (:class:`~crop_gym.envs.placement.PlacementEnv`):
    ``Discrete(Q * C + 1)`` over the first ``Q`` queued jobs that can be placed now, ``C`` candidate
    placements each (the generator CROP uses), plus **stop**. A placement starts the job at once
    (reward 0) and the table is rebuilt. **Stop** advances simulated time to the next event (an
    arrival, a completion, a health event); with ``skip_idle`` (default) it keeps advancing while
    nothing can be placed, so every step offers a real decision. Masks: ``action_masks()`` and
    ``info["action_mask"]``; stop is always valid. Invalid actions (masked, out of range, or not one
    integer: floats with a fraction, NaN, strings, ``None``, arrays of several elements, and
    booleans) never raise: nothing happens, the reward is 0, ``info["invalid_action"]`` is ``True``.

    **Reward** (given on stop, for the simulated interval it advanced over):

    * ``"effective"`` (default): effective GPU-hours delivered, ``∫ F dt``, divided by the cluster's
      GPUs and by one hour, i.e. cluster-hours of fully effective use. Over a time-bounded episode
      this rewards placing jobs early, compactly (η), on healthy devices (survival). Without the
      horizon it would be nearly policy-independent: a job's ``∫ k η dt`` over its whole run is its
      work times ``k T*``, whatever the placement — hence ``horizon_hours``.
    * ``"jct"``: minus the job-hours spent in the system (queued or running) over the interval,
      divided by ``window_jobs``; the undiscounted return is minus the mean JCT in hours of a
      finished episode (Little's law).

    Both are :func:`crop_gym.envs.rewards.online_reward`.

    **Observation**: the static environment's keys — ``"gpus"`` ``(G, 11)`` (its 10 columns plus
    ``job_remaining``: remaining run time ``r`` of the job on the GPU at its current speed, as
    ``r / (r + 1 h)``), ``"candidates"`` ``(Q*C, 17)``, ``"queue"`` ``(Q, 7)``, ``"summary"``
    ``(10,)`` — plus ``"online"`` ``(6,)`` (:data:`ONLINE_FEATURES`); ``"gain"`` with
    ``privileged=True``. All ``float32`` in ``[0, 1]`` (``gain`` in ``[-1, 1]``), tables flattened.

    **Episode end**: *terminated* when every job of the window has completed; *truncated* at the
    simulated ``horizon_hours`` or after ``max_steps`` steps. After the end, ``step`` raises
    :class:`gymnasium.error.ResetNeeded` until ``reset`` is called.

    **Info**: ``action_mask``, ``time_s``, ``F``, ``queued``, ``running``, ``completed``,
    ``invalid_action``, ``placed``, ``interval_s`` (simulated seconds advanced by this step),
    ``effective_gpu_hours`` (``∫ F dt`` over it, unnormalised); at the end also ``sim_metrics``
    (the simulator's metrics: JCT, utilisation, ...).

    Args:
        trace: Bundled trace name or file (default ``"elasticflow:cluster10"``).
        cluster: Topology preset or object (default ``"leafspine-64"``).
        profile: Abnormality profile (default ``"mild"``).
        window_jobs: Jobs per episode, an integer >= 1 (default 32).
        arrival_scale: Factor on inter-arrival times (default 0.1: ten times the trace's rate, which
            loads the 64-GPU cluster to roughly 60-80 %).
        horizon_hours: Simulated-time limit of an episode (default 24).
        queue_view: ``Q``, an integer >= 1 (default 8).
        max_candidates: ``C``, an integer >= 1 (default 8).
        reward: ``"effective"`` or ``"jct"``.
        skip_idle: Let stop advance until something can be placed (default ``True``).
        max_steps: Step cap, an integer >= 1 (default ``20 * window_jobs``).
        privileged: Add the exact marginal gains ``"gain"``.
        robust_candidates: Let device health steer candidate choice.
        sim_config: Simulator options (checkpointing, failures, ...); its ``max_time_s`` is set from
            ``horizon_hours``.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.
        hardware: Hardware spec (:attr:`crop_gym.scenario.Scenario.hardware`): ``cluster`` on that
            hardware, and its model options replace ``sim_config.perf``; ``None``: as given.

    **Reset options**: ``{"jobs": [Job, ...]}`` plays the given jobs instead of a drawn window;
    other keys are refused (:class:`~crop_gym.errors.ConfigError`).

    **Version history**:
        v0: Initial version.
        v0 (core rebuild): ``step`` after the end raises ``ResetNeeded`` (it used to return
        reward 0); booleans are invalid actions; non-integer or boolean ``window_jobs``,
        ``queue_view``, ``max_candidates`` and ``max_steps`` and unknown reset options are refused.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}  # noqa: RUF012

    def __init__(
        self,
        trace: str = "elasticflow:cluster10",
        cluster: str | Topology = "leafspine-64",
        profile: str | AbnormalityProfile = "mild",
        *,
        window_jobs: int = 32,
        arrival_scale: float = 0.1,
        horizon_hours: float = 24.0,
        queue_view: int = 8,
        max_candidates: int = 8,
        reward: Literal["effective", "jct"] = "effective",
        skip_idle: bool = True,
        max_steps: int | None = None,
        privileged: bool = False,
        robust_candidates: bool = True,
        sim_config: SimConfig | None = None,
        render_mode: str | None = None,
        hardware: str | None = None,
    ) -> None:
        check_render_mode(render_mode)
        if reward not in ("effective", "jct"):
            raise ConfigError(f"reward={reward!r} must be 'effective' or 'jct'")
        window = check_count("window_jobs", window_jobs)
        check_range("horizon_hours", horizon_hours, 0.0, low_inclusive=False)
        self.queue_view = check_count("queue_view", queue_view)
        self.max_candidates = check_count("max_candidates", max_candidates)
        self.robust_candidates = bool(robust_candidates)
        self.render_mode = render_mode
        self.horizon_s = float(horizon_hours) * HOUR
        self.topology, self.sim_config = online_cluster(
            cluster, hardware, sim_config, self.horizon_s
        )
        self.profile = get_profile(profile)
        self.windows = TraceWindows.load(trace, self.topology, window, arrival_scale)
        self.reward_mode = reward
        self.skip_idle = bool(skip_idle)
        self.max_steps = check_count(
            "max_steps", 20 * self.windows.window_jobs if max_steps is None else max_steps
        )
        self.perf: PerfConfig = self.sim_config.perf
        self.features = ObservationBuilder(
            self.topology,
            self.perf,
            num_slots=self.queue_view,
            max_candidates=self.max_candidates,
            queue_size=self.windows.window_jobs,
            max_job_gpus=self.windows.max_job_gpus,
            privileged=privileged,
            gpu_extra=("job_remaining",),
        )
        obs_spaces = dict(self.features.observation_space.spaces)
        obs_spaces["online"] = spaces.Box(0.0, 1.0, (len(ONLINE_FEATURES),), np.float32)
        self.observation_space = spaces.Dict(obs_spaces)  # type: ignore[assignment]
        self.action_space = action_space(self.queue_view, self.max_candidates)
        self._renderer = ClusterRenderer(self.topology)
        self._guard = EpisodeGuard()
        self.sim: Simulator | None = None
        self.table: ActionTable | None = None
        self._steps = 0
        self._episode_jobs: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers
    @property
    def _sim(self) -> Simulator:
        if self.sim is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        return self.sim

    @property
    def _table(self) -> ActionTable:
        if self.table is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        return self.table

    def _rebuild(self) -> None:
        sim = self._sim
        self._queue = PendingQueue.of(sim.state, sim.queue)
        self.table = build_action_tables(
            sim.state,
            [self._queue],
            num_slots=self.queue_view,
            max_candidates=self.max_candidates,
            robust=self.robust_candidates,
            interference=self.features.privileged,
        )[0]

    def _observe(self) -> Obs:
        sim = self._sim
        state = sim.state
        extra = np.zeros((self.topology.num_gpus, 1))
        if state.jobs:
            rem = sim.remaining_time_by_gpu()
            extra[:, 0] = rem / (rem + HOUR)
        batch = self.features.build(
            state,
            ObservedHealth.of(state.conditions),
            [self._table],
            [self._queue],
            [self._steps],
            self.max_steps,
            extra=extra[None],
        )
        obs = {key: value[0] for key, value in batch.items()}
        obs["online"] = self._online_features()
        return obs

    def _online_features(self) -> NDArray[np.float32]:
        return progress_features(self._sim, self.windows.window_jobs, self.horizon_s).astype(
            np.float32
        )

    def _info(self) -> dict[str, Any]:
        sim = self._sim
        return {
            "action_mask": self._table.mask.copy(),
            "time_s": sim.now,
            "F": sim.state.F,
            "queued": sim.queue_length,
            "running": sim.running,
            "completed": sim.completed,
        }

    # --------------------------------------------------------------------- API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Start an episode on a new trace window.

        Options:
            ``{"jobs": [Job, ...]}`` plays the given jobs instead of a drawn window.
        """
        jobs = jobs_option(options)
        super().reset(seed=seed)
        if jobs is None:
            jobs = self.windows.draw(self.np_random)
        sim_seed = int(self.np_random.integers(2**63 - 1))
        self.sim = Simulator(
            jobs, self.topology, profile=self.profile, config=self.sim_config, seed=sim_seed
        )
        self._steps = 0
        self._episode_jobs = {j.job_id: i for i, j in enumerate(self.sim.jobs)}
        self._rebuild()
        self._guard.start()
        interval, area, _in_system = 0.0, 0.0, 0.0
        if self.skip_idle and not self._table.has_placement and not self._finished():
            interval, area, _ = self._advance(until_decision=True)
        obs = self._observe()
        info = self._info()
        info.update(interval_s=interval, effective_gpu_hours=area / HOUR)
        return obs, info

    def _finished(self) -> bool:
        return self._sim.done

    def _advance(self, until_decision: bool) -> tuple[float, float, float]:
        """Advance the simulator by one event (or until a decision is possible).

        Returns:
            (seconds advanced, ∫ F dt, ∫ jobs in system dt).
        """
        sim = self._sim
        t0 = sim.now
        area = 0.0
        in_system = 0.0
        while not sim.done:
            before = sim.now
            n_sys = sim.queue_length + sim.running
            try:
                area += sim.advance()
            except SimulationError:
                sim.truncated = True  # nothing can ever happen again: end the episode
                break
            in_system += n_sys * (sim.now - before)
            self._rebuild()
            if not until_decision or self._table.has_placement:
                break
        return sim.now - t0, area, in_system

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        """Place one (job, candidate) pair, or stop (advance simulated time)."""
        self._guard.check()
        sim = self._sim
        self._steps += 1
        table = self._table
        decoded = table.decode(action)
        invalid = False
        placed: str | None = None
        interval, area, in_system = 0.0, 0.0, 0.0
        if decoded is not None:
            q, c = decoded
            job = table.jobs[q]
            sim.place(job, table.gpus(q, c))
            placed = job.job_id
            self._rebuild()
        elif table.is_stop(action):
            if not sim.done:
                interval, area, in_system = self._advance(until_decision=self.skip_idle)
        else:
            invalid = True
        reward = online_reward(
            self.reward_mode,
            area=area,
            in_system=in_system,
            num_gpus=self.topology.num_gpus,
            window_jobs=self.windows.window_jobs,
        )
        terminated = sim.done and not sim.truncated
        truncated = not terminated and (sim.truncated or self._steps >= self.max_steps)
        self._guard.end_if(terminated, truncated)
        obs = self._observe()
        info = self._info()
        info.update(
            invalid_action=invalid,
            placed=placed,
            interval_s=interval,
            effective_gpu_hours=area / HOUR,
        )
        if terminated or truncated:
            info["sim_metrics"] = sim.result(policy_name="agent").summary()
        return obs, float(reward), terminated, truncated, info

    def action_masks(self) -> NDArray[np.bool_]:
        """Valid actions, ``bool[Q * C + 1]`` (sb3-contrib's ``MaskablePPO`` calls this)."""
        return self._table.mask.copy()

    def action_for(self, job_id: str, gpus: NDArray[np.integer[Any]]) -> int | None:
        """The action placing ``job_id`` on exactly ``gpus`` now, or ``None`` if it is not offered."""
        return self._table.index_of(job_id, gpus)

    # ------------------------------------------------------------------ render
    def _status(self) -> tuple[Simulator, Sequence[Job], int]:
        return self._sim, self._table.jobs, self._steps
