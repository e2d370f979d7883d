"""Fitting the link parameters and compute coefficients to the bundled ElasticFlow A100 profiles.

Two data sets, both bundled with the package:

* **ElasticFlow A100 throughput profiles** (``data/profiles/throughputs_A100/*.csv``): iterations per
  second of 7 models per global batch ``B`` and GPU count ``k`` (1-8 GPUs inside one 8-GPU server;
  16, 32, 64 GPUs on 2, 4, 8 servers). These are *fitted*.
* **Chronus placement sensitivity** (``data/chronus/model_info.json``): relative throughput of a job of
  ``k`` GPUs spread over ``s`` servers, against the same job on one server. This is a *check* of the
  fitted link parameters (it was measured on other hardware, so only the ordering is compared
  strictly; the absolute error is reported for information).

The prediction of a profile point is the model of :mod:`crop_gym.model.timing` with the packed placement
``g = min(k, 8)`` GPUs per server on ``s = ceil(k / 8)`` servers, healthy devices and no contention::

    T(B, k) = t0 + per_sample * B / k + comm_time(allreduce, M, k, g, s, B_intra, B_inter, a_intra, a_inter)

Free parameters: per measured model ``t0 >= 0`` and ``per_sample >= 0``; shared ``intra_bandwidth``,
``inter_bandwidth``, ``intra_latency`` and ``inter_latency`` (positive, fitted in log space). The fit
minimises the squared *log* error of the iteration time (so errors are relative) with
:func:`scipy.optimize.least_squares` from fixed starting points, so it is deterministic.

Physical ordering constraints (documented in docs/MODEL.md): the network is no faster than the
intra-server interconnect (``inter_bandwidth <= intra_bandwidth / min_bandwidth_ratio``), and a
network hop costs at least ``min_latency_ratio`` times an intra-server hop
(``inter_latency >= min_latency_ratio * intra_latency``). The profiles hardly constrain how the
per-step latency splits between the two levels (all their multi-server points are packed), and
without the constraint the hierarchical fit makes spreading a job over servers *faster*, which
contradicts Chronus.

The data and the prediction of a point are in :mod:`crop_gym.calibration.bundled`, the Chronus
check in :mod:`crop_gym.calibration.chronus`. Run it with ``crop-gym calibrate``; ``crop-gym calibrate --write`` regenerates
``crop_gym/data/calibration.json``, which the package reads as its defaults.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.calibration.bundled import (
    CHRONUS_LOCAL_BATCH,
    GPUS_PER_SERVER,
    ProfilePoint,
    load_profiles,
    predict_iteration_time,
    profile_placement,
)
from crop_gym.calibration.chronus import ChronusComparison, chronus_check
from crop_gym.errors import ConfigError
from crop_gym.model.jobs import MODEL_ZOO
from crop_gym.model.timing import ALLREDUCE_ALGORITHMS

__all__ = [
    "LINK_KEYS",
    "MEDIAN_ERROR_TARGET",
    "RANK_AGREEMENT_TARGET",
    "CalibrationResult",
    "ModelFit",
    "calibration_json",
    "choose_default",
    "fit_all",
    "fit_calibration",
]

#: Targets that decide the default all-reduce algorithm.
MEDIAN_ERROR_TARGET = 0.15
RANK_AGREEMENT_TARGET = 0.9
#: Keys of the link parameters, in the order of the fitted vector.
LINK_KEYS: tuple[str, ...] = (
    "intra_bandwidth",
    "inter_bandwidth",
    "intra_latency",
    "inter_latency",
)


# Units of the fitted vector: t0 and per_sample in ms; bandwidth in GB/s and latency in µs (logs).
_MS = 1e-3
_GBPS = 1e9
_US = 1e-6
# Bounds of the link parameters (log space): 10 MB/s .. 10 TB/s, 1 ns .. 100 ms.
_BW_BOUNDS = (1e7, 1e13)
_LAT_BOUNDS = (1e-9, 1e-1)
# Fixed starting points of the link parameters: (intra GB/s, inter GB/s, intra µs, inter µs).
_STARTS: tuple[tuple[float, float, float, float], ...] = (
    (50.0, 10.0, 10.0, 50.0),
    (10.0, 1.0, 1.0, 100.0),
    (200.0, 100.0, 100.0, 1000.0),
)


# ------------------------------------------------------------------------------------ results
@dataclass(frozen=True, slots=True)
class ModelFit:
    """Fitted coefficients and fit errors of one measured model.

    Attributes:
        model: Model name.
        points: Measured (batch, GPUs) points.
        t0: Fitted fixed compute time per iteration (s).
        per_sample: Fitted compute time per local sample (s).
        median_abs_rel_error: Median of ``|T_pred / T_meas - 1|`` over its points.
        max_abs_rel_error: Largest ``|T_pred / T_meas - 1|``.
    """

    model: str
    points: int
    t0: float
    per_sample: float
    median_abs_rel_error: float
    max_abs_rel_error: float


@dataclass(frozen=True)
class CalibrationResult:
    """Outcome of :func:`fit_calibration` for one all-reduce algorithm.

    Attributes:
        allreduce: ``"ring"`` or ``"hierarchical"``.
        links: Fitted ``intra_bandwidth``, ``inter_bandwidth`` (bytes/s), ``intra_latency``,
            ``inter_latency`` (s).
        models: Per measured model, its :class:`ModelFit`.
        points: The profile points that were fitted.
        predicted: Predicted iteration time of each point (s).
        median_abs_rel_error: Median of ``|T_pred / T_meas - 1|`` over every point.
        mean_abs_rel_error: Mean of the same.
        max_abs_rel_error: Largest of the same.
        chronus: Per Chronus (model, job size), the comparison.
        chronus_rank_agreement: Fraction of Chronus (model, job size) pairs whose predicted order
            over servers spanned matches the measured one (predicted ties count as mismatches).
        chronus_mean_abs_error: Mean ``|predicted - measured|`` relative throughput over the
            spread (``s > 1``) Chronus points; informational (other hardware).
        chronus_spearman: Spearman rank correlation of predicted and measured relative
            throughput over all spread Chronus points, across models and job sizes; informational.
        cost: Final least-squares cost (half the sum of squared log errors).
        options: Settings of the fit (constraints, Chronus local batch).
    """

    allreduce: str
    links: dict[str, float]
    models: dict[str, ModelFit]
    points: tuple[ProfilePoint, ...]
    predicted: tuple[float, ...]
    median_abs_rel_error: float
    mean_abs_rel_error: float
    max_abs_rel_error: float
    chronus: tuple[ChronusComparison, ...]
    chronus_rank_agreement: float
    chronus_mean_abs_error: float
    chronus_spearman: float
    cost: float
    options: dict[str, float] = field(default_factory=dict)

    @property
    def coefficients(self) -> dict[str, dict[str, float]]:
        """``{model: {"t0": ..., "per_sample": ...}}`` as stored in calibration.json."""
        return {m: {"t0": f.t0, "per_sample": f.per_sample} for m, f in self.models.items()}

    @property
    def meets_targets(self) -> bool:
        """Median error <= 15% and Chronus rank agreement >= 0.9."""
        return (
            self.median_abs_rel_error <= MEDIAN_ERROR_TARGET
            and self.chronus_rank_agreement >= RANK_AGREEMENT_TARGET
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (no per-point arrays except the Chronus comparison)."""
        return {
            "allreduce": self.allreduce,
            "links": dict(self.links),
            "models": self.coefficients,
            "median_abs_rel_error": self.median_abs_rel_error,
            "mean_abs_rel_error": self.mean_abs_rel_error,
            "max_abs_rel_error": self.max_abs_rel_error,
            "points": len(self.points),
            "per_model": {
                m: {
                    "points": f.points,
                    "median_abs_rel_error": f.median_abs_rel_error,
                    "max_abs_rel_error": f.max_abs_rel_error,
                    "t0": f.t0,
                    "per_sample": f.per_sample,
                }
                for m, f in self.models.items()
            },
            "chronus_rank_agreement": self.chronus_rank_agreement,
            "chronus_mean_abs_error": self.chronus_mean_abs_error,
            "chronus_spearman": self.chronus_spearman,
            "chronus": [
                {
                    "model": c.model,
                    "gpus": c.gpus,
                    "servers": list(c.servers),
                    "measured": list(c.measured),
                    "predicted": list(c.predicted),
                    "order_matches": c.order_matches,
                }
                for c in self.chronus
            ],
            "cost": self.cost,
            "options": dict(self.options),
            "meets_targets": self.meets_targets,
        }


# ---------------------------------------------------------------------------------------- fit
def fit_calibration(
    allreduce: str = "hierarchical",
    *,
    points: Sequence[ProfilePoint] | None = None,
    min_latency_ratio: float = 4.0,
    min_bandwidth_ratio: float = 1.0,
    chronus_local_batch: float = CHRONUS_LOCAL_BATCH,
) -> CalibrationResult:
    """Fit compute coefficients and link parameters to the ElasticFlow A100 profiles.

    Deterministic: fixed starting points (the best of :data:`_STARTS` is kept), tight tolerances,
    finite-difference Jacobian.

    Args:
        allreduce: ``"ring"`` or ``"hierarchical"``.
        points: Profile points to fit; default every bundled measured point.
        min_latency_ratio: Constraint ``inter_latency >= min_latency_ratio * intra_latency``
            (0: unconstrained).
        min_bandwidth_ratio: Constraint ``intra_bandwidth >= min_bandwidth_ratio * inter_bandwidth``
            (0: unconstrained).
        chronus_local_batch: Per-GPU batch assumed in the Chronus check.

    Returns:
        The fitted parameters, their errors and the Chronus check.

    Raises:
        ConfigError: On an unknown algorithm, a ratio outside its range, or a model outside the zoo.
    """
    from scipy.optimize import least_squares
    from scipy.stats import spearmanr

    if allreduce not in ALLREDUCE_ALGORITHMS:
        raise ConfigError(
            f"allreduce={allreduce!r} is not one of {', '.join(ALLREDUCE_ALGORITHMS)}"
        )
    for name, ratio, (low, high) in (
        ("min_latency_ratio", min_latency_ratio, _LAT_BOUNDS),
        ("min_bandwidth_ratio", min_bandwidth_ratio, _BW_BOUNDS),
    ):
        if not (math.isfinite(ratio) and 0 <= ratio < high / low):
            raise ConfigError(
                f"{name}={ratio!r} must be a ratio in [0, {high / low:g}) "
                "(0: unconstrained; the upper end is the width of the fitted range)"
            )
    bw_span = math.log(_BW_BOUNDS[1] / _BW_BOUNDS[0])
    lat_span = math.log(_LAT_BOUNDS[1] / _LAT_BOUNDS[0])
    lo_dbw = math.log(min_bandwidth_ratio) if min_bandwidth_ratio > 0 else -bw_span
    lo_dlat = math.log(min_latency_ratio) if min_latency_ratio > 0 else -lat_span
    pts = tuple(load_profiles() if points is None else points)
    if not pts:
        raise ConfigError("no profile points to fit")
    models = sorted({p.model for p in pts})
    for m in models:
        if m not in MODEL_ZOO:
            raise ConfigError(f"profile model {m!r} is not in the model zoo")
    nm = len(models)
    index = {m: i for i, m in enumerate(models)}
    mid = np.array([index[p.model] for p in pts])
    batch = np.array([p.batch for p in pts], dtype=np.float64)
    k = np.array([p.gpus for p in pts], dtype=np.float64)
    measured = np.array([p.iteration_time for p in pts])
    grad = np.array([MODEL_ZOO[p.model].grad_bytes for p in pts])
    g, s = profile_placement(k)
    log_measured = np.log(measured)

    # x = [t0 (ms) per model, per_sample (ms) per model,
    #      ln(intra_bw / GB/s), ln(intra_bw / inter_bw), ln(intra_lat / µs), ln(inter_lat / intra_lat)]
    def unpack_links(x: NDArray[np.float64]) -> dict[str, float]:
        lbw, dbw, llat, dlat = x[2 * nm : 2 * nm + 4]
        return {
            "intra_bandwidth": float(np.exp(lbw) * _GBPS),
            "inter_bandwidth": float(np.exp(lbw - dbw) * _GBPS),
            "intra_latency": float(np.exp(llat) * _US),
            "inter_latency": float(np.exp(llat + dlat) * _US),
        }

    def predict(x: NDArray[np.float64]) -> NDArray[np.float64]:
        t0 = x[:nm][mid] * _MS
        per_sample = x[nm : 2 * nm][mid] * _MS
        out: NDArray[np.float64] = predict_iteration_time(
            allreduce, t0, per_sample, grad, batch / k, k, g, s, unpack_links(x)
        )
        return out

    def residuals(x: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(np.log(predict(x)) - log_measured)

    lo = np.concatenate(
        [
            np.zeros(2 * nm),
            [
                math.log(_BW_BOUNDS[0] / _GBPS),
                lo_dbw,
                math.log(_LAT_BOUNDS[0] / _US),
                lo_dlat,
            ],
        ]
    )
    hi = np.concatenate(
        [
            np.full(2 * nm, np.inf),
            [
                math.log(_BW_BOUNDS[1] / _GBPS),
                bw_span,
                math.log(_LAT_BOUNDS[1] / _US),
                lat_span,
            ],
        ]
    )
    # Compute start: one-GPU points (no communication) give t0 and per_sample directly.
    t0_start, ps_start = _single_gpu_start(models, pts)
    best = None
    for bw_i, bw_e, lat_i, lat_e in _STARTS:
        links0 = [
            math.log(bw_i),
            max(math.log(bw_i / bw_e), lo_dbw),
            math.log(lat_i),
            max(math.log(lat_e / lat_i), lo_dlat),
        ]
        x0 = np.clip(np.concatenate([t0_start, ps_start, links0]), lo, hi)
        # Strictly inside the bounds, as the trust-region reflective method requires.
        x0 = np.where(x0 <= lo, lo + 1e-3, x0)
        res = least_squares(
            residuals,
            x0,
            bounds=(lo, hi),
            method="trf",
            xtol=1e-14,
            ftol=1e-14,
            gtol=1e-14,
            max_nfev=20000,
        )
        if best is None or res.cost < best.cost - 1e-15:
            best = res
    assert best is not None
    x = np.asarray(best.x, dtype=np.float64)
    links = unpack_links(x)
    predicted = predict(x)
    rel = np.abs(predicted / measured - 1.0)
    fits: dict[str, ModelFit] = {}
    for m in models:
        sel = mid == index[m]
        fits[m] = ModelFit(
            model=m,
            points=int(sel.sum()),
            t0=float(x[index[m]] * _MS),
            per_sample=float(x[nm + index[m]] * _MS),
            median_abs_rel_error=float(np.median(rel[sel])),
            max_abs_rel_error=float(rel[sel].max()),
        )
    coefficients = {m: {"t0": f.t0, "per_sample": f.per_sample} for m, f in fits.items()}
    rows, agreement, mae = chronus_check(
        allreduce, links, coefficients, local_batch=chronus_local_batch
    )
    spread = [
        (p, m) for r in rows for s_, p, m in zip(r.servers, r.predicted, r.measured) if s_ > 1
    ]
    spearman = (
        float(spearmanr([p for p, _ in spread], [m for _, m in spread]).statistic)
        if len(spread) > 2
        else float("nan")
    )
    return CalibrationResult(
        allreduce=allreduce,
        links=links,
        models=fits,
        points=pts,
        predicted=tuple(float(v) for v in predicted),
        median_abs_rel_error=float(np.median(rel)),
        mean_abs_rel_error=float(np.mean(rel)),
        max_abs_rel_error=float(rel.max()),
        chronus=rows,
        chronus_rank_agreement=float(agreement),
        chronus_mean_abs_error=mae,
        chronus_spearman=spearman,
        cost=float(best.cost),
        options={
            "min_latency_ratio": float(min_latency_ratio),
            "min_bandwidth_ratio": float(min_bandwidth_ratio),
            "chronus_local_batch": float(chronus_local_batch),
            "gpus_per_server": float(GPUS_PER_SERVER),
        },
    )


def _single_gpu_start(
    models: Sequence[str], pts: Sequence[ProfilePoint]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Starting ``t0`` and ``per_sample`` (ms) from a line through each model's one-GPU points."""
    t0 = np.full(len(models), 10.0)
    ps = np.full(len(models), 1.0)
    for i, m in enumerate(models):
        one = [(p.batch, p.iteration_time / _MS) for p in pts if p.model == m and p.gpus == 1]
        if len(one) >= 2:
            b = np.array([q[0] for q in one], dtype=np.float64)
            t = np.array([q[1] for q in one])
            slope, intercept = np.polyfit(b, t, 1)
            ps[i] = max(float(slope), 1e-3)
            t0[i] = max(float(intercept), 1e-1)
        elif one:
            ps[i] = one[0][1] / one[0][0]
    return t0, ps


def fit_all(
    algorithms: Iterable[str] = ALLREDUCE_ALGORITHMS, **kwargs: Any
) -> dict[str, CalibrationResult]:
    """Fit each algorithm (keyword arguments go to :func:`fit_calibration`)."""
    return {a: fit_calibration(a, **kwargs) for a in algorithms}


def choose_default(results: Mapping[str, CalibrationResult]) -> tuple[str, str]:
    """Pick the default all-reduce algorithm by the evidence.

    Algorithms that meet both targets (median error <= 15%, Chronus rank agreement >= 0.9) come
    first; among them the higher rank agreement wins, then the lower median error, then ``ring``
    (the reference algorithm) on a tie.

    Returns:
        ``(algorithm, reason)``.
    """
    if not results:
        raise ConfigError("no calibration results to choose from")

    def key(a: str) -> tuple[bool, float, float, bool]:
        r = results[a]
        return (not r.meets_targets, -r.chronus_rank_agreement, r.median_abs_rel_error, a != "ring")

    ordered = sorted(results, key=key)
    best = results[ordered[0]]
    parts = [
        f"{a}: median error {results[a].median_abs_rel_error:.1%}, "
        f"Chronus rank agreement {results[a].chronus_rank_agreement:.2f}"
        for a in ordered
    ]
    verdict = "meets" if best.meets_targets else "does NOT meet"
    reason = (
        f"{ordered[0]} {verdict} the targets (median <= {MEDIAN_ERROR_TARGET:.0%}, rank agreement "
        f">= {RANK_AGREEMENT_TARGET}) with the best Chronus ordering; " + "; ".join(parts)
    )
    if len(results) > 1 and "ring" in results:
        reason += "; a ring cannot tell 2 servers from 4 (same links, same bottleneck)"
    return ordered[0], reason


def _sig(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def calibration_json(
    results: Mapping[str, CalibrationResult], default: str, reason: str
) -> dict[str, Any]:
    """The content of ``crop_gym/data/calibration.json`` for the chosen default.

    Values are rounded to 6 significant digits.
    """
    chosen = results[default]
    return {
        "comment": (
            "Generated by `crop-gym calibrate --write` (crop_gym/calibration/elasticflow.py): least-squares fit "
            "of log iteration time to the ElasticFlow A100 profiles (data/profiles/throughputs_A100), "
            f"packed placements of {GPUS_PER_SERVER} GPUs per server, constraints inter_latency >= "
            f"{chosen.options['min_latency_ratio']:g} x intra_latency and {chosen.options['min_bandwidth_ratio']:g} x "
            f"inter_bandwidth <= intra_bandwidth; checked against Chronus (data/chronus/model_info.json). "
            f"Default all-reduce: {reason}. See docs/MODEL.md."
        ),
        "allreduce": default,
        "links": {key: _sig(chosen.links[key]) for key in LINK_KEYS},
        "models": {
            m: {"t0": _sig(f.t0), "per_sample": _sig(f.per_sample)}
            for m, f in chosen.models.items()
        },
        "errors": {
            a: {
                "median_abs_rel_error": _sig(r.median_abs_rel_error, 4),
                "mean_abs_rel_error": _sig(r.mean_abs_rel_error, 4),
                "max_abs_rel_error": _sig(r.max_abs_rel_error, 4),
                "points": len(r.points),
                "chronus_rank_agreement": _sig(r.chronus_rank_agreement, 4),
                "chronus_mean_abs_error": _sig(r.chronus_mean_abs_error, 4),
                "chronus_spearman": _sig(r.chronus_spearman, 4),
                "per_model": {
                    m: {
                        "points": f.points,
                        "median_abs_rel_error": _sig(f.median_abs_rel_error, 4),
                        "max_abs_rel_error": _sig(f.max_abs_rel_error, 4),
                    }
                    for m, f in r.models.items()
                },
            }
            for a, r in results.items()
        },
    }
