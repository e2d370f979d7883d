"""Reading CSV workload files into columns, with errors that name the file, line and field.

Internal helpers shared by the trace loaders. Parsing is columnar: a whole column is converted with
numpy in one call, and only when that fails is the column scanned value by value to find the first bad
row, so well-formed files pay no per-row validation cost in Python.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError, TraceFormatError

__all__ = [
    "Table",
    "check_unique_ids",
    "map_names",
    "number_column",
    "read_header",
    "read_table",
    "string_column",
]


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


def _split_header(path: str, first: list[str] | None) -> tuple[str, ...]:
    if first is None or not any(cell.strip() for cell in first):
        raise TraceFormatError("file is empty (no header)", path=path, line=1, field="header")
    header = tuple(cell.strip() for cell in first)
    seen: set[str] = set()
    for name in header:
        if not name:
            raise TraceFormatError("empty column name in the header", path=path, line=1, field="")
        if name in seen:
            raise TraceFormatError("duplicate column in the header", path=path, line=1, field=name)
        seen.add(name)
    return header


def read_header(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The stripped column names of a CSV file (for format detection).

    Raises:
        TraceFormatError: If the file is empty or the header is malformed.
        FileNotFoundError: If the file does not exist.
    """
    label = os.fspath(path)
    with open(label, "rb") as fh:
        first_line = fh.readline()
    text = _decode(label, first_line)
    first = next(csv.reader(io.StringIO(text)), None)
    return _split_header(label, first)


def read_table(path: str | os.PathLike[str], required: Sequence[str]) -> Table:
    """Read a CSV file with a header row.

    Entirely empty lines (no fields at all) carry no data and are skipped; every other line must have
    one field per column.

    Args:
        path: The CSV file.
        required: Columns that must be present.

    Returns:
        The parsed table.

    Raises:
        TraceFormatError: Empty file, missing column (line 1, the column as field), a row with the
            wrong number of fields, a CSV syntax error, non-UTF-8 bytes or no data rows.
        FileNotFoundError: If the file does not exist.
    """
    label = os.fspath(path)
    with open(label, "rb") as fh:
        data = fh.read()
    reader = csv.reader(io.StringIO(_decode(label, data), newline=""))
    try:
        header = _split_header(label, next(reader, None))
        for name in required:
            if name not in header:
                raise TraceFormatError(
                    f"missing column (header has: {', '.join(header)})",
                    path=label,
                    line=1,
                    field=name,
                )
        width = len(header)
        rows: list[list[str]] = []
        lines: list[int] = []
        for row in reader:
            if len(row) != width:
                if not row:
                    continue
                line = reader.line_num
                if len(row) < width:
                    raise TraceFormatError(
                        f"row has {len(row)} fields, the header has {width}",
                        path=label,
                        line=line,
                        field=header[len(row)],
                    )
                raise TraceFormatError(
                    f"row has {len(row)} fields, the header has {width}",
                    path=label,
                    line=line,
                    field=None,
                )
            rows.append(row)
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise TraceFormatError(
            f"CSV syntax error: {exc}", path=label, line=reader.line_num, field=None
        ) from None
    if not rows:
        raise TraceFormatError("no job rows after the header", path=label, line=2, field=None)
    return Table(label, header, rows, lines)


def _first(mask: NDArray[np.bool_]) -> int:
    return int(np.flatnonzero(mask)[0])


def number_column(
    table: Table,
    name: str,
    *,
    integer: bool = False,
    minimum: float | None = None,
    positive: bool = False,
    allow_empty: bool = False,
    what: str = "",
) -> NDArray[np.float64]:
    """Parse column ``name`` as finite numbers.

    Args:
        table: The table.
        name: Column name.
        integer: Require integral values.
        minimum: Smallest allowed value (inclusive), or ``None``.
        positive: Require values ``> 0``.
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
    try:
        values = np.array(raw, dtype=np.float64)
    except ValueError:
        for i, s in enumerate(raw):
            try:
                np.array([s], dtype=np.float64)
            except ValueError:
                kind = "an integer" if integer else "a number"
                raise table.error(f"{s!r} is not {kind}", i, name) from None
        raise  # pragma: no cover - numpy refused the column but accepted every value
    mask = ~np.isfinite(values)
    if empty is not None:
        mask &= ~empty
    if mask.any():
        i = _first(mask)
        raise table.error(f"{raw[i]!r} is not a finite number", i, name)
    label = f" ({what})" if what else ""
    with np.errstate(invalid="ignore"):
        if integer:
            mask = (values != np.floor(values)) & ~np.isnan(values)  # NaN: an allowed empty cell
            if mask.any():
                i = _first(mask)
                raise table.error(f"{raw[i]!r} is not an integer{label}", i, name)
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
    return values


def string_column(table: Table, name: str) -> list[str]:
    """Column ``name`` as stripped, non-empty strings.

    Raises:
        TraceFormatError: On the first empty value.
    """
    values = [s.strip() for s in table.column(name)]
    if not all(values):
        i = values.index("")
        raise table.error("empty value", i, name)
    return values


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
