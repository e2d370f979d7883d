"""Measured per-placement step times in the Pollux / Sia format, read into named arrays.

A measurement folder holds one sub-folder per application, each with CSV files (columns by header,
in any order, unknown columns ignored)::

    DIR/<app>/placements[-<cluster>].csv    placement, local_bsz, step_time[, sync_time]
    DIR/<app>/scalability[-<cluster>].csv   num_nodes, num_replicas, local_bsz, step_time[, sync_time]

=================  ==========================================================================  =======
column             meaning                                                                     unit
=================  ==========================================================================  =======
``placement``      GPUs used on each node, one digit (1-9) per node: ``22`` = 2 nodes x 2 GPUs  --
``num_nodes``      nodes of a job spread as evenly as possible (scalability files)              --
``num_replicas``   GPUs of that job (>= nodes; ``k mod n`` nodes hold one GPU more)             GPUs
``local_bsz``      per-GPU batch                                                                samples
``step_time``      measured time of one iteration (compute + exposed synchronisation), > 0      s
``sync_time``      measured time in the gradient all-reduce, >= 0 (optional; empty = unknown)   s
=================  ==========================================================================  =======

The application folders are mapped to the model zoo (:data:`POLLUX_APPLICATIONS`, the Pollux/AdaptDL
benchmark models); a folder that is neither there nor in ``app_map`` is refused, never guessed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.model.jobs import MODEL_ZOO
from crop_gym.workloads.csv_columns import Table, number_column, read_table, string_column

__all__ = [
    "KINDS",
    "POLLUX_APPLICATIONS",
    "Measurements",
    "load_measurements",
    "read_measurement_file",
]

#: The two file kinds of a measurement folder.
KINDS: tuple[str, ...] = ("placements", "scalability")
#: Pollux/AdaptDL benchmark applications and the zoo model each one trains
#: (petuum/adaptdl ``benchmark/models/``: cifar10 is ResNet-18, imagenet is ResNet-50).
POLLUX_APPLICATIONS: Mapping[str, str] = {
    "bert": "bert",
    "cifar10": "resnet18",
    "deepspeech2": "deepspeech2",
    "imagenet": "resnet50",
    "ncf": "ncf",
    "yolov3": "yolov3",
}
#: Largest per-node GPU count, batch and time accepted (guards against garbage, not hardware).
_MAX_NODES = 4096
_MAX_BATCH = 1 << 24
_MAX_TIME_S = 1e6
_FILE = re.compile(r"^(placements|scalability)(?:-([A-Za-z0-9_.-]+))?\.csv$")


@dataclass(frozen=True, eq=False)
class Measurements:
    """Measured rows, one per (application, placement, per-GPU batch).

    Attributes:
        app: ``str[R]`` application (folder name) of each row.
        model: ``str[R]`` zoo model the application trains.
        kind: ``str[R]`` ``"placements"`` or ``"scalability"``.
        placement: ``int64[R, N]`` GPUs on each node, largest first, zero-padded to the widest row.
        local_bsz: ``float64[R]`` per-GPU batch.
        step_time: ``float64[R]`` measured seconds per iteration.
        sync_time: ``float64[R]`` measured seconds in the all-reduce (``nan`` if not measured).
        source: ``str[R]`` ``"file:line"`` of each row.
    """

    app: NDArray[np.str_]
    model: NDArray[np.str_]
    kind: NDArray[np.str_]
    placement: NDArray[np.int64]
    local_bsz: NDArray[np.float64]
    step_time: NDArray[np.float64]
    sync_time: NDArray[np.float64]
    source: NDArray[np.str_]

    def __len__(self) -> int:
        return len(self.step_time)

    @property
    def num_gpus(self) -> NDArray[np.int64]:
        """``int64[R]`` GPUs of each row."""
        out: NDArray[np.int64] = self.placement.sum(axis=1)
        return out

    @property
    def num_nodes(self) -> NDArray[np.int64]:
        """``int64[R]`` nodes of each row."""
        out: NDArray[np.int64] = (self.placement > 0).sum(axis=1)
        return out

    def select(self, rows: NDArray[np.bool_] | NDArray[np.integer]) -> Measurements:
        """The rows picked by a boolean mask or an index array (placements trimmed to width)."""
        placement = self.placement[rows]
        width = int((placement > 0).sum(axis=1).max(initial=0))
        return Measurements(
            app=self.app[rows],
            model=self.model[rows],
            kind=self.kind[rows],
            placement=placement[:, :width],
            local_bsz=self.local_bsz[rows],
            step_time=self.step_time[rows],
            sync_time=self.sync_time[rows],
            source=self.source[rows],
        )

    @classmethod
    def concatenate(cls, parts: Sequence[Measurements]) -> Measurements:
        """The rows of ``parts``, in order."""
        width = max((p.placement.shape[1] for p in parts), default=0)
        pad = [np.pad(p.placement, ((0, 0), (0, width - p.placement.shape[1]))) for p in parts]

        def cat(name: str, dtype: type) -> NDArray:
            arrays = [getattr(p, name) for p in parts]
            return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

        return cls(
            app=cat("app", np.str_),
            model=cat("model", np.str_),
            kind=cat("kind", np.str_),
            placement=np.concatenate(pad) if pad else np.zeros((0, 0), dtype=np.int64),
            local_bsz=cat("local_bsz", np.float64),
            step_time=cat("step_time", np.float64),
            sync_time=cat("sync_time", np.float64),
            source=cat("source", np.str_),
        )


def _placements(table: Table) -> list[list[int]]:
    out = []
    for i, text in enumerate(string_column(table, "placement")):
        if not text.isascii() or not text.isdigit() or "0" in text:
            raise table.error(
                f"{text[:20]!r} is not a placement (one digit 1-9 per node, e.g. 22)",
                i,
                "placement",
            )
        if len(text) > _MAX_NODES:
            raise table.error(f"more than {_MAX_NODES} nodes", i, "placement")
        out.append(sorted((int(c) for c in text), reverse=True))
    return out


def _spread(table: Table) -> list[list[int]]:
    nodes = number_column(table, "num_nodes", integer=True, minimum=1, maximum=_MAX_NODES)
    gpus = number_column(table, "num_replicas", integer=True, minimum=1, maximum=_MAX_NODES * 64)
    out = []
    for i, (n, k) in enumerate(zip(nodes.astype(int), gpus.astype(int))):
        if k < n:
            raise table.error(f"{k} GPUs cannot use num_nodes={n}", i, "num_replicas")
        # As even as possible: k mod n nodes hold one GPU more than the others.
        out.append([k // n + 1] * (k % n) + [k // n] * (n - k % n))
    return out


def read_measurement_file(path: str | os.PathLike[str], app: str, model: str) -> Measurements:
    """Read one ``placements*.csv`` or ``scalability*.csv`` file.

    Args:
        path: The CSV file; its name says its kind.
        app: The application it measures.
        model: The zoo model of that application.

    Raises:
        crop_gym.errors.TraceFormatError: A missing column or a malformed value (file, line and column named).
        ConfigError: If the file name is neither kind.
    """
    name = Path(path).name
    match = _FILE.match(name)
    if match is None:
        raise ConfigError(f"{path}: not a placements*.csv or scalability*.csv file")
    kind = match.group(1)
    layout = ("placement",) if kind == "placements" else ("num_nodes", "num_replicas")
    table = read_table(path, (*layout, "local_bsz", "step_time"))
    per_node = _placements(table) if kind == "placements" else _spread(table)
    bsz = number_column(table, "local_bsz", positive=True, maximum=_MAX_BATCH)
    step = number_column(table, "step_time", positive=True, maximum=_MAX_TIME_S)
    if table.has("sync_time"):
        sync = number_column(table, "sync_time", minimum=0.0, maximum=_MAX_TIME_S, allow_empty=True)
    else:
        sync = np.full(len(table), np.nan)
    width = max(len(p) for p in per_node)
    placement = np.zeros((len(table), width), dtype=np.int64)
    for i, p in enumerate(per_node):
        placement[i, : len(p)] = p
    n = len(table)
    return Measurements(
        app=np.full(n, app),
        model=np.full(n, model),
        kind=np.full(n, kind),
        placement=placement,
        local_bsz=bsz,
        step_time=step,
        sync_time=sync,
        source=np.array([f"{path}:{line}" for line in table.lines]),
    )


def _kind(path: Path) -> str:
    """``"placements"`` or ``"scalability"`` for a file :data:`_FILE` matches."""
    return path.name.split("-")[0].removesuffix(".csv")


def _cluster_files(app_dir: Path, cluster: str | None) -> list[Path]:
    """The measurement files of one application folder for ``cluster`` (see :func:`load_measurements`)."""
    found: dict[str, list[tuple[str, Path]]] = {}
    for f in sorted(app_dir.iterdir()):
        m = _FILE.match(f.name)
        if m and f.is_file():
            found.setdefault(m.group(2) or "", []).append((m.group(1), f))
    if cluster is None:
        if len(found) > 1:
            shown = ", ".join(repr(c) if c else "(no suffix)" for c in sorted(found))
            raise ConfigError(
                f"{app_dir}: measurements of several clusters ({shown}); choose one (--cluster)"
            )
        cluster = next(iter(found), "")
    return [f for _, f in sorted(found.get(cluster, []))]


def load_measurements(
    folder: str | os.PathLike[str],
    *,
    cluster: str | None = None,
    app_map: Mapping[str, str] | None = None,
    kinds: Sequence[str] = KINDS,
    apps: Sequence[str] | None = None,
) -> Measurements:
    """Read every measurement of one cluster in a Pollux/Sia folder.

    Args:
        folder: The folder of ``<app>/`` sub-folders.
        cluster: File suffix to read (``"azure"`` reads ``placements-azure.csv``); ``""`` reads the
            unsuffixed files; ``None`` reads the only cluster present (refused if there are several).
        app_map: Extra or overriding ``{application: zoo model}`` entries.
        kinds: File kinds to read (:data:`KINDS`).
        apps: Applications to read (default: every sub-folder with files of ``cluster``).

    Returns:
        The rows of every file read, applications in sorted order, placements before scalability.

    Raises:
        ConfigError: If the folder is missing or holds nothing to read, an application is not
            mapped to a zoo model, or several clusters are present and none was chosen.
        crop_gym.errors.TraceFormatError: On a malformed file (file, line and column named).
    """
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"{root}: measurement folder not found (expected <app>/placements*.csv)")
    for k in kinds:
        if k not in KINDS:
            raise ConfigError(f"kind {k!r} is not one of {', '.join(KINDS)}")
    mapping = dict(POLLUX_APPLICATIONS)
    mapping.update(app_map or {})
    for app, model in (app_map or {}).items():
        if model not in MODEL_ZOO:
            raise ConfigError(f"app map {app}={model}: {model!r} is not a model of the zoo")
    dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if apps is not None:
        missing = sorted(set(apps) - {d.name for d in dirs})
        if missing:
            raise ConfigError(f"{root}: no folder for application(s) {', '.join(missing)}")
        dirs = [d for d in dirs if d.name in set(apps)]
    parts = []
    for d in dirs:
        files = [f for f in _cluster_files(d, cluster) if _kind(f) in kinds]
        if not files:
            continue
        if d.name not in mapping:
            raise ConfigError(
                f"{d}: application {d.name!r} is not mapped to a zoo model "
                f"(known: {', '.join(sorted(mapping))}; map it with --app-map {d.name}=MODEL)"
            )
        for f in sorted(files, key=lambda f: KINDS.index(_kind(f))):
            parts.append(read_measurement_file(f, d.name, mapping[d.name]))
    if not parts:
        which = "unsuffixed" if cluster == "" else f"cluster {cluster!r}" if cluster else "any"
        raise ConfigError(
            f"{root}: no {'/'.join(kinds)} files of {which} in its application folders"
        )
    return Measurements.concatenate(parts)
