"""Validation protocols: predict measured rows that a fit did not see.

* :func:`fit_within_nodes`: fit on the rows of at most ``N`` nodes, predict the rows of more
  (``crop-gym calibrate --evaluate DIR --fit-within-nodes N``): how well a profile extrapolates to
  larger jobs;
* :func:`leave_one_app_out`: for each application, fit on the others, then add it from its 1-GPU
  rows and its gradient size alone (:func:`new_application`) and predict its multi-GPU rows
  (``--leave-one-app-out``): how well a fitted cluster predicts a model it has never run on more
  than one GPU;
* :func:`new_application`: a profile with one more application, its compute curve the median
  1-GPU step time at each measured 1-GPU batch (``crop-gym calibrate --hardware P --new-app
  DIR/app``). Every per-application term the profile fitted for its own applications (compute
  and latency sharing, the single-replica overhead) takes the profile's cluster-wide value for it.

Each protocol returns :class:`HeldOut` records: the profile used, the rows predicted and the
predictions, which :func:`~crop_gym.calibration.report.evaluate` scores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from crop_gym.calibration.fit import predict_step_time
from crop_gym.calibration.measurements import Measurements
from crop_gym.errors import ConfigError
from crop_gym.model.hardware import ComputeCurve, HardwareProfile
from crop_gym.model.jobs import get_model

__all__ = [
    "Fitter",
    "HeldOut",
    "fit_within_nodes",
    "leave_one_app_out",
    "new_application",
    "one_gpu_curve",
]

FloatArray = NDArray[np.float64]
#: A fit: measured rows in, a hardware profile out.
Fitter = Callable[[Measurements], HardwareProfile]


@dataclass(frozen=True, eq=False)
class HeldOut:
    """Rows a profile did not see, and its predictions of them.

    Attributes:
        label: What was held out (``"nodes > 2"``, ``"bert"``).
        profile: The profile that predicted them.
        rows: The rows.
        predicted: ``float64[R]`` predicted step times.
    """

    label: str
    profile: HardwareProfile
    rows: Measurements
    predicted: FloatArray


def one_gpu_curve(rows: Measurements) -> ComputeCurve:
    """The measured compute curve of one application: piecewise linear through the median 1-GPU
    step time at each 1-GPU local batch.

    Raises:
        ConfigError: If the rows hold fewer than two 1-GPU batches (or several applications).
    """
    apps = set(rows.app.tolist())
    if len(apps) != 1:
        raise ConfigError(f"one application's rows are needed, got {sorted(apps)}")
    sel = rows.num_gpus == 1
    batches = np.unique(rows.local_bsz[sel])
    if len(batches) < 2:
        files = ", ".join(sorted({str(s).rsplit(":", 1)[0] for s in rows.source.tolist()}))
        raise ConfigError(
            f"{files}: application {next(iter(apps))} has {len(batches)} 1-GPU local batch(es) "
            "(rows with placement 1); its compute curve needs at least 2"
        )
    times = [float(np.median(rows.step_time[sel & (rows.local_bsz == b)])) for b in batches]
    return ComputeCurve(local_batch=tuple(float(b) for b in batches), time=tuple(times))


def new_application(
    profile: HardwareProfile,
    rows: Measurements,
    *,
    grad_bytes: float | None = None,
    name: str | None = None,
) -> HardwareProfile:
    """``profile`` with the application of ``rows`` added from its 1-GPU rows and its gradient
    size (see the module docstring).

    Args:
        profile: A fitted cluster profile.
        rows: Measured rows of one application (only its 1-GPU rows are used).
        grad_bytes: Its gradient bytes; default the model zoo's size of its model.
        name: Name of the result (default the profile's).

    Raises:
        ConfigError: If the rows are of several applications or hold fewer than two 1-GPU batches,
            or ``grad_bytes`` is not positive.
    """
    curve = one_gpu_curve(rows)
    model = str(rows.model[0])
    grad = float(get_model(model).grad_bytes if grad_bytes is None else grad_bytes)
    if not grad > 0:
        raise ConfigError(f"grad_bytes={grad_bytes!r} must be > 0 bytes")
    compute = {m: dict(c) for m, c in profile.compute.items()}
    compute[model] = {profile.gpu_type: curve}
    grads = {**profile.grad_bytes, model: grad}

    def others(values: Mapping[str, float]) -> dict[str, float]:
        return {m: v for m, v in values.items() if m != model}

    return dataclasses.replace(
        profile,
        name=name or profile.name,
        compute=compute,
        grad_bytes=grads,
        model_compute_sharing=others(profile.model_compute_sharing),
        model_compute_saturation=others(profile.model_compute_saturation),
        model_latency_inflation=others(profile.model_latency_inflation),
        model_replica_overhead=others(profile.model_replica_overhead),
    )


def fit_within_nodes(rows: Measurements, nodes: int, fit: Fitter) -> HeldOut:
    """Fit on the rows of at most ``nodes`` nodes, predict the others.

    Raises:
        ConfigError: If either side of the split is empty.
    """
    inside = rows.num_nodes <= nodes
    if not inside.any() or inside.all():
        raise ConfigError(
            f"--fit-within-nodes {nodes}: the rows span {int(rows.num_nodes.min())}-"
            f"{int(rows.num_nodes.max())} nodes, so nothing is {'fitted' if not inside.any() else 'held out'}"
        )
    profile = fit(rows.select(inside))
    test = rows.select(~inside)
    return HeldOut(f"nodes > {nodes}", profile, test, predict_step_time(profile, test))


def leave_one_app_out(rows: Measurements, fit: Fitter) -> list[HeldOut]:
    """For each application: fit on the others, add it with :func:`new_application`, predict its
    rows of more than one GPU.

    Raises:
        ConfigError: If fewer than two applications are measured.
    """
    apps = sorted(set(rows.app.tolist()))
    if len(apps) < 2:
        raise ConfigError("leave-one-app-out needs at least two applications")
    out = []
    for app in apps:
        mine = rows.app == app
        profile = new_application(fit(rows.select(~mine)), rows.select(mine))
        test = rows.select(mine & (rows.num_gpus > 1))
        out.append(HeldOut(app, profile, test, predict_step_time(profile, test)))
    return out
