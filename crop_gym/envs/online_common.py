"""What the online environments (v0 and v1) share: trace windows, the cluster, rendering.

* :class:`TraceWindows`: the jobs of a trace that fit the cluster (all of them, or the part
  before or after the trace's train/eval cut), and the draw of one episode's window of consecutive
  jobs with its arrivals compressed (and optionally batched into bursts);
* :class:`TraceMix`: the windows of one or more traces under a :class:`TraceSplit` (which part of
  which traces an episode may come from), as an env draws them;
* :func:`online_cluster`: the topology and simulator configuration of an online env, with an
  optional hardware profile;
* :class:`OnlineRendering`: ``render`` / ``close`` and the two-line status header.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

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
    "SPLIT_PARTS",
    "OnlineRendering",
    "TraceMix",
    "TraceSplit",
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


#: Parts of a trace an env's windows may come from: ``"train"`` (jobs submitted before the cut),
#: ``"eval"`` (at or after it), ``"all"`` (the whole trace, the v0/v1 behaviour).
SPLIT_PARTS: tuple[str, ...] = ("train", "eval", "all")

Part = Literal["train", "eval", "all"]


def check_part(split: str | None) -> Part:
    """``split`` as one of :data:`SPLIT_PARTS` (``None`` is ``"all"``).

    Raises:
        ConfigError: For another value.
    """
    if split is None:
        return "all"
    if split not in SPLIT_PARTS:
        raise ConfigError(f"split={split!r} must be one of {', '.join(map(repr, SPLIT_PARTS))}")
    return split  # type: ignore[return-value]


def split_index(arrivals: Sequence[float], train_fraction: float) -> int:
    """Index of the first job of the eval part of a trace whose jobs arrive at ``arrivals``.

    The cut is the submission time of job ``floor(train_fraction * n)`` (in arrival order): the
    train part is every job submitted before it, the eval part every job submitted at or after
    it (so jobs submitted in the same second are never split).

    Args:
        arrivals: Submission times in non-decreasing order.
        train_fraction: Share of the jobs (by submission order) before the cut, in ``(0, 1)``.
    """
    n = len(arrivals)
    k = min(max(math.floor(train_fraction * n), 0), n - 1)
    return bisect.bisect_left(list(arrivals), arrivals[k])


@dataclass(frozen=True)
class TraceWindows:
    """Episode windows of (a part of) a trace on one cluster.

    Attributes:
        name: The trace's name.
        pool: ``Job[P]`` the jobs of the part that fit the cluster, in arrival order (windows are
            drawn from these only, so a window never crosses the cut).
        skipped: Jobs of the trace larger than the cluster.
        window_jobs: Jobs per episode (at most ``len(pool)``: more is refused, not shortened).
        arrival_scale: Factor applied to arrival gaps (``< 1`` compresses them so queues form).
        burst_s: If set, arrivals are batched to the start of each ``burst_s`` interval.
        part: ``"train"``, ``"eval"`` or ``"all"`` (:data:`SPLIT_PARTS`).
        train_fraction: Share of the trace's jobs (by submission time) in the train part.
        cut_s: Submission time of the cut (``None`` for ``part="all"``).
        max_job_gpus: GPUs of the largest job of the whole trace that fits (the same for every
            part, so observations of a job do not depend on the part).
    """

    name: str
    pool: tuple[Job, ...]
    skipped: int
    window_jobs: int
    arrival_scale: float
    burst_s: float | None = None
    part: Part = "all"
    train_fraction: float = 0.7
    cut_s: float | None = None
    max_job_gpus: int = 0

    @classmethod
    def load(
        cls,
        trace: str,
        topology: Topology,
        window_jobs: int,
        arrival_scale: float,
        burst_s: float | None = None,
        part: str | None = None,
        train_fraction: float = 0.7,
    ) -> TraceWindows:
        """Load ``trace``, keep the jobs that fit ``topology`` and, for a ``part``, that part.

        Raises:
            ConfigError: If no job fits, a window holds more jobs than the part has, or a scale or
                fraction is out of range.
        """
        from crop_gym.workloads import load_workload

        check_range("arrival_scale", arrival_scale, 0.0, low_inclusive=False)
        check_range(
            "train_fraction", train_fraction, 0.0, 1.0, low_inclusive=False, high_inclusive=False
        )
        if burst_s is not None:
            check_range("burst_s", burst_s, 0.0, low_inclusive=False)
        which = check_part(part)
        G = topology.num_gpus
        workload = load_workload(trace)
        fits = sorted((j for j in workload.jobs if j.num_gpus <= G), key=lambda j: j.arrival)
        if not fits:
            raise ConfigError(f"no job of {trace!r} fits on {topology.name} ({G} GPUs)")
        whole = cls(
            name=workload.name,
            pool=tuple(fits),
            skipped=len(workload.jobs) - len(fits),
            window_jobs=window_jobs,
            arrival_scale=float(arrival_scale),
            burst_s=None if burst_s is None else float(burst_s),
            train_fraction=float(train_fraction),
            max_job_gpus=max(j.num_gpus for j in fits),
        )
        return whole.part_of(which, f"{topology.name} ({G} GPUs)")

    def part_of(self, part: Part, where: str = "the cluster") -> TraceWindows:
        """These windows restricted to ``part`` of the trace (from the whole trace's windows).

        Raises:
            ConfigError: If the part has fewer jobs than a window.
        """
        pool, cut_s = self.pool, None
        if part != "all":
            cut = split_index([j.arrival for j in pool], self.train_fraction)
            cut_s = float(pool[cut].arrival)
            pool = pool[:cut] if part == "train" else pool[cut:]
        if self.window_jobs > len(pool):
            which = "" if part == "all" else f" in its {part} part"
            raise ConfigError(
                f"window_jobs={self.window_jobs} is larger than the {len(pool)} jobs of "
                f"{self.name!r}{which} that fit on {where}"
            )
        return dataclasses.replace(self, pool=pool, part=part, cut_s=cut_s)

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


@dataclass(frozen=True)
class TraceSplit:
    """Which traces, and which part of each, an env's windows come from.

    * ``part="train"``: the jobs of every training trace submitted before its cut (the first
      ``train_fraction`` of its jobs by submission time); held-out traces are never used;
    * ``part="eval"``: the jobs of every training trace submitted at or after its cut, and every
      held-out trace whole;
    * ``part="all"``: every trace whole (the v0/v1 behaviour).

    Attributes:
        part: One of :data:`SPLIT_PARTS`.
        train_fraction: Share of each training trace's jobs before its cut.
        training_traces: Traces whose train part may be trained on.
        held_out_traces: Traces never in a train part.
        traces: Traces this part's windows come from (names as loaded).
        cut_s: Trace name → submission time of its cut (training traces; ``part`` not ``"all"``).
    """

    part: Part
    train_fraction: float
    training_traces: tuple[str, ...]
    held_out_traces: tuple[str, ...]
    traces: tuple[str, ...]
    cut_s: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (what ``crop-gym eval`` records as ``split``)."""
        return {
            "part": self.part,
            "train_fraction": self.train_fraction,
            "traces": list(self.traces),
            "training_traces": list(self.training_traces),
            "held_out_traces": list(self.held_out_traces),
            "cut_s": dict(self.cut_s),
        }


@dataclass(frozen=True)
class TraceMix:
    """The windows an env draws: one :class:`TraceWindows` per trace of its part.

    With one source a draw is that source's (the v0/v1 random stream, unchanged); with several, a
    source is drawn uniformly first, then a window of it.

    Attributes:
        sources: The traces' windows.
        split: What they are (:class:`TraceSplit`).
    """

    sources: tuple[TraceWindows, ...]
    split: TraceSplit

    @classmethod
    def load(
        cls,
        traces: str | Sequence[str],
        topology: Topology,
        window_jobs: int,
        arrival_scale: float,
        burst_s: float | None = None,
        *,
        held_out_traces: Sequence[str] = (),
        split: str | None = None,
        train_fraction: float = 0.7,
    ) -> TraceMix:
        """The windows of ``split`` over ``traces`` (training traces) and ``held_out_traces``.

        Raises:
            ConfigError: On an empty or overlapping trace list, an unknown ``split`` or anything
                :meth:`TraceWindows.load` refuses.
        """
        part = check_part(split)
        training = (traces,) if isinstance(traces, str) else tuple(traces)
        if isinstance(held_out_traces, str):
            raise ConfigError("held_out_traces must be a sequence of trace names, not one string")
        held = tuple(held_out_traces)
        if not training or not all(isinstance(t, str) for t in (*training, *held)):
            raise ConfigError("trace must be a trace name or a non-empty sequence of names")
        named = (*training, *held)
        repeated = sorted({t for t in named if named.count(t) > 1})
        if repeated:
            raise ConfigError(
                f"trace and held_out_traces must name distinct traces (repeated: {repeated})"
            )

        whole = [
            TraceWindows.load(
                t, topology, window_jobs, arrival_scale, burst_s, "all", train_fraction
            )
            for t in (*training, *held)
        ]
        largest = max(w.max_job_gpus for w in whole)
        where = f"{topology.name} ({topology.num_gpus} GPUs)"
        if part == "all":
            sources = whole
        else:
            sources = [w.part_of(part, where) for w in whole[: len(training)]]
            if part == "eval":
                sources += whole[len(training) :]
        # The observation's job-size scale is the largest job of every trace named, whatever the
        # part, so a policy sees a job the same way in training and in evaluation.
        sources = [dataclasses.replace(w, max_job_gpus=largest) for w in sources]
        cuts = {w.name: float(w.cut_s) for w in sources if w.cut_s is not None}
        return cls(
            sources=tuple(sources),
            split=TraceSplit(
                part=part,
                train_fraction=float(train_fraction),
                training_traces=training,
                held_out_traces=held,
                traces=tuple(w.name for w in sources),
                cut_s=cuts,
            ),
        )

    @property
    def name(self) -> str:
        """The sources' trace names, joined with ``+``."""
        return "+".join(w.name for w in self.sources)

    @property
    def window_jobs(self) -> int:
        """Jobs per episode."""
        return self.sources[0].window_jobs

    @property
    def max_job_gpus(self) -> int:
        """GPUs of the largest job that fits, over every trace named (whatever the part)."""
        return max(w.max_job_gpus for w in self.sources)

    def draw(self, rng: np.random.Generator) -> tuple[str, list[Job]]:
        """One episode's window: the name of its trace and its jobs (:meth:`TraceWindows.draw`)."""
        n = len(self.sources)
        w = self.sources[0] if n == 1 else self.sources[int(rng.integers(n))]
        return w.name, w.draw(rng)


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
    windows: TraceMix
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
