"""Compiled kernels of the hot path (optional: the ``fast`` extra, numba).

The readable implementations are the product: the vectorised numpy code of
:mod:`crop_gym.model.candidates` (the candidate generator) and :mod:`crop_gym.model.facts` (the
placement-facts kernel). This module holds the same two computations as loops compiled by numba,
behind the same signatures, for the small arrays a single environment step works on (1–16 items,
where numpy's per-call overhead dominates). Each is tested equal to its numpy reference, bit for bit
(tests/test_kernels.py), and used only where it is (:func:`enabled`).

* :func:`generate_rows` (:mod:`crop_gym.model.kernels_numba`, which imports numba): the candidate
  rows of every (region, size) asked for, ranked, capped and
  without repeats, with the same floating-point sums in the same order as the reference (prefix
  sums of the region, numpy's pairwise sum for compact and health-first rows);
* :func:`facts_rows`: the placement facts of padded rows of GPUs, with the same products in the
  same order as the reference.

numba is imported the first time a kernel is asked for (``import crop_gym`` stays cheap), and the
kernels are compiled once per machine (``cache=True``: numba keeps them in ``__pycache__``).
``CROP_GYM_KERNELS=numpy`` in the environment turns them off (the reference runs instead).
benchmarks/bench_kernels.py prints the import and compile cost and each kernel's speed beside its
reference.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

__all__ = [
    "action_tables",
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


@cache
def _compiled() -> Any:
    """The module of compiled kernels, or ``None`` without numba or when turned off."""
    if os.environ.get(KERNELS_ENV, "numba").strip().lower() == "numpy":
        return None
    try:
        # The optional dependency, imported only here, the first time a kernel is asked for.
        from crop_gym.model import kernels_numba
    except ImportError:
        return None
    return kernels_numba


def enabled() -> bool:
    """Whether the compiled kernels are in use (numba importable and not turned off)."""
    return _compiled() is not None


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
