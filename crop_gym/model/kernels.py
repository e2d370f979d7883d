"""Compiled kernels of the hot path (numba, optional: without it the numpy references run).

The readable implementations are the product: the vectorised numpy code of the model and the
environments. This module holds the same computations as loops compiled by numba
(:mod:`crop_gym.model.kernels_numba`, which imports numba), behind the same signatures, for the small
arrays a single environment step works on (1–16 items, where numpy's per-call overhead dominates).
Each is tested equal to its numpy reference, bit for bit, NaN positions included
(tests/test_kernels.py), and used only where it is (:func:`enabled`):

* :func:`generate_rows`: the candidate rows of every (region, size) asked for, ranked, capped and
  without repeats, with the same floating-point sums in the same order as the reference
  (:func:`crop_gym.model.candidates.generate`: prefix sums of the region, numpy's pairwise sum for
  compact and health-first rows);
* :func:`facts_rows`: the placement facts of padded rows of GPUs, with the same products in the
  same order as the reference (:func:`crop_gym.model.facts.facts_kernel`, through
  :meth:`Conditions.facts_of_rows <crop_gym.model.conditions.Conditions.facts_of_rows>`);
* :func:`row_times`: the times, η and values of rows of jobs under the link loads
  (:func:`crop_gym.model.timing.times_arrays` and :func:`crop_gym.model.objective.job_value`
  compiled from their one source), for :class:`~crop_gym.model.state.ClusterState`'s
  re-evaluation and gains;
* :func:`action_tables`: the action tables of every region in one call (view selection,
  generator, facts, gains, mask, row index), against
  :func:`crop_gym.envs.actions.build_action_tables`' numpy steps;
* :func:`observation_tables`: the per-GPU, candidate, queue and summary tables of the
  observation, against :class:`crop_gym.envs.observation.ObservationBuilder`'s numpy columns;
* :func:`region_sums`: F, jobs, busy GPUs and communication share of every region, added in the
  order of the jobs' first GPUs (:meth:`ClusterState.region_metrics
  <crop_gym.model.state.ClusterState.region_metrics>`);
* :func:`place_rows`: the state update of :meth:`ClusterState.place
  <crop_gym.model.state.ClusterState.place>` (facts and constants written, loads raised, the jobs
  sharing a link re-evaluated, F summed).

numba is imported the first time a kernel is asked for (``import crop_gym`` stays cheap), and the
kernels are compiled once per machine (``cache=True``: numba keeps them in ``__pycache__``; a cold
compile takes 30–60 s, a cache load well under a second).
``CROP_GYM_KERNELS=numpy`` in the environment turns them off (the reference runs instead); inside
one process, :func:`backend` forces one path for a block of code (tests compare the two).
benchmarks/bench_kernels.py prints the import and compile cost and each kernel's speed beside its
reference.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

__all__ = [
    "BACKENDS",
    "action_tables",
    "backend",
    "enabled",
    "facts_rows",
    "generate_rows",
    "observation_tables",
    "place_rows",
    "region_sums",
    "row_times",
]

#: The environment variable that turns the compiled kernels off (``numpy``) or on (``numba``).
KERNELS_ENV = "CROP_GYM_KERNELS"

#: The paths :func:`backend` can force: the numpy reference or the compiled kernels.
BACKENDS = ("numpy", "numba")


@cache
def _numba() -> Any:
    """The module of compiled kernels, or ``None`` without numba."""
    try:
        # The optional dependency, imported only here, the first time a kernel is asked for.
        from crop_gym.model import kernels_numba
    except ImportError:
        return None
    return kernels_numba


@cache
def _default() -> Any:
    """The module of compiled kernels, or ``None`` without numba or when turned off
    (:data:`KERNELS_ENV`, read once)."""
    if os.environ.get(KERNELS_ENV, "numba").strip().lower() == "numpy":
        return None
    return _numba()


#: The dispatcher: the compiled module in use, or ``None`` (:func:`backend` swaps it).
_compiled: Callable[[], Any] = _default


def enabled() -> bool:
    """Whether the compiled kernels are in use (numba importable and not turned off)."""
    return _compiled() is not None


def _forced_numpy() -> Any:
    return None


@contextmanager
def backend(name: str) -> Iterator[None]:
    """Force one path inside a ``with`` block, then restore the one before (blocks nest).

    ``backend("numpy")`` runs the numpy references everywhere the dispatch reads
    :func:`enabled`; ``backend("numba")`` the compiled kernels, even under
    ``CROP_GYM_KERNELS=numpy``. Process-wide (not per thread): meant for tests and benchmarks
    that compare the two paths in one process.

    Raises:
        ValueError: If ``name`` is not one of :data:`BACKENDS`.
        ImportError: For ``"numba"`` when numba is not installed.
    """
    global _compiled
    if name not in BACKENDS:
        raise ValueError(f"backend {name!r}: must be one of {', '.join(BACKENDS)}")
    if name == "numba" and _numba() is None:
        raise ImportError("backend('numba'): numba is not installed (the 'fast' extra)")
    before = _compiled
    _compiled = _forced_numpy if name == "numpy" else _numba
    try:
        yield
    finally:
        _compiled = before


def generate_rows(*args: Any) -> Any:
    """The compiled candidate generator
    (:func:`crop_gym.model.kernels_numba.generate_rows`)."""
    return _compiled().generate_rows(*args)


def facts_rows(*args: Any) -> Any:
    """The compiled placement-facts kernel (:func:`crop_gym.model.kernels_numba.facts_rows`)."""
    return _compiled().facts_rows(*args)


def row_times(*args: Any) -> Any:
    """The compiled times of rows of jobs (:func:`crop_gym.model.kernels_numba.row_times`)."""
    return _compiled().row_times(*args)


def action_tables(*args: Any) -> Any:
    """The compiled action tables (:func:`crop_gym.model.kernels_numba.action_tables`)."""
    return _compiled().action_tables(*args)


def observation_tables(*args: Any) -> Any:
    """The compiled observation tables
    (:func:`crop_gym.model.kernels_numba.observation_tables`)."""
    return _compiled().observation_tables(*args)


def region_sums(*args: Any) -> Any:
    """The compiled sums of every region (:func:`crop_gym.model.kernels_numba.region_sums`)."""
    return _compiled().region_sums(*args)


def place_rows(*args: Any) -> Any:
    """The compiled placement of jobs (:func:`crop_gym.model.kernels_numba.place_rows`)."""
    return _compiled().place_rows(*args)
