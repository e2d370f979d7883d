"""The calibration data bundled with the package, and the prediction of one of its points.

* **ElasticFlow A100 throughput profiles** (``data/profiles/throughputs_A100/*.csv``): iterations per
  second of 7 models per global batch ``B`` and GPU count ``k`` (1-8 GPUs inside one 8-GPU server;
  16, 32, 64 GPUs on 2, 4, 8 servers).
* **Chronus placement sensitivity** (``data/chronus/model_info.json``): relative throughput of a job of
  ``k`` GPUs spread over ``s`` servers, against the same job on one server.

The prediction of a profile point is :func:`crop_gym.model.timing.job_times` (the model itself, no
second formula) of the packed placement ``g = min(k, 8)`` GPUs per server on ``s = ceil(k / 8)``
servers, healthy devices and no contention.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from crop_gym.calibration.spread import even_spread, spread_facts
from crop_gym.errors import ConfigError
from crop_gym.model.hardware import LinkLevel
from crop_gym.model.jobs import MODEL_ZOO, scaling_base
from crop_gym.model.timing import PerfConfig, job_times

__all__ = [
    "CHRONUS_LOCAL_BATCH",
    "GPUS_PER_SERVER",
    "ProfilePoint",
    "load_chronus",
    "load_profiles",
    "model_coefficients",
    "predict_iteration_time",
    "profile_placement",
]

#: GPUs per server in the ElasticFlow A100 profiles (columns 1-8 inside one server).
GPUS_PER_SERVER = 8
#: Per-GPU batch assumed for the Chronus jobs (their batch sizes are not in model_info.json).
CHRONUS_LOCAL_BATCH = 32.0

_PROFILE_DIR = "data/profiles/throughputs_A100"
_CHRONUS_FILE = "data/chronus/model_info.json"


# --------------------------------------------------------------------------------------- data
@dataclass(frozen=True, slots=True)
class ProfilePoint:
    """One measured point of an ElasticFlow throughput profile.

    Attributes:
        model: Model name (file stem).
        batch: Global batch size ``B``.
        gpus: GPU count ``k``.
        throughput: Measured iterations per second.
    """

    model: str
    batch: int
    gpus: int
    throughput: float

    @property
    def iteration_time(self) -> float:
        """Measured seconds per iteration (``1 / throughput``)."""
        return 1.0 / self.throughput


def _parse_measured(text: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def load_profiles(models: Iterable[str] | None = None) -> tuple[ProfilePoint, ...]:
    """Read the bundled ElasticFlow A100 profiles.

    Empty, ``nan`` and ``0`` cells are "not measured" and skipped.

    Args:
        models: Models to read (file stems); default all bundled profiles.

    Returns:
        Every measured point, sorted by model, batch and GPU count.

    Raises:
        ConfigError: If a requested model has no bundled profile or a header is malformed.
    """
    folder = resources.files("crop_gym").joinpath(_PROFILE_DIR)
    available = sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".csv"))
    wanted = available if models is None else list(models)
    points: list[ProfilePoint] = []
    for model in wanted:
        if model not in available:
            raise ConfigError(f"no bundled profile for {model!r}; profiles: {', '.join(available)}")
        rows = list(csv.reader(folder.joinpath(f"{model}.csv").read_text().splitlines()))
        header = [h.strip() for h in rows[0]]
        if not header or header[0] != "global_batch_size":
            raise ConfigError(
                f"{_PROFILE_DIR}/{model}.csv: header must start with global_batch_size"
            )
        gpu_counts = [int(h) for h in header[1:]]
        for row in rows[1:]:
            if not row or not row[0].strip():
                continue
            batch = int(float(row[0]))
            for k, cell in zip(gpu_counts, row[1:]):
                value = _parse_measured(cell)
                if value is not None:
                    points.append(ProfilePoint(model, batch, k, value))
    points.sort(key=lambda p: (p.model, p.batch, p.gpus))
    return tuple(points)


def load_chronus() -> dict[str, dict[int, dict[int, float]]]:
    """Read the bundled Chronus placement sensitivity.

    Returns:
        ``{model: {job_gpus: {servers_spanned: relative_throughput}}}`` with integer keys.
    """
    text = resources.files("crop_gym").joinpath(_CHRONUS_FILE).read_text()
    raw: dict[str, dict[str, dict[str, float]]] = json.loads(text)
    return {
        model: {int(k): {int(s): float(v) for s, v in by_s.items()} for k, by_s in by_k.items()}
        for model, by_k in raw.items()
    }


# -------------------------------------------------------------------------------- prediction
def profile_placement(k: Any, gpus_per_server: int = GPUS_PER_SERVER) -> tuple[Any, Any]:
    """The packed placement of a profile point: ``(g, s) = (min(k, 8), ceil(k / 8))``.

    Args:
        k: GPU count(s) (scalar or array).
        gpus_per_server: Server size.

    Returns:
        GPUs per server ``g`` and servers spanned ``s`` (float arrays).
    """
    kf = np.asarray(k, dtype=np.float64)
    return np.minimum(kf, gpus_per_server), np.ceil(kf / gpus_per_server)


def predict_iteration_time(
    allreduce: str,
    t0: Any,
    per_sample: Any,
    grad_bytes: Any,
    local_batch: Any,
    k: Any,
    g: Any,
    s: Any,
    links: Mapping[str, float],
    *,
    nic_sharing: float = 0.0,
) -> Any:
    """Iteration time of a job on a healthy, uncontended placement (vectorised).

    The job has ``g`` GPUs on each of ``s - 1`` servers and the rest on the last
    (:func:`~crop_gym.calibration.spread.even_spread`); it spans its GPU links (bandwidth
    ``intra_bandwidth``, latency ``intra_latency``) and, on more than one server, its server links
    (``inter_bandwidth``, ``inter_latency``), exactly as :func:`crop_gym.model.facts.placement_facts`
    finds on a two-level tree. The time is :func:`crop_gym.model.timing.job_times` of those facts
    with compute ``t0 + per_sample * local_batch`` (the one iteration-time formula).

    Args:
        allreduce: ``"ring"`` or ``"hierarchical"``.
        t0: Fixed compute time per iteration (s).
        per_sample: Compute time per local sample (s).
        grad_bytes: Gradient size ``M`` (bytes).
        local_batch: Per-GPU batch.
        k: GPUs.
        g: GPUs per server (most on one server).
        s: Servers spanned.
        links: The four :data:`LINK_KEYS`.
        nic_sharing: ν of :func:`~crop_gym.model.timing.comm_time` (a server's network card
            shared by the job's ``g`` GPUs there; 0: off, the shipped calibration).

    Returns:
        Seconds per iteration.
    """
    kb, gb, sb = np.broadcast_arrays(np.asarray(k), np.asarray(g), np.asarray(s))
    facts, b_inter = spread_facts(
        even_spread(kb.ravel(), gb.ravel(), sb.ravel()),
        LinkLevel("gpu", links["intra_bandwidth"], links["intra_latency"]),
        LinkLevel("nic", links["inter_bandwidth"], links["inter_latency"]),
    )
    shape = np.broadcast_shapes(
        kb.shape, np.shape(t0), np.shape(per_sample), np.shape(grad_bytes), np.shape(local_batch)
    )

    def rows(x: Any) -> Any:
        return np.broadcast_to(np.asarray(x, dtype=np.float64), shape).ravel()

    compute = rows(t0) + rows(per_sample) * rows(local_batch)
    perf = PerfConfig(allreduce=allreduce, nic_sharing=nic_sharing)
    times = job_times(
        perf, rows(grad_bytes), compute, np.inf, facts, np.broadcast_to(b_inter, compute.shape)
    )
    return times.T.reshape(shape)


def model_coefficients(
    name: str, fitted: Mapping[str, Mapping[str, float]]
) -> tuple[float, float, float]:
    """``(t0, per_sample, grad_bytes)`` of a zoo model under a set of fitted coefficients.

    A measured model takes its fitted values (``t0``, ``per_sample`` and, if present,
    ``grad_bytes``; else the zoo's gradient size); an unmeasured one is scaled from its base model
    by GMACs per sample, the same rule :mod:`crop_gym.model.jobs` applies to the shipped calibration.

    Raises:
        ConfigError: If the model is not in the zoo or its base was not fitted.
    """
    if name not in MODEL_ZOO:
        raise ConfigError(f"unknown model {name!r}")
    spec = MODEL_ZOO[name]
    if name in fitted:
        own = fitted[name]
        grad = float(own.get("grad_bytes", spec.grad_bytes))
        return float(own["t0"]), float(own["per_sample"]), grad
    base = scaling_base(name)
    if base is None or base not in fitted:
        raise ConfigError(f"model {name!r} is neither fitted nor scaled from a fitted model")
    ratio = spec.gmacs / MODEL_ZOO[base].gmacs
    return float(fitted[base]["t0"]), float(fitted[base]["per_sample"]) * ratio, spec.grad_bytes
