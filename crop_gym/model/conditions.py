"""Conditions: a cluster under one device health, compiled once.

Everything the model derives from a :class:`~crop_gym.model.topology.Topology` and a
:class:`~crop_gym.model.health.Health` together lives here, computed once per health and carried by
the one :class:`Conditions` object that the cluster state holds while the health lasts:

* the effective link bandwidths ``ρ_e · B_e`` and the usable GPUs;
* every GPU's *badness* ``σ_g / speed_g / (1 - π_g)`` (1 is a healthy reference GPU), which steers
  the candidate generator (:mod:`crop_gym.model.candidates`), and the *blind* conditions that a
  health-blind scheduler believes in (every device healthy, failed GPUs still failed);
* the per-GPU and per-link tables the placement-facts kernel gathers from
  (:mod:`crop_gym.model.facts`);
* the facts of the GPU sets already evaluated (:meth:`Conditions.facts`), a memo of a pure function
  of immutable values: topology, health and GPU set;
* :attr:`Conditions.cache`, where higher layers keep data that is a pure function of the conditions
  (CROP's candidate pool), under names of their own.

Both inputs are immutable, so nothing here ever goes stale: a new health is a new object, and the
state builds new conditions for it (:meth:`~crop_gym.model.state.ClusterState.set_health`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crop_gym.errors import ConfigError
from crop_gym.model import kernels
from crop_gym.model.facts import (
    FACT_COLUMNS,
    PlacementFacts,
    device_table,
    facts_kernel,
    link_table,
    padded_rows,
    upper_links_by_depth,
)
from crop_gym.model.health import Health
from crop_gym.model.topology import Topology

__all__ = ["FACTS_MEMO_ROWS", "Conditions"]

FloatArray = NDArray[np.float64]

#: GPU sets the facts memo of one :class:`Conditions` holds before it starts afresh (its bound).
FACTS_MEMO_ROWS = 1 << 14


def _readonly(a: NDArray[Any]) -> NDArray[Any]:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Conditions:
    """A topology under one health, compiled once (see the module docstring).

    Args:
        topology: The cluster.
        health: Its device health; every device healthy if ``None``.

    Attributes:
        topology: The cluster.
        health: The device health.
        eff_bw: ``float64[N]`` effective bandwidth ``ρ_e · B_e`` of the link above each node (the
            root, which carries no link, is ``inf``: padding never binds).
        usable: ``bool[G]`` GPUs that are not failed.
        badness: ``float64[G]`` ``σ_g / speed_g / (1 - π_g)`` (1 = healthy reference GPU).
        uniform: Whether every GPU's badness is exactly 1 (the candidate generator then has no
            health to steer by).
        cache: Derived data of higher layers, each a pure function of these conditions, under a
            name of its own (for example CROP's candidate pool).
    """

    topology: Topology
    health: Health = field(default=None)  # type: ignore[assignment]
    eff_bw: FloatArray = field(init=False, repr=False)
    usable: NDArray[np.bool_] = field(init=False, repr=False)
    badness: FloatArray = field(init=False, repr=False)
    uniform: bool = field(init=False)
    cache: dict[str, Any] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        topo, health = self.topology, self.health
        if health is None:
            health = Health.healthy(topo)
            object.__setattr__(self, "health", health)
        if len(health.gpu_slowdown) != topo.num_gpus or len(health.link_degradation) != (
            topo.num_nodes
        ):
            raise ConfigError(
                f"health of {len(health.gpu_slowdown)} GPUs and {len(health.link_degradation)} "
                f"links for a cluster of {topo.num_gpus} GPUs and {topo.num_nodes} nodes"
            )
        object.__setattr__(self, "eff_bw", _readonly(topo.link_bw * health.link_degradation))
        object.__setattr__(self, "usable", health.usable)
        q = health.gpu_slowdown / topo.gpu_speed / (1.0 - health.gpu_fail_prob)
        object.__setattr__(self, "badness", _readonly(q))
        object.__setattr__(self, "uniform", bool((q == 1.0).all()))
        object.__setattr__(self, "_memo", _FactsMemo())

    # ------------------------------------------------------------------ derived once
    @cached_property
    def blind(self) -> Conditions:
        """What a health-blind scheduler believes: every device healthy, but failed GPUs still
        failed (a dead GPU is not ambiguous; stragglers, failure-prone devices and degraded links
        are invisible). The same object every time, so what is kept per conditions carries over
        between a blind policy's decisions."""
        h = self.health
        if (
            self.uniform
            and not h.gpu_fail_prob.any()
            and (h.link_degradation == 1.0).all()
            and (not h.link_fail_prob.any())
        ):
            return self
        g, n = self.topology.num_gpus, self.topology.num_nodes
        return Conditions(
            self.topology, Health(np.ones(g), h.gpu_failed, np.zeros(g), np.ones(n), np.zeros(n))
        )

    @cached_property
    def device_table(self) -> FloatArray:
        """:func:`~crop_gym.model.facts.device_table` of these conditions."""
        return device_table(self.topology, self.health)

    @cached_property
    def link_table(self) -> FloatArray:
        """:func:`~crop_gym.model.facts.link_table` of these conditions."""
        return link_table(self.topology, self.health)

    # ------------------------------------------------------------------ facts by GPU set
    def facts(self, keys: Sequence[tuple[int, ...]]) -> PlacementFacts:
        """The placement facts of the GPU sets ``keys`` (sorted tuples of GPU indices), one row
        each, in order.

        Facts are a pure function of the immutable topology, health and GPU set, so each set is
        evaluated once (the new ones of a call in one kernel evaluation) and kept, up to
        :data:`FACTS_MEMO_ROWS` sets, after which the memo starts afresh.
        """
        memo: _FactsMemo = self._memo  # type: ignore[attr-defined]
        return memo.facts(self, keys)

    def facts_of_rows(
        self, P: NDArray[np.integer[Any]], k: NDArray[np.int64], backend: str | None = None
    ) -> PlacementFacts:
        """:func:`~crop_gym.model.facts.facts_kernel` of the padded rows ``P`` (``k[r]`` GPUs
        each) under these conditions, not memoised.

        ``backend``: ``"numpy"`` (the reference), ``"numba"`` (the same computation compiled,
        :func:`crop_gym.model.kernels.facts_rows`) or ``None``: the compiled kernel when it is
        available."""
        topo = self.topology
        R, kmax = P.shape
        if R and kmax and (kernels.enabled() if backend is None else backend == "numba"):
            values, links = kernels.facts_rows(
                P,
                k,
                topo.gpu_server,
                self.device_table,
                self.link_table,
                upper_links_by_depth(topo),
            )
            return PlacementFacts(values, links)
        return facts_kernel(topo, self.device_table, self.link_table, P, k)

    @property
    def facts_memo_stats(self) -> tuple[int, int]:
        """``(hits, misses)`` of :meth:`facts` so far (benchmarks print the hit rate)."""
        memo: _FactsMemo = self._memo  # type: ignore[attr-defined]
        return memo.hits, memo.misses


@dataclass(eq=False)
class _FactsMemo:
    """The facts of the GPU sets already evaluated under one :class:`Conditions`: row
    ``row[gpus]`` of ``values``, ``links`` (root-padded) and ``width``."""

    row: dict[tuple[int, ...], int] = field(default_factory=dict)
    values: FloatArray = field(default_factory=lambda: np.zeros((0, len(FACT_COLUMNS))))
    links: NDArray[np.int32] = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int32))
    width: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    hits: int = 0
    misses: int = 0

    def facts(self, cond: Conditions, keys: Sequence[tuple[int, ...]]) -> PlacementFacts:
        row = self.row
        rows = [row.get(key, -1) for key in keys]
        if -1 in rows:
            new = list(dict.fromkeys(key for key, r in zip(keys, rows, strict=True) if r < 0))
            self.misses += len(new)
            self.hits += len(keys) - len(new)
            if len(row) + len(new) > FACTS_MEMO_ROWS:
                self._clear()
            self._add(new, cond.facts_of_rows(*padded_rows(new)))
            rows = [self.row[key] for key in keys]
        else:
            self.hits += len(keys)
        idx = np.array(rows, dtype=np.intp)
        width = int(self.width[idx].max(initial=0))
        return PlacementFacts(self.values[idx], self.links[idx, :width])

    def _clear(self) -> None:
        self.row = {}
        self.values = self.values[:0]
        self.links = self.links[:0]
        self.width = self.width[:0]

    def _add(self, keys: list[tuple[int, ...]], facts: PlacementFacts) -> None:
        """Store ``facts`` (one row per key, in order)."""
        n, (R, W) = len(self.row), facts.inter_links.shape
        old_w = self.links.shape[1]
        if n + R > len(self.values) or old_w < W:
            cap = max(len(self.values), 2 * (n + R), 64)
            values = np.zeros((cap, len(FACT_COLUMNS)))
            links = np.zeros((cap, max(old_w, W)), np.int32)
            width = np.zeros(cap, dtype=np.int64)
            values[:n], links[:n, :old_w], width[:n] = (
                self.values[:n],
                self.links[:n],
                self.width[:n],
            )
            self.values, self.links, self.width = values, links, width
        self.values[n : n + R] = facts.values
        self.links[n : n + R, :W] = facts.inter_links
        self.width[n : n + R] = np.count_nonzero(facts.inter_links, axis=1)
        self.row.update(zip(keys, range(n, n + R), strict=True))
