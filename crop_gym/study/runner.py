"""Run a study: expand the grid, skip finished runs, execute the rest, write every record.

:func:`run_study` is what ``crop-gym study`` calls; it can be called from Python too::

    from crop_gym.study import LocalBackend, StudySpec, run_study
    spec = StudySpec(traces=("elasticflow:cluster10",), policies=("crop", "best-fit"), jobs=200)
    outcome = run_study(spec, "out/", LocalBackend(workers=2))
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crop_gym.io import atomic_write_text, pin_folder
from crop_gym.study.backends import Backend
from crop_gym.study.grid import Run, expand
from crop_gym.study.results import (
    RUNS_DIR,
    finished_records,
    remove_stale_temporaries,
    write_record,
)
from crop_gym.study.spec import StudySpec

__all__ = ["StudyOutcome", "estimated_jobs", "run_study"]


@dataclass(frozen=True)
class StudyOutcome:
    """What :func:`run_study` did.

    Attributes:
        runs: Every run of the grid, in grid order.
        records: Run id → record, for every run of the grid (finished before or now).
        skipped: Runs found finished and not run again.
        executed: Runs executed now.
        wall_s: Wall-clock seconds of the execution.
    """

    runs: tuple[Run, ...]
    records: dict[str, dict[str, Any]]
    skipped: int
    executed: int
    wall_s: float

    def ordered_records(self) -> list[dict[str, Any]]:
        """The records in grid order."""
        return [self.records[r.run_id] for r in self.runs if r.run_id in self.records]


def estimated_jobs(run: Run) -> int:
    """Jobs ``run`` will simulate (bundled traces: from the registry; files: their lines).

    Only weighs the progress bar, so that its ETA reflects that a 15,802-job trace takes longer
    than a 260-job one.
    """
    from crop_gym.workloads.registry import resolve_bundled

    bundled = resolve_bundled(run.trace)
    if bundled is not None:
        total = bundled.jobs
    else:
        try:
            with open(run.trace, "rb") as fh:
                total = max(sum(1 for _ in fh) - 1, 1)
        except OSError:
            total = 1000
    return max(1, min(total, run.jobs) if run.jobs is not None else total)


class _Progress:
    """One bar over every run to do, weighted by jobs, with the ETA tqdm derives from it."""

    def __init__(self, todo: list[Run], enabled: bool) -> None:
        self.bar: Any = None
        self.runs_total = len(todo)
        self.runs_done = 0
        if enabled and todo:
            from tqdm.auto import tqdm

            total = sum(estimated_jobs(r) for r in todo)
            self.bar = tqdm(total=total, unit="job", desc="study", dynamic_ncols=True)
            self.bar.set_postfix_str(f"runs 0/{self.runs_total}")

    def advance(self, run: Run) -> None:
        self.runs_done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(f"runs {self.runs_done}/{self.runs_total}", refresh=False)
            self.bar.update(estimated_jobs(run))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_study(
    spec: StudySpec,
    out: str | os.PathLike[str],
    backend: Backend,
    *,
    resume: bool = True,
    progress: bool = False,
    on_record: Callable[[Run, dict[str, Any]], None] | None = None,
) -> StudyOutcome:
    """Execute the runs of ``spec`` not finished under ``out``; write each record as it arrives.

    Args:
        spec: The study.
        out: Results folder (created if missing); records go to ``out/runs/<run id>.json``.
        backend: Where runs execute.
        resume: Skip runs with a finished record (``False``: run everything again, replacing them).
        progress: Show one bar across runs (weighted by jobs, with an ETA).
        on_record: Called after each record is written.

    Returns:
        The runs, every record of the grid, and how many were skipped or executed.

    Raises:
        StudyError: One line naming the run that failed; records finished before stay written.
    """
    out = Path(out)
    (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    # Pinned now: a results folder swapped for another (or a link) mid-study is refused, not used.
    runs_folder = pin_folder(out / RUNS_DIR, shown=f"--out {out}: {RUNS_DIR}")
    atomic_write_text(
        out / "study.json",
        json.dumps(spec.to_dict(), indent=1) + "\n",
        folder=pin_folder(out, shown=f"--out {out}"),
    )
    runs = expand(spec)
    records = finished_records(out, runs) if resume else {}
    # Longest first (by jobs), so that two workers do not end on one long trace alone.
    todo = sorted((r for r in runs if r.run_id not in records), key=estimated_jobs, reverse=True)
    bar = _Progress(todo, progress)
    t0 = time.perf_counter()
    executed = 0
    try:
        for run, record in backend.execute(todo):
            if run.run_id in records:  # a retried task that finished twice: counted once
                continue
            write_record(out, record, folder=runs_folder)
            records[run.run_id] = record
            executed += 1
            bar.advance(run)
            if on_record is not None:
                on_record(run, record)
    finally:
        bar.close()
    return StudyOutcome(
        runs=tuple(runs),
        records=records,
        skipped=len(runs) - len(todo),
        executed=executed,
        wall_s=time.perf_counter() - t0,
    )
