"""Reading CSV workload files into columns, with errors that name the file, line and field.

Internal helpers shared by the trace loaders. Parsing is columnar: a whole column is converted with
numpy in one call, and only when that fails is the column scanned value by value to find the first bad
row, so well-formed files pay no per-row validation cost in Python.

Files are streamed: :func:`read_table` decodes and splits the file as it goes and, given ``max_rows``,
stops after that many data rows, so loading the first ``N`` jobs of a huge trace reads about ``N``
rows and holds only those in memory. Only regular files are opened (a FIFO or ``/dev/zero`` would
never end).

Numbers must be plain ASCII decimals (``12``, ``-3.5``, ``1e6``): Python's and numpy's parsers also
accept ``1_6``, Arabic-Indic (``٨``) and full-width (``８``) digits, which a trace never means; those
are refused. Each numeric column has a documented range (the ``MAX_*`` constants), so a GPU count or a
batch can never wrap around when it becomes an ``int64``.
"""

from __future__ import annotations

import codecs
import csv
import difflib
import io
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, TraceFormatError
from crop_gym.io import check_regular_input

__all__ = [
    "MAX_BATCH",
    "MAX_GPUS",
    "MAX_ITERATIONS",
    "MAX_TIME_S",
    "MAX_WEIGHT",
    "Table",
    "TraceColumnWarning",
    "check_batch_vs_gpus",
    "check_columns",
    "check_max_jobs",
    "check_sorted",
    "check_unique_ids",
    "map_names",
    "number_column",
    "read_header",
    "read_table",
    "string_column",
]


#: Largest GPU count of a job (2**20).
MAX_GPUS = 1 << 20
#: Largest global batch of a job (2**31 - 1).
MAX_BATCH = (1 << 31) - 1
#: Largest number of iterations of a job (1e15).
MAX_ITERATIONS = 1e15
#: Largest time (arrival, deadline, duration) in seconds (1e12 s, about 31,700 years).
MAX_TIME_S = 1e12
#: Largest objective weight (1e6).
MAX_WEIGHT = 1e6

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CHUNK = 1 << 16


@dataclass(frozen=True, eq=False)
class Table:
    """A CSV file split into a header and rows of strings.

    Attributes:
        path: The file, as given (used in error messages).
        header: Column names, stripped of surrounding spaces.
        rows: Data rows; each has exactly ``len(header)`` fields.
        lines: 1-based line number of each row in the file (the header is line 1).
    """

    path: str
    header: tuple[str, ...]
    rows: list[list[str]]
    lines: list[int]

    def __len__(self) -> int:
        return len(self.rows)

    def has(self, name: str) -> bool:
        """Whether the file has column ``name``."""
        return name in self.header

    def column(self, name: str) -> list[str]:
        """The raw strings of column ``name``."""
        i = self.header.index(name)
        return [row[i] for row in self.rows]

    def error(self, message: str, row: int, field: str | None) -> TraceFormatError:
        """A :class:`TraceFormatError` for data row ``row`` (0-based) and ``field``."""
        return TraceFormatError(message, path=self.path, line=self.lines[row], field=field)


def _decode(path: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TraceFormatError(
            f"not UTF-8 text (byte {exc.start})", path=path, line=line, field=None
        ) from None


def _check_file(label: str) -> None:
    """Refuse anything but an existing regular file before opening it.

    Raises:
        FileNotFoundError: If nothing is there.
        ConfigError: A directory, FIFO, socket or device (``/dev/zero``), naming the file.
    """
    if not os.path.lexists(label):
        raise FileNotFoundError(f"no such workload file: {label!r}")
    check_regular_input(label, what="workload")


def _utf8_error(label: str, fh: io.BufferedIOBase) -> TraceFormatError:
    """The error for the first non-UTF-8 byte of ``fh``, found by rescanning it from the start."""
    fh.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, newlines = 0, 0
    pending = b""
    while piece := fh.read(_CHUNK):
        pending = decoder.getstate()[0]
        try:
            decoder.decode(piece)
        except UnicodeDecodeError as exc:
            data = pending + piece
            line = newlines + data[: exc.start].count(b"\n") + 1
            bad = offset - len(pending) + exc.start
            return TraceFormatError(f"not UTF-8 text (byte {bad})", path=label, line=line)
        offset += len(piece)
        newlines += piece.count(b"\n")
    pending = decoder.getstate()[0]
    bad = offset - len(pending)
    return TraceFormatError(
        f"not UTF-8 text (byte {bad}: truncated character)", path=label, line=newlines + 1
    )


def _split_header(path: str, first: list[str] | None) -> tuple[str, ...]:
    if first is None or not any(cell.strip() for cell in first):
        raise TraceFormatError("file is empty (no header)", path=path, line=1, field="header")
    header = tuple(cell.strip() for cell in first)
    seen: set[str] = set()
    for name in header:
        if not name:
            raise TraceFormatError("empty column name in the header", path=path, line=1, field="")
        if _CONTROL.search(name) or len(name) > 100:
            raise TraceFormatError(
                f"column name {_show(name)} has a control character or is over 100 characters",
                path=path,
                line=1,
                field="header",
            )
        if name in seen:
            raise TraceFormatError("duplicate column in the header", path=path, line=1, field=name)
        seen.add(name)
    return header


def read_header(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The stripped column names of a CSV file (for format detection).

    Raises:
        TraceFormatError: If the file is empty or the header is malformed.
        ConfigError: If the path is a directory, FIFO, device or other non-regular file.
        FileNotFoundError: If the file does not exist.
    """
    label = os.fspath(path)
    _check_file(label)
    with open(label, "rb") as fh:
        first_line = fh.readline()
    text = _decode(label, first_line)
    first = next(csv.reader(io.StringIO(text)), None)
    return _split_header(label, first)


def _rows(
    label: str, reader: Any, header: tuple[str, ...], limit: int
) -> tuple[list[list[str]], list[int]]:
    """Up to ``limit`` data rows of a ``csv.reader`` and the line each starts on.

    A quote that is never closed makes the reader join every following line into one field, so
    the error shows up where the file (or the field-size limit) ends: the message names the line
    the row started on, where the quote opened, instead.
    """
    width = len(header)
    rows: list[list[str]] = []
    lines: list[int] = []
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader, None)
        except csv.Error as exc:
            raise TraceFormatError(
                f"CSV syntax error in the row that starts here ({exc})"
                + (
                    f"; a quote opened on this line is not closed before line {reader.line_num}"
                    if reader.line_num > start
                    else ""
                ),
                path=label,
                line=start,
                field=None,
            ) from None
        if row is None:
            break
        if len(row) != width and row:
            if reader.line_num > start:
                raise TraceFormatError(
                    f"a quote opened on this line runs on to line {reader.line_num} (an "
                    f"unterminated quote: the row reads as {len(row)} fields, the header has "
                    f"{width})",
                    path=label,
                    line=start,
                    field=None,
                )
            raise TraceFormatError(
                f"row has {len(row)} fields, the header has {width}",
                path=label,
                line=start,
                field=header[len(row)] if len(row) < width else None,
            )
        if row:
            rows.append(row)
            lines.append(start)
            if len(rows) >= limit:
                break
        start = reader.line_num + 1
    return rows, lines


class TraceColumnWarning(UserWarning):
    """A trace column no loader reads whose name is close to one it does (``wieght``)."""


def check_columns(
    path: str,
    header: Sequence[str],
    required: Sequence[str],
    optional: Sequence[str] = (),
    *,
    strict: bool = False,
) -> None:
    """Look at the columns a format does not read.

    A format reads its required and optional columns and ignores the rest, so that traces may carry
    more than a loader needs. A misspelt optional column would then be ignored too, and every job
    would silently get the default (``wieght``: weight 1). So a column the format does not read
    whose name is close to one it does (:func:`difflib.get_close_matches`, ratio >= 0.75) warns
    (:class:`TraceColumnWarning`), and with ``strict`` every column the format does not read is
    refused.

    Raises:
        TraceFormatError: With ``strict``, naming the first unread column (line 1).
    """
    known = [*required, *optional]
    for name in header:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if strict:
            raise TraceFormatError(
                f"column not read by this format (it reads {', '.join(known)}){hint}",
                path=path,
                line=1,
                field=name,
            )
        if close:
            warnings.warn(
                TraceColumnWarning(
                    f"{path}:1: column {name!r} is not read by this format{hint} (every job gets "
                    f"the default {close[0]}; --strict refuses unread columns)"
                ),
                stacklevel=3,
            )


def read_table(
    path: str | os.PathLike[str],
    required: Sequence[str],
    *,
    optional: Sequence[str] = (),
    max_rows: int | None = None,
    strict: bool = False,
) -> Table:
    """Read a CSV file with a header row, streaming it.

    Entirely empty lines (no fields at all) carry no data and are skipped; every other line must have
    one field per column.

    Args:
        path: The CSV file (a regular file).
        required: Columns that must be present.
        optional: Columns the format reads when present (see :func:`check_columns`).
        max_rows: Stop after this many data rows (the rest of the file is not read); ``None`` reads
            every row.
        strict: Refuse every column the format does not read (see :func:`check_columns`).

    Returns:
        The parsed table.

    Raises:
        TraceFormatError: Empty file, missing column (line 1, the column as field), a row with the
            wrong number of fields, a CSV syntax error, non-UTF-8 bytes or no data rows.
        ConfigError: If the path is a directory, FIFO, device or other non-regular file.
        FileNotFoundError: If the file does not exist.
    """
    label = os.fspath(path)
    _check_file(label)
    limit = check_max_jobs(max_rows, name="max_rows")
    with open(label, "rb") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        reader = csv.reader(text)
        try:
            header = _split_header(label, next(reader, None))
            for name in required:
                if name not in header:
                    shown = ", ".join(header[:12]) + (", ..." if len(header) > 12 else "")
                    raise TraceFormatError(
                        f"missing column (header has: {shown})",
                        path=label,
                        line=1,
                        field=name,
                    )
            check_columns(label, header, required, optional, strict=strict)
            rows, lines = _rows(label, reader, header, limit)
        except UnicodeDecodeError:
            raise _utf8_error(label, raw) from None
        except csv.Error as exc:
            raise TraceFormatError(
                f"CSV syntax error: {exc}", path=label, line=reader.line_num, field=None
            ) from None
    if not rows:
        raise TraceFormatError("no job rows after the header", path=label, line=2, field=None)
    return Table(label, header, rows, lines)


def check_max_jobs(max_jobs: int | None, *, name: str = "max_jobs") -> int:
    """``max_jobs`` as a row limit (``None``: no limit).

    Raises:
        ConfigError: Unless ``max_jobs`` is ``None`` or an integer >= 1 (``bool`` is refused).
    """
    if max_jobs is None:
        return 1 << 62
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, (int, np.integer)) or max_jobs < 1:
        raise ConfigError(f"{name}={max_jobs!r} must be None or an integer >= 1")
    return int(max_jobs)


def _show(s: str, width: int = 40) -> str:
    """``repr(s)``, shortened to about ``width`` characters (messages stay one short line)."""
    r = repr(s)
    return r if len(r) <= width else r[: width - 4] + "...'"


def _first(mask: NDArray[np.bool_]) -> int:
    return int(np.flatnonzero(mask)[0])


def number_column(
    table: Table,
    name: str,
    *,
    integer: bool = False,
    minimum: float | None = None,
    positive: bool = False,
    maximum: float | None = None,
    allow_empty: bool = False,
    what: str = "",
) -> NDArray[np.float64]:
    """Parse column ``name`` as finite numbers written as plain ASCII decimals.

    ``1_6``, non-ASCII digits (``٨``, ``８``), ``nan`` and ``inf`` are refused; so is a value too large
    for ``float64`` (``1e400``).

    Args:
        table: The table.
        name: Column name.
        integer: Require integral values (``16`` or ``16.0``).
        minimum: Smallest allowed value (inclusive), or ``None``.
        positive: Require values ``> 0``.
        maximum: Largest allowed value (inclusive), or ``None``.
        allow_empty: Empty cells become NaN instead of an error.
        what: Words describing the column for messages (e.g. ``"a GPU count"``).

    Returns:
        A float64 array, one value per row (NaN for empty cells when ``allow_empty``).

    Raises:
        TraceFormatError: On the first value that breaks a rule, naming its line and the column.
    """
    raw = table.column(name)
    empty: NDArray[np.bool_] | None = None
    if allow_empty:
        empty = np.array([not s.strip() for s in raw], dtype=bool)
        if empty.any():
            raw = ["nan" if e else s for s, e in zip(raw, empty.tolist())]
        else:
            empty = None
    joined = "".join(raw)
    if not joined.isascii() or "_" in joined:
        for i, s in enumerate(raw):
            if not s.isascii() or "_" in s:
                raise table.error(
                    f"{_show(s)} is not a plain decimal number (ASCII digits, '.', 'e', sign)",
                    i,
                    name,
                )
    try:
        values = np.array(raw, dtype=np.float64)
    except ValueError:
        for i, s in enumerate(raw):
            try:
                np.array([s], dtype=np.float64)
            except ValueError:
                kind = "an integer" if integer else "a number"
                raise table.error(f"{_show(s)} is not {kind}", i, name) from None
        raise  # pragma: no cover - numpy refused the column but accepted every value
    mask = ~np.isfinite(values)
    if empty is not None:
        mask &= ~empty
    if mask.any():
        i = _first(mask)
        raise table.error(f"{_show(raw[i])} is not a finite number", i, name)
    label = f" ({what})" if what else ""
    with np.errstate(invalid="ignore"):
        if integer:
            mask = (values != np.floor(values)) & ~np.isnan(values)  # NaN: an allowed empty cell
            if mask.any():
                i = _first(mask)
                raise table.error(f"{_show(raw[i])} is not an integer{label}", i, name)
        if positive:
            mask = values <= 0
            if mask.any():
                i = _first(mask)
                raise table.error(f"value {raw[i].strip()} must be > 0{label}", i, name)
        if minimum is not None:
            mask = values < minimum
            if mask.any():
                i = _first(mask)
                raise table.error(f"value {raw[i].strip()} must be >= {minimum:g}{label}", i, name)
        if maximum is not None:
            mask = values > maximum
            if mask.any():
                i = _first(mask)
                raise table.error(f"value {raw[i].strip()} must be <= {maximum:g}{label}", i, name)
    return values


def string_column(table: Table, name: str) -> list[str]:
    """Column ``name`` as stripped, non-empty strings without control characters.

    Raises:
        TraceFormatError: On the first empty value, or the first with a control character (NUL,
            tab, newline, ...).
    """
    values = [s.strip() for s in table.column(name)]
    if not all(values):
        i = values.index("")
        raise table.error("empty value", i, name)
    search = _CONTROL.search
    if any(map(search, values)):
        i = next(i for i, v in enumerate(values) if search(v))
        raise table.error(f"{_show(values[i])} contains a control character", i, name)
    return values


def check_batch_vs_gpus(
    table: Table, batch: NDArray[np.float64], gpus: NDArray[np.float64], name: str
) -> None:
    """Refuse a global batch smaller than the job's GPU count (less than one sample per GPU).

    Raises:
        TraceFormatError: Naming the first such row and the batch column ``name``.
    """
    small = batch < gpus
    if small.any():
        i = _first(small)
        raise table.error(
            f"batch {batch[i]:.0f} is smaller than the job's {gpus[i]:.0f} GPUs", i, name
        )


def check_sorted(table: Table, arrival: NDArray[np.float64], name: str) -> None:
    """Refuse rows that are not in non-decreasing arrival order (needed when reading stopped after
    the first rows of a file: the jobs left unread might arrive earlier).

    Raises:
        TraceFormatError: Naming the first row that arrives before the row above it.
    """
    if len(arrival) < 2:
        return
    back = arrival[1:] < arrival[:-1]
    if back.any():
        i = _first(back) + 1
        raise table.error(
            f"arrives at {arrival[i]:g}, before the row above it ({arrival[i - 1]:g}); reading "
            "only the first rows (max_jobs / --jobs) needs a file sorted by arrival",
            i,
            name,
        )


def check_unique_ids(table: Table, ids: Sequence[str], name: str) -> None:
    """Refuse duplicate job identifiers.

    Raises:
        TraceFormatError: Naming the line of the second occurrence.
    """
    if len(set(ids)) == len(ids):
        return
    seen: set[str] = set()
    for i, job_id in enumerate(ids):
        if job_id in seen:
            raise table.error(f"duplicate job id {job_id!r}", i, name)
        seen.add(job_id)


def map_names(
    table: Table,
    name: str,
    values: Sequence[str],
    known: Mapping[str, object],
    model_map: Mapping[str, str] | None,
    *,
    kind: str = "model",
) -> list[str]:
    """Translate names through ``model_map`` and refuse any that remain unknown.

    Each distinct name is checked once; the result reuses the interned strings.

    Args:
        table: The table (for error locations).
        name: Column name.
        values: The column's stripped values.
        known: The names that are accepted (the model zoo, or Pollux applications).
        model_map: ``{trace name: known name}`` translations, or ``None``.
        kind: Word used in messages (``"model"`` or ``"application"``).

    Returns:
        The translated names, one per row.

    Raises:
        TraceFormatError: For the first row whose name is unknown and not mapped.
    """
    mapping = dict(model_map or {})
    check_model_map(mapping, known, kind=kind)
    resolved: dict[str, str] = {}
    for raw in dict.fromkeys(values):
        target = mapping.get(raw, raw)
        if target not in known:
            i = values.index(raw)
            options = ", ".join(sorted(known))
            raise table.error(
                f"unknown {kind} {raw!r}; known: {options} "
                f"(map it to a known {kind} with model_map / --map {raw}=NAME)",
                i,
                name,
            )
        resolved[raw] = target
    return [resolved[v] for v in values]


def check_model_map(
    model_map: Mapping[str, str], known: Mapping[str, object], *, kind: str = "model"
) -> None:
    """Refuse a mapping whose targets are not known names.

    Raises:
        ConfigError: Naming the first bad target.
    """
    for old, new in model_map.items():
        if new not in known:
            options = ", ".join(sorted(known))
            raise ConfigError(f"model_map {old!r} -> {new!r}: unknown {kind}; known: {options}")
