"""Exceptions raised by crop_gym.

Every error caused by user input subclasses :class:`ValueError` and names what was wrong: the file,
line and field for data files, or the parameter and its allowed range for arguments.
"""

from __future__ import annotations

import math
import numbers

__all__ = [
    "ConfigError",
    "CropGymError",
    "TopologyError",
    "TraceFormatError",
    "check_bool",
    "check_int",
    "check_range",
    "check_real",
]


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
        span = _interval(low, high, low_inclusive, high_inclusive)
        raise ConfigError(f"{name}={value!r} is outside its allowed range {span}")


def _interval(
    low: float | None, high: float | None, low_inclusive: bool, high_inclusive: bool
) -> str:
    lo = "-inf" if low is None else f"{low:g}"
    hi = "inf" if high is None else f"{high:g}"
    return f"{'[' if low_inclusive else '('}{lo}, {hi}{']' if high_inclusive else ')'}"


def _is_bool(value: object) -> bool:
    """Python and numpy booleans (numpy's are not registered as numbers, but be explicit)."""
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b"


def check_real(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    """:func:`check_range` for a value that must be a real number; returns it as a ``float``.

    Booleans, strings and other non-numbers are refused (``True`` is not ``1.0`` here), as is NaN.
    """
    if _is_bool(value) or not isinstance(value, numbers.Real):
        span = _interval(low, high, low_inclusive, high_inclusive)
        raise ConfigError(f"{name}={value!r} must be a number in {span}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        number = math.copysign(math.inf, int(value))  # type: ignore[call-overload]
    check_range(name, number, low, high, low_inclusive=low_inclusive, high_inclusive=high_inclusive)
    return number


def check_int(name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """:func:`check_range` for a value that must be an integer (not a bool, not a float such as
    ``3.0``); returns it as an ``int``."""
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise ConfigError(
            f"{name}={value!r} must be an integer in {_interval(low, high, True, True)}"
        )
    check_range(name, int(value), low, high)
    return int(value)


def check_bool(name: str, value: object) -> bool:
    """Refuse anything but ``True`` / ``False`` (numbers such as ``0`` or ``1`` included)."""
    if not _is_bool(value):
        raise ConfigError(f"{name}={value!r} must be True or False")
    return bool(value)
