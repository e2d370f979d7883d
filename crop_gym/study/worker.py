"""What a worker does with one run: load the trace, simulate, return the run's record.

:func:`execute_run` is a top-level function of an importable module, so a spawned process
(:mod:`concurrent.futures` with the ``spawn`` start method) or a Ray worker can unpickle it by
reference; it needs crop_gym (and the packages that provide the policies) installed
where it runs, nothing else: it reads no file but the trace and writes nothing. The driver writes
the record (:mod:`crop_gym.study.results`), so a worker that dies leaves nothing behind.

Fault injection for tests: when the environment variable ``CROP_GYM_STUDY_CRASH_ONCE`` names a
folder, the first attempt of every run creates a marker file there and kills its own process, as a
lost machine would; the retry finds the marker and runs normally.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from crop_gym.study.grid import Run, apply_hardware, cluster_on

__all__ = ["CRASH_ONCE_ENV", "JCT_QUANTILES", "execute_run", "worker_init"]

#: Environment variable of the fault-injection hook (see the module docstring).
CRASH_ONCE_ENV = "CROP_GYM_STUDY_CRASH_ONCE"
#: JCT percentiles kept per run (0, 1, ..., 100 %): enough for CDF figures, small on disk.
JCT_QUANTILES = 101


#: ``prctl`` option: the signal the kernel sends this process when its parent dies (Linux).
_PR_SET_PDEATHSIG = 1


def worker_init(driver_pid: int) -> None:
    """Set up a local worker process: it lives no longer than the study's driver.

    Ctrl-C in a terminal reaches the whole process group: the worker ignores it and lets the
    driver stop it (no traceback from every worker). On Linux the kernel sends the worker SIGTERM
    when the driver dies, however it dies (``kill -9`` included: no handler of the driver's can
    catch that); a driver that died before this ran is noticed here.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != driver_pid:
        os._exit(1)


def _maybe_crash(run: Run) -> None:
    folder = os.environ.get(CRASH_ONCE_ENV)
    if not folder:
        return
    marker = Path(folder) / f"{run.run_id}.crashed"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # this run's retry
    os.close(fd)
    os._exit(77)  # no cleanup, no result: what a killed worker looks like


def execute_run(run: Run) -> dict[str, Any]:
    """Simulate ``run`` and return its record.

    Returns:
        The fields of ``crop-gym simulate --json`` (:meth:`SimResult.summary
        <crop_gym.sim.SimResult.summary>`), then the run's grid coordinates
        (:meth:`Run.coordinates`), ``run_id``, ``jct_quantiles_s`` (101 percentiles of the
        completed jobs' JCT, seconds) and ``cpu_s`` (CPU seconds of this process for the run,
        trace loading included: the figure that adds up to a study's CPU time).

    Raises:
        CropGymError: For a trace, cluster or policy the simulator refuses (one line).
    """
    from crop_gym.model.timing import PerfConfig
    from crop_gym.policy import make_policy
    from crop_gym.sim import SimConfig, Simulator
    from crop_gym.workloads.csv_columns import TraceColumnWarning
    from crop_gym.workloads.loader import load_workload

    _maybe_crash(run)
    cpu0 = time.process_time()
    with warnings.catch_warnings():  # the driver checked the columns (crop-gym study --strict)
        warnings.simplefilter("ignore", TraceColumnWarning)
        workload = load_workload(run.trace, max_jobs=run.jobs)
    jobs = list(workload.jobs[: run.jobs] if run.jobs is not None else workload.jobs)
    if run.arrival_scale != 1.0:
        jobs = [dataclasses.replace(j, arrival=j.arrival * run.arrival_scale) for j in jobs]
    config = SimConfig(perf=PerfConfig(), record_timeline=False, **dict(run.sim))
    config = apply_hardware(config, run.hardware)
    topology = cluster_on(run.cluster, run.hardware)
    sim = Simulator(jobs, topology, profile=run.abnormal, config=config, seed=run.seed)
    sim.workload_name = workload.name + (f"[:{run.jobs}]" if run.jobs is not None else "")
    result = sim.run(make_policy(run.policy), progress=False)
    record = result.summary()
    record.update(run.coordinates())
    record["run_id"] = run.run_id
    jct = np.asarray(result.records["jct_s"], dtype=np.float64)
    jct = jct[~np.isnan(jct)]
    record["jct_quantiles_s"] = (
        np.percentile(jct, np.linspace(0, 100, JCT_QUANTILES)).round(3).tolist() if len(jct) else []
    )
    record["cpu_s"] = round(time.process_time() - cpu0, 3)
    return record
