"""Results of a simulation: summary metrics, per-job records, the time series, and writers.

Metric definitions (every time average is over ``[0, makespan]``; time 0 is the first arrival):

==========================  ======================================================================
key                         meaning
==========================  ======================================================================
``jobs_total``              jobs simulated (after ``--jobs`` and skipping, if any)
``jobs_completed``          jobs that finished
``jobs_skipped``            jobs skipped because they need more GPUs than the cluster has
``mean_jct_s`` ...          job completion time ``finish - arrival``: mean, p50, p95, p99, max
``mean_queueing_s``         time spent queued (before the first start and after failures), mean
``p95_queueing_s``          same, 95th percentile
``makespan_s``              last completion time
``mean_utilization``        ``∫ busy GPUs dt / (GPUs × makespan)``
``mean_effective_gpus``     ``∫ F dt / makespan``: expected effective GPUs (the objective)
``mean_throughput_gpus``    ``∫ Σ_j k_j η_j dt / makespan``: effective GPUs without the survival term
``goodput_gpus``            ``Σ_completed k_j · work_j · T*_j / makespan``: useful work, in ideal
                            GPU-seconds per second (lost work excluded)
``mean_efficiency``         ``∫ Σ k_j η_j dt / ∫ Σ k_j dt``: η averaged over allocated GPU-time
``comm_overhead``           ``∫ Σ k_j C_j/T_j dt / ∫ Σ k_j dt``: GPU-time-weighted share of
                            iteration time spent communicating
``mean_slowdown``           mean over completed jobs of (time running) / (work × T*)
``job_failures``            job interruptions by failures (GPU or link); ``restarts`` = same
``lost_gpu_hours``          ``Σ k × (time since the last checkpoint)`` over interruptions
``lost_work_frac``          lost iterations / asked iterations
``gpu_failures``            device failures (GPU), ``link_failures`` transient link faults
``abnormal_onsets``         abnormal episodes started; ``abnormal_recoveries`` ended
``events``                  events processed; ``policy_calls`` policy decisions asked
``wall_s``                  wall-clock time of :meth:`Simulator.run`; ``events_per_s``;
                            ``policy_wall_s`` time inside the policy
==========================  ======================================================================
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.io import atomic_write_text
from crop_gym.model.jobs import Job
from crop_gym.sim.ledger import QUEUED, RUNNING, JobLedger

__all__ = ["RECORD_COLUMNS", "TIMELINE_COLUMNS", "RunTotals", "SimResult", "Timeline"]

#: Columns of the per-job records (``SimResult.records`` and the CSV).
RECORD_COLUMNS: tuple[str, ...] = (
    "job_id",
    "model",
    "num_gpus",
    "iterations",
    "arrival_s",
    "start_s",
    "finish_s",
    "jct_s",
    "queueing_s",
    "run_s",
    "ideal_run_s",
    "restarts",
    "lost_gpu_hours",
    "servers",
    "mean_servers",
)

#: Columns of the time series (``SimResult.timeline``): the cluster from each time ``t`` on.
TIMELINE_COLUMNS: tuple[str, ...] = ("t", "busy", "F", "throughput", "queued", "running")


def _pct(a: NDArray[np.float64], q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else math.nan


def _csv_cell(v: Any) -> Any:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.10g}"
    return v


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


@dataclass
class Timeline:
    """The cluster at every event, one entry per event in each column (:data:`TIMELINE_COLUMNS`).

    Attributes:
        t: Event times (s); each entry holds from its ``t`` to the next.
        busy: GPUs held by running jobs.
        F: Expected effective GPUs.
        throughput: ``Σ k η`` over the running jobs.
        queued: Queued jobs.
        running: Running jobs.
    """

    t: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    F: list[float] = field(default_factory=list)
    throughput: list[float] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)

    def append(
        self, t: float, busy: float, F: float, throughput: float, queued: int, running: int
    ) -> None:
        """Record the cluster from time ``t`` on."""
        self.t.append(t)
        self.busy.append(busy)
        self.F.append(F)
        self.throughput.append(throughput)
        self.queued.append(queued)
        self.running.append(running)

    def __len__(self) -> int:
        return len(self.t)

    def copy(self) -> Timeline:
        """An independent copy."""
        return Timeline(**{c: list(getattr(self, c)) for c in TIMELINE_COLUMNS})

    def columns(self) -> dict[str, NDArray[np.float64]]:
        """Each column as a ``float64`` array."""
        return {c: np.array(getattr(self, c), dtype=np.float64) for c in TIMELINE_COLUMNS}


@dataclass(frozen=True)
class RunTotals:
    """What a simulation accumulated up to time ``now`` (besides its per-job ledger).

    Attributes:
        now: Simulated time reached (s).
        truncated: Whether the time limit stopped it.
        gpus: GPUs of the cluster.
        skipped: Jobs skipped because they need more GPUs than the cluster has.
        int_F: ``∫ F dt`` (GPU-seconds).
        int_busy: ``∫ busy GPUs dt``.
        int_thr: ``∫ Σ k η dt``.
        int_comm: ``∫ Σ k C/T dt``.
        counters: Event counts (``events``, ``policy_calls``, failures, health events), in the
            order the metrics list them.
        wall_s: Wall-clock seconds of :meth:`Simulator.run <crop_gym.sim.Simulator.run>`.
        policy_wall_s: Of which inside the policy.
    """

    now: float
    truncated: bool
    gpus: int
    skipped: int
    int_F: float
    int_busy: float
    int_thr: float
    int_comm: float
    counters: Mapping[str, int]
    wall_s: float
    policy_wall_s: float


@dataclass
class SimResult:
    """What a simulation produced.

    Attributes:
        metrics: Summary metrics (see the module docstring for every key).
        records: Per-job columns (:data:`RECORD_COLUMNS`), one entry per job in arrival order.
        timeline: Time series recorded at every event (:data:`TIMELINE_COLUMNS`): ``t``, ``busy``
            (GPUs), ``F``, ``throughput`` (``Σ k η``), ``queued``, ``running`` (values hold from
            ``t`` to the next ``t``).
        info: Run description: policy, workload, cluster, profile, seed, GPUs.
    """

    metrics: dict[str, Any]
    records: dict[str, NDArray[Any]]
    timeline: dict[str, NDArray[np.float64]]
    info: dict[str, Any] = field(default_factory=dict)

    # ---------------------------------------------------------------- building
    @classmethod
    def build(
        cls,
        jobs: Sequence[Job],
        ledger: JobLedger,
        totals: RunTotals,
        timeline: Timeline,
        info: dict[str, Any],
    ) -> SimResult:
        """Assemble a result from the run's records (:meth:`Simulator.result
        <crop_gym.sim.Simulator.result>` passes them).

        Args:
            jobs: The simulated jobs, in the ledger's order.
            ledger: Their records.
            totals: The run's integrals and counters.
            timeline: The time series, its last entry the cluster at ``totals.now``.
            info: The run's description.
        """
        n = len(jobs)
        G = totals.gpus
        now = totals.now
        finish = ledger.finish
        done = ~np.isnan(finish)
        arrival = ledger.arrival
        jct = finish - arrival
        jct_done = jct[done]
        queueing = ledger.queue_time.copy()
        # Jobs still queued at the end: count their waiting so far.
        queued = ledger.status == QUEUED
        queueing[queued] += now - ledger.queued_since[queued]
        ideal_run = ledger.work * ledger.tstar
        # Jobs still running at the end: count their current run so far.
        run_time = ledger.run_time.copy()
        running = ledger.status == RUNNING
        run_time[running] += now - ledger.run_start[running]
        makespan = float(finish[done].max()) if done.any() else float(now)
        if totals.truncated:
            makespan = float(now)
        horizon = makespan if makespan > 0 else math.nan
        busy_int = totals.int_busy
        lost_gpu_s = float(ledger.lost_gpu_s.sum())
        wall_s = totals.wall_s
        metrics: dict[str, Any] = {
            "jobs_total": n,
            "jobs_completed": int(done.sum()),
            "jobs_unfinished": int(n - done.sum()),
            "jobs_skipped": totals.skipped,
            "mean_jct_s": float(jct_done.mean()) if len(jct_done) else math.nan,
            "p50_jct_s": _pct(jct_done, 50),
            "p95_jct_s": _pct(jct_done, 95),
            "p99_jct_s": _pct(jct_done, 99),
            "max_jct_s": float(jct_done.max()) if len(jct_done) else math.nan,
            "mean_queueing_s": float(queueing.mean()) if n else math.nan,
            "p95_queueing_s": _pct(queueing, 95),
            "makespan_s": makespan,
            "mean_utilization": busy_int / (G * horizon),
            "mean_effective_gpus": totals.int_F / horizon,
            "mean_throughput_gpus": totals.int_thr / horizon,
            "goodput_gpus": float((ledger.k * ideal_run)[done].sum()) / horizon,
            "mean_efficiency": totals.int_thr / busy_int if busy_int > 0 else math.nan,
            "comm_overhead": totals.int_comm / busy_int if busy_int > 0 else math.nan,
            "mean_slowdown": float((run_time[done] / ideal_run[done]).mean())
            if done.any()
            else math.nan,
            "restarts": int(ledger.restarts.sum()),
            "lost_gpu_hours": lost_gpu_s / 3600.0,
            "lost_work_frac": float(ledger.lost_work.sum() / ledger.work.sum()) if n else 0.0,
            "gpu_hours_busy": busy_int / 3600.0,
            **totals.counters,
            "truncated": bool(totals.truncated),
            "wall_s": wall_s,
            "policy_wall_s": totals.policy_wall_s,
            "events_per_s": totals.counters["events"] / wall_s if wall_s > 0 else math.nan,
        }
        records: dict[str, NDArray[Any]] = {
            "job_id": np.array([j.job_id for j in jobs], dtype=object),
            "model": np.array([j.model for j in jobs], dtype=object),
            "num_gpus": ledger.k.copy(),
            "iterations": ledger.work.copy(),
            "arrival_s": arrival.copy(),
            "start_s": ledger.start.copy(),
            "finish_s": finish.copy(),
            "jct_s": jct,
            "queueing_s": queueing,
            "run_s": run_time,
            "ideal_run_s": ideal_run,
            "restarts": ledger.restarts.copy(),
            "lost_gpu_hours": ledger.lost_gpu_s / 3600.0,
            "servers": ledger.servers.copy(),
            "mean_servers": np.divide(
                ledger.sum_servers,
                ledger.place_count,
                out=np.full(n, np.nan),
                where=ledger.place_count > 0,
            ),
        }
        return cls(metrics=metrics, records=records, timeline=timeline.columns(), info=info)

    # ----------------------------------------------------------------- writers
    def summary(self) -> dict[str, Any]:
        """``info`` and ``metrics`` in one JSON-ready mapping (non-finite numbers become ``None``)."""
        out = {k: _json_value(v) for k, v in self.info.items()}
        out.update({k: _json_value(v) for k, v in self.metrics.items()})
        return out

    def to_json(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`summary` as JSON, atomically."""
        atomic_write_text(path, json.dumps(self.summary(), indent=2, sort_keys=False) + "\n")

    def records_csv(self) -> str:
        """The per-job records as CSV text (header: :data:`RECORD_COLUMNS`)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(RECORD_COLUMNS)
        cols = [self.records[c].tolist() for c in RECORD_COLUMNS]
        for row in zip(*cols):
            w.writerow([_csv_cell(v) for v in row])
        return buf.getvalue()

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the per-job records as CSV, atomically."""
        atomic_write_text(path, self.records_csv())

    def plot(self, path: str | os.PathLike[str]) -> None:
        """Save :meth:`figure` to ``path`` atomically (the format follows the suffix)."""
        from crop_gym.plotting import save_figure

        save_figure(self.figure(), path)

    def figure(self) -> Any:
        """A matplotlib figure (Agg): the JCT CDF (left), utilisation (top right) and effective
        GPUs F (bottom right) over time, each on its own axes."""
        from crop_gym.plotting import new_figure, policy_style

        policy = str(self.info.get("policy"))
        fig = new_figure(12.0, 5.0)
        axd = fig.subplot_mosaic([["cdf", "util"], ["cdf", "F"]], sharex=False)
        ax1, ax2, ax3 = axd["cdf"], axd["util"], axd["F"]
        style = policy_style(policy, [policy])
        jct = self.records["jct_s"]
        jct = np.sort(jct[~np.isnan(jct)]) / 3600.0
        if len(jct):
            ax1.step(
                jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=policy, **style
            )
            ax1.set_xscale("log")
            ax1.legend(loc="lower right", fontsize=8)
        ax1.set_xlabel("job completion time (hours, log scale)")
        ax1.set_ylabel("fraction of completed jobs")
        ax1.set_ylim(0, 1.02)
        ax1.set_title("JCT CDF")
        ax1.grid(alpha=0.3)
        t = self.timeline["t"] / 3600.0
        G = float(self.info.get("gpus", 1))
        ax2.step(
            t, 100.0 * self.timeline["busy"] / G, where="post", color="tab:blue", label="busy GPUs"
        )
        ax2.set_ylabel("utilisation (% of GPUs)")
        ax2.set_ylim(0, 115)
        ax2.set_title("Cluster over time")
        ax2.legend(loc="upper left", fontsize=8)
        ax3.step(t, self.timeline["F"], where="post", color="tab:red", label="F (effective GPUs)")
        ax3.axhline(G, color="0.4", ls="--", lw=1, label=f"cluster size ({G:g} GPUs)")
        ax3.set_ylabel("effective GPUs (GPUs)")
        ax3.set_ylim(0, G * 1.3)
        ax3.legend(loc="upper left", fontsize=8, ncol=2)
        ax3.sharex(ax2)
        ax2.tick_params(labelbottom=False)
        ax3.set_xlabel("simulated time (hours)")
        for ax in (ax2, ax3):
            ax.grid(alpha=0.3)
        fig.suptitle(
            f"{policy} on {self.info.get('workload')} / {self.info.get('cluster')} "
            f"/ {self.info.get('profile')}"
        )
        fig.tight_layout()
        return fig
