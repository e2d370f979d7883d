"""Configuration of the discrete-event simulator (:class:`SimConfig`) and its error type."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from crop_gym.errors import ConfigError, CropGymError, check_range
from crop_gym.perf import PerfConfig

__all__ = ["QUEUE_VIEWS", "SimConfig", "SimulationError"]

#: What the placement policy is shown of the queue (see :attr:`SimConfig.queue_view`).
QUEUE_VIEWS: tuple[str, ...] = ("fitting", "all")


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
            nothing runs, no arrival is pending and jobs stay queued (a policy that never places).
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

    def __post_init__(self) -> None:
        if not isinstance(self.perf, PerfConfig):
            raise ConfigError(
                f"SimConfig.perf must be a PerfConfig, got {type(self.perf).__name__}"
            )
        check_range(
            "SimConfig.checkpoint_interval_s", self.checkpoint_interval_s, 0.0, low_inclusive=False
        )
        check_range("SimConfig.failure_horizon_s", self.failure_horizon_s, 0.0, low_inclusive=False)
        if not math.isfinite(self.failure_horizon_s):
            raise ConfigError("SimConfig.failure_horizon_s must be finite")
        check_range("SimConfig.mean_repair_s", self.mean_repair_s, 0.0, low_inclusive=False)
        if not math.isfinite(self.mean_repair_s):
            raise ConfigError("SimConfig.mean_repair_s must be finite")
        if self.queue_view not in QUEUE_VIEWS:
            raise ConfigError(
                f"SimConfig.queue_view={self.queue_view!r} is not one of {', '.join(QUEUE_VIEWS)}"
            )
        if self.max_queue_view is not None:
            if int(self.max_queue_view) != self.max_queue_view:
                raise ConfigError(
                    f"SimConfig.max_queue_view={self.max_queue_view!r} must be an integer"
                )
            check_range("SimConfig.max_queue_view", self.max_queue_view, 1)
        if self.max_time_s is not None:
            check_range("SimConfig.max_time_s", self.max_time_s, 0.0, low_inclusive=False)
        check_range("SimConfig.stall_events", self.stall_events, 1)
