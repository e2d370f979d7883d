"""Checking the fitted link parameters against Chronus' measured placement sensitivity.

Chronus measured, on other hardware, the throughput of a job of ``k`` GPUs spread over ``s`` servers
relative to the same job on one server. The check compares the predicted order over ``s`` strictly
and reports the absolute error for information.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.calibration.bundled import (
    CHRONUS_LOCAL_BATCH,
    load_chronus,
    model_coefficients,
    predict_iteration_time,
)
from crop_gym.errors import ConfigError

__all__ = ["ChronusComparison", "chronus_check", "spread_throughput"]

_TIE_RTOL = 1e-9


@dataclass(frozen=True, slots=True)
class ChronusComparison:
    """Predicted against measured relative throughput of one Chronus (model, job size).

    Attributes:
        model: Model name.
        gpus: Job size ``k``.
        servers: Servers spanned, ascending (1 included).
        measured: Measured throughput relative to one server, per entry of ``servers``.
        predicted: Predicted ``T(1 server) / T(s servers)``, per entry of ``servers``.
        order_matches: Whether the predicted order over ``servers`` equals the measured one.
    """

    model: str
    gpus: int
    servers: tuple[int, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]
    order_matches: bool


# ------------------------------------------------------------------------------------ chronus
def _order_signs(values: Sequence[float], *, rtol: float) -> list[int]:
    signs = []
    for i in range(len(values)):
        for j in range(i + 1, len(values)):
            a, b = values[i], values[j]
            diff = a - b
            tie = abs(diff) <= rtol * max(abs(a), abs(b))
            signs.append(0 if tie else (1 if diff > 0 else -1))
    return signs


def spread_throughput(
    allreduce: str,
    t0: Any,
    per_sample: Any,
    grad_bytes: Any,
    local_batch: Any,
    k: Any,
    s: Any,
    links: Mapping[str, float],
    *,
    nic_sharing: float = 0.0,
) -> NDArray[np.float64]:
    """Predicted throughput of a job of ``k`` GPUs spread as ``k / s`` GPUs on each of ``s``
    servers, relative to the job on one server: ``T(1 server) / T(s servers)`` (vectorised; the
    arguments are those of :func:`predict_iteration_time`, ``g`` derived from ``k`` and ``s``)."""
    kf = np.asarray(k, dtype=np.float64)
    sf = np.asarray(s, dtype=np.float64)

    def time(g: Any, servers: Any) -> Any:
        return predict_iteration_time(
            allreduce,
            t0,
            per_sample,
            grad_bytes,
            local_batch,
            kf,
            g,
            servers,
            links,
            nic_sharing=nic_sharing,
        )

    return np.asarray(time(kf, np.ones_like(sf)) / time(kf / sf, sf), dtype=np.float64)


def chronus_check(
    allreduce: str,
    links: Mapping[str, float],
    fitted: Mapping[str, Mapping[str, float]],
    *,
    local_batch: float = CHRONUS_LOCAL_BATCH,
    data: Mapping[str, Mapping[int, Mapping[int, float]]] | None = None,
    nic_sharing: float = 0.0,
) -> tuple[tuple[ChronusComparison, ...], float, float]:
    """Compare predicted and measured Chronus placement sensitivity.

    For each (model, job size ``k``) and servers spanned ``s``, the job has ``k / s`` GPUs on each of
    ``s`` servers and a per-GPU batch ``local_batch``; the predicted relative throughput is
    ``T(1 server) / T(s servers)``.

    Args:
        allreduce: ``"ring"`` or ``"hierarchical"``.
        links: Link parameters (:data:`LINK_KEYS`).
        fitted: Fitted coefficients of the measured models (unmeasured ones are scaled).
        local_batch: Per-GPU batch of the Chronus jobs.
        data: Chronus data; default the bundled file.
        nic_sharing: ν, the network card of a server shared by the job's GPUs there (0: off).

    Returns:
        ``(comparisons, rank_agreement, mean_abs_error)``.
    """
    chronus = load_chronus() if data is None else data
    rows: list[ChronusComparison] = []
    errors: list[float] = []
    for model in sorted(chronus):
        t0, per_sample, grad = model_coefficients(model, fitted)
        for k in sorted(chronus[model]):
            by_s = chronus[model][k]
            servers = tuple(sorted(set(by_s) | {1}))
            if any(k % s for s in servers):
                raise ConfigError(f"Chronus {model} k={k}: servers {servers} do not divide the job")
            rel = spread_throughput(
                allreduce,
                t0,
                per_sample,
                grad,
                local_batch,
                k,
                np.asarray(servers),
                links,
                nic_sharing=nic_sharing,
            )
            predicted = tuple(rel.tolist())
            measured = tuple(float(by_s.get(s, 1.0)) for s in servers)
            match = _order_signs(predicted, rtol=_TIE_RTOL) == _order_signs(measured, rtol=0.0)
            rows.append(ChronusComparison(model, k, servers, measured, predicted, match))
            errors.extend(abs(p - m) for s, p, m in zip(servers, predicted, measured) if s > 1)
    agreement = sum(r.order_matches for r in rows) / len(rows) if rows else float("nan")
    mae = float(np.mean(errors)) if errors else float("nan")
    return tuple(rows), agreement, mae
