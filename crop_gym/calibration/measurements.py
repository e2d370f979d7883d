"""Measured per-placement step times in the Pollux / Sia format, read into named arrays.

A measurement folder holds one sub-folder per application, each with CSV files (columns by header,
in any order, unknown columns ignored)::

    DIR/<app>/placements[-<cluster>].csv    placement, local_bsz, step_time[, sync_time]
    DIR/<app>/scalability[-<cluster>].csv   num_nodes, num_replicas, local_bsz, step_time[, sync_time]
                                            [, placement]

=================  ==========================================================================  =======
column             meaning                                                                     unit
=================  ==========================================================================  =======
``placement``      GPUs used on each node, one digit (1-9) per node: ``22`` = 2 nodes x 2 GPUs  --
``num_nodes``      nodes of the job (scalability files)                                         --
``num_replicas``   GPUs of that job (>= nodes)                                                  GPUs
``local_bsz``      per-GPU batch                                                                samples
``step_time``      measured time of one iteration (compute + exposed synchronisation), > 0      s
``sync_time``      measured time in the gradient all-reduce, >= 0 (optional; empty = unknown)   s
=================  ==========================================================================  =======

**Which placement a scalability row measured.** A scalability file gives only the node and GPU
counts. The loader takes the placement, in this order, from (:attr:`Measurements.placement_source`):

* ``"file"``: the row's own ``placement`` column, if the file has one (it must agree with
  ``num_nodes`` and ``num_replicas``); every placements-file row is ``"file"`` too;
* ``"copy"``: a row of the application's placements file with the same ``local_bsz``,
  ``step_time`` and ``sync_time`` and the same node and GPU counts: the same measurement, copied
  (the Sia files hold many such copies, e.g. 2,016 of the 2,184 rows of ``dgx-ext``, 940 of them
  at a placement other than the even spread);
* ``"even"``: otherwise the job is *assumed* spread as evenly as possible (``k mod n`` nodes hold
  one GPU more), and :meth:`Measurements.placement_notes` says so, per file.

A row that repeats an earlier row exactly (same application, placement, batch and times, e.g. such
a copy) is dropped by default (``duplicates="drop"``), so that no measurement counts twice in a fit
or a score.

The application folders are mapped to the model zoo (:data:`POLLUX_APPLICATIONS`, the Pollux/AdaptDL
benchmark models); a folder that is neither there nor in ``app_map`` is refused, never guessed.
"""

from __future__ import annotations

import dataclasses
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
    "PLACEMENT_SOURCES",
    "POLLUX_APPLICATIONS",
    "Measurements",
    "load_measurements",
    "read_measurement_file",
]

#: The two file kinds of a measurement folder.
KINDS: tuple[str, ...] = ("placements", "scalability")
#: Where a row's placement comes from (see the module docstring).
PLACEMENT_SOURCES: tuple[str, ...] = ("file", "copy", "even")
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
        placement_source: ``str[R]`` where the placement comes from (:data:`PLACEMENT_SOURCES`);
            defaults to ``"file"`` for every row.
    """

    app: NDArray[np.str_]
    model: NDArray[np.str_]
    kind: NDArray[np.str_]
    placement: NDArray[np.int64]
    local_bsz: NDArray[np.float64]
    step_time: NDArray[np.float64]
    sync_time: NDArray[np.float64]
    source: NDArray[np.str_]
    placement_source: NDArray[np.str_] | None = None

    def __post_init__(self) -> None:
        if self.placement_source is None:
            object.__setattr__(self, "placement_source", np.full(len(self.step_time), "file"))

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
            placement_source=self.sources[rows],
        )

    @property
    def sources(self) -> NDArray[np.str_]:
        """``str[R]`` :attr:`placement_source` (never ``None``)."""
        assert self.placement_source is not None  # (set in __post_init__)
        return self.placement_source

    def placement_notes(self) -> list[str]:
        """One line per file with rows whose placement was not in the file (see the module
        docstring): how many were recovered from an identical placements row, how many assumed
        evenly spread."""
        out = []
        files = np.array([s.rsplit(":", 1)[0] for s in self.source.tolist()])
        for f in dict.fromkeys(files.tolist()):
            sel = files == f
            copy = int((sel & (self.sources == "copy")).sum())
            even = int((sel & (self.sources == "even")).sum())
            if copy or even:
                parts = []
                if copy:
                    parts.append(f"{copy} placed as the identical placements row measured them")
                if even:
                    parts.append(f"{even} assumed spread evenly over their nodes")
                out.append(
                    f"{f}: {int(sel.sum())} rows without a placement column: " + "; ".join(parts)
                )
        return out

    def duplicated(self) -> NDArray[np.bool_]:
        """``bool[R]``: rows that repeat an earlier row exactly (application, placement, batch,
        step and sync time)."""
        seen: set[tuple[object, ...]] = set()
        out = np.zeros(len(self), dtype=bool)
        for i in range(len(self)):
            key = (
                str(self.app[i]),
                self.placement[i].tobytes(),
                float(self.local_bsz[i]),
                float(self.step_time[i]),
                float(self.sync_time[i]) if np.isfinite(self.sync_time[i]) else None,
            )
            out[i] = key in seen
            seen.add(key)
        return out

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
            placement_source=(
                np.concatenate([p.sources for p in parts]) if parts else np.zeros(0, dtype=np.str_)
            ),
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


def _spread(table: Table) -> tuple[list[list[int]], list[bool]]:
    """Per row of a scalability file its GPUs per node and whether they were given (the file's
    ``placement`` column) or assumed as even as possible."""
    nodes = number_column(table, "num_nodes", integer=True, minimum=1, maximum=_MAX_NODES)
    gpus = number_column(table, "num_replicas", integer=True, minimum=1, maximum=_MAX_NODES * 64)
    given = _placements(table) if table.has("placement") else [[] for _ in range(len(table))]
    out, known = [], []
    for i, (n, k) in enumerate(zip(nodes.astype(int), gpus.astype(int))):
        if k < n:
            raise table.error(f"{k} GPUs cannot use num_nodes={n}", i, "num_replicas")
        if given[i]:
            if len(given[i]) != n or sum(given[i]) != k:
                raise table.error(
                    f"placement {''.join(map(str, given[i]))} is not {k} GPUs on {n} nodes",
                    i,
                    "placement",
                )
            out.append(given[i])
            known.append(True)
            continue
        # As even as possible: k mod n nodes hold one GPU more than the others.
        out.append([k // n + 1] * (k % n) + [k // n] * (n - k % n))
        known.append(False)
    return out, known


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
    if kind == "placements":
        per_node, known = _placements(table), [True] * len(table)
    else:
        per_node, known = _spread(table)
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
        placement_source=np.where(known, "file", "even"),
    )


def _match_copies(placements: Measurements, scalability: Measurements) -> Measurements:
    """``scalability`` with the placement of each row whose placement was assumed even replaced by
    that of the placements row measured identically (same batch, step and sync time, node and GPU
    counts), if exactly one placement fits (the module docstring's ``"copy"``)."""
    index: dict[tuple[float, float, float], set[bytes]] = {}
    width = max(placements.placement.shape[1], scalability.placement.shape[1])
    pad = np.pad(placements.placement, ((0, 0), (0, width - placements.placement.shape[1])))
    for i in range(len(placements)):
        key = (
            float(placements.local_bsz[i]),
            float(placements.step_time[i]),
            float(placements.sync_time[i]),
        )
        index.setdefault(key, set()).add(pad[i].tobytes())
    placement = np.pad(scalability.placement, ((0, 0), (0, width - scalability.placement.shape[1])))
    source = scalability.sources.copy()
    k, n = scalability.num_gpus, scalability.num_nodes
    for i in np.flatnonzero(source == "even").tolist():
        key = (
            float(scalability.local_bsz[i]),
            float(scalability.step_time[i]),
            float(scalability.sync_time[i]),
        )
        cands = {
            c
            for c in index.get(key, ())
            if (row := np.frombuffer(c, dtype=np.int64)).sum() == k[i] and (row > 0).sum() == n[i]
        }
        if len(cands) == 1:
            placement[i] = np.frombuffer(cands.pop(), dtype=np.int64)
            source[i] = "copy"
    return dataclasses.replace(scalability, placement=placement, placement_source=source).select(
        np.arange(len(scalability))
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
    duplicates: str = "drop",
) -> Measurements:
    """Read every measurement of one cluster in a Pollux/Sia folder.

    Args:
        folder: The folder of ``<app>/`` sub-folders.
        cluster: File suffix to read (``"azure"`` reads ``placements-azure.csv``); ``""`` reads the
            unsuffixed files; ``None`` reads the only cluster present (refused if there are several).
        app_map: Extra or overriding ``{application: zoo model}`` entries.
        kinds: File kinds to read (:data:`KINDS`).
        apps: Applications to read (default: every sub-folder with files of ``cluster``).
        duplicates: ``"drop"`` (default) the rows that repeat an earlier row exactly
            (:meth:`Measurements.duplicated`), or ``"keep"`` them.

    Returns:
        The rows of every file read, applications in sorted order, placements before scalability;
        a scalability row's placement as the module docstring says.

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
    if duplicates not in ("drop", "keep"):
        raise ConfigError(f"duplicates={duplicates!r} is not one of drop, keep")
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
    parts: list[Measurements] = []
    for d in dirs:
        every = _cluster_files(d, cluster)
        files = [f for f in every if _kind(f) in kinds]
        if not files:
            continue
        if d.name not in mapping:
            raise ConfigError(
                f"{d}: application {d.name!r} is not mapped to a zoo model "
                f"(known: {', '.join(sorted(mapping))}; map it with --app-map {d.name}=MODEL)"
            )
        read = {_kind(f): read_measurement_file(f, d.name, mapping[d.name]) for f in every}
        if "placements" in read and "scalability" in read:
            read["scalability"] = _match_copies(read["placements"], read["scalability"])
        parts.extend(read[k] for k in KINDS if k in read and k in kinds)
    if not parts:
        which = "unsuffixed" if cluster == "" else f"cluster {cluster!r}" if cluster else "any"
        raise ConfigError(
            f"{root}: no {'/'.join(kinds)} files of {which} in its application folders"
        )
    out = Measurements.concatenate(parts)
    return out.select(~out.duplicated()) if duplicates == "drop" else out
