"""Fitting link parameters to Chronus' own testbed (the spread penalties as a calibration target).

:func:`~crop_gym.calibration.chronus.chronus_check` *checks* the ElasticFlow A100 links against
Chronus' measured spread penalties (other hardware: the check is about order). :func:`fit_chronus`
instead *fits* the Chronus testbed: the four shared link parameters (:data:`LINK_KEYS`) and, per
model, its compute time per iteration at the assumed local batch (Chronus' file gives neither the
hardware nor the batches) and optionally a gradient-size scale, with the network card of a server
shared by the job's GPUs there (ν = 1, structural as in :mod:`crop_gym.calibration.fit`). The
result is scored by ``chronus_check`` itself, so fitted and checked figures are the same function.

The relative throughput ``T(1 server) / T(s servers)`` does not depend on the scale of time, so
the fit is over ``log`` parameters from several seeded starts (least squares, then Nelder–Mead on
the mean absolute error, the figure the target names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, minimize

from crop_gym.calibration.bundled import CHRONUS_LOCAL_BATCH, load_chronus
from crop_gym.calibration.chronus import ChronusComparison, chronus_check, spread_throughput
from crop_gym.calibration.elasticflow import LINK_KEYS
from crop_gym.errors import ConfigError
from crop_gym.model.jobs import MODEL_ZOO

__all__ = ["ChronusFit", "fit_chronus"]

ChronusData = Mapping[str, Mapping[int, Mapping[int, float]]]

#: Structural ν of the fit (one network card per server carries the traffic of the job's GPUs).
NIC_SHARING = 1.0
#: Ranges of the random starts (log-uniform): seconds, bytes/s, seconds.
_START_COMPUTE = (1e-2, 1.0)
_START_BANDWIDTH = (1e8, 1e11)
_START_LATENCY = (1e-6, 1e-2)


@dataclass(frozen=True)
class ChronusFit:
    """Link parameters fitted to Chronus' spread penalties, and their score.

    Attributes:
        links: The four :data:`LINK_KEYS` (bytes/s and seconds).
        nic_sharing: ν used (structural).
        coefficients: Per model ``{"t0": compute seconds at the local batch, "per_sample": 0}``
            and, with ``grad_scale``, ``"grad_bytes"``.
        shared_params: Fitted shared parameters (4).
        per_model_params: Fitted parameters per model (1, or 2 with ``grad_scale``).
        comparisons: :func:`chronus_check`'s rows under the fit.
        rank_agreement: Share of (model, k) whose predicted order over servers is the measured one.
        mean_abs_error: Mean |predicted − measured| relative throughput over the spread points.
    """

    links: dict[str, float]
    nic_sharing: float
    coefficients: dict[str, dict[str, float]]
    shared_params: int
    per_model_params: int
    comparisons: tuple[ChronusComparison, ...]
    rank_agreement: float
    mean_abs_error: float


@dataclass(frozen=True)
class _Points:
    """The spread points of the data, one entry per (model, k, s > 1)."""

    model: np.ndarray  # int[P] index into ``models``
    k: np.ndarray  # float[P]
    s: np.ndarray  # float[P]
    measured: np.ndarray  # float[P]
    grad: np.ndarray  # float[P] the zoo's gradient bytes of the point's model
    models: tuple[str, ...]


def _points(data: ChronusData) -> _Points:
    rows = [
        (i, float(k), float(s), float(r), MODEL_ZOO[m].grad_bytes)
        for i, m in enumerate(sorted(data))
        for k, by_s in sorted(data[m].items())
        for s, r in sorted(by_s.items())
        if s > 1
    ]
    if not rows:
        raise ConfigError("Chronus data hold no point spread over more than one server")
    model, k, s, measured, grad = (np.array(c) for c in zip(*rows, strict=True))
    return _Points(model.astype(np.intp), k, s, measured, grad, tuple(sorted(data)))


def _unpack(
    x: np.ndarray, n_models: int, grad_scale: bool
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """``(compute[n], grad scale[n], links)`` from the log parameters ``x``."""
    e = np.exp(x)
    compute = e[:n_models]
    scale = e[n_models : 2 * n_models] if grad_scale else np.ones(n_models)
    links = dict(zip(LINK_KEYS, e[-4:].tolist(), strict=True))
    return compute, scale, links


def _relative(x: np.ndarray, p: _Points, grad_scale: bool, local_batch: float) -> np.ndarray:
    compute, scale, links = _unpack(x, len(p.models), grad_scale)
    return spread_throughput(
        "hierarchical",
        compute[p.model],
        0.0,
        p.grad * scale[p.model],
        local_batch,
        p.k,
        p.s,
        links,
        nic_sharing=NIC_SHARING,
    )


def fit_chronus(
    *,
    grad_scale: bool = False,
    data: ChronusData | None = None,
    starts: int = 24,
    seed: int = 0,
    local_batch: float = CHRONUS_LOCAL_BATCH,
) -> ChronusFit:
    """Fit the Chronus testbed's links (and per-model compute) to its spread penalties.

    Args:
        grad_scale: Also fit a gradient-size scale per model (2 parameters per model, not 1).
        data: Chronus data ``{model: {k: {s: relative throughput}}}``; default the bundled file.
        starts: Seeded random starts (>= 1); the best by mean absolute error is kept.
        seed: Seed of the starts.
        local_batch: Per-GPU batch the per-model compute time is taken at.

    Returns:
        The fit, scored by :func:`chronus_check` (hierarchical all-reduce, ν = 1).

    Raises:
        ConfigError: If ``starts`` < 1, or the data have no spread point or an unknown model.
    """
    if starts < 1:
        raise ConfigError(f"starts={starts} must be >= 1")
    chronus = load_chronus() if data is None else data
    unknown = sorted(set(chronus) - set(MODEL_ZOO))
    if unknown:
        raise ConfigError(f"Chronus data name models not in the zoo: {', '.join(unknown)}")
    p = _points(chronus)
    n = len(p.models)
    rng = np.random.default_rng(seed)

    def mae(x: np.ndarray) -> float:
        return float(np.abs(_relative(x, p, grad_scale, local_batch) - p.measured).mean())

    best: tuple[float, np.ndarray] | None = None
    for _ in range(starts):
        x0 = np.concatenate(
            [
                np.log(rng.uniform(*_START_COMPUTE, n)),
                rng.normal(0.0, 0.5, n if grad_scale else 0),
                np.log(rng.uniform(*_START_BANDWIDTH, 2)),
                np.log(rng.uniform(*_START_LATENCY, 2)),
            ]
        )
        ls = least_squares(
            lambda x: _relative(x, p, grad_scale, local_batch) - p.measured, x0, max_nfev=2000
        )
        nm = minimize(
            mae, ls.x, method="Nelder-Mead", options={"maxiter": 8000, "xatol": 1e-7, "fatol": 1e-9}
        )
        err, x = min((float(nm.fun), nm.x), (mae(ls.x), ls.x), key=lambda c: c[0])
        if best is None or err < best[0]:
            best = (err, x)
    assert best is not None
    compute, scale, links = _unpack(best[1], n, grad_scale)
    coefficients: dict[str, dict[str, float]] = {}
    for i, m in enumerate(p.models):
        coefficients[m] = {"t0": float(compute[i]), "per_sample": 0.0}
        if grad_scale:
            coefficients[m]["grad_bytes"] = float(MODEL_ZOO[m].grad_bytes * scale[i])
    rows, agreement, err = chronus_check(
        "hierarchical",
        links,
        coefficients,
        local_batch=local_batch,
        data=chronus,
        nic_sharing=NIC_SHARING,
    )
    return ChronusFit(
        links=links,
        nic_sharing=NIC_SHARING,
        coefficients=coefficients,
        shared_params=len(LINK_KEYS),
        per_model_params=2 if grad_scale else 1,
        comparisons=rows,
        rank_agreement=agreement,
        mean_abs_error=err,
    )
