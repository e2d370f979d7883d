"""Exceptions raised by crop_gym.

Every error caused by user input subclasses :class:`ValueError` and names what was wrong: the file,
line and field for data files, or the parameter and its allowed range for arguments.
"""

from __future__ import annotations

__all__ = ["ConfigError", "CropGymError", "TopologyError", "TraceFormatError"]


class CropGymError(Exception):
    """Base class of every crop_gym exception."""


class ConfigError(CropGymError, ValueError):
    """A configuration value, scenario field or function argument is out of its allowed range."""


class TopologyError(CropGymError, ValueError):
    """A cluster graph is not a valid tree of GPUs (names the offending node or edge)."""


class TraceFormatError(CropGymError, ValueError):
    """A workload file is malformed.

    Attributes:
        path: The file that was read.
        line: 1-based line number in the file (the header is line 1), or ``None``.
        field: The column or field that was wrong, or ``None``.
    """

    def __init__(
        self, message: str, *, path: str, line: int | None = None, field: str | None = None
    ) -> None:
        where = path
        if line is not None:
            where += f":{line}"
        if field is not None:
            where += f": field '{field}'"
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.field = field


def check_range(
    name: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    """Raise :class:`ConfigError` unless ``low <= value <= high`` (bounds optional).

    Args:
        name: Parameter name used in the message.
        value: The value to check.
        low: Lower bound or ``None``.
        high: Upper bound or ``None``.
        low_inclusive: Whether ``value == low`` is allowed.
        high_inclusive: Whether ``value == high`` is allowed.
    """
    ok = value == value  # rejects NaN
    if low is not None:
        ok = ok and (value >= low if low_inclusive else value > low)
    if high is not None:
        ok = ok and (value <= high if high_inclusive else value < high)
    if not ok:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        lb = "[" if low_inclusive else "("
        rb = "]" if high_inclusive else ")"
        raise ConfigError(f"{name}={value!r} is outside its allowed range {lb}{lo}, {hi}{rb}")
