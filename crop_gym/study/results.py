"""A study's results folder: one atomic JSON file per run, resume, and the merged JSON and CSV.

Layout of ``OUT`` (``crop-gym study --out OUT``)::

    OUT/runs/<run id>.json   one record per finished run (written by the driver, atomically)
    OUT/study.json           the study as last run (its spec, for the record)
    OUT/results.json         every record of the study, merged (grid order)
    OUT/results.csv          one row per run: coordinates and scalar metrics
    OUT/summary.csv          mean and bootstrap 95 % interval over seeds, per setting and metric
    OUT/summary.md           the same as markdown tables
    OUT/summary.png          a figure of the summary
    OUT/jct_cdf.png          JCT CDFs: a row per setting, a panel per profile, CROP on top

A run counts as finished only if ``runs/<run id>.json`` exists, parses as JSON and holds that run
id: the file is moved into place with :func:`os.replace` after it is written in full, so a driver
killed mid-write leaves a hidden temporary file (``.<name>.<random>.tmp``, ignored, removed by the
next run) or nothing, never a partial record. A run that finishes twice (a Ray task retried after
its first result was already written) rewrites the same file with the same numbers: each run is
counted once because records are keyed by run id.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from crop_gym.io import OutputFolder, atomic_write_text
from crop_gym.study.grid import COORDINATES, Run

__all__ = [
    "RUNS_DIR",
    "TIMING_FIELDS",
    "csv_cell",
    "finished_records",
    "load_record",
    "merged_csv",
    "merged_json",
    "remove_stale_temporaries",
    "run_path",
    "scalar_metrics",
    "write_record",
]

#: Folder of the per-run files inside the results folder.
RUNS_DIR = "runs"
#: Fields measured in wall-clock time: they differ between two executions of the same run (and
#: between backends); every other field is a function of the run's coordinates.
TIMING_FIELDS: frozenset[str] = frozenset({"wall_s", "policy_wall_s", "events_per_s", "cpu_s"})
#: Fields of a record that are not scalar metrics (descriptions and coordinates).
_NOT_METRICS = frozenset(
    {
        *COORDINATES,
        "run_id",
        "workload",
        "profile",
        "gpus",
        "checkpoint_interval_s",
        "jct_quantiles_s",
        "truncated",
    }
)


def run_path(out: str | os.PathLike[str], run_id: str) -> Path:
    """Where the record of run ``run_id`` lives under results folder ``out``."""
    return Path(out) / RUNS_DIR / f"{run_id}.json"


def _json_ready(value: Any) -> Any:
    """Non-finite floats become ``None`` (JSON has no NaN or infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    return value


def write_record(
    out: str | os.PathLike[str], record: Mapping[str, Any], *, folder: OutputFolder | None = None
) -> Path:
    """Write one run's record atomically (a reader sees the whole file or none).

    Args:
        out: The results folder (``runs/`` is created if missing).
        record: What :func:`crop_gym.study.worker.execute_run` returned.
        folder: ``out/runs`` as pinned when the study started (:func:`crop_gym.io.pin_folder`): a
            folder swapped for another (or a link) during the study is refused, not written into.

    Returns:
        The file written.
    """
    path = run_path(out, str(record["run_id"]))
    text = json.dumps(_json_ready(dict(record)), indent=1, allow_nan=False) + "\n"
    return atomic_write_text(path, text, folder=folder)


def load_record(path: str | os.PathLike[str], run_id: str) -> dict[str, Any] | None:
    """The record in ``path`` if it is a finished record of ``run_id``, else ``None``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("run_id") != run_id:
        return None
    return data


def finished_records(out: str | os.PathLike[str], runs: Iterable[Run]) -> dict[str, dict[str, Any]]:
    """Records of the runs of ``runs`` that have a finished file under ``out``, by run id."""
    found = {}
    for run in runs:
        rid = run.run_id
        record = load_record(run_path(out, rid), rid)
        if record is not None:
            found[rid] = record
    return found


def remove_stale_temporaries(out: str | os.PathLike[str]) -> int:
    """Delete temporary files a killed driver left in ``out/runs``; returns how many.

    Call it only when no other driver writes into the same folder.
    """
    folder = Path(out) / RUNS_DIR
    n = 0
    if folder.is_dir():
        for p in folder.glob(".*.json.*.tmp"):
            with contextlib.suppress(OSError):
                p.unlink()
                n += 1
    return n


def scalar_metrics(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the numeric metrics present in ``records``, in first-seen order."""
    names: dict[str, None] = {}
    for r in records:
        for k, v in r.items():
            if k in _NOT_METRICS or isinstance(v, bool):
                continue
            if isinstance(v, (int, float)) or v is None:
                names.setdefault(k, None)
    return list(names)


def merged_json(records: Sequence[Mapping[str, Any]]) -> str:
    """Every record in one JSON document ``{"runs": [...]}``."""
    return json.dumps({"runs": [_json_ready(dict(r)) for r in records]}, indent=1) + "\n"


def csv_cell(v: Any) -> Any:
    """A value as a CSV cell: ``None`` and ``nan`` empty, floats in 10 significant digits, mappings
    as compact JSON."""
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.10g}"
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    return v


def merged_csv(records: Sequence[Mapping[str, Any]]) -> str:
    """One CSV row per run: ``run_id``, the coordinates, then every scalar metric."""
    metrics = scalar_metrics(records)
    cols = ["run_id", *COORDINATES, "workload", "gpus", "truncated", *metrics]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in records:
        w.writerow([csv_cell(r.get(c)) for c in cols])
    return buf.getvalue()
