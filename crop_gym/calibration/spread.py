"""Placement facts of a job spread over identical nodes under one switch, healthy and alone.

Every calibration data set describes a placement by its GPUs per node: a Sia row ``(4, 2, 1)``, an
ElasticFlow profile point (``g = min(k, 8)`` GPUs on ``s = ceil(k / 8)`` servers), a Chronus
spread (``k / s`` GPUs on each of ``s`` servers). :func:`spread_facts` turns such rows into the
:class:`~crop_gym.model.facts.PlacementFacts` that :func:`~crop_gym.model.facts.placement_facts`
finds for the same GPUs on ``build_tree([nodes, gpus_per_node], ...)`` (a test checks it), so every
prediction of a calibration row goes through :func:`crop_gym.model.timing.job_times`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.facts import PlacementFacts
from crop_gym.model.hardware import LinkLevel

__all__ = ["even_spread", "spread_facts"]

FloatArray = NDArray[np.float64]


def even_spread(k: Any, g: Any, s: Any) -> NDArray[np.int64]:
    """``int64[R, max s]``: ``s - 1`` nodes of ``g`` GPUs and one of the remaining ``k - g (s - 1)``
    (the packed profile points and the Chronus spreads), zero-padded."""
    kk = np.atleast_1d(np.asarray(k, dtype=np.int64))
    gg = np.broadcast_to(np.asarray(g, dtype=np.int64), kk.shape)
    ss = np.broadcast_to(np.asarray(s, dtype=np.int64), kk.shape)
    width = int(ss.max(initial=1))
    col = np.arange(width)
    out = np.where(col < (ss - 1)[:, None], gg[:, None], 0)
    out[np.arange(len(kk)), ss - 1] = kk - gg * (ss - 1)
    return out


def spread_facts(
    placement: NDArray[np.integer[Any]], gpu_link: LinkLevel, nic: LinkLevel
) -> tuple[PlacementFacts, FloatArray]:
    """Placement facts and NIC bandwidth of rows of GPUs per node (healthy, alone, one switch).

    Args:
        placement: ``int[R, N]`` GPUs on each node, zero-padded (any order).
        gpu_link: The GPU link level (bandwidth and latency of a spanned GPU link).
        nic: The NIC level.

    Returns:
        ``(facts, b_inter)``: what :func:`~crop_gym.model.facts.placement_facts` and
        :func:`~crop_gym.model.timing.inter_bandwidth` give on ``build_tree([nodes, gpus], ...)``.
    """
    p = np.asarray(placement)
    k = p.sum(axis=1).astype(np.float64)
    g = p.max(axis=1, initial=0).astype(np.float64)
    s = (p > 0).sum(axis=1).astype(np.float64)
    multi, spread = k >= 2, s >= 2
    facts = PlacementFacts.of(
        np.zeros((len(p), 0), dtype=np.int32),
        k=k,
        g=g,
        s=s,
        b_intra=np.where(multi, gpu_link.bandwidth, np.inf),
        a_intra=np.where(multi, gpu_link.latency, 0.0),
        a_inter=np.where(spread, nic.latency, 0.0),
        slowdown=np.ones(len(p)),
        survival=np.ones(len(p)),
        sum_g2=(p.astype(np.float64) ** 2).sum(axis=1),
    )
    return facts, np.where(spread, nic.bandwidth, np.inf)
