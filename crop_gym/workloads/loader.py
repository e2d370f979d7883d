"""One entry point for every workload source: :func:`load_workload`."""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Mapping
from importlib import resources

from crop_gym.errors import ConfigError, TraceFormatError
from crop_gym.io import check_regular_input
from crop_gym.workloads.csv_columns import check_columns, check_max_jobs, read_header
from crop_gym.workloads.elasticflow import ELASTICFLOW_COLUMNS, load_elasticflow
from crop_gym.workloads.generic_csv import (
    GENERIC_COLUMNS,
    GENERIC_OPTIONAL_COLUMNS,
    load_generic_csv,
)
from crop_gym.workloads.pollux import POLLUX_COLUMNS, load_pollux
from crop_gym.workloads.registry import bundled_names, bundled_resource, resolve_bundled
from crop_gym.workloads.workload import Workload

__all__ = ["FORMATS", "check_trace_columns", "detect_format", "load_workload"]

_Loader = Callable[..., Workload]

#: Loaders by format name (``"generic"`` is an alias of ``"csv"``).
FORMATS: dict[str, _Loader] = {
    "elasticflow": load_elasticflow,
    "pollux": load_pollux,
    "csv": load_generic_csv,
    "generic": load_generic_csv,
}

#: Optional columns each format reads when present (the others: none).
_OPTIONAL: dict[str, tuple[str, ...]] = {"csv": GENERIC_OPTIONAL_COLUMNS}

_SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("elasticflow", ELASTICFLOW_COLUMNS),
    ("pollux", POLLUX_COLUMNS),
    ("csv", GENERIC_COLUMNS),
)


#: Longest header line :func:`detect_format` reads (bytes).
_MAX_HEADER_BYTES = 1 << 20


def _header_columns(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The header's column names, whichever line ending the file uses (``\\n``, ``\\r\\n`` or ``\\r``).

    :func:`read_header` reads up to the first ``\\n``; a header line that holds a ``\\r`` (``\\r\\n``,
    or old Mac files ended by lone ``\\r``, where that "line" is the whole file) is cut at the ``\\r``
    here instead, so :mod:`csv` never sees a line break inside an unquoted field.
    """
    label = os.fspath(path)
    check_regular_input(label, what="trace")  # a FIFO or /dev/zero would block or never end
    with open(label, "rb") as fh:
        first = fh.readline(_MAX_HEADER_BYTES)
    if b"\r" not in first:
        return read_header(path)
    line = first.split(b"\r", 1)[0]
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(
            f"not UTF-8 text (byte {exc.start})", path=label, line=1, field=None
        ) from None
    try:
        cells = next(csv.reader([text]), [])
    except csv.Error as exc:
        raise TraceFormatError(
            f"CSV syntax error: {exc}", path=label, line=1, field="header"
        ) from None
    header = tuple(cell.strip() for cell in cells)
    if not any(header):
        raise TraceFormatError("file is empty (no header)", path=label, line=1, field="header")
    return header


def detect_format(path: str | os.PathLike[str]) -> str:
    """Guess a file's format from its header.

    A format is chosen when its distinctive columns are present (``submission_time`` for
    ElasticFlow, ``application`` for Pollux, ``arrival_s`` for the generic format); the loader then
    checks that every required column is there.

    Raises:
        TraceFormatError: If the header matches no format (line 1, field ``header``).
    """
    header = set(_header_columns(path))
    for fmt, marker in (
        ("elasticflow", "submission_time"),
        ("pollux", "application"),
        ("csv", "arrival_s"),
    ):
        if marker in header:
            return fmt
    expected = "; ".join(f"{fmt}: {','.join(cols)}" for fmt, cols in _SIGNATURES)
    raise TraceFormatError(
        f"cannot tell the format from the header (expected {expected}); pass format=",
        path=os.fspath(path),
        line=1,
        field="header",
    )


def load_workload(
    spec: str | os.PathLike[str],
    format: str | None = None,
    model_map: Mapping[str, str] | None = None,
    max_jobs: int | None = None,
    strict: bool = False,
) -> Workload:
    """Load a workload from a file or a bundled trace.

    Args:
        spec: A file path, or a bundled trace name such as ``"elasticflow:cluster10"``,
            ``"elasticflow:195job"`` or the bare ``"cluster10"``. An existing file wins over a bare
            bundled name.
        format: ``"elasticflow"``, ``"pollux"`` or ``"csv"`` (alias ``"generic"``); detected from the
            header when ``None``.
        model_map: ``{trace name: known name}`` for models (applications, for Pollux) that the zoo
            does not know; an unknown name without a mapping is refused.
        max_jobs: Load only the first ``max_jobs`` rows of the file, without reading the rest; those
            rows must be in arrival order (a row arriving before the one above it is refused, naming
            its line), so on a file sorted by arrival (every bundled trace is) this is the first
            ``max_jobs`` jobs of the whole workload. ``None`` loads every row.
        strict: Refuse a file's columns that its format does not read; without it, such a column
            whose name is close to one the format reads (``wieght``) warns
            (:class:`~crop_gym.workloads.csv_columns.TraceColumnWarning`) and is ignored.

    Returns:
        The workload: jobs sorted by arrival, first arrival at 0.

    Raises:
        TraceFormatError: On malformed input, naming the file, line and field.
        ConfigError: On an unknown format, a bad ``model_map`` target, a ``max_jobs`` that is not
            an integer >= 1, or a path that is a directory, FIFO or device.
        FileNotFoundError: If ``spec`` is neither a file nor a bundled trace.
    """
    if format is not None and format not in FORMATS:
        raise ConfigError(f"unknown workload format {format!r}; use one of {', '.join(FORMATS)}")
    check_max_jobs(max_jobs)
    path = os.fspath(spec)
    if not os.path.exists(path):
        trace = resolve_bundled(path)
        if trace is None:
            raise FileNotFoundError(
                f"no such file or bundled trace: {path!r} (bundled: {', '.join(bundled_names())})"
            )
        loader = FORMATS[format or trace.format]
        with resources.as_file(bundled_resource(trace)) as real:
            workload: Workload = loader(
                real, model_map=model_map, name=trace.name, max_jobs=max_jobs, strict=strict
            )
        return workload
    fmt = format or detect_format(path)  # refuses a directory, FIFO or device before reading
    workload = FORMATS[fmt](path, model_map=model_map, max_jobs=max_jobs, strict=strict)
    return workload


def check_trace_columns(
    path: str | os.PathLike[str], format: str | None = None, *, strict: bool = False
) -> None:
    """Check a trace file's header as its loader will (:func:`~crop_gym.workloads.csv_columns.check_columns`),
    without reading its rows: a driver does it once before its workers load the file.

    Raises:
        TraceFormatError: With ``strict``, for a column the format does not read; for a header
            that matches no format.
    """
    fmt = format or detect_format(path)
    fmt = "csv" if fmt == "generic" else fmt
    required = dict(_SIGNATURES)[fmt]
    check_columns(
        os.fspath(path), _header_columns(path), required, _OPTIONAL.get(fmt, ()), strict=strict
    )
