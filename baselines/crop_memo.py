"""CROP's memos: pure functions of immutable inputs, shared between greedy passes and calls.

Two memos make CROP cheap enough to run at every event of a long trace (docs/SIMULATOR.md, *Speed*)
without changing a single placement:

* :class:`CandidatePool`, one per :class:`~crop_gym.model.conditions.Conditions` (a topology under
  one health), kept in the conditions' :attr:`~crop_gym.model.conditions.Conditions.cache`: every
  candidate GPU set CROP has met gets an id, its placement facts, its lazy bound ``(k, survival,
  slowdown)`` and its sorted inter-server links (also a row of a root-padded matrix, so that the
  candidates a placement touches are found with one gather). Facts depend on the topology, the
  health and the GPU set only. The pool also keeps each candidate *list* of the default generator
  (:func:`crop_gym.model.candidates.candidate_placements`), keyed by the free GPUs (the mask's
  bytes), the size, the robust flag and the cap: with the conditions these are all the generator
  reads, so a list never goes stale. The pool lives as long as its conditions and starts afresh
  when it grows past its bound (checked when a call starts, so the ids a call holds stay valid).
* :class:`PrefixMemo`, one per :func:`~crop_gym.baselines.crop.crop_greedy` call: ΔF by (prefix of accepted
  placements, job class, candidate), and the candidate lists, the links an acceptance touches and F
  by prefix. Both greedy passes (``rule="best"``) start from the same state,
  which the call does not change, and the state after a sequence of acceptances is a function of
  that sequence; so what one pass computed after a prefix is what the other would compute after
  the same prefix. The two passes mostly agree on their first placements (often on all of them),
  so the second pass rarely needs a state of its own (CROP's pass builds it only when the memo
  lacks something).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from crop_gym.model.candidates import CandidateSet
from crop_gym.model.conditions import Conditions
from crop_gym.model.facts import PlacementFacts
from crop_gym.model.topology import Topology

__all__ = ["CandidatePool", "PrefixMemo", "candidate_pool"]

#: A pool starts afresh (at the next call) past this many candidates or lists.
POOL_CANDIDATES = 1 << 14
POOL_LISTS = 1 << 13

#: Key of a memoised candidate list: free GPUs (mask bytes), size, robust flag, cap.
ListKey = tuple[bytes, int, bool, int]


@dataclass(eq=False)
class CandidatePool:
    """The candidates met under one :class:`~crop_gym.model.conditions.Conditions` (see the
    module docstring).

    Attributes:
        topology: The cluster.
        cid_of: Candidate id of each GPU set (sorted tuple).
        gpus: ``int32[k]`` read-only GPUs of each candidate.
        facts: One-row placement facts of each candidate.
        bound: ``(k, survival, slowdown)`` of each candidate (the lazy bound's inputs).
        links: Sorted inter-server links of each candidate.
        linkmat: The same links as rows of one root-padded matrix (row = candidate id).
        lists: Candidate ids of the default generator's list, by :data:`ListKey`.
    """

    topology: Topology
    cid_of: dict[tuple[int, ...], int] = field(default_factory=dict)
    gpus: list[NDArray[np.int32]] = field(default_factory=list)
    facts: list[PlacementFacts] = field(default_factory=list)
    bound: list[tuple[int, float, float]] = field(default_factory=list)
    links: list[NDArray[np.int32]] = field(default_factory=list)
    linkmat: NDArray[np.int32] = field(default_factory=lambda: np.zeros((64, 4), dtype=np.int32))
    lists: dict[ListKey, list[int]] = field(default_factory=dict)

    @property
    def full(self) -> bool:
        """Whether the pool has grown past its bound."""
        return len(self.gpus) > POOL_CANDIDATES or len(self.lists) > POOL_LISTS

    def ids(self, conditions: Conditions, cs: CandidateSet) -> list[int]:
        """The ids of the candidates of ``cs`` (best first), registering the new ones.

        Args:
            conditions: The conditions this pool is for (its facts are evaluated under them).
            cs: A candidate set on :attr:`topology`.
        """
        keys = cs.keys
        cid_of = self.cid_of
        new = [i for i, key in enumerate(keys) if key not in cid_of]
        if new:
            facts = conditions.facts([keys[i] for i in new])
            for j, i in enumerate(new):
                cid = len(self.gpus)
                cid_of[keys[i]] = cid
                g = cs.gpus[i].copy()
                g.setflags(write=False)
                self.gpus.append(g)
                f = facts.take(j)
                self.facts.append(f)
                self.bound.append((cs.k, float(f.survival[0]), float(f.slowdown[0])))
                row = f.inter_links[0]
                links = np.sort(row[row > 0])
                self._store_links(cid, links)
                self.links.append(links)
        return [cid_of[key] for key in keys]

    def _store_links(self, cid: int, links: NDArray[np.int32]) -> None:
        """Write candidate ``cid``'s links into :attr:`linkmat` (grown as needed)."""
        rows, width = self.linkmat.shape
        if cid >= rows or len(links) > width:
            grown = np.zeros((max(rows, 2 * cid + 2), max(width, len(links))), dtype=np.int32)
            grown[:rows, :width] = self.linkmat
            self.linkmat = grown
        self.linkmat[cid, : len(links)] = links


#: The key of CROP's pool in :attr:`Conditions.cache <crop_gym.model.conditions.Conditions>`.
POOL_KEY = "crop.candidate_pool"


def candidate_pool(conditions: Conditions) -> CandidatePool:
    """The pool of ``conditions`` (a fresh one if it has none, or its pool is full)."""
    pool: CandidatePool | None = conditions.cache.get(POOL_KEY)
    if pool is None or pool.full:
        pool = conditions.cache[POOL_KEY] = CandidatePool(conditions.topology)
    return pool


@dataclass(eq=False)
class PrefixMemo:
    """Gains by (prefix of acceptances, class, candidate) within one call (module docstring).

    A prefix is a node of a trie: node 0 is the empty prefix and :meth:`child` extends one.

    Attributes:
        gains: ΔF by ``(node, class, candidate id)``.
        lists: Candidate ids of the default generator by ``(node, size)``.
        touched: By node, ``bool[N]`` the links of the jobs sharing a link with the last one
            accepted (itself included).
        F: F of the state at a node.
        children: Trie edges, ``(node, class, candidate id) -> node``.
    """

    gains: dict[tuple[int, int, int], float] = field(default_factory=dict)
    lists: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    touched: dict[int, NDArray[np.bool_]] = field(default_factory=dict)
    F: dict[int, float] = field(default_factory=dict)
    children: dict[tuple[int, int, int], int] = field(default_factory=dict)

    def child(self, node: int, c: int, cid: int) -> int:
        """The prefix ``node`` followed by the acceptance of class ``c`` on candidate ``cid``."""
        key = (node, c, cid)
        nxt = self.children.get(key)
        if nxt is None:
            nxt = self.children[key] = len(self.children) + 1
        return nxt
