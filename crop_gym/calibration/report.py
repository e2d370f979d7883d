"""Error statistics of predicted against measured step times, overall and per application.

The one implementation behind ``crop-gym calibrate --evaluate``, the fit report of ``crop-gym
calibrate --profiles`` and ``scripts/validate_sia.py``. The error of a row is
``|predicted / measured - 1|``; the statistics are its median, 90th percentile (linear
interpolation, :func:`numpy.quantile`) and maximum.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from crop_gym.errors import ConfigError

__all__ = ["ErrorReport", "ErrorStats", "error_report", "format_error_table"]


@dataclass(frozen=True)
class ErrorStats:
    """Statistics of ``|predicted / measured - 1|`` over some rows.

    Attributes:
        median_abs_rel_error: Median.
        p90_abs_rel_error: 90th percentile.
        max_abs_rel_error: Largest.
        rows: Rows counted.
    """

    median_abs_rel_error: float
    p90_abs_rel_error: float
    max_abs_rel_error: float
    rows: int

    @classmethod
    def of(cls, rel: np.ndarray) -> ErrorStats:
        """The statistics of absolute relative errors ``rel`` (at least one row)."""
        return cls(
            median_abs_rel_error=float(np.median(rel)),
            p90_abs_rel_error=float(np.quantile(rel, 0.9)),
            max_abs_rel_error=float(rel.max()),
            rows=len(rel),
        )


@dataclass(frozen=True)
class ErrorReport:
    """Errors over every row and per application.

    Attributes:
        overall: Over every row.
        per_app: Application → its rows' statistics, applications sorted.
    """

    overall: ErrorStats
    per_app: Mapping[str, ErrorStats]

    def to_mapping(self) -> dict[str, Any]:
        """``median_abs_rel_error``, ``p90_abs_rel_error``, ``max_abs_rel_error``, ``rows`` and
        ``per_app`` (``{app: {median_abs_rel_error, p90_abs_rel_error, rows}}``)."""
        o = self.overall
        return {
            "median_abs_rel_error": o.median_abs_rel_error,
            "p90_abs_rel_error": o.p90_abs_rel_error,
            "max_abs_rel_error": o.max_abs_rel_error,
            "rows": o.rows,
            "per_app": {
                a: {
                    "median_abs_rel_error": s.median_abs_rel_error,
                    "p90_abs_rel_error": s.p90_abs_rel_error,
                    "rows": s.rows,
                }
                for a, s in self.per_app.items()
            },
        }


def error_report(predicted: ArrayLike, measured: ArrayLike, apps: ArrayLike) -> ErrorReport:
    """The errors of ``predicted`` against ``measured`` step times, one application per row.

    Raises:
        ConfigError: If the arrays differ in length or hold no row.
    """
    pred = np.asarray(predicted, dtype=np.float64)
    meas = np.asarray(measured, dtype=np.float64)
    app = np.asarray(apps).astype(str)
    if not len(pred) == len(meas) == len(app) or len(pred) == 0:
        raise ConfigError(
            f"error report: {len(pred)} predictions, {len(meas)} measurements, {len(app)} "
            "applications (need the same number, at least one)"
        )
    rel = np.abs(pred / meas - 1.0)
    per = {str(a): ErrorStats.of(rel[app == a]) for a in np.unique(app)}
    return ErrorReport(overall=ErrorStats.of(rel), per_app=per)


def format_error_table(report: ErrorReport, title: str = "") -> str:
    """The report as a terminal table (one row per application, then ``all``)."""
    head = f"{'application':<14} {'rows':>6} {'median':>8} {'p90':>8} {'max':>8}"
    lines = [title] if title else []
    lines += [head, "-" * len(head)]
    rows = [*report.per_app.items(), ("all", report.overall)]
    for name, s in rows:
        if name == "all":
            lines.append("-" * len(head))
        lines.append(
            f"{name:<14} {s.rows:>6} {s.median_abs_rel_error:>8.2%} {s.p90_abs_rel_error:>8.2%} "
            f"{s.max_abs_rel_error:>8.2%}"
        )
    return "\n".join(lines)
