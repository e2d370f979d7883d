"""Statistics of predicted against measured step times, overall and per application.

The one implementation behind ``crop-gym calibrate --evaluate``, the fit report of ``crop-gym
calibrate --profiles`` and ``scripts/validate_sia.py``:

* **error** of a row: ``|predicted / measured - 1|``; its median, 90th percentile (linear
  interpolation, :func:`numpy.quantile`) and maximum (:func:`error_report`);
* **signed bias per node count**: the median of ``predicted / measured - 1`` over the rows of each
  node count (a model that absorbs communication into compute is high on one node and low on
  many);
* **ordering**: over every pair of rows of one application and per-GPU batch whose placements
  differ (as multisets of GPUs per node) and whose measured times differ, the share the prediction
  orders the same way; a predicted tie (``|Δ| <= 1e-9`` of the larger time) counts as wrong, and
  the share of tied pairs is reported beside it. Once over pairs of any GPU counts, once over pairs
  of equal GPU count (where only the placement differs);
* **spread**: the best-to-worst ratio over the placements of one GPU count (8 by default): each
  placement's step time relative to the geometric mean of those placements at the same per-GPU
  batch, the median of that over the batches (so that one noisy row does not set the extremes),
  and ``max / min`` of those medians; measured and predicted, per application (overall: the
  median over applications), and predicted / measured - 1 (:func:`evaluate`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crop_gym.calibration.measurements import Measurements
from crop_gym.errors import ConfigError

FloatArray = NDArray[np.float64]

__all__ = [
    "SPREAD_GPUS",
    "TIE_RTOL",
    "ErrorReport",
    "ErrorStats",
    "EvaluationReport",
    "OrderingStats",
    "Scores",
    "SpreadStats",
    "error_report",
    "evaluate",
    "format_error_table",
    "format_evaluation",
    "ordering_pairs",
    "predictions_csv",
]

#: Predicted times within this relative difference are a tie (counted wrong).
TIE_RTOL = 1e-9
#: GPU count of the placements whose best-to-worst spread is reported.
SPREAD_GPUS = 8


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


# ------------------------------------------------------------------------------ evaluation
@dataclass(frozen=True)
class OrderingStats:
    """How a prediction orders pairs of placements (see the module docstring).

    Attributes:
        pairs: Pairs counted (different placements, different measured times).
        accuracy: Share ordered as measured, a predicted tie counted wrong (``None``: no pair).
        ties: Share the prediction ties (``None``: no pair).
    """

    pairs: int
    accuracy: float | None
    ties: float | None

    def to_mapping(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "accuracy": self.accuracy, "ties": self.ties}


@dataclass(frozen=True)
class SpreadStats:
    """Best-to-worst step time over the placements of ``gpus`` GPUs (see the module docstring).

    Attributes:
        gpus: GPU count.
        groups: (application, batch) groups with at least two such placements.
        measured: Measured ``max / min`` (the median over applications for several).
        predicted: Predicted ``max / min`` (likewise).
        error: ``predicted / measured - 1``.
    """

    gpus: int
    groups: int
    measured: float
    predicted: float
    error: float

    def to_mapping(self) -> dict[str, Any]:
        return {
            "gpus": self.gpus,
            "groups": self.groups,
            "measured": self.measured,
            "predicted": self.predicted,
            "error": self.error,
        }


@dataclass(frozen=True)
class Scores:
    """Every statistic of some rows (one application, or all).

    Attributes:
        errors: ``|pred / meas - 1|`` statistics.
        bias_by_nodes: Node count → median ``pred / meas - 1`` of its rows.
        ordering: Pairs of any GPU count.
        ordering_same_gpus: Pairs of equal GPU count.
        spread: Best-to-worst spread over :data:`SPREAD_GPUS`-GPU placements (``None`` if no group
            has two of them).
    """

    errors: ErrorStats
    bias_by_nodes: Mapping[int, float]
    ordering: OrderingStats
    ordering_same_gpus: OrderingStats
    spread: SpreadStats | None

    def to_mapping(self) -> dict[str, Any]:
        e = self.errors
        return {
            "rows": e.rows,
            "median_abs_rel_error": e.median_abs_rel_error,
            "p90_abs_rel_error": e.p90_abs_rel_error,
            "max_abs_rel_error": e.max_abs_rel_error,
            "bias_by_nodes": {str(n): v for n, v in self.bias_by_nodes.items()},
            "ordering": self.ordering.to_mapping(),
            "ordering_same_gpus": self.ordering_same_gpus.to_mapping(),
            "spread": None if self.spread is None else self.spread.to_mapping(),
        }


@dataclass(frozen=True)
class EvaluationReport:
    """:class:`Scores` over every row and per application (sorted)."""

    overall: Scores
    per_app: Mapping[str, Scores]

    def to_mapping(self) -> dict[str, Any]:
        """``overall`` and ``per_app`` as mappings (:meth:`Scores.to_mapping`)."""
        return {
            "overall": self.overall.to_mapping(),
            "per_app": {a: s.to_mapping() for a, s in self.per_app.items()},
        }


def ordering_pairs(
    m: Measurements, *, same_gpus: bool = False
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Row pairs ``(i, j)``, ``i < j``, of one application and per-GPU batch (and GPU count, with
    ``same_gpus``) whose placements differ and whose measured step times differ."""
    keys = [m.app, m.local_bsz] + ([m.num_gpus] if same_gpus else [])
    order = np.lexsort(keys[::-1])
    group = np.zeros(len(m), dtype=np.int64)
    if len(m):
        change = np.zeros(len(m), dtype=bool)
        change[0] = True
        for key in keys:
            ks = np.asarray(key)[order]
            change[1:] |= ks[1:] != ks[:-1]
        group[order] = np.cumsum(change) - 1
    first_i, first_j = [], []
    for rows in _groups(group):
        if len(rows) < 2:
            continue
        a, b = np.triu_indices(len(rows), 1)
        first_i.append(rows[a])
        first_j.append(rows[b])
    if not first_i:
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty
    i, j = np.concatenate(first_i), np.concatenate(first_j)
    keep = (m.placement[i] != m.placement[j]).any(axis=1) & (m.step_time[i] != m.step_time[j])
    return i[keep], j[keep]


def _groups(group: NDArray[np.int64]) -> list[NDArray[np.intp]]:
    order = np.argsort(group, kind="stable")
    cuts = np.flatnonzero(np.diff(group[order])) + 1
    return np.split(order, cuts) if len(order) else []


def _ordering(pred: FloatArray, meas: FloatArray, i: Any, j: Any) -> OrderingStats:
    n = len(i)
    if n == 0:
        return OrderingStats(0, None, None)
    dp = pred[i] - pred[j]
    tie = np.abs(dp) <= TIE_RTOL * np.maximum(pred[i], pred[j])
    right = (np.sign(dp) == np.sign(meas[i] - meas[j])) & ~tie
    return OrderingStats(n, float(right.mean()), float(tie.mean()))


def _spread(
    pred: FloatArray, m: Measurements, rows: NDArray[np.bool_], gpus: int
) -> SpreadStats | None:
    sel = np.flatnonzero(rows & (m.num_gpus == gpus))
    by: dict[tuple[str, float], list[int]] = {}
    for i in sel.tolist():
        by.setdefault((str(m.app[i]), float(m.local_bsz[i])), []).append(i)
    # Per placement (an application's), its time relative to the geometric mean of the
    # placements measured at the same batch, then the median of that over the batches.
    rel: dict[tuple[str, bytes], tuple[list[float], list[float]]] = {}
    groups = 0
    for (app, _), members in by.items():
        if len({m.placement[i].tobytes() for i in members}) < 2:
            continue
        groups += 1
        t, p = np.log(m.step_time[members]), np.log(pred[members])
        for i, dt, dp in zip(members, t - t.mean(), p - p.mean()):
            r = rel.setdefault((app, m.placement[i].tobytes()), ([], []))
            r[0].append(float(dt))
            r[1].append(float(dp))
    if not groups:
        return None
    apps = sorted({a for a, _ in rel})
    meas_s, pred_s = [], []
    for app in apps:
        meds = [(np.median(a), np.median(b)) for (x, _), (a, b) in rel.items() if x == app]
        if len(meds) < 2:
            continue
        mm, pp = np.array(meds).T
        meas_s.append(float(np.exp(mm.max() - mm.min())))
        pred_s.append(float(np.exp(pp.max() - pp.min())))
    if not meas_s:
        return None
    mm_, pp_ = float(np.median(meas_s)), float(np.median(pred_s))
    return SpreadStats(gpus, groups, mm_, pp_, pp_ / mm_ - 1.0)


def _scores(
    pred: FloatArray,
    m: Measurements,
    rows: NDArray[np.bool_],
    pairs: tuple[Any, Any],
    pairs_same: tuple[Any, Any],
    spread_gpus: int,
) -> Scores:
    rel = pred[rows] / m.step_time[rows] - 1.0
    nodes = m.num_nodes[rows]
    bias = {int(n): float(np.median(rel[nodes == n])) for n in np.unique(nodes)}

    def restrict(ij: tuple[Any, Any]) -> tuple[Any, Any]:
        i, j = ij
        keep = rows[i] & rows[j]
        return i[keep], j[keep]

    return Scores(
        errors=ErrorStats.of(np.abs(rel)),
        bias_by_nodes=bias,
        ordering=_ordering(pred, m.step_time, *restrict(pairs)),
        ordering_same_gpus=_ordering(pred, m.step_time, *restrict(pairs_same)),
        spread=_spread(pred, m, rows, spread_gpus),
    )


def evaluate(
    predicted: ArrayLike, measurements: Measurements, *, spread_gpus: int = SPREAD_GPUS
) -> EvaluationReport:
    """Every statistic of the module docstring, over all rows and per application.

    Raises:
        ConfigError: If ``predicted`` has not one positive value per measured row.
    """
    pred = np.asarray(predicted, dtype=np.float64)
    m = measurements
    if pred.shape != (len(m),) or len(m) == 0 or not (pred > 0).all():
        raise ConfigError(
            f"evaluation: {pred.size} predictions for {len(m)} measured rows "
            "(need one positive prediction per row, at least one row)"
        )
    pairs, pairs_same = ordering_pairs(m), ordering_pairs(m, same_gpus=True)
    everything = np.ones(len(m), dtype=bool)
    per = {
        str(a): _scores(pred, m, m.app == a, pairs, pairs_same, spread_gpus)
        for a in np.unique(m.app)
    }
    return EvaluationReport(_scores(pred, m, everything, pairs, pairs_same, spread_gpus), per)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def format_evaluation(report: EvaluationReport, title: str = "") -> str:
    """The report as a terminal table: one row per application, then ``all``."""
    head = (
        f"{'application':<12} {'rows':>5} {'median':>7} {'p90':>7} {'order':>6} {'ties':>6} "
        f"{'order=k':>7} {'ties':>6} {'spread m/p':>11}  bias by nodes"
    )
    lines = [title] if title else []
    lines += [head, "-" * len(head)]
    for name, sc in [*report.per_app.items(), ("all", report.overall)]:
        if name == "all":
            lines.append("-" * len(head))
        e, o, q, sp = sc.errors, sc.ordering, sc.ordering_same_gpus, sc.spread
        spread = "n/a" if sp is None else f"{sp.measured:.2f}/{sp.predicted:.2f}"
        bias = " ".join(f"{n}:{v:+.1%}" for n, v in sc.bias_by_nodes.items())
        lines.append(
            f"{name:<12} {e.rows:>5} {e.median_abs_rel_error:>7.1%} {e.p90_abs_rel_error:>7.1%} "
            f"{_pct(o.accuracy):>6} {_pct(o.ties):>6} {_pct(q.accuracy):>7} {_pct(q.ties):>6} "
            f"{spread:>11}  {bias}"
        )
    return "\n".join(lines)


def predictions_csv(predicted: ArrayLike, measurements: Measurements) -> str:
    """``app,placement,local_bsz,measured_s,predicted_s`` (one row per measured row; the placement
    as GPUs per node, largest first, e.g. ``431``)."""
    pred = np.asarray(predicted, dtype=np.float64)
    m = measurements
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["app", "placement", "local_bsz", "measured_s", "predicted_s"])
    for i in range(len(m)):
        w.writerow(
            [
                str(m.app[i]),
                "".join(str(int(v)) for v in m.placement[i] if v),
                f"{float(m.local_bsz[i]):g}",
                repr(float(m.step_time[i])),
                repr(float(pred[i])),
            ]
        )
    return buf.getvalue()
