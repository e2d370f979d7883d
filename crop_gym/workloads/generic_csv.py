"""The generic CSV workload format: a reader and a writer.

Header required, column order free, unknown columns ignored.

=================  ========  ======================================================  ===========
column             needed    meaning                                                 unit
=================  ========  ======================================================  ===========
``job_id``         required  identifier, unique within the file                      --
``arrival_s``      required  arrival time (any origin; rebased so the first is 0)    s
``model``          required  model name from the model zoo (or mapped with model_map) --
``num_gpus``       required  GPUs, an integer >= 1                                   GPUs
``batch_size``     required  global batch, an integer >= 1                           samples
``iterations``     required  work, > 0                                               iterations
``weight``         optional  objective weight, > 0; empty cell = 1                   --
``deadline_s``     optional  absolute deadline, same clock as ``arrival_s``;          s
                             empty cell = none
``duration_s``     optional  run time the source recorded, > 0; empty = unknown      s
=================  ========  ======================================================  ===========
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from crop_gym.io import atomic_write_text
from crop_gym.model.jobs import MODEL_ZOO
from crop_gym.workloads.csv_columns import (
    MAX_BATCH,
    MAX_GPUS,
    MAX_ITERATIONS,
    MAX_TIME_S,
    MAX_WEIGHT,
    check_batch_vs_gpus,
    check_sorted,
    check_unique_ids,
    map_names,
    number_column,
    read_table,
    string_column,
)
from crop_gym.workloads.workload import Workload, build_workload

__all__ = ["GENERIC_COLUMNS", "GENERIC_OPTIONAL_COLUMNS", "load_generic_csv", "save_generic_csv"]

#: Required columns of the generic format.
GENERIC_COLUMNS: tuple[str, ...] = (
    "job_id",
    "arrival_s",
    "model",
    "num_gpus",
    "batch_size",
    "iterations",
)
#: Optional columns of the generic format.
GENERIC_OPTIONAL_COLUMNS: tuple[str, ...] = ("weight", "deadline_s", "duration_s")


def load_generic_csv(
    path: str | os.PathLike[str],
    *,
    model_map: Mapping[str, str] | None = None,
    name: str | None = None,
    max_jobs: int | None = None,
    strict: bool = False,
) -> Workload:
    """Load a workload in the generic CSV format.

    Args:
        path: The CSV file.
        model_map: ``{file model: zoo model}`` for models the zoo does not know.
        name: Workload name (default: the file stem).
        max_jobs: Read only the first ``max_jobs`` rows (the rest of the file is not read); they
            must be sorted by ``arrival_s``.
        strict: Refuse columns the format does not read (else a misspelt one warns).

    Returns:
        The workload.

    Raises:
        TraceFormatError: On any malformed value, naming the file, line and column.
        ConfigError: If a ``model_map`` target is not in the model zoo.
        FileNotFoundError: If the file does not exist.
    """
    table = read_table(
        path, GENERIC_COLUMNS, optional=GENERIC_OPTIONAL_COLUMNS, max_rows=max_jobs, strict=strict
    )
    job_ids = string_column(table, "job_id")
    check_unique_ids(table, job_ids, "job_id")
    arrival = number_column(table, "arrival_s", minimum=0, maximum=MAX_TIME_S, what="arrival time")
    if max_jobs is not None and len(arrival) >= max_jobs:  # rows were left unread
        check_sorted(table, arrival, "arrival_s")
    models = map_names(table, "model", string_column(table, "model"), MODEL_ZOO, model_map)
    gpus = number_column(
        table, "num_gpus", integer=True, positive=True, maximum=MAX_GPUS, what="GPUs per job"
    )
    batch = number_column(
        table, "batch_size", integer=True, positive=True, maximum=MAX_BATCH, what="global batch"
    )
    check_batch_vs_gpus(table, batch, gpus, "batch_size")
    iterations = number_column(
        table, "iterations", positive=True, maximum=MAX_ITERATIONS, what="iterations"
    )
    weight = None
    if table.has("weight"):
        weight = number_column(
            table, "weight", positive=True, maximum=MAX_WEIGHT, allow_empty=True, what="weight"
        )
    deadline = None
    if table.has("deadline_s"):
        deadline = number_column(
            table, "deadline_s", minimum=0, maximum=MAX_TIME_S, allow_empty=True, what="deadline"
        )
        late = deadline < arrival  # NaN compares False
        if late.any():
            i = int(late.argmax())
            raise table.error(
                f"deadline {deadline[i]:g} is before arrival_s {arrival[i]:g}", i, "deadline_s"
            )
    duration = None
    if table.has("duration_s"):
        duration = number_column(
            table,
            "duration_s",
            positive=True,
            maximum=MAX_TIME_S,
            allow_empty=True,
            what="run time",
        )
        if np.isnan(duration).all():
            duration = None
    return build_workload(
        name=name or Path(table.path).stem,
        source=table.path,
        format="csv",
        job_ids=job_ids,
        models=models,
        num_gpus=gpus,
        batch_size=batch,
        iterations=iterations,
        arrival=arrival,
        weight=weight,
        deadline=deadline,
        duration=duration,
    )


def _num(x: float) -> str:
    if math.isnan(x):
        return ""
    if x.is_integer() and abs(x) < 2**53:
        return str(int(x))
    return repr(x)


def save_generic_csv(workload: Workload, path: str | os.PathLike[str]) -> None:
    """Write a workload in the generic CSV format (atomically; arrivals as rebased).

    Values are written exactly (integral floats as integers, others with ``repr``), so loading the file
    gives back the same jobs and durations.

    Args:
        workload: The workload.
        path: Destination file; replaced atomically.
    """
    has_dur = workload.durations is not None
    cols = [*GENERIC_COLUMNS, "weight", "deadline_s"] + (["duration_s"] if has_dur else [])
    lines = [",".join(cols)]
    durations = workload.durations or ()
    for i, j in enumerate(workload.jobs):
        cells = [
            _quote(j.job_id),
            _num(j.arrival),
            _quote(j.model),
            str(j.num_gpus),
            str(j.batch_size),
            _num(float(j.iterations)),
            _num(float(j.weight)),
            "" if j.deadline is None else _num(float(j.deadline)),
        ]
        if has_dur:
            cells.append(_num(durations[i]))
        lines.append(",".join(cells))
    atomic_write_text(path, "\n".join(lines) + "\n")


def _quote(s: str) -> str:
    if any(c in s for c in ',"\n\r') or s != s.strip():
        return '"' + s.replace('"', '""') + '"'
    return s
