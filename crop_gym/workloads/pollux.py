"""Loader for Pollux workload files (petuum/adaptdl, Pollux OSDI 2021 artifact).

Format (header required, order free, extra columns ignored)::

    name,time,application,num_replicas,batch_size

``name`` is the job id, ``time`` the arrival in seconds, ``application`` one of Pollux's six training
applications, ``num_replicas`` the GPUs and ``batch_size`` the global batch. The file has no duration:
a Pollux job trains its application for a fixed number of epochs, so the work is derived as::

    iterations = epochs × ceil(dataset_samples / batch_size)

from :data:`POLLUX_APPLICATIONS`. The epoch counts are the ``max_epochs`` of the applications in
Pollux's artifact simulator (petuum/adaptdl, branch ``osdi21-artifact``, ``simulator/applications.py``):
cifar10 100, imagenet 90, ncf 10, yolov3 50, deepspeech2 80, bert 2. The dataset sizes of cifar10
(CIFAR-10 training set, 50,000 images) and imagenet (ILSVRC-2012 training set, 1,281,167 images) are
the published sizes of those datasets. The other four are **assumptions**: the Pollux paper names the
datasets (MovieLens for ncf, PASCAL VOC for yolov3, CMU ARCTIC for deepspeech2, SQuAD for bert) but its
artifact does not state a sample count, so we use the ``dataset_size`` values of a public
Pollux-derived simulator that extends the same table (ncf 1,000,000; yolov3 14,041; deepspeech2 4,074;
bert 97,077). Pass ``applications=`` to :func:`load_pollux` to override any of them.

Applications map to zoo models: cifar10 → resnet18, imagenet → resnet50, ncf → ncf, yolov3 → yolov3,
deepspeech2 → deepspeech2, bert → bert. An unknown application is refused unless ``model_map`` maps it
to a known application (e.g. ``{"cifar100": "cifar10"}``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crop_gym.errors import ConfigError, check_range
from crop_gym.model.jobs import get_model
from crop_gym.workloads.csv_columns import (
    MAX_BATCH,
    MAX_GPUS,
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

__all__ = ["POLLUX_APPLICATIONS", "POLLUX_COLUMNS", "PolluxApplication", "load_pollux"]

#: The columns a Pollux workload file must have.
POLLUX_COLUMNS: tuple[str, ...] = ("name", "time", "application", "num_replicas", "batch_size")


@dataclass(frozen=True, slots=True)
class PolluxApplication:
    """One Pollux training application.

    Attributes:
        name: Application name as used in workload files.
        model: Zoo model that trains it.
        dataset: Dataset name (documentation).
        samples: Training samples per epoch.
        epochs: Epochs a job trains.
    """

    name: str
    model: str
    dataset: str
    samples: int
    epochs: int

    def __post_init__(self) -> None:
        get_model(self.model)
        check_range(f"PolluxApplication({self.name}).samples", self.samples, 1)
        check_range(f"PolluxApplication({self.name}).epochs", self.epochs, 1)

    def iterations(self, batch_size: int) -> int:
        """Iterations to train ``epochs`` epochs at global batch ``batch_size``."""
        return self.epochs * math.ceil(self.samples / batch_size)


#: Pollux's applications (see the module docstring for the sources of each number).
POLLUX_APPLICATIONS: dict[str, PolluxApplication] = {
    a.name: a
    for a in (
        PolluxApplication("cifar10", "resnet18", "CIFAR-10", 50_000, 100),
        PolluxApplication("imagenet", "resnet50", "ImageNet (ILSVRC-2012)", 1_281_167, 90),
        PolluxApplication("ncf", "ncf", "MovieLens", 1_000_000, 10),
        PolluxApplication("yolov3", "yolov3", "PASCAL VOC", 14_041, 50),
        PolluxApplication("deepspeech2", "deepspeech2", "CMU ARCTIC", 4_074, 80),
        PolluxApplication("bert", "bert", "SQuAD", 97_077, 2),
    )
}


def load_pollux(
    path: str | os.PathLike[str],
    *,
    model_map: Mapping[str, str] | None = None,
    applications: Mapping[str, PolluxApplication] | None = None,
    name: str | None = None,
    max_jobs: int | None = None,
    strict: bool = False,
) -> Workload:
    """Load a Pollux workload file.

    Args:
        path: The CSV file.
        model_map: ``{trace application: known application}`` for applications not in the table.
        applications: Application table (default :data:`POLLUX_APPLICATIONS`).
        name: Workload name (default: the file stem).
        max_jobs: Read only the first ``max_jobs`` rows (the rest of the file is not read); they
            must be sorted by ``time``.
        strict: Refuse columns the format does not read (else a misspelt one warns).

    Returns:
        The workload (no durations: Pollux files have none).

    Raises:
        TraceFormatError: On any malformed value, naming the file, line and column.
        ConfigError: If a ``model_map`` target is not a known application.
        FileNotFoundError: If the file does not exist.
    """
    apps = dict(POLLUX_APPLICATIONS if applications is None else applications)
    if not apps:
        raise ConfigError("load_pollux: the application table is empty")
    table = read_table(path, POLLUX_COLUMNS, max_rows=max_jobs, strict=strict)
    job_ids = string_column(table, "name")
    check_unique_ids(table, job_ids, "name")
    arrival = number_column(table, "time", minimum=0, maximum=MAX_TIME_S, what="arrival time")
    if max_jobs is not None and len(arrival) >= max_jobs:  # rows were left unread
        check_sorted(table, arrival, "time")
    app_names = map_names(
        table,
        "application",
        string_column(table, "application"),
        apps,
        model_map,
        kind="application",
    )
    gpus = number_column(
        table, "num_replicas", integer=True, positive=True, maximum=MAX_GPUS, what="GPUs per job"
    )
    batch = number_column(
        table, "batch_size", integer=True, positive=True, maximum=MAX_BATCH, what="global batch"
    )
    check_batch_vs_gpus(table, batch, gpus, "batch_size")
    per_app = {
        a: (apps[a].model, apps[a].samples, apps[a].epochs) for a in dict.fromkeys(app_names)
    }
    samples = np.array([per_app[a][1] for a in app_names], dtype=np.float64)
    epochs = np.array([per_app[a][2] for a in app_names], dtype=np.float64)
    iterations = epochs * np.ceil(samples / batch)
    return build_workload(
        name=name or Path(table.path).stem,
        source=table.path,
        format="pollux",
        job_ids=job_ids,
        models=[per_app[a][0] for a in app_names],
        num_gpus=gpus,
        batch_size=batch,
        iterations=iterations,
        arrival=arrival,
    )
