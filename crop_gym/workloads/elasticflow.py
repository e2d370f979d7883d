"""Loader for ElasticFlow traces (microsoft/elasticflow-traces, ElasticFlow ASPLOS 2023).

Columns (header required, order free, extra columns ignored)::

    job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration

========================  =====================================================  ===========
column                    meaning                                                unit
========================  =====================================================  ===========
``job_id``                anonymised identifier, unique                          --
``submission_time``       submit time on the trace's own clock (not 0-based)     s
``num_iteration``         work: iterations to train                              iterations
``model_name``            model (resnet50, vgg16, inception3, bert, gpt2, ...)   --
``deadline``              absolute deadline, same clock as ``submission_time``   s
``batch_size``            global batch                                           samples
``num_gpu``               GPUs requested                                         GPUs
``duration``              real run time at ``num_gpu`` GPUs                      s
========================  =====================================================  ===========

Arrivals and deadlines are rebased so that the first job arrives at 0; the offset is kept in
:attr:`Workload.time_offset`. The recorded ``duration`` is kept per job (used for GPU-hours).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from crop_gym.model.jobs import MODEL_ZOO
from crop_gym.workloads.csv_columns import (
    MAX_BATCH,
    MAX_GPUS,
    MAX_ITERATIONS,
    MAX_TIME_S,
    check_batch_vs_gpus,
    check_sorted,
    check_unique_ids,
    map_names,
    number_column,
    read_table,
    string_column,
)
from crop_gym.workloads.workload import Workload, build_workload

__all__ = ["ELASTICFLOW_COLUMNS", "load_elasticflow"]

#: The columns an ElasticFlow trace must have.
ELASTICFLOW_COLUMNS: tuple[str, ...] = (
    "job_id",
    "submission_time",
    "num_iteration",
    "model_name",
    "deadline",
    "batch_size",
    "num_gpu",
    "duration",
)


def load_elasticflow(
    path: str | os.PathLike[str],
    *,
    model_map: Mapping[str, str] | None = None,
    name: str | None = None,
    max_jobs: int | None = None,
    strict: bool = False,
) -> Workload:
    """Load an ElasticFlow trace.

    Args:
        path: The CSV file.
        model_map: ``{trace model: zoo model}`` for models the zoo does not know.
        name: Workload name (default: the file stem).
        max_jobs: Read only the first ``max_jobs`` rows (the rest of the file is not read); they
            must be sorted by ``submission_time``, as the ElasticFlow traces are.
        strict: Refuse columns the format does not read (else a misspelt one warns).

    Returns:
        The workload, with per-job durations.

    Raises:
        TraceFormatError: On any malformed value, naming the file, line and column.
        ConfigError: If a ``model_map`` target is not in the model zoo.
        FileNotFoundError: If the file does not exist.
    """
    table = read_table(path, ELASTICFLOW_COLUMNS, max_rows=max_jobs, strict=strict)
    job_ids = string_column(table, "job_id")
    check_unique_ids(table, job_ids, "job_id")
    arrival = number_column(
        table, "submission_time", minimum=0, maximum=MAX_TIME_S, what="submit time"
    )
    if max_jobs is not None and len(arrival) >= max_jobs:  # rows were left unread
        check_sorted(table, arrival, "submission_time")
    iterations = number_column(
        table, "num_iteration", positive=True, maximum=MAX_ITERATIONS, what="iterations"
    )
    models = map_names(
        table, "model_name", string_column(table, "model_name"), MODEL_ZOO, model_map
    )
    deadline = number_column(
        table, "deadline", minimum=0, maximum=MAX_TIME_S, what="absolute deadline"
    )
    late = deadline < arrival
    if late.any():
        i = int(late.argmax())
        raise table.error(
            f"deadline {deadline[i]:g} is before submission_time {arrival[i]:g}", i, "deadline"
        )
    batch = number_column(
        table, "batch_size", integer=True, positive=True, maximum=MAX_BATCH, what="global batch"
    )
    gpus = number_column(
        table, "num_gpu", integer=True, positive=True, maximum=MAX_GPUS, what="GPUs per job"
    )
    check_batch_vs_gpus(table, batch, gpus, "batch_size")
    duration = number_column(table, "duration", positive=True, maximum=MAX_TIME_S, what="run time")
    return build_workload(
        name=name or Path(table.path).stem,
        source=table.path,
        format="elasticflow",
        job_ids=job_ids,
        models=models,
        num_gpus=gpus,
        batch_size=batch,
        iterations=iterations,
        arrival=arrival,
        deadline=deadline,
        duration=duration,
    )
