"""Configuration of the discrete-event simulator (:class:`SimConfig`), its limits and its error type."""

from __future__ import annotations

from dataclasses import dataclass, field

from crop_gym.errors import ConfigError, CropGymError, check_bool, check_int, check_real
from crop_gym.model.timing import PerfConfig

__all__ = [
    "DEFAULT_EVENTS_PER_JOB",
    "DEFAULT_MAX_EVENTS",
    "EVENT_BUDGET_BASE",
    "MAX_COUNT",
    "MAX_SECONDS",
    "MIN_CHECKPOINT_INTERVAL_S",
    "MIN_FAILURE_HORIZON_S",
    "MIN_REPAIR_S",
    "QUEUE_VIEWS",
    "SimConfig",
    "SimulationError",
]

#: What the placement policy is shown of the queue (see :attr:`SimConfig.queue_view`).
QUEUE_VIEWS: tuple[str, ...] = ("fitting", "all")

#: Smallest failure horizon ``H``: a device's π (a chronic and an episode π ≤ 0.999 combined) is at
#: most ``1 - 0.001²``, so it fails at most ``-ln(1e-6) / H`` times per second on average, i.e. at
#: most about 830 times per simulated hour at this minimum.
MIN_FAILURE_HORIZON_S = 60.0
#: Smallest mean repair time of a failed GPU.
MIN_REPAIR_S = 1.0
#: Smallest checkpoint interval.
MIN_CHECKPOINT_INTERVAL_S = 1.0
#: Largest finite duration accepted by any time field (about 31,700 years).
MAX_SECONDS = 1e12
#: Largest value of the event counters' limits.
MAX_COUNT = 10**10
#: Default :attr:`SimConfig.max_events`, the cap on every run's event budget whatever its size.
DEFAULT_MAX_EVENTS = 10_000_000
#: Events every run may use besides its per-job allowance (:meth:`SimConfig.event_budget`).
EVENT_BUDGET_BASE = 20_000
#: Default :attr:`SimConfig.events_per_job`. The published study (810 runs: every bundled trace in
#: full, up to the severe profile) used at most 21 % of the budget this gives (cluster06 on n64g8,
#: severe: 29,601 events for 2,396 jobs). At the largest allowed rates (an onset per
#: device-minute, one-second episodes and repairs, a 60 s failure horizon) an event costs 0.8 to
#: 1.5 ms on a 2-core machine, so such a run stops within about 3 minutes for a 2,000-job trace and
#: 20 minutes for the largest bundled one (15,802 jobs), where the fixed 10^7 of before took hours.
DEFAULT_EVENTS_PER_JOB = 50


class SimulationError(CropGymError, ValueError):
    """The simulation cannot go on: an invalid placement, a job larger than the cluster, or a
    policy that leaves jobs queued on an idle cluster for ever."""


@dataclass(frozen=True)
class SimConfig:
    """Options of :class:`~crop_gym.sim.Simulator` (validated; frozen).

    Attributes:
        perf: Iteration-time options (all-reduce algorithm, overlap).
        checkpoint_interval_s: Wall-clock seconds between checkpoints of a running job, counted from
            its (re)start. ``math.inf`` = never checkpoint (a failure loses everything since the
            restart).
        failure_horizon_s: Horizon ``H`` of the failure probabilities π: a failure-prone GPU (link)
            fails at the constant hazard ``λ = -ln(1 - π) / H``, so that it fails within ``H`` with
            probability π, the same π the objective's survival term uses.
        mean_repair_s: Mean of the exponential repair time of a failed GPU.
        transient_abnormalities: Whether abnormal episodes start and end over time (Poisson onsets at
            the profile's ``onset_rate_per_gpu_hour`` per healthy device, exponential durations of
            mean ``mean_abnormal_duration_s``).
        chronic_abnormalities: Whether the profile's snapshot (drawn once at time 0) applies for the
            whole run. GPUs the snapshot marks failed are under repair at time 0 either way.
        gpu_failures: Whether failure-prone GPUs fail (and onsets of the "failed" kind happen).
        link_failures: Whether failure-prone links fail (a link failure crashes every job whose ring
            crosses the link; the link itself stays usable: a transient fault).
        queue_view: ``"fitting"``: the policy is shown the queued jobs that need no more GPUs than are
            free (a non-preemptive policy cannot place the others); ``"all"``: the whole queue.
        max_queue_view: Show the policy at most this many queued jobs (oldest first); ``None`` = no cap.
        max_time_s: Stop the simulation at this simulated time, with jobs unfinished (``None`` = run
            until every job completes).
        skip_oversized: Skip jobs that need more GPUs than the cluster has (and report how many)
            instead of refusing the workload.
        record_timeline: Keep the per-event time series (utilisation, F, queue) for plots.
        stall_events: Raise :class:`SimulationError` after this many consecutive events during which
            nothing runs, no arrival is pending and jobs stay queued (a policy that never places),
            or after this many consecutive policy calls on such an idle cluster that place
            nothing although a queued job fits.
        events_per_job: The run's event budget grows by this many events per job simulated
            (:meth:`event_budget`): work that scales with the run, not a fixed count.
        max_events: Cap of the event budget, whatever the run's size.

    Ranges (each checked in ``__post_init__``; a value outside raises
    :class:`~crop_gym.errors.ConfigError` naming the field and its range; booleans are not accepted
    as numbers nor numbers as booleans): ``checkpoint_interval_s`` in ``[1, inf]``;
    ``failure_horizon_s`` in ``[60, 1e12]``; ``mean_repair_s`` in ``[1, 1e12]``; ``max_time_s``
    ``None`` or in ``(0, 1e12]``; ``max_queue_view`` ``None`` or an integer in ``[1, 1e10]``;
    ``stall_events``, ``events_per_job`` and ``max_events`` integers in ``[1, 1e10]``; the flags
    ``True``/``False``.

    The simulation raises :class:`SimulationError` (one line naming the budget, the simulated time
    reached and the unfinished jobs) when it reaches :meth:`event_budget` events without finishing:
    a guarantee of bounded work, proportional to the run, whatever the rates.
    """

    perf: PerfConfig = field(default_factory=PerfConfig)
    checkpoint_interval_s: float = 1800.0
    failure_horizon_s: float = 86400.0
    mean_repair_s: float = 4 * 3600.0
    transient_abnormalities: bool = True
    chronic_abnormalities: bool = True
    gpu_failures: bool = True
    link_failures: bool = True
    queue_view: str = "fitting"
    max_queue_view: int | None = None
    max_time_s: float | None = None
    skip_oversized: bool = False
    record_timeline: bool = True
    stall_events: int = 1000
    events_per_job: int = DEFAULT_EVENTS_PER_JOB
    max_events: int = DEFAULT_MAX_EVENTS

    def __post_init__(self) -> None:
        if not isinstance(self.perf, PerfConfig):
            raise ConfigError(
                f"SimConfig.perf must be a PerfConfig, got {type(self.perf).__name__}"
            )
        values: dict[str, object] = {
            "checkpoint_interval_s": check_real(
                "SimConfig.checkpoint_interval_s",
                self.checkpoint_interval_s,
                MIN_CHECKPOINT_INTERVAL_S,
                float("inf"),
            ),
            "failure_horizon_s": check_real(
                "SimConfig.failure_horizon_s",
                self.failure_horizon_s,
                MIN_FAILURE_HORIZON_S,
                MAX_SECONDS,
            ),
            "mean_repair_s": check_real(
                "SimConfig.mean_repair_s", self.mean_repair_s, MIN_REPAIR_S, MAX_SECONDS
            ),
            "stall_events": check_int("SimConfig.stall_events", self.stall_events, 1, MAX_COUNT),
            "events_per_job": check_int(
                "SimConfig.events_per_job", self.events_per_job, 1, MAX_COUNT
            ),
            "max_events": check_int("SimConfig.max_events", self.max_events, 1, MAX_COUNT),
        }
        for name in (
            "transient_abnormalities",
            "chronic_abnormalities",
            "gpu_failures",
            "link_failures",
            "skip_oversized",
            "record_timeline",
        ):
            values[name] = check_bool(f"SimConfig.{name}", getattr(self, name))
        if not isinstance(self.queue_view, str) or self.queue_view not in QUEUE_VIEWS:
            raise ConfigError(
                f"SimConfig.queue_view={self.queue_view!r} must be one of {', '.join(QUEUE_VIEWS)}"
            )
        if self.max_queue_view is not None:
            values["max_queue_view"] = check_int(
                "SimConfig.max_queue_view", self.max_queue_view, 1, MAX_COUNT
            )
        if self.max_time_s is not None:
            values["max_time_s"] = check_real(
                "SimConfig.max_time_s", self.max_time_s, 0.0, MAX_SECONDS, low_inclusive=False
            )
        for name, value in values.items():  # normalised: plain float / int / bool
            object.__setattr__(self, name, value)

    def event_budget(self, jobs: int) -> int:
        """Events a run of ``jobs`` jobs may take: ``min(max_events, 20,000 + events_per_job ×
        jobs)`` (:data:`EVENT_BUDGET_BASE`)."""
        return min(self.max_events, EVENT_BUDGET_BASE + self.events_per_job * int(jobs))
