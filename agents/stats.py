"""Statistics of evaluations over training seeds and held-out instances, in the style of rliable.

Agarwal et al., *Deep Reinforcement Learning at the Edge of the Statistical Precipice* (NeurIPS
2021): report the interquartile mean (IQM) of per-run scores and stratified bootstrap confidence
intervals rather than a mean over a handful of seeds. Here a *score* is a policy's result on one
held-out instance (a static episode, an online window) divided by a reference's (CROP's) on the
same instance; the instances are a sample too, so the bootstrap resamples them first and the
training seeds within each resampled instance second.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["iqm", "mean_ci", "ratio_bootstrap"]


def iqm(x: Any) -> float:
    """Interquartile mean: the mean of the middle 50 % of the values (rliable's IQM)."""
    v = np.sort(np.asarray(x, dtype=float).ravel())
    n = len(v)
    lo, hi = int(np.floor(0.25 * n)), int(np.ceil(0.75 * n))
    return float(v[lo:hi].mean())


def mean_ci(x: Any, *, reps: int = 2000, seed: int = 0) -> list[float]:
    """95 % percentile-bootstrap interval ``[low, high]`` of the mean of ``x`` (values resampled
    with replacement; one value: ``[x, x]``)."""
    v = np.asarray(x, dtype=float).ravel()
    if len(v) == 0:
        raise ValueError("mean_ci needs at least one value")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(len(v), size=(reps, len(v)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return [float(lo), float(hi)]


def ratio_bootstrap(
    policy: np.ndarray, ref: np.ndarray, *, reps: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Ratios of a policy to a reference and their 95 % stratified bootstrap intervals.

    Args:
        policy: The policy's result ``(seeds, instances)``.
        ref: The reference's result ``(instances,)`` on the same instances.
        reps: Bootstrap resamples.
        seed: Seed of the resampling.

    Returns:
        ``ratio_of_means`` (policy mean over seeds × instances / reference mean) and ``iqm_ratio``
        (IQM of the per-(seed, instance) ratios), each with ``..._ci95`` (instances resampled
        with replacement, then the training seeds within each resampled instance), and
        ``bootstrap_reps``.
    """
    policy = np.asarray(policy, dtype=float)
    ref = np.asarray(ref, dtype=float)
    rng = np.random.default_rng(seed)
    S, W = policy.shape
    ratios = policy / ref[None, :]

    def stats(p: np.ndarray, r: np.ndarray, q: np.ndarray) -> tuple[float, float]:
        return float(p.mean() / r.mean()), iqm(q)

    point = stats(policy, ref, ratios)
    draws = np.empty((reps, 2))
    for b in range(reps):
        w = rng.integers(W, size=W)
        s = rng.integers(S, size=(S, W))
        p = policy[s, w[None, :]]
        draws[b] = stats(p, ref[w], p / ref[w][None, :])
    lo, hi = np.percentile(draws, [2.5, 97.5], axis=0)
    return {
        "ratio_of_means": point[0],
        "ratio_of_means_ci95": [float(lo[0]), float(hi[0])],
        "iqm_ratio": point[1],
        "iqm_ratio_ci95": [float(lo[1]), float(hi[1])],
        "bootstrap_reps": reps,
    }
