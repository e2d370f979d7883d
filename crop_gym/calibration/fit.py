"""Fit a hardware profile to measured per-placement step times (Pollux / Sia format).

The measured rows (:class:`~crop_gym.calibration.measurements.Measurements`) are predicted by the
iteration-time model itself (:func:`crop_gym.model.timing.job_times`, no second formula): a row of
``k`` GPUs spread over nodes as ``(g_1, g_2, ...)`` becomes the placement facts of that spread on a
tree of ``gpus_per_node``-GPU nodes under one switch, healthy and alone (``k``, ``g = max g_i``,
``s`` nodes, ``Σ g_i²``; the GPU links and, on more than one node, the NIC links spanned:
:func:`~crop_gym.calibration.spread.spread_facts`, checked against
:func:`~crop_gym.model.facts.placement_facts` on a real topology by a test).

**The model fitted** (docs/MODEL.md §7; every term is a field of the profile):

* ring all-reduce over the job's ``k`` GPUs; its bandwidth term ``2(k-1)/k · M / min(F / g,
  B / g^ν)`` (a node's fabric ``F`` shared by its ``g`` GPUs, its network card ``B`` by the job's
  ``g^ν``), its latency term the sum over the ring's hops (``latency="hops"``): ``a_intra`` per
  hop inside a node, ``a_inter`` per hop out of one, each slowed by ``1 + χ_a (g_i - 1)`` on a
  node with ``g_i`` of the job's GPUs;
* compute pinned to the measurement: the application's measured 1-GPU step time at the local
  batch (piecewise linear through the median at each 1-GPU batch; ``compute="affine"`` fits
  ``t0 + per_sample · b`` instead), less the single-replica overhead ``δ_a`` on more than one GPU,
  times ``1 + min(κ_a (g - 1), κ_a (g* - 1))`` (compute sharing, which stops growing at ``g*``
  co-located GPUs, where the node's shared resource saturates; ``κ_max,a = κ_a (g* - 1)`` in the
  profile, none when ``g*`` reaches ``gpus_per_node``);
* overlap: backward hides up to ``φ · t`` of the all-reduce's bandwidth term, but never the last
  gradient bucket (``bucket_bytes``, PyTorch DDP's default 25 MB); ``φ <= overlap_max``, by
  default the backward pass's share of a step (:data:`BACKWARD_SHARE`, 2/3), the only part of it
  that overlaps; the ring's hop latency, CPU-side work, hides behind up to ``ψ`` of the compute
  left (``latency_overlap``, :func:`~crop_gym.model.timing.times_arrays`).

**Hardware facts** (:class:`NetworkFacts`, ``network=``) stand in for what the rows cannot
identify: on rows of one node, which never cross the network, ``B`` is the card's line rate, ν the
hardware's and ``a_inter = a_intra``, none fitted; with an ``efficiency``, on rows of at most two
nodes ``B`` stays within ``[efficiency, 1] ×`` the line rate (there hidden and exposed
communication fit nearly equally well). The fit's report says where the network terms came from.

Fitted, with :func:`scipy.optimize.least_squares` (trust-region reflective, soft-L1 loss of scale
5 % on the log error of the step time, finite differences on the sparsity pattern of the
parameters, three fixed starts of ``F`` and ``B``, the best kept; deterministic):

* shared by the cluster (:data:`SHARED_PARAMETERS`, 8): ``F``, ``B``, ν, φ, ``a_intra``,
  ``a_inter``, ``g*`` (``g* - 1`` in ``[1, gpus_per_node - 1]``, in log), ψ (in ``[0, 1]``; a
  number given as ``latency_overlap=`` pins it, 0 being the model without it);
* per application (4, :data:`APP_PARAMETERS`): the effective gradient bytes ``M_a`` (in log,
  within a factor 2 of the zoo's size, which is checked against the published parameter counts,
  with a weak pull towards it, weight ``grad_prior``, default :data:`GRAD_PRIOR`; with
  ``grad_prior=math.inf`` every ``M_a`` is pinned to the zoo's size and not fitted, 3 per
  application), ``κ_a``, ``χ_a`` and ``δ_a`` (at most half the application's fastest 1-GPU step).

A model the profile has no per-model value for (a new application, :mod:`.protocols`) takes the
cluster-wide ``compute_sharing``, ``compute_saturation``, ``latency_inflation`` and
``replica_overhead``: the geometric means of the fitted applications' values (so its
``κ_max = κ (g* - 1)`` too) (each is fitted in log, and they differ between
applications by up to four orders of magnitude, so the mean of the logs is their centre; the
median of a few such values is one application's value, whichever sits in the middle).

Structural choices that are not fitted: the ring, the GPU link bandwidth (``gpu_bandwidth``, 10
TB/s by default: the fabric ``F / g`` binds below it) and the bucket size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.calibration.measurements import Measurements
from crop_gym.calibration.spread import spread_facts
from crop_gym.errors import ConfigError
from crop_gym.model.hardware import ComputeCurve, HardwareProfile, LinkLevel
from crop_gym.model.jobs import get_model
from crop_gym.model.timing import PerfConfig, compute_curve, job_times

__all__ = [
    "APP_PARAMETERS",
    "BACKWARD_SHARE",
    "COMPUTE_VARIANTS",
    "DDP_BUCKET_BYTES",
    "GRAD_PRIOR",
    "SHARED_PARAMETERS",
    "FitReport",
    "NetworkFacts",
    "fit_profile",
    "predict_step_time",
]

FloatArray = NDArray[np.float64]

#: Shared parameters fitted (see the module docstring).
SHARED_PARAMETERS: tuple[str, ...] = (
    "fabric",  # F, bytes/s (fitted as ln(F / B))
    "nic",  # B, bytes/s (ln, in GB/s)
    "nic_sharing",  # ν in [0, 1] (logistic)
    "overlap",  # φ in (0, 1) (logistic)
    "gpu_latency",  # a_intra, s per hop (ln, in µs)
    "nic_latency",  # a_inter, s per hop (ln, in µs)
    "saturation_gpus",  # g*, co-located GPUs that saturate the node's shared resource (ln(g* - 1))
    "latency_overlap",  # ψ in [0, 1]: share of the compute left that hides the hop latency
)
#: Per-application parameters fitted (see the module docstring).
APP_PARAMETERS: tuple[str, ...] = (
    "grad_bytes",  # ln(M / M_zoo)
    "compute_sharing",  # κ_a (ln)
    "latency_inflation",  # χ_a (ln)
    "replica_overhead",  # δ_a, s (ln, in ms)
)
#: How the compute curve is obtained (see the module docstring).
COMPUTE_VARIANTS: tuple[str, ...] = ("measured", "affine")
#: PyTorch DDP's default gradient bucket (``bucket_cap_mb=25``): the last one never overlaps.
DDP_BUCKET_BYTES = 25e6
#: Weight of the pull of ln(M / M_zoo) towards 0 (one pseudo-row per application).
GRAD_PRIOR = 0.1
#: Share of a training step's compute that is the backward pass: a backward pass costs about twice
#: the forward's FLOPs (a weight gradient and an input gradient per layer), so 2/3 of the step.
#: DDP can overlap the all-reduce only with backward (a bucket is reduced once its gradients are
#: ready), so the overlap φ cannot exceed it.
BACKWARD_SHARE = 2.0 / 3.0
#: Node counts up to which the rows do not tell the NIC bandwidth from the overlap (issue 31): on
#: rows of at most this many nodes a known line rate bounds ``B`` tightly (:class:`NetworkFacts`).
_FEW_NODES = 2


@dataclass(frozen=True)
class NetworkFacts:
    """Hardware facts of a node's network card, for a fit whose rows cannot identify them.

    Attributes:
        line_rate: Line rate of the network bandwidth ``B`` of the model, bytes/s: what the
            ``g^ν`` co-located GPUs of a job share (per GPU rail on a node with a card per GPU).
        nic_sharing: ν of that hardware: 0 with a card per GPU, 1 with one card per node.
        efficiency: Lowest share of the line rate an all-reduce achieves, in (0, 1], or ``None``
            (the default): with a value, on rows of at most two nodes ``B`` is bounded to
            ``[efficiency, 1] × line_rate``; with ``None`` the line rate is used only where no
            row crosses the network.
        source: Where the line rate comes from (kept in the fit report).
    """

    line_rate: float
    nic_sharing: float
    efficiency: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if not 0 < self.line_rate < 1e15:
            raise ConfigError(f"line_rate={self.line_rate!r} must be in (0, 1e15) bytes/s")
        if not 0 <= self.nic_sharing <= 1:
            raise ConfigError(f"nic_sharing={self.nic_sharing!r} must be in [0, 1]")
        if self.efficiency is not None and not 0 < self.efficiency <= 1:
            raise ConfigError(f"efficiency={self.efficiency!r} must be in (0, 1]")


# GPU link bandwidth of a profile fitted without a base: high enough never to bind, so that the
# node fabric (F / g per GPU) alone sets the intra-node bandwidth.
_GPU_LINK = 1e13
_F_SCALE = 0.05  # soft-L1 scale of the log error (5 %)
_GB, _US, _MS = 1e9, 1e-6, 1e-3
# Fixed starting points of (F, B) in GB/s; the other values start at _START.
_LINK_STARTS: tuple[tuple[float, float], ...] = ((20.0, 5.0), (100.0, 20.0), (5.0, 1.0))
# (start, low, high) of each fitted value in its fitted scale.
_SHARED = {
    "fabric": (0.0, math.log(1e-3), math.log(1e5)),
    "nic": (0.0, math.log(0.01), math.log(1e3)),
    "nic_sharing": (0.0, -8.0, 8.0),
    "overlap": (0.0, -12.0, 12.0),
    "gpu_latency": (math.log(10.0), math.log(0.1), math.log(1e5)),
    "nic_latency": (math.log(100.0), math.log(0.1), math.log(1e5)),
    # g* - 1 in [1, gpus_per_node - 1] (the upper bound is set per fit: there, no row saturates);
    # it starts at 3 (saturated from 4 GPUs on), where both κ_a and g* move the residuals (a g* that
    # no row reaches has no gradient).
    "saturation_gpus": (math.log(3.0), 0.0, math.log(7.0)),
    # ψ itself (a box bound of the trust region, not a logistic, whose gradient vanishes near 0),
    # starting at 0, the model without it: the data decide whether it moves.
    "latency_overlap": (0.0, 0.0, 1.0),
}
_APP = {
    "grad_bytes": (0.0, -math.log(2.0), math.log(2.0)),
    "compute_sharing": (math.log(0.02), -12.0, math.log(2.0)),
    # χ >= 0.001: below any measurement's resolution, but never 0, so that placements that differ
    # beyond node order (same k, s and g, other Σ g_i²) never tie where the data cannot tell.
    "latency_inflation": (math.log(0.1), math.log(1e-3), math.log(100.0)),
    "replica_overhead": (math.log(1.0), math.log(1e-3), math.log(1e4)),
}
_MAX_NFEV = 1000
_TOL = 1e-8
_SPARSE_FROM = 50_000  # Jacobian entries above which differences are grouped by sparsity


@dataclass(frozen=True)
class FitReport:
    """What a fit did (kept in the profile's ``fit`` field as a mapping).

    Attributes:
        rows: Rows fitted.
        shared: Names of the fitted shared parameters.
        applications: Applications fitted (each with :data:`APP_PARAMETERS`, plus ``t0`` and
            ``per_sample`` with ``compute="affine"``).
        parameters: Total fitted parameters.
        compute: ``"measured"`` or ``"affine"`` (:data:`COMPUTE_VARIANTS`).
        median_abs_rel_error: In-sample median ``|pred / meas - 1|``.
        p90_abs_rel_error: In-sample 90th percentile.
        cost: Final robust cost.
        network: Where the network terms (``B``, ν, ``a_inter``) come from: fitted, bounded by
            or taken from the hardware facts, or not identified (:func:`fit_profile`).
        overlap_max: Upper bound of φ used (:data:`BACKWARD_SHARE` by default).
    """

    rows: int
    shared: tuple[str, ...]
    applications: tuple[str, ...]
    parameters: int
    compute: str
    median_abs_rel_error: float
    p90_abs_rel_error: float
    cost: float
    network: str = "fitted"
    overlap_max: float = 1.0

    def to_mapping(self) -> dict[str, Any]:
        """A JSON-able mapping."""
        return {
            "rows": self.rows,
            "shared": list(self.shared),
            "applications": list(self.applications),
            "per_application": list(APP_PARAMETERS)
            + (["t0", "per_sample"] if self.compute == "affine" else []),
            "parameters": self.parameters,
            "compute": self.compute,
            "measured_inputs": (
                "compute: median 1-GPU step time at each 1-GPU local batch (knots)"
                if self.compute == "measured"
                else "none"
            ),
            "median_abs_rel_error": round(self.median_abs_rel_error, 5),
            "p90_abs_rel_error": round(self.p90_abs_rel_error, 5),
            "cost": round(self.cost, 6),
            "network": self.network,
            "overlap_max": round(self.overlap_max, 6),
        }


def predict_step_time(profile: HardwareProfile, measurements: Measurements) -> FloatArray:
    """Predicted step time of every measured row on ``profile`` (via :func:`job_times`)."""
    facts, b_inter = spread_facts(measurements.placement, profile.links[0], profile.links[1])
    models = measurements.model
    n = len(measurements)
    compute, grad, kappa, kappa_max, chi, delta = (np.empty(n) for _ in range(6))
    for m in np.unique(models):
        sel = models == m
        name = str(m)
        compute[sel] = profile.compute_time(name, measurements.local_bsz[sel])
        grad[sel] = profile.model_grad_bytes(name)
        kappa[sel] = profile.model_kappa(name)
        kappa_max[sel] = profile.model_kappa_max(name)
        chi[sel] = profile.model_chi(name)
        delta[sel] = profile.model_delta(name)
    times = job_times(
        profile.perf(),
        grad,
        compute,
        np.inf,
        facts,
        b_inter,
        compute_sharing=kappa,
        compute_saturation=kappa_max,
        latency_inflation=chi,
        replica_overhead=delta,
    )
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
    compute: str = "measured",
    gpu_bandwidth: float | None = None,
    bucket_bytes: float = DDP_BUCKET_BYTES,
    grad_prior: float = GRAD_PRIOR,
    overlap_max: float = BACKWARD_SHARE,
    network: NetworkFacts | None = None,
    latency_overlap: float | None = None,
) -> HardwareProfile:
    """Fit a hardware profile to measured step times (the model of the module docstring).

    Args:
        measurements: The rows to fit (e.g. ``load_measurements(dir)``).
        gpus_per_node: GPUs per node of the measured cluster (every row must fit in it).
        gpu_type: Name of the measured GPU type.
        base: Profile whose other models' curves, upper link levels and GPU speeds are kept.
        name: Name of the result (default ``fitted-<gpu_type>``).
        citation: Citation text of the result.
        compute: ``"measured"`` (the 1-GPU rows, pinned) or ``"affine"`` (``t0``,
            ``per_sample`` fitted per application).
        gpu_bandwidth: GPU link bandwidth, bytes/s (default the base's, else 10 TB/s).
        bucket_bytes: The last gradient bucket, which cannot overlap (0: no such limit).
        grad_prior: Weight of the pull of ``ln(M_a / M_zoo)`` towards 0 (:data:`GRAD_PRIOR`);
            ``math.inf`` pins every ``M_a`` to the model zoo's size (no ``grad_bytes`` fitted).
        overlap_max: Upper bound of the overlap φ, in (0, 1] (default :data:`BACKWARD_SHARE`:
            only the backward pass overlaps the all-reduce).
        network: Hardware facts of the network card (:class:`NetworkFacts`), used where the rows
            cannot identify the network: on rows of at most two nodes ``B`` is bounded to
            ``[efficiency, 1] ×`` its line rate; on rows of one node (no row crosses the network)
            ``B`` is the line rate, ν the hardware's and a hop out of a node costs what one inside
            does (``a_inter = a_intra``), none of them fitted. Without facts such a fit leaves
            them where its start put them, and its report says they are not identified.
        latency_overlap: ψ pinned to this value in [0, 1] (0: the hop latency never hides, the
            model before it), or ``None`` (the default) to fit it.

    Returns:
        The fitted profile; its ``fit`` field holds a :class:`FitReport` mapping.

    Raises:
        ConfigError: On no rows, a row wider than ``gpus_per_node``, an unknown ``compute``, or
            (measured) an application with fewer than two 1-GPU batches.
    """
    from scipy.optimize import least_squares
    from scipy.sparse import lil_matrix

    if compute not in COMPUTE_VARIANTS:
        raise ConfigError(f"compute={compute!r} is not one of {', '.join(COMPUTE_VARIANTS)}")
    if len(measurements) == 0:
        raise ConfigError("no measured rows to fit")
    if int(measurements.placement.max()) > gpus_per_node:
        raise ConfigError(
            f"a row uses {int(measurements.placement.max())} GPUs on one node; "
            f"gpus_per_node={gpus_per_node}"
        )
    if not 0 <= bucket_bytes < 1e15:
        raise ConfigError(f"bucket_bytes={bucket_bytes!r} must be in [0, 1e15)")
    if not 0 < overlap_max <= 1:
        raise ConfigError(f"overlap_max={overlap_max!r} must be in (0, 1]")
    if latency_overlap is not None and not 0 <= latency_overlap <= 1:
        raise ConfigError(f"latency_overlap={latency_overlap!r} must be in [0, 1] (None: fitted)")
    if not grad_prior >= 0:
        raise ConfigError(f"grad_prior={grad_prior!r} must be >= 0 (inf: M pinned to the zoo's)")
    pinned = math.isinf(grad_prior)
    rows = measurements
    span = int(rows.num_nodes.max())
    # The network terms no row identifies come from the hardware facts (see Args).
    net_fixed = span == 1 and network is not None
    net_bounded = 1 < span <= _FEW_NODES and network is not None and network.efficiency is not None
    network_note = _network_note(span, network)
    models = tuple(str(m) for m in np.unique(rows.model))
    apps = {m: str(rows.app[rows.model == m][0]) for m in models}
    idx = np.searchsorted(np.array(models), rows.model)
    na, R = len(models), len(rows)
    measured_t = rows.step_time
    b = rows.local_bsz
    affine = compute == "affine"
    base_gpu = base.links[0] if base is not None else None
    gpu_link = LinkLevel(
        "gpu",
        gpu_bandwidth or (base_gpu.bandwidth if base_gpu else _GPU_LINK),
        0.0,
    )
    zoo_grad = np.array([get_model(m).grad_bytes for m in models])
    knots = {} if affine else _one_gpu_knots(models, rows)
    t1 = np.zeros(R)
    if not affine:
        for i, m in enumerate(models):
            sel = idx == i
            t1[sel] = compute_curve(*knots[m], b[sel])
    # δ_a is at most half the application's fastest step: its upper bound in ln ms.
    fastest = np.array([rows.step_time[idx == i].min() for i in range(na)])
    delta_hi = np.log(0.5 * fastest / _MS)

    # The fitted vector: per application blocks (na each), then affine t0, per_sample (ms), then
    # the shared values.
    app_names = [p for p in APP_PARAMETERS if not (pinned and p == "grad_bytes")]
    app_names += ["t0", "per_sample"] if affine else []
    n_app = len(app_names)
    t0_start, ps_start = _compute_start(models, rows)
    lo, hi, x0 = [], [], []
    for p in app_names:
        if p in _APP:
            start, low, high = _APP[p]
            x0.append(np.full(na, start))
            lo.append(np.full(na, low))
            hi.append(delta_hi if p == "replica_overhead" else np.full(na, high))
        else:
            x0.append(t0_start if p == "t0" else ps_start)
            lo.append(np.zeros(na))
            hi.append(np.full(na, np.inf))
    # (On nodes of 1 or 2 GPUs no row can saturate before g = gpus_per_node: the bound is then
    # just above 0 and g* is off.)
    sat_high = math.log(max(gpus_per_node - 1.0, 1.001))
    for p in SHARED_PARAMETERS:
        start, low, high = _SHARED[p]
        if p == "saturation_gpus":
            high = sat_high
            start = min(start, high)
        if p == "nic" and net_bounded and network is not None and network.efficiency is not None:
            low = math.log(network.efficiency * network.line_rate / _GB)
            high = math.log(network.line_rate / _GB)
            start = 0.5 * (low + high)
        x0.append(np.array([start]))
        lo.append(np.array([low]))
        hi.append(np.array([high]))
    lo_v, hi_v, x_init = np.concatenate(lo), np.concatenate(hi), np.concatenate(x0)
    shared_at = n_app * na

    def unpack(x: FloatArray) -> tuple[dict[str, float], dict[str, FloatArray]]:
        sh = dict(zip(SHARED_PARAMETERS, x[shared_at:].tolist()))
        shared = {
            "nic": math.exp(sh["nic"]) * _GB,
            "nic_sharing": 1.0 / (1.0 + math.exp(-sh["nic_sharing"])),
            "overlap": overlap_max / (1.0 + math.exp(-sh["overlap"])),
            "gpu_latency": math.exp(sh["gpu_latency"]) * _US,
            "nic_latency": math.exp(sh["nic_latency"]) * _US,
            "saturation_gpus": 1.0 + math.exp(sh["saturation_gpus"]),
            "latency_overlap": sh["latency_overlap"]
            if latency_overlap is None
            else float(latency_overlap),
        }
        if net_fixed and network is not None:
            shared["nic"] = network.line_rate
            shared["nic_sharing"] = network.nic_sharing
            shared["nic_latency"] = shared["gpu_latency"]
        # The fabric is fitted relative to the NIC, so that scaling every bandwidth and every M
        # together (the one direction the step times cannot see) stays free for the prior on M.
        shared["fabric"] = math.exp(sh["fabric"]) * shared["nic"]
        blocks = {p: x[i * na : (i + 1) * na] for i, p in enumerate(app_names)}
        per = {
            "grad_bytes": zoo_grad * np.exp(blocks["grad_bytes"]) if not pinned else zoo_grad,
            "compute_sharing": np.exp(blocks["compute_sharing"]),
            "latency_inflation": np.exp(blocks["latency_inflation"]),
            "replica_overhead": np.exp(blocks["replica_overhead"]) * _MS,
        }
        # The slowdown stops growing at g* co-located GPUs, where the node's shared resource
        # saturates: κ_max = κ (g* - 1), or none where g* is at its bound (no row reaches it).
        at_bound = sh["saturation_gpus"] >= sat_high - 1e-9
        per["compute_saturation"] = (
            np.full(na, np.inf)
            if at_bound
            else per["compute_sharing"] * (shared["saturation_gpus"] - 1.0)
        )
        if affine:
            per["t0"], per["per_sample"] = blocks["t0"] * _MS, blocks["per_sample"] * _MS
        return shared, per

    def perf_of(shared: dict[str, float]) -> PerfConfig:
        return PerfConfig(
            allreduce="ring",
            latency="hops",
            overlap=shared["overlap"],
            overlap_cap=1.0,
            fabric_bandwidth=shared["fabric"],
            nic_sharing=shared["nic_sharing"],
            bucket_bytes=bucket_bytes,
            latency_overlap=shared["latency_overlap"],
        )

    def predict(x: FloatArray) -> FloatArray:
        shared, per = unpack(x)
        facts, b_inter = spread_facts(
            rows.placement,
            LinkLevel("gpu", gpu_link.bandwidth, shared["gpu_latency"]),
            LinkLevel("nic", shared["nic"], shared["nic_latency"]),
        )
        t_c = per["t0"][idx] + per["per_sample"][idx] * b if affine else t1
        times = job_times(
            perf_of(shared),
            per["grad_bytes"][idx],
            t_c,
            np.inf,
            facts,
            b_inter,
            compute_sharing=per["compute_sharing"][idx],
            compute_saturation=per["compute_saturation"][idx],
            latency_inflation=per["latency_inflation"][idx],
            replica_overhead=per["replica_overhead"][idx],
        )
        out: FloatArray = times.T
        return out

    log_measured = np.log(measured_t)

    def residuals(x: FloatArray) -> FloatArray:
        r = np.log(predict(x)) - log_measured
        return r if pinned else np.concatenate([r, grad_prior * x[:na]])

    # Which residuals each parameter moves: a per-application value only its rows (and its
    # prior row), a shared value every row. Finite differences then perturb many columns at once.
    n_prior = 0 if pinned else na
    sparsity = lil_matrix((R + n_prior, len(x_init)), dtype=np.int8)
    for i, _ in enumerate(app_names):
        for a in range(na):
            sparsity[np.flatnonzero(idx == a), i * na + a] = 1
    for a in range(n_prior):
        sparsity[R + a, a] = 1
    sparsity[:R, shared_at:] = 1
    # Grouped differences pay off on many rows; on a few, scipy's sparse bookkeeping costs more.
    sparse = (R + n_prior) * len(x_init) > _SPARSE_FROM
    best = None
    for f_bw, n_bw in _LINK_STARTS:
        x = x_init.copy()
        x[shared_at + SHARED_PARAMETERS.index("fabric")] = math.log(f_bw / n_bw)
        x[shared_at + SHARED_PARAMETERS.index("nic")] = math.log(n_bw)
        x = np.clip(x, lo_v + 1e-6, np.where(np.isfinite(hi_v), hi_v - 1e-6, hi_v))
        res = least_squares(
            residuals,
            x,
            bounds=(lo_v, hi_v),
            loss="soft_l1",
            f_scale=_F_SCALE,
            method="trf",
            max_nfev=_MAX_NFEV,
            xtol=_TOL,
            ftol=_TOL,
            jac_sparsity=sparsity if sparse else None,
            x_scale="jac",
        )
        if best is None or res.cost < best.cost - 1e-12:
            best = res
    assert best is not None
    x = np.asarray(best.x, dtype=np.float64)
    shared, per = unpack(x)
    rel = np.abs(predict(x) / measured_t - 1.0)
    report = FitReport(
        rows=R,
        shared=SHARED_PARAMETERS,
        applications=tuple(apps[m] for m in models),
        parameters=len(SHARED_PARAMETERS)
        - (3 if net_fixed else 0)
        - (0 if latency_overlap is None else 1)
        + n_app * na,
        compute=compute,
        median_abs_rel_error=float(np.median(rel)),
        p90_abs_rel_error=float(np.quantile(rel, 0.9)),
        cost=float(best.cost),
        network=network_note,
        overlap_max=overlap_max,
    )
    compute_curves: dict[str, dict[str, ComputeCurve]] = (
        {m: dict(c) for m, c in base.compute.items()} if base else {}
    )
    for i, m in enumerate(models):
        if affine:
            curve = ComputeCurve.affine(_sig(per["t0"][i]), _sig(per["per_sample"][i]))
        else:
            kb, kt = knots[m]
            curve = ComputeCurve(
                local_batch=tuple(float(v) for v in kb), time=tuple(float(v) for v in kt)
            )
        compute_curves.setdefault(m, {})[gpu_type] = curve
    grads = dict(base.grad_bytes) if base else {}
    grads.update({m: _sig(per["grad_bytes"][i]) for i, m in enumerate(models)})
    speeds = dict(base.gpu_speeds) if base else {}
    speeds.setdefault(gpu_type, 1.0)

    def by_model(p: str) -> dict[str, float]:
        return {m: _sig(float(per[p][i])) for i, m in enumerate(models) if np.isfinite(per[p][i])}

    return HardwareProfile(
        name=name or f"fitted-{gpu_type}",
        citation=citation,
        gpus_per_node=gpus_per_node,
        gpu_type=gpu_type,
        gpu_speeds=speeds,
        allreduce="ring",
        links=(
            LinkLevel("gpu", gpu_link.bandwidth, _sig(shared["gpu_latency"])),
            LinkLevel("nic", _sig(shared["nic"]), _sig(shared["nic_latency"])),
            *(base.links[2:] if base else ()),
        ),
        fabric_bandwidth=_sig(shared["fabric"]),
        nic_sharing=_sig(shared["nic_sharing"]),
        overlap=_sig(shared["overlap"]),
        overlap_cap=1.0,
        latency="hops",
        bucket_bytes=bucket_bytes,
        latency_overlap=_sig(shared["latency_overlap"]),
        # A model without its own values (a new application) takes the fitted ones' geometric
        # means (each is fitted in log and they differ by orders of magnitude between models).
        compute_sharing=_sig(_geometric_mean(per["compute_sharing"])),
        compute_saturation=_sig(_geometric_mean(per["compute_saturation"])),
        latency_inflation=_sig(_geometric_mean(per["latency_inflation"])),
        replica_overhead=_sig(_geometric_mean(per["replica_overhead"])),
        model_compute_sharing=by_model("compute_sharing"),
        model_compute_saturation=by_model("compute_saturation"),
        model_latency_inflation=by_model("latency_inflation"),
        model_replica_overhead=by_model("replica_overhead"),
        compute=compute_curves,
        grad_bytes=grads,
        fit=report.to_mapping(),
    )


def _network_note(span: int, network: NetworkFacts | None) -> str:
    """Where a fit of rows spanning ``span`` nodes takes its network terms from (the report)."""
    src = f" ({network.source})" if network is not None and network.source else ""
    if span == 1:
        if network is None:
            return (
                "not identified: no row crosses the network and no hardware facts were given, "
                "so the NIC bandwidth, ν and a_inter stay at the fit's start"
            )
        return (
            "hardware facts, not fitted (no row crosses the network): B = the line rate "
            f"{network.line_rate / _GB:.3g} GB/s, ν = {network.nic_sharing:g}, "
            f"a_inter = a_intra{src}"
        )
    if span <= _FEW_NODES and network is not None and network.efficiency is not None:
        return (
            f"fitted, B bounded to [{network.efficiency:g}, 1] x the line rate "
            f"{network.line_rate / _GB:.3g} GB/s (rows of {span} nodes){src}"
        )
    return "fitted"


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
        if sel.sum() >= 2 and len(np.unique(m.local_bsz[sel])) >= 2:
            slope, icpt = np.polyfit(m.local_bsz[sel], m.step_time[sel] / _MS, 1)
            ps[i], t0[i] = max(float(slope), 1e-4), max(float(icpt), 1e-2)
        else:
            sel = m.model == model
            ps[i] = float(np.median(m.step_time[sel] / m.local_bsz[sel])) / _MS / 2
            t0[i] = float(np.median(m.step_time[sel])) / _MS / 2
    return t0, ps


def _geometric_mean(values: FloatArray) -> float:
    """``exp(mean(ln v))`` of positive values (every fitted κ, χ, δ is > 0: fitted in log)."""
    return float(np.exp(np.mean(np.log(values))))


def _sig(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")
