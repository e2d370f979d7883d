"""What the online environments (v0 and v1) share: trace windows, the cluster, rendering.

* :class:`TraceWindows`: the jobs of a trace that fit the cluster, and the draw of one episode's
  window of consecutive jobs with its arrivals compressed (and optionally batched into bursts);
* :func:`online_cluster`: the topology and simulator configuration of an online env, with an
  optional hardware profile;
* :class:`OnlineRendering`: ``render`` / ``close`` and the two-line status header.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.envs.base import check_options
from crop_gym.envs.rewards import HOUR
from crop_gym.errors import ConfigError, check_range
from crop_gym.model.jobs import Job
from crop_gym.model.topology import Topology, make_topology
from crop_gym.sim.config import SimConfig
from crop_gym.sim.engine import Simulator

__all__ = [
    "ONLINE_FEATURES",
    "OnlineRendering",
    "TraceWindows",
    "jobs_option",
    "online_cluster",
    "progress_features",
]

#: Columns of the ``"online"`` key of v0 (v1 adds its own after them).
ONLINE_FEATURES: tuple[str, ...] = (
    "elapsed",  # simulated time / horizon
    "queued",  # queued jobs / window jobs
    "running",  # running jobs / window jobs
    "completed",  # completed jobs / window jobs
    "mean_wait",  # mean waiting time w of the queued jobs, as w / (w + 1 h)
    "next_arrival",  # time d to the next arrival, as d / (d + 1 h) (1 when none is left)
)


@dataclass(frozen=True)
class TraceWindows:
    """Episode windows of a trace on one cluster.

    Attributes:
        name: The trace's name.
        pool: ``Job[P]`` the trace's jobs that fit the cluster, in arrival order.
        skipped: Jobs of the trace larger than the cluster.
        window_jobs: Jobs per episode (at most ``len(pool)``: more is refused, not shortened).
        arrival_scale: Factor applied to arrival gaps (``< 1`` compresses them so queues form).
        burst_s: If set, arrivals are batched to the start of each ``burst_s`` interval.
    """

    name: str
    pool: tuple[Job, ...]
    skipped: int
    window_jobs: int
    arrival_scale: float
    burst_s: float | None = None

    @classmethod
    def load(
        cls,
        trace: str,
        topology: Topology,
        window_jobs: int,
        arrival_scale: float,
        burst_s: float | None = None,
    ) -> TraceWindows:
        """Load ``trace`` and keep the jobs that fit ``topology``.

        Raises:
            ConfigError: If no job fits, a window holds more jobs than fit, or a scale is not > 0.
        """
        from crop_gym.workloads import load_workload

        check_range("arrival_scale", arrival_scale, 0.0, low_inclusive=False)
        if burst_s is not None:
            check_range("burst_s", burst_s, 0.0, low_inclusive=False)
        G = topology.num_gpus
        workload = load_workload(trace)
        pool = tuple(j for j in workload.jobs if j.num_gpus <= G)
        if not pool:
            raise ConfigError(f"no job of {trace!r} fits on {topology.name} ({G} GPUs)")
        if window_jobs > len(pool):
            raise ConfigError(
                f"window_jobs={window_jobs} is larger than the {len(pool)} jobs of {trace!r} "
                f"that fit on {topology.name} ({G} GPUs)"
            )
        return cls(
            name=workload.name,
            pool=pool,
            skipped=len(workload.jobs) - len(pool),
            window_jobs=window_jobs,
            arrival_scale=float(arrival_scale),
            burst_s=None if burst_s is None else float(burst_s),
        )

    @property
    def max_job_gpus(self) -> int:
        """GPUs of the largest job of the pool."""
        return max(j.num_gpus for j in self.pool)

    def draw(self, rng: np.random.Generator) -> list[Job]:
        """One episode's jobs: ``window_jobs`` consecutive jobs from a random start, rebased to
        arrive from 0 with gaps scaled (and batched into bursts), deadlines dropped."""
        n = self.window_jobs
        start = int(rng.integers(0, len(self.pool) - n + 1))
        jobs = self.pool[start : start + n]
        t0 = jobs[0].arrival
        out = []
        for j in jobs:
            t = (j.arrival - t0) * self.arrival_scale
            if self.burst_s is not None:
                t = math.floor(t / self.burst_s) * self.burst_s
            out.append(dataclasses.replace(j, arrival=t, deadline=None))
        return out


def online_cluster(
    cluster: str | Topology,
    hardware: str | None,
    sim_config: SimConfig | None,
    horizon_s: float,
) -> tuple[Topology, SimConfig]:
    """The topology and simulator configuration of an online env.

    Args:
        cluster: Topology preset name or a topology.
        hardware: Hardware spec (a bundled profile, a file, or a ``+`` mix) whose links and model
            options replace the preset's; ``None`` keeps them.
        sim_config: Base simulator options (default :class:`SimConfig`).
        horizon_s: Simulated seconds after which an episode is truncated.
    """
    from crop_gym.model.hardware import resolve_hardware

    topology = make_topology(cluster) if isinstance(cluster, str) else cluster
    base = sim_config if sim_config is not None else SimConfig()
    if hardware is not None:
        hw = resolve_hardware(hardware)
        topology = hw.topology(cluster)
        base = dataclasses.replace(base, perf=hw.perf())
    return topology, dataclasses.replace(base, max_time_s=horizon_s, record_timeline=False)


def progress_features(sim: Simulator, window_jobs: int, horizon_s: float) -> NDArray[np.float64]:
    """``float64[6]``: the :data:`ONLINE_FEATURES` of ``sim`` (each in ``[0, 1]``)."""
    n = float(window_jobs)
    f = np.zeros(len(ONLINE_FEATURES))
    f[:4] = (sim.now / horizon_s, sim.queue_length / n, sim.running / n, sim.completed / n)
    if sim.queue_length:
        wait = float(np.mean([sim.now - j.arrival for j in sim.queue]))
        f[4] = wait / (wait + HOUR)
    nxt = sim.next_arrival_time()
    f[5] = 1.0 if not math.isfinite(nxt) else (nxt - sim.now) / (nxt - sim.now + HOUR)
    return np.clip(f, 0.0, 1.0)


def jobs_option(options: dict[str, Any] | None) -> Sequence[Job] | None:
    """The ``{"jobs": [Job, ...]}`` reset option (jobs to play instead of a drawn window), checked.

    Raises:
        ConfigError: On another option, or ``jobs`` not a non-empty sequence of :class:`Job`.
    """
    jobs = check_options(options, ("jobs",)).get("jobs")
    if jobs is not None and (
        isinstance(jobs, (str, bytes))
        or not all(isinstance(j, Job) for j in jobs)
        or len(jobs) == 0
    ):
        raise ConfigError("options['jobs'] must be a non-empty sequence of Job")
    return jobs


class OnlineRendering:
    """``render`` and ``close`` of an online env; the env supplies :meth:`_status`."""

    #: Name shown at the start of the header.
    label = "online"
    render_mode: str | None
    sim: Simulator | None
    topology: Topology
    windows: TraceWindows
    _renderer: Any
    _episode_jobs: dict[str, int]

    def _status(self) -> tuple[Simulator, Sequence[Job], int]:
        """The live simulator, the jobs in view and the steps taken."""
        raise NotImplementedError

    def _header(self) -> list[str]:
        sim, jobs, steps = self._status()
        view = ", ".join(f"{j.job_id}:{j.model}x{j.num_gpus}" for j in jobs[:8])
        return [
            f"{self.label} {self.windows.name} ({self.topology.name})  t={sim.now / HOUR:.2f}h  "
            f"step {steps}  F={sim.state.F:.2f}  free={sim.state.num_free}/{self.topology.num_gpus}",
            f"queued {sim.queue_length}  running {sim.running}  done {sim.completed}/{len(sim.jobs)}: {view}",
        ]

    def render(self) -> Any:
        """``ansi``: a string; ``rgb_array``: ``uint8[H, W, 3]``; ``None`` without a render mode."""
        if self.sim is None or self.render_mode is None:
            return None
        if self.render_mode == "ansi":
            return self._renderer.ansi(self.sim.state, header=self._header())
        return self._renderer.rgb(
            self.sim.state, title="\n".join(self._header()), episode_jobs=self._episode_jobs
        )

    def close(self) -> None:
        """Release the rendering figure."""
        self._renderer.close()
