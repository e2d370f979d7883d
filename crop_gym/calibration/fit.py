"""Fit a hardware profile to measured per-placement step times (Pollux / Sia format).

The measured rows (:class:`~crop_gym.calibration.measurements.Measurements`) are predicted by the
iteration-time model itself (:func:`crop_gym.model.timing.job_times`, no second formula): a row of
``k`` GPUs spread over nodes as ``(g_1, g_2, ...)`` becomes the placement facts of that spread on a
tree of ``gpus_per_node``-GPU nodes under one switch, healthy and alone (``k``, ``g = max g_i``,
``s`` nodes; the GPU links and, on more than one node, the NIC links spanned:
:func:`~crop_gym.calibration.spread.spread_facts`, checked against
:func:`~crop_gym.model.facts.placement_facts` on a real topology by a test).

Free parameters (deterministic robust fit, :func:`scipy.optimize.least_squares`, soft-L1 loss on
the log error of the step time, fixed starting points, the best kept):

* shared by the cluster (at most 4, chosen by ``free``; see :data:`SHARED_PARAMETERS`): the node
  fabric ``F``, the NIC bandwidth, the overlap φ_t (with φ_c = 1), the compute sharing κ, the NIC
  latency or a per-step latency λ;
* per application (3), two variants (``compute=``):

  - ``"measured"`` (default): the compute curve is *measured*, piecewise linear through the median
    1-GPU step time at each 1-GPU local batch (knots), times a fitted per-application level
    ``scale`` (the multi-GPU rows of the Sia data run at 0.86-1.2 x the 1-GPU time at the same
    batch); fitted: ``ln scale``, the application's compute sharing κ_a (its slowdown per
    co-located GPU) and ``M``; the default shared set has no κ then (:data:`MEASURED_FREE`);
  - ``"affine"``: the curve ``t0 + per_sample · b`` and ``M`` are fitted (no measured input);
  - ``"mixed"``: each application takes the variant that fits its own rows better (both variants
    are fitted first, the lower per-application median |rel err| on the fitted rows wins), then one
    joint fit with that choice; or a mapping ``{application: "measured" | "affine"}`` given
    directly. An affine application has no κ of its own (the shared κ, if fitted, applies).

  ``M`` is the effective gradient bytes, fitted in log scale with a weak pull towards the zoo's
  size, since ``M`` and the bandwidths are only identified together.

Structural choices that are not fitted: ``nic_sharing`` (ν, default 1: the job's co-located GPUs
share a node's card, see docs/MODEL.md), the hierarchical all-reduce, and the GPU link bandwidth
(``gpu_bandwidth``; the fabric ``F / g`` binds below it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.calibration.measurements import Measurements
from crop_gym.calibration.report import error_report
from crop_gym.calibration.spread import spread_facts
from crop_gym.errors import ConfigError
from crop_gym.model.hardware import ComputeCurve, HardwareProfile, LinkLevel
from crop_gym.model.jobs import get_model
from crop_gym.model.timing import PerfConfig, compute_curve, job_times

__all__ = [
    "COMPUTE_VARIANTS",
    "DEFAULT_FREE",
    "MEASURED_FREE",
    "SHARED_PARAMETERS",
    "FitReport",
    "fit_profile",
    "predict_step_time",
]

FloatArray = NDArray[np.float64]

#: Shared parameters that can be fitted, and how each maps from the fitted (unbounded) value.
SHARED_PARAMETERS: tuple[str, ...] = (
    "fabric",  # F, bytes/s (log of F / NIC)
    "nic",  # NIC bandwidth, bytes/s (log)
    "overlap",  # φ_t in (0, 1) (logistic), φ_c = 1
    "compute_sharing",  # κ >= 0 (log)
    "nic_latency",  # NIC link latency, s (log)
    "step_latency",  # λ, s (log)
)
#: The shared parameters fitted by default with a fitted affine compute curve.
DEFAULT_FREE: tuple[str, ...] = ("fabric", "nic", "overlap", "compute_sharing")
#: The shared parameters fitted by default with the measured compute curve (κ is per application).
MEASURED_FREE: tuple[str, ...] = ("fabric", "nic", "overlap", "step_latency")
#: How the compute curve is obtained (see the module docstring).
COMPUTE_VARIANTS: tuple[str, ...] = ("measured", "affine", "mixed")
_SCALE_BOUND = 1.0  # |ln scale| of the measured curve: a level within x e^±1
MAX_SHARED = 4
PER_APP = 3
# Units of the fitted vector: GB/s, ms, µs.
_GB, _MS, _US = 1e9, 1e-3, 1e-6
# Weight of the pull of ln(M / M_zoo) towards 0 (one pseudo-row per application).
_PRIOR = 0.1
# GPU link bandwidth of a profile fitted without a base: high enough never to bind, so that the
# node fabric (F / g per GPU) alone sets the intra-node bandwidth.
_GPU_LINK = 1e13
_F_SCALE = 0.05  # soft-L1 scale of the log error (5 %)
# Fixed starting points of (fabric GB/s, nic GB/s); the other shared values start at _START.
_LINK_STARTS: tuple[tuple[float, float], ...] = ((20.0, 5.0), (100.0, 20.0), (5.0, 1.0))
# Bounds of the unbounded shared values: GB/s and µs in log, κ in log, φ_t as a logit.
_BOUNDS = {
    "fabric": (math.log(1e-3), math.log(1e5)),  # F / NIC
    "nic": (math.log(0.01), math.log(1e4)),
    "overlap": (-12.0, 12.0),
    "compute_sharing": (-12.0, math.log(2.0)),
    "nic_latency": (-5.0, math.log(1e5)),
    "step_latency": (-5.0, math.log(1e5)),
}
_START = {
    "overlap": 0.0,
    "compute_sharing": math.log(0.02),
    "nic_latency": math.log(50.0),
    "step_latency": math.log(1000.0),
}


@dataclass(frozen=True)
class FitReport:
    """What a fit did (kept in the profile's ``fit`` field as a mapping).

    Attributes:
        rows: Rows fitted.
        shared: Names of the fitted shared parameters.
        applications: Applications fitted (each with :data:`PER_APP` parameters).
        parameters: Total fitted parameters.
        compute: ``"measured"`` or ``"affine"`` (:data:`COMPUTE_VARIANTS`).
        median_abs_rel_error: In-sample median ``|pred / meas - 1|``.
        p90_abs_rel_error: In-sample 90th percentile.
        cost: Final robust cost.
    """

    rows: int
    shared: tuple[str, ...]
    applications: tuple[str, ...]
    parameters: int
    median_abs_rel_error: float
    p90_abs_rel_error: float
    cost: float
    compute: str = "affine"
    compute_by_app: Mapping[str, str] | None = None

    def to_mapping(self) -> dict[str, Any]:
        """A JSON-able mapping."""
        return {
            "rows": self.rows,
            "shared": list(self.shared),
            "applications": list(self.applications),
            "parameters": self.parameters,
            "compute": self.compute,
            **({"compute_by_app": dict(self.compute_by_app)} if self.compute_by_app else {}),
            "measured_inputs": (
                "compute knots: median 1-GPU step time at each 1-GPU local batch"
                + (
                    " (applications fitted with the measured curve)"
                    if self.compute == "mixed"
                    else ""
                )
                if self.compute in ("measured", "mixed")
                else "none"
            ),
            "median_abs_rel_error": round(self.median_abs_rel_error, 5),
            "p90_abs_rel_error": round(self.p90_abs_rel_error, 5),
            "cost": round(self.cost, 6),
        }


def predict_step_time(profile: HardwareProfile, measurements: Measurements) -> FloatArray:
    """Predicted step time of every measured row on ``profile`` (via :func:`job_times`)."""
    facts, b_inter = spread_facts(measurements.placement, profile.links[0], profile.links[1])
    models = measurements.model
    compute = np.empty(len(measurements))
    grad = np.empty(len(measurements))
    kappa = np.empty(len(measurements))
    for m in np.unique(models):
        sel = models == m
        compute[sel] = profile.compute_time(str(m), measurements.local_bsz[sel])
        grad[sel] = profile.model_grad_bytes(str(m))
        kappa[sel] = profile.model_kappa(str(m))
    times = job_times(profile.perf(), grad, compute, np.inf, facts, b_inter, compute_sharing=kappa)
    out: FloatArray = times.T
    return out


def fit_profile(
    measurements: Measurements,
    *,
    gpus_per_node: int,
    gpu_type: str,
    base: HardwareProfile | None = None,
    name: str | None = None,
    citation: str = "",
    free: Sequence[str] | None = None,
    nic_sharing: float = 1.0,
    gpu_bandwidth: float | None = None,
    compute: str | Mapping[str, str] = "measured",
) -> HardwareProfile:
    """Fit a hardware profile to measured step times.

    Args:
        measurements: The rows to fit (e.g. ``load_measurements(dir, kinds=("placements",))``).
        gpus_per_node: GPUs per node of the measured cluster (every row must fit in it).
        gpu_type: Name of the measured GPU type.
        base: Profile whose fixed values (GPU link, fixed shared terms, other models' curves) are
            kept; default none (GPU link ``gpu_bandwidth`` or 10 TB/s, never binding, latencies 0).
        name: Name of the result (default ``fitted-<gpu_type>``).
        citation: Citation text of the result.
        free: Shared parameters to fit (a subset of :data:`SHARED_PARAMETERS`, at most 4; default
            :data:`MEASURED_FREE` or :data:`DEFAULT_FREE` by ``compute``).
        nic_sharing: ν of the result (structural, not fitted).
        gpu_bandwidth: GPU link bandwidth, bytes/s (default the base's, else 10 TB/s: the fabric binds).
        compute: ``"measured"`` (curve through the 1-GPU rows, per-application level and κ fitted),
            ``"affine"`` (``t0``, ``per_sample`` fitted), ``"mixed"`` (the better of the two per
            application, chosen on ``measurements``), or a mapping ``{application: variant}``
            naming every application; see the module docstring.

    Returns:
        The fitted profile; its ``fit`` field holds a :class:`FitReport` mapping.

    Raises:
        ConfigError: On no rows, an unknown or repeated shared parameter, more than 4 of them, a
            row wider than ``gpus_per_node``, an unknown ``compute`` or application in it, or
            (measured) an application with fewer than two 1-GPU batches or with a shared κ also
            fitted when every application is measured.
    """
    from scipy.optimize import least_squares

    if compute == "mixed":
        return _fit_mixed(
            measurements,
            gpus_per_node=gpus_per_node,
            gpu_type=gpu_type,
            base=base,
            name=name,
            citation=citation,
            free=free,
            nic_sharing=nic_sharing,
            gpu_bandwidth=gpu_bandwidth,
        )
    models = tuple(str(m) for m in np.unique(measurements.model))
    apps = {m: str(measurements.app[measurements.model == m][0]) for m in models}
    by_app = _variant_by_app(compute, tuple(apps.values()))
    is_measured = np.array([by_app[apps[m]] == "measured" for m in models], dtype=bool)
    label = compute if isinstance(compute, str) else "mixed"
    free = tuple(free) if free is not None else MEASURED_FREE if is_measured.any() else DEFAULT_FREE
    for f in free:
        if f not in SHARED_PARAMETERS:
            raise ConfigError(f"free={f!r} is not one of {', '.join(SHARED_PARAMETERS)}")
    if len(set(free)) != len(free) or len(free) > MAX_SHARED:
        raise ConfigError(f"free={list(free)}: at most {MAX_SHARED} distinct shared parameters")
    if is_measured.all() and "compute_sharing" in free:
        raise ConfigError(
            "free: compute_sharing is fitted per application with compute='measured'; leave it out"
        )
    if len(measurements) == 0:
        raise ConfigError("no measured rows to fit")
    if int(measurements.placement.max()) > gpus_per_node:
        raise ConfigError(
            f"a row uses {int(measurements.placement.max())} GPUs on one node; "
            f"gpus_per_node={gpus_per_node}"
        )
    base_gpu = base.links[0] if base is not None else None
    gpu_bw = gpu_bandwidth or (base_gpu.bandwidth if base_gpu else _GPU_LINK)
    gpu_link = LinkLevel("gpu", gpu_bw, base_gpu.latency if base_gpu else 0.0)
    fixed = {
        "fabric": base.fabric_bandwidth if base else math.inf,
        "nic": base.links[1].bandwidth if base else 10 * _GB,
        "overlap": base.overlap if base else 0.0,
        "compute_sharing": base.compute_sharing if base else 0.0,
        "nic_latency": base.links[1].latency if base else 0.0,
        "step_latency": base.step_latency if base else 0.0,
    }
    idx = np.searchsorted(np.array(models), measurements.model)
    na, ns = len(models), len(free)
    zoo_grad = np.array([get_model(m).grad_bytes for m in models])
    b = measurements.local_bsz
    measured = measurements.step_time
    measured_models = [m for i, m in enumerate(models) if is_measured[i]]
    knots = _one_gpu_knots(measured_models, measurements)
    # The measured curve at every row's batch (unscaled), through the same function as a profile's.
    t1 = np.zeros(len(measurements))
    for i, m in enumerate(models):
        if is_measured[i]:
            sel = idx == i
            t1[sel] = compute_curve(*knots[m], b[sel])
    row_measured = is_measured[idx]

    def unpack(x: FloatArray) -> tuple[dict[str, float], FloatArray, FloatArray, FloatArray]:
        """Shared values; the two compute blocks per application (measured: scale, κ; affine:
        t0, per_sample in s); M in bytes."""
        shared = dict(fixed)
        for j, f in enumerate(free):
            v = float(x[3 * na + j])
            shared[f] = (
                1.0 / (1.0 + math.exp(-v))
                if f == "overlap"
                else math.exp(v) * {"fabric": 1.0, "nic": _GB, "compute_sharing": 1.0}.get(f, _US)
            )
        # The fabric is fitted relative to the NIC, so that scaling every bandwidth and every M
        # together (the one direction the step times cannot see) stays free for the prior on M.
        if "fabric" in free:
            shared["fabric"] *= shared["nic"]
        grad = zoo_grad * np.exp(x[2 * na : 3 * na])
        # exp only of the measured blocks (an affine t0 in ms would overflow it).
        c0 = np.where(is_measured, np.exp(np.where(is_measured, x[:na], 0.0)), x[:na] * _MS)
        c1 = np.where(
            is_measured, np.exp(np.where(is_measured, x[na : 2 * na], 0.0)), x[na : 2 * na] * _MS
        )
        return shared, c0, c1, grad

    def predict(x: FloatArray) -> FloatArray:
        shared, c0, c1, grad = unpack(x)
        perf = _perf(shared, nic_sharing)
        facts, b_inter = spread_facts(
            measurements.placement, gpu_link, LinkLevel("nic", shared["nic"], shared["nic_latency"])
        )
        # measured: c0 = scale, c1 = κ of the application; affine: c0 = t0, c1 = per_sample.
        compute_s = np.where(row_measured, c0[idx] * t1, c0[idx] + c1[idx] * b)
        kappa = np.where(row_measured, c1[idx], shared["compute_sharing"])
        times = job_times(perf, grad[idx], compute_s, np.inf, facts, b_inter, compute_sharing=kappa)
        out: FloatArray = times.T
        return out

    def residuals(x: FloatArray) -> FloatArray:
        r = np.log(predict(x)) - np.log(measured)
        return np.concatenate([r, _PRIOR * x[2 * na : 3 * na]])

    # Measured applications: ln scale, ln κ_a; affine ones: t0, per_sample (ms).
    aff_t0, aff_ps = _compute_start(models, measurements)
    t0_start = np.where(is_measured, 0.0, aff_t0)
    ps_start = np.where(is_measured, _START["compute_sharing"], aff_ps)
    k_lo, k_hi = _BOUNDS["compute_sharing"]
    lo_c = np.concatenate(
        [np.where(is_measured, -_SCALE_BOUND, 0.0), np.where(is_measured, k_lo, 0.0)]
    )
    hi_c = np.concatenate(
        [np.where(is_measured, _SCALE_BOUND, np.inf), np.where(is_measured, k_hi, np.inf)]
    )
    lo = np.concatenate([lo_c, np.full(na, -8.0), [_BOUNDS[f][0] for f in free]])
    hi = np.concatenate([hi_c, np.full(na, 8.0), [_BOUNDS[f][1] for f in free]])
    best = None
    for f_bw, n_bw in _LINK_STARTS:
        starts = {**_START, "fabric": math.log(f_bw / n_bw), "nic": math.log(n_bw)}
        x0 = np.concatenate([t0_start, ps_start, np.zeros(na), [starts[f] for f in free]])
        x0 = np.clip(x0, lo + 1e-6, hi - 1e-6)
        res = least_squares(
            residuals,
            x0,
            bounds=(lo, hi),
            loss="soft_l1",
            f_scale=_F_SCALE,
            method="trf",
            max_nfev=3000,
            xtol=1e-10,
            ftol=1e-10,
        )
        if best is None or res.cost < best.cost - 1e-12:
            best = res
    assert best is not None
    x = np.asarray(best.x, dtype=np.float64)
    shared, c0, c1, grad = unpack(x)
    rel = np.abs(predict(x) / measured - 1.0)
    report = FitReport(
        rows=len(measured),
        shared=free,
        applications=tuple(apps[m] for m in models),
        parameters=ns + PER_APP * na,
        median_abs_rel_error=float(np.median(rel)),
        p90_abs_rel_error=float(np.quantile(rel, 0.9)),
        cost=float(best.cost),
        compute=label,
        compute_by_app=dict(by_app) if label == "mixed" else None,
    )
    compute_curves: dict[str, dict[str, ComputeCurve]] = (
        {m: dict(c) for m, c in base.compute.items()} if base else {}
    )
    curves: dict[str, ComputeCurve] = {}
    kappas = dict(base.model_compute_sharing) if base else {}
    for i, m in enumerate(models):
        if is_measured[i]:  # the measured knots at the fitted level
            kb, kt = knots[m]
            curves[m] = ComputeCurve(
                local_batch=tuple(float(v) for v in kb),
                time=tuple(_sig(float(c0[i] * v)) for v in kt),
            )
            kappas[m] = _sig(float(c1[i]))
        else:
            curves[m] = ComputeCurve.affine(_sig(c0[i]), _sig(c1[i]))
    for m, c in curves.items():
        compute_curves.setdefault(m, {})[gpu_type] = c
    grads = dict(base.grad_bytes) if base else {}
    grads.update({m: _sig(grad[i]) for i, m in enumerate(models)})
    speeds = dict(base.gpu_speeds) if base else {}
    speeds.setdefault(gpu_type, 1.0)
    return HardwareProfile(
        name=name or f"fitted-{gpu_type}",
        citation=citation,
        gpus_per_node=gpus_per_node,
        gpu_type=gpu_type,
        gpu_speeds=speeds,
        allreduce="hierarchical",
        links=(
            gpu_link,
            LinkLevel("nic", _sig(shared["nic"]), _sig(shared["nic_latency"])),
            *(base.links[2:] if base else ()),
        ),
        fabric_bandwidth=_sig(shared["fabric"]) if math.isfinite(shared["fabric"]) else math.inf,
        nic_sharing=nic_sharing,
        compute_sharing=_sig(shared["compute_sharing"]),
        step_latency=_sig(shared["step_latency"]),
        overlap=_sig(shared["overlap"]),
        overlap_cap=1.0 if shared["overlap"] > 0 else None,
        model_compute_sharing=kappas,
        compute=compute_curves,
        grad_bytes=grads,
        fit={
            **report.to_mapping(),
            **(
                {
                    "compute_scale": {
                        m: _sig(float(c0[i]), 4) for i, m in enumerate(models) if is_measured[i]
                    }
                }
                if is_measured.any()
                else {}
            ),
        },
    )


def _variant_by_app(compute: str | Mapping[str, str], apps: Sequence[str]) -> dict[str, str]:
    """``{application: "measured" | "affine"}`` for every fitted application."""
    if isinstance(compute, str):
        if compute not in ("measured", "affine"):
            raise ConfigError(f"compute={compute!r} is not one of {', '.join(COMPUTE_VARIANTS)}")
        return {a: compute for a in apps}
    out = {}
    for a in apps:
        v = compute.get(a)
        if v not in ("measured", "affine"):
            raise ConfigError(
                f"compute[{a!r}]={v!r}: every fitted application needs 'measured' or 'affine'"
            )
        out[a] = v
    return out


def _fit_mixed(measurements: Measurements, **kw: Any) -> HardwareProfile:
    """``compute="mixed"``: fit both variants, give each application the one with the lower
    median |rel err| on its own rows of ``measurements``, and fit once more with that choice."""
    per_app = {
        v: error_report(
            predict_step_time(fit_profile(measurements, compute=v, **kw), measurements),
            measurements.step_time,
            measurements.app,
        ).per_app
        for v in ("measured", "affine")
    }
    choice = {
        a: min(("measured", "affine"), key=lambda v: per_app[v][a].median_abs_rel_error)
        for a in per_app["measured"]
    }
    return fit_profile(measurements, compute=choice, **kw)


def _perf(shared: Mapping[str, float], nic_sharing: float) -> PerfConfig:
    return PerfConfig(
        allreduce="hierarchical",
        overlap=shared["overlap"],
        overlap_cap=1.0 if shared["overlap"] > 0 else None,
        fabric_bandwidth=shared["fabric"],
        nic_sharing=nic_sharing,
        compute_sharing=shared["compute_sharing"],
        step_latency=shared["step_latency"],
    )


def _one_gpu_knots(
    models: Sequence[str], m: Measurements
) -> dict[str, tuple[FloatArray, FloatArray]]:
    """Measured compute knots per model: the median 1-GPU step time at each 1-GPU local batch."""
    out = {}
    for model in models:
        sel = (m.model == model) & (m.num_gpus == 1)
        batches = np.unique(m.local_bsz[sel])
        if len(batches) < 2:
            raise ConfigError(
                f"application {m.app[m.model == model][0]}: {len(batches)} 1-GPU local batch(es); "
                "compute='measured' needs >= 2 (use compute='affine')"
            )
        times = np.array([np.median(m.step_time[sel & (m.local_bsz == v)]) for v in batches])
        out[model] = (batches, times)
    return out


def _compute_start(models: Sequence[str], m: Measurements) -> tuple[FloatArray, FloatArray]:
    """Starting ``t0`` and ``per_sample`` (ms) from a line through each model's one-GPU rows."""
    t0, ps = np.full(len(models), 10.0), np.full(len(models), 1.0)
    for i, model in enumerate(models):
        sel = (m.model == model) & (m.num_gpus == 1)
        if sel.sum() >= 2:
            slope, icpt = np.polyfit(m.local_bsz[sel], m.step_time[sel] / _MS, 1)
            ps[i], t0[i] = max(float(slope), 1e-4), max(float(icpt), 1e-2)
        else:
            sel = m.model == model
            ps[i] = float(np.median(m.step_time[sel] / m.local_bsz[sel])) / _MS / 2
            t0[i] = float(np.median(m.step_time[sel])) / _MS / 2
    return t0, ps


def _sig(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")
