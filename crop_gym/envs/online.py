"""The online placement environment: the candidate action interface inside the discrete-event
simulator, where the order, the place and the timing of starts are decisions.

The class docstring of :class:`OnlinePlacementEnv` is the specification; ``OnlinePlacement-v0``,
``-v1``, ``-Bursty-v1``, ``-v2`` and ``-Bursty-v2`` are registered settings of this one class (as
CartPole-v0 and -v1 are), listed with their differences in its version history.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    TraceMix,
    TraceSplit,
    jobs_option,
    online_cluster,
    progress_features,
)
from crop_gym.envs.render import ClusterRenderer
from crop_gym.envs.rewards import (
    HOUR,
    ONLINE_TERMS,
    ONLINE_WEIGHTS,
    REWARD_PRESETS,
    online_terms,
    weighted,
)
from crop_gym.errors import ConfigError, check_range
from crop_gym.model.health import AbnormalityProfile, get_profile
from crop_gym.model.jobs import Job
from crop_gym.model.topology import Topology
from crop_gym.sim import SimConfig, SimulationError, Simulator

__all__ = [
    "ONLINE_FEATURES",
    "ONLINE_QUEUE_FEATURES",
    "SLOT_FEATURES",
    "WAITING_FEATURES",
    "OnlinePlacementEnv",
    "action_mask",
]

Obs = dict[str, NDArray[np.float32]]

#: Columns of the ``"online"`` key: the progress features, then the cluster's load and health
#: (with ``observe_queue``).
ONLINE_QUEUE_FEATURES: tuple[str, ...] = (
    *ONLINE_FEATURES,
    "free",  # free usable GPUs / cluster GPUs
    "queued_gpus",  # GPUs requested by the queued jobs / cluster GPUs (capped at 1)
    "abnormal",  # share of GPUs that are slow, failure-prone or failed now
)

#: Columns of the ``"waiting"`` table: one row per queued job, oldest first (fitting or not).
WAITING_FEATURES: tuple[str, ...] = (
    "present",  # the row holds a queued job
    "fits",  # it fits in the free GPUs now (so it is in the view, if the view has room)
    "size",  # k / largest job size of the trace
    "wait",  # waiting time w, as w / (w + 1 h)
    "work",  # remaining run time r at the ideal speed (iterations left x T*), as r / (r + 1 h)
    "slot",  # (view slot + 1) / Q if the job is in the view, else 0
)

#: Columns of the ``"slots"`` table: one row per view slot (aligned with ``"queue"``).
SLOT_FEATURES: tuple[str, ...] = (
    "work",  # remaining ideal run time r of the slot's job, as r / (r + 1 h)
    "wait",  # its waiting time w, as w / (w + 1 h)
)


def _squash(seconds: NDArray[np.float64] | float) -> Any:
    """``x / (x + 1 h)``: seconds to ``[0, 1)``."""
    return np.asarray(seconds) / (np.asarray(seconds) + HOUR)


def action_mask(table: ActionTable) -> NDArray[np.bool_]:
    """The valid actions of ``table``, ``bool[Q * C + 1]``, as predicates.

    * place ``(q, c)`` ⇔ view slot ``q`` holds a queued job that fits now ∧ that job has a
      ``c``-th candidate (these are exactly the table's rows);
    * wait (the last action) ⇔ always: time can always advance (up to the horizon).
    """
    mask = np.zeros(table.stop_action + 1, dtype=bool)
    mask[table.row_action] = True
    mask[-1] = True
    return mask


@dataclass(frozen=True)
class _Interval:
    """What one advance of simulated time covered (:meth:`OnlinePlacementEnv._advance`)."""

    seconds: float  # simulated seconds advanced
    area: float  # ∫ F dt (effective GPU-seconds)
    queued: float  # ∫ jobs queued dt (job-seconds)
    in_system: float  # ∫ jobs in the system (queued or running) dt (job-seconds)


def _reward_weights(weights: Mapping[str, float] | None, preset: str | None) -> dict[str, float]:
    """The reward's term weights from ``reward_weights`` or the ``reward`` shorthand (checked)."""
    if preset is not None:
        if weights is not None:
            raise ConfigError("give reward or reward_weights, not both")
        if preset not in REWARD_PRESETS:
            raise ConfigError(
                f"reward={preset!r} must be one of {', '.join(map(repr, REWARD_PRESETS))}"
            )
        weights = REWARD_PRESETS[preset]
    chosen = dict(ONLINE_WEIGHTS if weights is None else weights)
    bad = sorted(set(chosen) - set(ONLINE_TERMS))
    if bad:
        raise ConfigError(f"reward_weights: unknown term(s) {bad}; terms: {sorted(ONLINE_TERMS)}")
    for name, value in chosen.items():
        check_range(f"reward_weights[{name!r}]", value, 0.0)
    return {k: float(v) for k, v in chosen.items()}


class OnlinePlacementEnv(OnlineRendering, gym.Env[Obs, np.int64]):
    """Online placement in which the order, the place and the timing of starts are decisions.

    An episode is a **trace window**: ``window_jobs`` consecutive jobs of ``trace`` (jobs larger
    than the cluster left out), from a start drawn with ``np_random``, arrivals rebased to 0,
    multiplied by ``arrival_scale`` (``< 1`` compresses the window so queues form) and, with
    ``burst_s``, rounded down to multiples of ``burst_s`` (jobs then arrive in bursts). They run in
    the discrete-event simulator (:class:`crop_gym.sim.Simulator`) on an empty cluster, with the
    ``profile``'s abnormal devices at time 0 and **health that changes during the episode**:
    devices turn abnormal at ``onset_rate_per_gpu_hour`` (slow, failure-prone or failed) for an
    exponential time of mean ``mean_abnormal_duration_s``; failure-prone devices fail (their jobs
    lose the work since their last checkpoint and go back to the queue); failed GPUs are repaired.
    The health timeline is seeded from ``np_random`` and independent of the actions.

    **Splits** (``split``, :class:`~crop_gym.envs.online_common.TraceSplit`): ``trace`` may name
    several traces (the *training traces*) and ``held_out_traces`` more. Each training trace is cut
    at the submission time of its job ``floor(train_fraction · n)`` (jobs in submission order):
    ``split="train"`` draws windows from the jobs submitted before the cut, ``split="eval"`` from
    those at or after it and from the held-out traces whole; ``None`` / ``"all"`` from every trace
    whole. A window never crosses a cut (it is drawn inside one part of one trace); with several
    sources the trace is drawn uniformly first. The job-size scale of the observation is the
    largest job of every trace named, so it does not depend on the split.

    **Actions** ``Discrete(Q * C + 1)``. The view is the first ``Q`` queued jobs, oldest first, that
    fit in the free GPUs now — every job its own slot, or with ``group_identical`` one slot per
    (model, size, batch) class. Action ``q * C + c`` starts view job ``q`` on its candidate ``c``
    (the compact GPU sets CROP considers, :func:`~crop_gym.model.candidates.candidate_sets`) at
    once: the clock does not move, the table is rebuilt, and the agent may start another job. The
    last action, **wait**, leaves every queued job queued and advances the simulation to the next
    event (an arrival, a completion, a health event, the horizon); with ``skip_idle`` (default) it
    keeps advancing while nothing can be placed, so every step is a real decision.

    **Action mask** (:func:`action_mask`; ``action_masks()`` and ``info["action_mask"]``): a
    placement is valid when its slot holds a job and the job has that candidate; wait is always
    valid. Invalid actions (masked, out of range, not one integer: floats with a fraction, NaN,
    strings, ``None``, arrays of several elements, booleans) never raise: nothing happens, the
    reward is 0, ``info["invalid_action"]`` is ``True``.

    **Reward** on wait, for the interval advanced (placements give 0): the weighted sum
    (``reward_weights``, default :data:`~crop_gym.envs.rewards.ONLINE_WEIGHTS`) of the named terms
    of :func:`~crop_gym.envs.rewards.online_terms`, reported in ``info["reward_terms"]``:

    * ``effective``: effective GPU-hours gained, ``∫ F dt / (G · 1 h)``: over a time-bounded episode
      this rewards placing jobs early, compactly (η), on healthy devices (survival);
    * ``waiting``: minus the job-hours spent queued, per window job;
    * ``in_system``: minus the job-hours spent in the system (queued or running), per window job:
      alone, the undiscounted return is minus the mean JCT in hours of a finished episode (Little's
      law).

    ``reward="effective"`` or ``"jct"`` is shorthand for the weights of one term
    (:data:`~crop_gym.envs.rewards.REWARD_PRESETS`).

    **Observation** (``float32`` in ``[0, 1]``, ``gain`` in ``[-1, 1]``; tables row-major 1-D): the
    static environment's ``"gpus"`` ``(G, 11)`` (its columns plus ``job_remaining``: remaining run
    time ``r`` of the job on the GPU at its current speed, as ``r / (r + 1 h)``), ``"candidates"``
    ``(Q*C, 17)``, ``"queue"`` ``(Q, 8)``, ``"summary"`` ``(10,)``; ``"online"`` ``(6,)``
    (:data:`~crop_gym.envs.online_common.ONLINE_FEATURES`), and with ``observe_queue`` (v1):
    ``"online"`` ``(9,)`` (:data:`ONLINE_QUEUE_FEATURES`: load and health too), ``"waiting"``
    ``(W, 6)``, the first ``W = waiting_view`` queued jobs whether they fit or not
    (:data:`WAITING_FEATURES`), and ``"slots"`` ``(Q, 2)``, the remaining work and wait of each view
    slot (:data:`SLOT_FEATURES`); ``"gain"`` ``(Q*C,)`` with ``privileged=True``.

    **Episode end**: *terminated* when every job of the window has completed; *truncated* at the
    simulated horizon or after ``max_steps`` steps; then ``step`` raises
    :class:`gymnasium.error.ResetNeeded` until ``reset``.

    **Info**: ``action_mask``, ``time_s``, ``F``, ``queued``, ``running``, ``completed``,
    ``view_jobs`` (jobs placeable now), ``interval_s`` (simulated seconds advanced by the step or
    the reset), ``effective_gpu_hours`` (``∫ F dt`` over it, unnormalised); on steps also
    ``invalid_action``, ``placed``, ``reward_terms``, ``in_system_s`` (``∫ jobs in system dt`` over
    the interval); at the end ``sim_metrics`` (the simulator's: JCT, utilisation, ...) and
    ``mean_jct_h``: the mean over the window's jobs of the time each spent in the system until it
    finished or the horizon (the mean JCT when every job finished).

    Args:
        trace: Bundled trace name or file, or a sequence of them (the training traces; default
            ``"elasticflow:cluster04"``: jobs of 1 to 64 GPUs, enough large ones to contend on 64
            GPUs).
        cluster: Topology preset or object (default ``"leafspine-64"``).
        profile: Abnormality profile at time 0 (default ``"mild"``).
        onset_rate_per_gpu_hour: Rate at which a device turns abnormal, overriding the profile's
            (default 0.05: about 3 onsets an hour on 64 GPUs); ``None`` keeps the profile's.
        mean_abnormal_duration_s: Mean length of an abnormal episode (default 3600); ``None``
            keeps the profile's.
        window_jobs: Jobs per episode, an integer >= 1 (default 48).
        arrival_scale: Factor on inter-arrival times, > 0 (default 0.1).
        burst_s: Round arrivals down to multiples of this many seconds (``None``: no rounding).
        horizon_hours: Simulated-time limit, > 0 (default 72).
        queue_view: ``Q``, an integer >= 1 (default 8).
        max_candidates: ``C``, an integer >= 1 (default 8).
        group_identical: One view slot per job class instead of one per job (default ``False``).
        observe_queue: Add the load and health features and the ``"waiting"`` and ``"slots"``
            tables (default ``True``).
        waiting_view: ``W``, an integer >= 1 (default 16).
        reward_weights: Weights of the reward terms (keys ``effective``, ``waiting``,
            ``in_system``; each >= 0).
        reward: ``"effective"`` or ``"jct"``, shorthand for ``reward_weights`` (not both).
        skip_idle: Let wait advance until something can be placed (default ``True``).
        max_steps: Step cap, an integer >= 1 (default ``20 * window_jobs``).
        privileged: Add the exact marginal gains ``"gain"``.
        robust_candidates: Let device health steer candidate choice.
        sim_config: Simulator options; its ``max_time_s`` is set from ``horizon_hours``.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.
        hardware: Hardware spec (:attr:`crop_gym.scenario.Scenario.hardware`): ``cluster`` on that
            hardware, and its model options replace ``sim_config.perf``; ``None``: as given.
        held_out_traces: Traces never in the train part (evaluation only; default none).
        split: ``"train"``, ``"eval"``, ``"all"`` or ``None`` (same as ``"all"``, the default).
        train_fraction: Share of each training trace's jobs (by submission time) before its cut,
            in ``(0, 1)`` (default 0.7).

    **Reset options**: ``{"jobs": [Job, ...]}`` plays the given jobs instead of a drawn window;
    other keys are refused (:class:`~crop_gym.errors.ConfigError`).

    **Version history** (the registered settings of this class):
        v0 (``trace="elasticflow:cluster10"``, ``window_jobs=32``, ``horizon_hours=24``, the mild
        profile's onsets, ``group_identical``, no ``observe_queue``, reward ``effective``): 32-job
        windows of ElasticFlow cluster10 (mostly 1-GPU jobs) on 64 GPUs: queues never formed and
        exactly one job was placeable at each of 313 measured decisions; abnormal onsets at the
        mild profile's 0.002 per GPU-hour (about one in 8 h). Core rebuild: ``step`` after the end
        raises ``ResetNeeded`` (it used to return reward 0); booleans are invalid actions;
        non-integer or boolean counts and unknown reset options are refused.
        v1 (the defaults): trace cluster04 with 48-job windows (queues form; several jobs are
        placeable at a third of the decisions or more); every job its own view slot;
        ``"waiting"`` and ``"slots"`` keys (what is queued beyond the view, remaining work,
        waits); onsets at 0.05 per GPU-hour, 1 h episodes; ``burst_s``; reward = weighted named
        terms in ``info["reward_terms"]``; ``mean_jct_h`` at the end; the stop action is called
        *wait*.
        Bursty-v1: v1 with ``arrival_scale=0.25`` and ``burst_s=1800``.
        Core v2: v0 and v1 are one class (``OnlinePlacementV1Env`` is gone); every step's info
        has the union of both versions' keys; what each version observes, does and rewards is
        unchanged (the behaviour fixture holds).
        v2 and Bursty-v2 (v1 and Bursty-v1 with honest splits): ``trace=("elasticflow:cluster04",
        "elasticflow:cluster03")``, ``held_out_traces=("elasticflow:cluster06",)``,
        ``train_fraction=0.7`` and ``split="train"`` by default: training windows from the first
        70 % of cluster04 and cluster03 by submission time; ``split="eval"`` (what ``crop-gym
        eval`` plays) from their last 30 % and from cluster06, which no training window comes
        from. v1's windows could overlap between training and evaluation seeds.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}  # noqa: RUF012

    def __init__(
        self,
        trace: str | Sequence[str] = "elasticflow:cluster04",
        cluster: str | Topology = "leafspine-64",
        profile: str | AbnormalityProfile = "mild",
        *,
        onset_rate_per_gpu_hour: float | None = 0.05,
        mean_abnormal_duration_s: float | None = 3600.0,
        window_jobs: int = 48,
        arrival_scale: float = 0.1,
        burst_s: float | None = None,
        horizon_hours: float = 72.0,
        queue_view: int = 8,
        max_candidates: int = 8,
        group_identical: bool = False,
        observe_queue: bool = True,
        waiting_view: int = 16,
        reward_weights: Mapping[str, float] | None = None,
        reward: Literal["effective", "jct"] | None = None,
        skip_idle: bool = True,
        max_steps: int | None = None,
        privileged: bool = False,
        robust_candidates: bool = True,
        sim_config: SimConfig | None = None,
        render_mode: str | None = None,
        hardware: str | None = None,
        held_out_traces: Sequence[str] = (),
        split: Literal["train", "eval", "all"] | None = None,
        train_fraction: float = 0.7,
    ) -> None:
        self.render_mode = check_render_mode(render_mode)
        window = check_count("window_jobs", window_jobs)
        check_range("horizon_hours", horizon_hours, 0.0, low_inclusive=False)
        self.queue_view = check_count("queue_view", queue_view)
        self.max_candidates = check_count("max_candidates", max_candidates)
        self.waiting_view = check_count("waiting_view", waiting_view)
        self.reward_weights = _reward_weights(reward_weights, reward)
        self.group_identical = bool(group_identical)
        self.observe_queue = bool(observe_queue)
        self.skip_idle = bool(skip_idle)
        self.robust_candidates = bool(robust_candidates)
        self.horizon_s = float(horizon_hours) * HOUR
        self.topology, self.sim_config = online_cluster(
            cluster, hardware, sim_config, self.horizon_s
        )
        overrides: dict[str, float] = {}
        if onset_rate_per_gpu_hour is not None:
            overrides["onset_rate_per_gpu_hour"] = onset_rate_per_gpu_hour
        if mean_abnormal_duration_s is not None:
            overrides["mean_abnormal_duration_s"] = mean_abnormal_duration_s
        self.profile = get_profile(profile, **overrides)
        self.windows = TraceMix.load(
            trace,
            self.topology,
            window,
            arrival_scale,
            burst_s,
            held_out_traces=held_out_traces,
            split=split,
            train_fraction=train_fraction,
        )
        #: The trace of the current episode's window (``None`` for ``options["jobs"]``).
        self.window_trace: str | None = None
        self.max_steps = check_count(
            "max_steps", 20 * self.windows.window_jobs if max_steps is None else max_steps
        )
        self.max_job_gpus = self.windows.max_job_gpus
        self.label = "online-v1" if self.observe_queue else "online"
        self.features = ObservationBuilder(
            self.topology,
            self.sim_config.perf,
            num_slots=self.queue_view,
            max_candidates=self.max_candidates,
            queue_size=self.windows.window_jobs,
            max_job_gpus=self.max_job_gpus,
            privileged=privileged,
            gpu_extra=("job_remaining",),
        )
        box = dict(self.features.observation_space.spaces)
        W, Q = self.waiting_view, self.queue_view
        online = ONLINE_QUEUE_FEATURES if self.observe_queue else ONLINE_FEATURES
        box["online"] = spaces.Box(0.0, 1.0, (len(online),), np.float32)
        if self.observe_queue:
            box["waiting"] = spaces.Box(0.0, 1.0, (W * len(WAITING_FEATURES),), np.float32)
            box["slots"] = spaces.Box(0.0, 1.0, (Q * len(SLOT_FEATURES),), np.float32)
        self.observation_space = spaces.Dict(box)  # type: ignore[assignment]
        self.action_space = action_space(Q, self.max_candidates)
        self._renderer = ClusterRenderer(self.topology)
        self._guard = EpisodeGuard()
        self.sim: Simulator | None = None
        self.table: ActionTable | None = None
        self.steps = 0
        self.in_system_s = 0.0
        self._episode_jobs: dict[str, int] = {}

    # ------------------------------------------------------------------ episode
    @property
    def split(self) -> TraceSplit:
        """Which part of which traces this env's windows come from (:class:`TraceSplit`)."""
        return self.windows.split

    def draw_window(self) -> list[Job]:
        """The next episode's jobs: a window of the split's traces drawn with ``np_random``,
        rescaled (its trace is then :attr:`window_trace`)."""
        self.window_trace, jobs = self.windows.draw(self.np_random)
        return jobs

    def _live(self) -> tuple[Simulator, ActionTable]:
        if self.sim is None or self.table is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        return self.sim, self.table

    def _rebuild(self) -> None:
        sim = self.sim
        if sim is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        self._queue = PendingQueue.of(sim.state, sim.queue)
        self.table = build_action_tables(
            sim.state,
            [self._queue],
            num_slots=self.queue_view,
            max_candidates=self.max_candidates,
            robust=self.robust_candidates,
            group_identical=self.group_identical,
            interference=self.features.privileged,
        )[0]

    def _advance(self, until_decision: bool) -> _Interval:
        """Advance to the next event, then (``until_decision``) on while nothing can be placed."""
        sim, _ = self._live()
        t0, area, queued, in_system = sim.now, 0.0, 0.0, 0.0
        while not sim.done:
            before, n_q, n_run = sim.now, sim.queue_length, sim.running
            try:
                area += sim.advance()
            except SimulationError:
                sim.truncated = True  # nothing can ever happen again: end the episode
                break
            dt = sim.now - before
            queued += n_q * dt
            in_system += (n_q + n_run) * dt
            self._rebuild()
            if not until_decision or self._live()[1].has_placement:
                break
        return _Interval(sim.now - t0, area, queued, in_system)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Start an episode on a new trace window (or on ``options["jobs"]``)."""
        jobs = jobs_option(options)
        super().reset(seed=seed)
        if jobs is None:
            jobs = self.draw_window()
        else:
            self.window_trace = None
        sim_seed = int(self.np_random.integers(2**63 - 1))
        self.sim = Simulator(
            jobs, self.topology, profile=self.profile, config=self.sim_config, seed=sim_seed
        )
        self.steps = 0
        self.in_system_s = 0.0
        self._episode_jobs = {j.job_id: i for i, j in enumerate(self.sim.jobs)}
        self.table = None
        self._rebuild()
        self._guard.start()
        moved = _Interval(0.0, 0.0, 0.0, 0.0)
        if self.skip_idle and not self._live()[1].has_placement and not self.sim.done:
            moved = self._advance(until_decision=True)
            self.in_system_s += moved.in_system
        info = self._info()
        info.update(interval_s=moved.seconds, effective_gpu_hours=moved.area / HOUR)
        return self._observe(), info

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        """Start one view job on one candidate, or wait (advance simulated time)."""
        self._guard.check()
        sim, table = self._live()
        self.steps += 1
        decoded = table.decode(action)
        invalid, placed = False, None
        moved = _Interval(0.0, 0.0, 0.0, 0.0)
        if decoded is not None:
            q, c = decoded
            job = table.jobs[q]
            sim.place(job, table.gpus(q, c))
            placed = job.job_id
            self._rebuild()
        elif table.is_stop(action):
            if not sim.done:
                moved = self._advance(until_decision=self.skip_idle)
        else:
            invalid = True
        self.in_system_s += moved.in_system
        terms = online_terms(
            area=moved.area,
            queued=moved.queued,
            in_system=moved.in_system,
            num_gpus=self.topology.num_gpus,
            window_jobs=self.windows.window_jobs,
        )
        terminated = sim.done and not sim.truncated
        truncated = not terminated and (sim.truncated or self.steps >= self.max_steps)
        self._guard.end_if(terminated, truncated)
        info = self._info()
        info.update(
            invalid_action=invalid,
            placed=placed,
            interval_s=moved.seconds,
            effective_gpu_hours=moved.area / HOUR,
            reward_terms=terms,
            in_system_s=moved.in_system,
        )
        if terminated or truncated:
            info["sim_metrics"] = sim.result(policy_name="agent").summary()
            info["mean_jct_h"] = self.mean_jct_h()
        return self._observe(), weighted(terms, self.reward_weights), terminated, truncated, info

    def copy(self) -> OnlinePlacementEnv:
        """An independent copy of this environment mid-episode, for lookahead (rollouts).

        The copy is unwrapped and continues the current episode: the same simulated cluster, queue,
        step count and accumulated time in system, and the same future (the window's arrivals and
        the health timeline, whose random state is copied with the simulator:
        :meth:`crop_gym.sim.Simulator.copy`), so the same actions give the same transitions, rewards
        and ``mean_jct_h`` in both. Stepping (or resetting) one never changes the other; the copy has
        its own ``np_random`` (a copy of this one's). It does not render.

        Raises:
            gymnasium.error.ResetNeeded: Before the first ``reset``.
        """
        sim, _ = self._live()
        new = copy.copy(self)
        new.sim = sim.copy()
        new.np_random = copy.deepcopy(self.np_random)
        new._guard = copy.copy(self._guard)
        new.render_mode = None
        new._rebuild()
        return new

    def mean_jct_h(self) -> float:
        """Mean time in the system of the window's jobs so far, hours (queued jobs count to now).

        Every job that has arrived is in the system until it completes, so this is
        ``∫ jobs in system dt / window jobs`` (Little's law); at the end of an episode in which
        every job finished, it is the mean JCT.
        """
        return self.in_system_s / HOUR / len(self._live()[0].jobs)

    def action_masks(self) -> NDArray[np.bool_]:
        """Valid actions, ``bool[Q * C + 1]`` (:func:`action_mask`)."""
        return action_mask(self._live()[1])

    def action_for(self, job_id: str, gpus: NDArray[np.integer[Any]]) -> int | None:
        """The action starting ``job_id`` on exactly ``gpus`` now, or ``None`` if not offered."""
        return self._live()[1].index_of(job_id, gpus)

    def remaining_ideal_s(self, job: Job) -> float:
        """Remaining run time of a queued ``job`` at its ideal speed (iterations left × T*)."""
        sim = self._live()[0]
        return sim.remaining_work(job.job_id) * sim.state.ideal_time(job)

    # -------------------------------------------------------------- observation
    def _observe(self) -> Obs:
        sim, table = self._live()
        state = sim.state
        extra = np.zeros((self.topology.num_gpus, 1))
        if state.jobs:
            extra[:, 0] = _squash(sim.remaining_time_by_gpu())
        batch = self.features.build(
            state,
            ObservedHealth.of(state.conditions),
            [table],
            [self._queue],
            [self.steps],
            self.max_steps,
            extra=extra[None],
        )
        obs = {key: value[0] for key, value in batch.items()}
        obs["online"] = self._online_features()
        if self.observe_queue:
            obs["waiting"], obs["slots"] = self._queue_tables()
        return obs

    def _online_features(self) -> NDArray[np.float32]:
        sim = self._live()[0]
        progress = progress_features(sim, self.windows.window_jobs, self.horizon_s)
        if not self.observe_queue:
            return progress.astype(np.float32)
        G = self.topology.num_gpus
        f = np.zeros(len(ONLINE_QUEUE_FEATURES))
        f[: len(ONLINE_FEATURES)] = progress
        f[6] = sim.state.num_free / G
        f[7] = sum(j.num_gpus for j in sim.queue) / G
        h = sim.state.health
        f[8] = float(np.mean((h.gpu_slowdown > 1.0) | (h.gpu_fail_prob > 0) | h.gpu_failed))
        return np.clip(f, 0.0, 1.0).astype(np.float32)

    def _queue_tables(self) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        sim, table = self._live()
        W, Q = self.waiting_view, self.queue_view
        slot_of = {j.job_id: q for q, j in enumerate(table.jobs)}
        waiting = np.zeros((W, len(WAITING_FEATURES)))
        for r, job in enumerate(sim.queue[:W]):
            q = slot_of.get(job.job_id)
            waiting[r] = (
                1.0,
                float(job.num_gpus <= sim.state.num_free),
                job.num_gpus / self.max_job_gpus,
                _squash(sim.now - job.arrival),
                _squash(self.remaining_ideal_s(job)),
                0.0 if q is None else (q + 1) / Q,
            )
        slots = np.zeros((Q, len(SLOT_FEATURES)))
        for q, job in enumerate(table.jobs):
            slots[q] = (_squash(self.remaining_ideal_s(job)), _squash(sim.now - job.arrival))
        return (
            np.clip(waiting, 0.0, 1.0).astype(np.float32).reshape(-1),
            np.clip(slots, 0.0, 1.0).astype(np.float32).reshape(-1),
        )

    def _info(self) -> dict[str, Any]:
        sim, table = self._live()
        return {
            "action_mask": action_mask(table),
            "time_s": sim.now,
            "F": sim.state.F,
            "queued": sim.queue_length,
            "running": sim.running,
            "completed": sim.completed,
            "view_jobs": len(table.jobs),
        }

    # ------------------------------------------------------------------ render
    def _status(self) -> tuple[Simulator, Sequence[Job], int]:
        sim, table = self._live()
        return sim, table.jobs, self.steps
