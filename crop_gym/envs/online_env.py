"""The online placement environment: the candidate action interface inside the discrete-event simulator."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.devices import AbnormalityProfile, Health, get_profile
from crop_gym.envs.actions import CandidateActions
from crop_gym.envs.base import RENDER_MODES, check_render_mode
from crop_gym.envs.features import ObservationBuilder
from crop_gym.envs.render import ClusterRenderer
from crop_gym.errors import ConfigError, check_range
from crop_gym.jobs import Job
from crop_gym.perf import PerfConfig
from crop_gym.sim import SimConfig, SimulationError, Simulator
from crop_gym.topology import Topology, make_topology

__all__ = ["ONLINE_FEATURES", "OnlinePlacementEnv"]

Obs = dict[str, NDArray[np.float32]]

#: Columns of the ``"online"`` key.
ONLINE_FEATURES: tuple[str, ...] = (
    "elapsed",  # simulated time / horizon
    "queued",  # queued jobs / window jobs
    "running",  # running jobs / window jobs
    "completed",  # completed jobs / window jobs
    "mean_wait",  # mean waiting time of the queued jobs w, as w / (w + 1 h)
    "next_arrival",  # time to the next arrival d, as d / (d + 1 h) (1 when none is left)
)

_HOUR = 3600.0


class OnlinePlacementEnv(gym.Env[Obs, np.int64]):
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
    ``info["action_mask"]``; stop is always valid. Invalid actions never raise: nothing happens,
    ``info["invalid_action"]`` is ``True``.

    **Reward** (given on stop, for the simulated interval it advanced over):

    * ``"effective"`` (default): effective GPU-hours delivered, ``∫ F dt``, divided by the cluster's
      GPUs and by one hour, i.e. cluster-hours of fully effective use. Over a time-bounded episode
      this rewards placing jobs early, compactly (η), on healthy devices (survival). Without the
      horizon it would be nearly policy-independent: a job's ``∫ k η dt`` over its whole run is its
      work times ``k T*``, whatever the placement — hence ``horizon_hours``.
    * ``"jct"``: minus the job-hours spent in the system (queued or running) over the interval,
      divided by ``window_jobs``; the undiscounted return is minus the mean JCT in hours of a
      finished episode (Little's law).

    **Observation**: the static environment's keys — ``"gpus"`` ``(G, 11)`` (its 10 columns plus
    ``job_remaining``: remaining run time ``r`` of the job on the GPU at its current speed, as
    ``r / (r + 1 h)``), ``"candidates"`` ``(Q*C, 17)``, ``"queue"`` ``(Q, 7)``, ``"summary"``
    ``(10,)`` — plus ``"online"`` ``(6,)`` (:data:`ONLINE_FEATURES`); ``"gain"`` with
    ``privileged=True``. All ``float32`` in ``[0, 1]`` (``gain`` in ``[-1, 1]``), tables flattened.

    **Episode end**: *terminated* when every job of the window has completed; *truncated* at the
    simulated ``horizon_hours`` or after ``max_steps`` steps.

    **Info**: ``action_mask``, ``time_s``, ``F``, ``queued``, ``running``, ``completed``,
    ``invalid_action``, ``placed``, ``interval_s`` (simulated seconds advanced by this step),
    ``effective_gpu_hours`` (``∫ F dt`` over it, unnormalised); at the end also ``sim_metrics``
    (the simulator's metrics: JCT, utilisation, ...).

    Args:
        trace: Bundled trace name or file (default ``"elasticflow:cluster10"``).
        cluster: Topology preset or object (default ``"leafspine-64"``).
        profile: Abnormality profile (default ``"mild"``).
        window_jobs: Jobs per episode (default 32).
        arrival_scale: Factor on inter-arrival times (default 0.1: ten times the trace's rate, which
            loads the 64-GPU cluster to roughly 60-80 %).
        horizon_hours: Simulated-time limit of an episode (default 24).
        queue_view: ``Q`` (default 8).
        max_candidates: ``C`` (default 8).
        reward: ``"effective"`` or ``"jct"``.
        skip_idle: Let stop advance until something can be placed (default ``True``).
        max_steps: Step cap (default ``20 * window_jobs``).
        privileged: Add the exact marginal gains ``"gain"``.
        robust_candidates: Let device health steer candidate choice.
        sim_config: Simulator options (checkpointing, failures, ...); its ``max_time_s`` is set from
            ``horizon_hours``.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.

    **Version history**:
        v0: Initial version.
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
    ) -> None:
        from crop_gym.workloads import load_workload

        check_render_mode(render_mode)
        if reward not in ("effective", "jct"):
            raise ConfigError(f"reward={reward!r} must be 'effective' or 'jct'")
        check_range("window_jobs", window_jobs, 1)
        check_range("arrival_scale", arrival_scale, 0.0, low_inclusive=False)
        check_range("horizon_hours", horizon_hours, 0.0, low_inclusive=False)
        check_range("queue_view", queue_view, 1)
        check_range("max_candidates", max_candidates, 1)
        self.render_mode = render_mode
        self.topology = make_topology(cluster) if isinstance(cluster, str) else cluster
        self.profile = get_profile(profile)
        G = self.topology.num_gpus
        workload = load_workload(trace)
        self.trace_name = workload.name
        self._pool: tuple[Job, ...] = tuple(j for j in workload.jobs if j.num_gpus <= G)
        self.skipped_jobs = len(workload.jobs) - len(self._pool)
        if len(self._pool) < 1:
            raise ConfigError(f"no job of {trace!r} fits on {self.topology.name} ({G} GPUs)")
        self.window_jobs = min(int(window_jobs), len(self._pool))
        self.arrival_scale = float(arrival_scale)
        self.horizon_s = float(horizon_hours) * _HOUR
        self.reward_mode = reward
        self.skip_idle = bool(skip_idle)
        self.max_steps = int(max_steps) if max_steps is not None else 20 * self.window_jobs
        check_range("max_steps", self.max_steps, 1)
        base = sim_config if sim_config is not None else SimConfig()
        self.sim_config = dataclasses.replace(
            base, max_time_s=self.horizon_s, record_timeline=False
        )
        self.perf: PerfConfig = self.sim_config.perf
        max_k = max(j.num_gpus for j in self._pool)
        self.actions = CandidateActions(
            int(queue_view), int(max_candidates), robust=robust_candidates
        )
        self.features = ObservationBuilder(
            self.topology,
            self.actions,
            self.perf,
            queue_size=self.window_jobs,
            max_job_gpus=max_k,
            privileged=privileged,
            gpu_extra=("job_remaining",),
        )
        obs_spaces = dict(self.features.observation_space.spaces)
        obs_spaces["online"] = spaces.Box(0.0, 1.0, (len(ONLINE_FEATURES),), np.float32)
        self.observation_space = spaces.Dict(obs_spaces)  # type: ignore[assignment]
        self.action_space = self.actions.space
        self._renderer = ClusterRenderer(self.topology)
        self.sim: Simulator | None = None
        self._obs_health: Health | None = None
        self._steps = 0
        self._episode_jobs: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers
    def _draw_window(self) -> list[Job]:
        n = self.window_jobs
        start = int(self.np_random.integers(0, len(self._pool) - n + 1))
        jobs = self._pool[start : start + n]
        t0 = jobs[0].arrival
        return [
            dataclasses.replace(j, arrival=(j.arrival - t0) * self.arrival_scale, deadline=None)
            for j in jobs
        ]

    @property
    def _sim(self) -> Simulator:
        if self.sim is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        return self.sim

    def _rebuild(self) -> None:
        sim = self._sim
        self.actions.build(sim.state, sim.queue)

    def _observe(self) -> Obs:
        sim = self._sim
        state = sim.state
        if state.health is not self._obs_health:
            self.features.set_health(state.health)
            self._obs_health = state.health
        gb = self.features.gpu_buffer
        col = gb.shape[1] - 1
        gb[:, col] = 0.0
        if state.jobs:
            rem = sim.remaining_time_by_gpu()
            gb[:, col] = rem / (rem + _HOUR)
        obs = self.features.build(state, sim.queue, step=self._steps, max_steps=self.max_steps)
        obs["online"] = self._online_features()
        return obs

    def _online_features(self) -> NDArray[np.float32]:
        sim = self._sim
        n = float(self.window_jobs)
        f = np.zeros(len(ONLINE_FEATURES), dtype=np.float32)
        f[0] = min(sim.now / self.horizon_s, 1.0)
        f[1] = min(sim.queue_length / n, 1.0)
        f[2] = min(sim.running / n, 1.0)
        f[3] = min(sim.completed / n, 1.0)
        if sim.queue_length:
            wait = float(np.mean([sim.now - j.arrival for j in sim.queue]))
            f[4] = wait / (wait + _HOUR)
        nxt = sim.next_arrival_time()
        f[5] = 1.0 if not np.isfinite(nxt) else (nxt - sim.now) / (nxt - sim.now + _HOUR)
        return np.clip(f, 0.0, 1.0)

    def _info(self) -> dict[str, Any]:
        sim = self._sim
        return {
            "action_mask": self.actions.mask.copy(),
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
        super().reset(seed=seed)
        jobs = (options or {}).get("jobs")
        if jobs is None:
            jobs = self._draw_window()
        sim_seed = int(self.np_random.integers(2**63 - 1))
        self.sim = Simulator(
            jobs, self.topology, profile=self.profile, config=self.sim_config, seed=sim_seed
        )
        self._obs_health = None
        self._steps = 0
        self._episode_jobs = {j.job_id: i for i, j in enumerate(self.sim.jobs)}
        self.features.clear_jobs()
        self._rebuild()
        interval, area, _in_system = 0.0, 0.0, 0.0
        if self.skip_idle and not self.actions.has_placement and not self._finished():
            interval, area, _ = self._advance(until_decision=True)
        obs = self._observe()
        info = self._info()
        info.update(interval_s=interval, effective_gpu_hours=area / _HOUR)
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
            if not until_decision or self.actions.has_placement:
                break
        return sim.now - t0, area, in_system

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        """Place one (job, candidate) pair, or stop (advance simulated time)."""
        sim = self._sim
        self._steps += 1
        acts = self.actions
        decoded = acts.decode(action)
        invalid = False
        placed: str | None = None
        interval, area, in_system = 0.0, 0.0, 0.0
        if decoded is not None:
            q, c = decoded
            job = acts.view[q]
            sim.place(job, acts.gpus(q, c))
            placed = job.job_id
            self._rebuild()
        elif acts.is_stop(action):
            if not sim.done:
                interval, area, in_system = self._advance(until_decision=self.skip_idle)
        else:
            invalid = True
        if self.reward_mode == "effective":
            reward = area / (self.topology.num_gpus * _HOUR)
        else:
            reward = -in_system / _HOUR / self.window_jobs
        terminated = sim.done and not sim.truncated
        truncated = not terminated and (sim.truncated or self._steps >= self.max_steps)
        obs = self._observe()
        info = self._info()
        info.update(
            invalid_action=invalid,
            placed=placed,
            interval_s=interval,
            effective_gpu_hours=area / _HOUR,
        )
        if terminated or truncated:
            info["sim_metrics"] = sim.result(policy_name="agent").summary()
        return obs, float(reward), terminated, truncated, info

    def action_masks(self) -> NDArray[np.bool_]:
        """Valid actions, ``bool[Q * C + 1]`` (sb3-contrib's ``MaskablePPO`` calls this)."""
        return self.actions.mask.copy()

    def action_for(self, job_id: str, gpus: NDArray[np.integer[Any]]) -> int | None:
        """The action placing ``job_id`` on exactly ``gpus`` now, or ``None`` if it is not offered."""
        return self.actions.index_of(job_id, gpus)

    # ------------------------------------------------------------------ render
    def _header(self) -> list[str]:
        sim = self._sim
        view = ", ".join(f"{j.job_id}:{j.model}x{j.num_gpus}" for j in self.actions.view[:8])
        return [
            f"online {self.trace_name} ({self.topology.name})  t={sim.now / _HOUR:.2f}h  step {self._steps}  "
            f"F={sim.state.F:.2f}  free={sim.state.num_free}/{self.topology.num_gpus}",
            f"queued {sim.queue_length}  running {sim.running}  done {sim.completed}/{len(sim.jobs)}: {view}",
        ]

    def render(self) -> Any:
        """``ansi``: a string; ``rgb_array``: ``uint8[H, W, 3]``; ``None`` without a render mode."""
        if self.sim is None or self.render_mode is None:
            return None
        if self.render_mode == "ansi":
            return self._renderer.ansi(self.sim.state, header=self._header())
        return self._renderer.rgb(
            self.sim.state, title="   ".join(self._header()), episode_jobs=self._episode_jobs
        )

    def close(self) -> None:
        """Release the rendering figure."""
        self._renderer.close()
