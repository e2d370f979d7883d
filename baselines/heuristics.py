"""Classic placement policies under the same model and interface as CROP (docs/CROP.md, baselines).

Every policy here serves the queue in FIFO order with backfilling: a job that does not fit waits and
the next one is tried. None of them sees stragglers, failure-prone devices or degraded links (they are
what today's schedulers do); all of them avoid failed GPUs, which a node agent reports.

* ``random``: ``k`` free GPUs drawn uniformly at random.
* ``first-fit``: the ``k`` lowest-numbered free GPUs (GPUs are numbered in DFS order of the tree).
* ``best-fit``: consolidation by servers (Tiresias-style): the server with the fewest free GPUs that
  still holds the job; a job larger than any server's free GPUs takes the servers with the most free
  GPUs first (fewest servers).
* ``spread``: load balancing: one GPU at a time on the server with the most free GPUs.
* ``hived``: HiveD-style buddy cells: a job of ``k <= server size`` GPUs takes an aligned, fully free
  cell of ``2^⌈log2 k⌉`` GPUs inside a server, preferring cells whose buddies are already split (so
  large cells stay whole); a bigger job takes ``⌈k / server size⌉`` fully free servers under the lowest
  switch that has them. No cell, no placement: the job waits (HiveD does not fragment cells).
* ``comm-greedy``: each job takes the candidate (health-blind candidate generator) with the smallest
  all-reduce time under the current link loads, as if every device were healthy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from crop_gym.baselines._common import blind_state, own_comm_times
from crop_gym.errors import check_range
from crop_gym.model.candidates import candidate_placements
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.topology import SWITCH, Topology
from crop_gym.policy import Placement, PlacementPolicy, pending_jobs

__all__ = [
    "BestFitPolicy",
    "CommGreedyPolicy",
    "FirstFitPolicy",
    "FreeMaskPolicy",
    "HivedPolicy",
    "RandomPolicy",
    "SpreadPolicy",
]


class FreeMaskPolicy(PlacementPolicy):
    """A FIFO policy that only needs the free GPUs: subclasses implement :meth:`choose`.

    A :meth:`choose` that skips a job (returns ``None``) must do so as a function of the free GPUs
    and the job's size alone: later jobs of that size are then skipped without asking again until
    a placement changes the free GPUs (a HiveD queue of jobs waiting for a cell is answered once).
    """

    def place(
        self, state: ClusterState, queue: Sequence[Job], rng: np.random.Generator | None = None
    ) -> list[Placement]:
        """Serve the queue in order; each job takes :meth:`choose`'s GPUs or waits."""
        jobs = pending_jobs(state, queue)
        free = state.free_mask.copy()
        gen = rng if rng is not None else self._default_rng()
        out: list[Placement] = []
        num_free = int(free.sum())
        skipped: set[int] = set()  # sizes choose skipped since the free GPUs last changed
        for job in jobs:
            k = job.num_gpus
            if k > num_free or k in skipped:
                continue
            gpus = self.choose(state.topology, free, k, gen)
            if gpus is None:
                skipped.add(k)
                continue
            free[gpus] = False
            num_free -= k
            skipped.clear()
            out.append(Placement(job, gpus))
        return out

    def _default_rng(self) -> np.random.Generator:
        return np.random.default_rng(0)

    def choose(
        self, topo: Topology, free: NDArray[np.bool_], k: int, rng: np.random.Generator
    ) -> NDArray[np.int32] | None:
        """``k`` GPUs among ``free`` (at least ``k`` of them are free), or ``None`` to skip the job."""
        raise NotImplementedError


class RandomPolicy(FreeMaskPolicy):
    """``k`` free GPUs drawn uniformly at random.

    Args:
        seed: Seed used when :meth:`place` gets no ``rng``.
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def _default_rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)

    def choose(
        self, topo: Topology, free: NDArray[np.bool_], k: int, rng: np.random.Generator
    ) -> NDArray[np.int32] | None:
        idx = np.flatnonzero(free)
        return np.sort(rng.choice(idx, size=k, replace=False)).astype(np.int32)


class FirstFitPolicy(FreeMaskPolicy):
    """The ``k`` lowest-numbered free GPUs."""

    name = "first-fit"

    def choose(
        self, topo: Topology, free: NDArray[np.bool_], k: int, rng: np.random.Generator
    ) -> NDArray[np.int32] | None:
        return np.flatnonzero(free)[:k].astype(np.int32)


def _take(topo: Topology, free: NDArray[np.bool_], counts: dict[int, int]) -> NDArray[np.int32]:
    """The lowest-numbered ``counts[s]`` free GPUs of each server ``s``."""
    parts = []
    for s, n in counts.items():
        lo, hi = topo.server_gpu_lo[s], topo.server_gpu_hi[s]
        parts.append(lo + np.flatnonzero(free[lo:hi])[:n])
    return np.sort(np.concatenate(parts)).astype(np.int32)


class BestFitPolicy(FreeMaskPolicy):
    """Consolidation by servers (Tiresias-style best fit)."""

    name = "best-fit"

    def choose(
        self, topo: Topology, free: NDArray[np.bool_], k: int, rng: np.random.Generator
    ) -> NDArray[np.int32] | None:
        cs = np.concatenate([[0], np.cumsum(free, dtype=np.int64)])
        srv_free = cs[topo.server_gpu_hi] - cs[topo.server_gpu_lo]
        fits = np.flatnonzero(srv_free >= k)
        if len(fits):
            s = int(fits[np.argmin(srv_free[fits])])  # tightest fit, lowest index on ties
            return _take(topo, free, {s: k})
        order = np.lexsort((np.arange(len(srv_free)), -srv_free))
        counts: dict[int, int] = {}
        need = k
        for s in order.tolist():
            if need == 0 or srv_free[s] == 0:
                break
            n = int(min(need, srv_free[s]))
            counts[s] = n
            need -= n
        return _take(topo, free, counts)


class SpreadPolicy(FreeMaskPolicy):
    """Load balancing: each GPU of the job goes to the server with the most free GPUs."""

    name = "spread"

    def choose(
        self, topo: Topology, free: NDArray[np.bool_], k: int, rng: np.random.Generator
    ) -> NDArray[np.int32] | None:
        cs = np.concatenate([[0], np.cumsum(free, dtype=np.int64)])
        srv_free = cs[topo.server_gpu_hi] - cs[topo.server_gpu_lo]
        counts: dict[int, int] = {}
        for _ in range(k):
            s = int(np.argmax(srv_free))  # lowest index on ties
            srv_free[s] -= 1
            counts[s] = counts.get(s, 0) + 1
        return _take(topo, free, counts)


class HivedPolicy(FreeMaskPolicy):
    """HiveD-style buddy-cell allocation (see the module docstring)."""

    name = "hived"

    def choose(
        self, topo: Topology, free: NDArray[np.bool_], k: int, rng: np.random.Generator
    ) -> NDArray[np.int32] | None:
        sizes = topo.server_gpu_hi - topo.server_gpu_lo
        if k <= int(sizes.max()):
            return self._in_server(topo, free, k, sizes)
        return self._whole_servers(topo, free, k, sizes)

    @staticmethod
    def _in_server(
        topo: Topology, free: NDArray[np.bool_], k: int, sizes: NDArray[np.int32]
    ) -> NDArray[np.int32] | None:
        """The aligned free cell of ``2^⌈log2 k⌉`` GPUs whose largest free buddy block is smallest.

        Every server large enough is searched at once (one group per server size): a cell is free
        when the prefix sum of ``free`` over it equals its size, and its *span* is the largest
        aligned block holding it that is fully free (blocks nest, so the free ones are a chain).
        The winner is the smallest (span, first GPU), as a loop over servers and offsets would find.
        """
        cs = np.concatenate([[0], np.cumsum(free, dtype=np.int64)])
        cell = 1 << (k - 1).bit_length()
        best: tuple[int, int] | None = None
        for size in np.unique(sizes[sizes >= k]).tolist():
            lo = topo.server_gpu_lo[sizes == size].astype(np.int64)
            c = min(cell, size)  # a server that is not a power of two is one cell
            start = (lo[:, None] + np.arange(0, size - c + 1, c)[None, :]).ravel()
            start = start[cs[start + c] - cs[start] == c]
            if not len(start):
                continue
            span = np.full(len(start), c, dtype=np.int64)
            off = start - lo[np.searchsorted(lo, start, side="right") - 1]  # within the server
            block = 2 * c
            while block <= size:
                b0 = start - off % block
                span[cs[b0 + block] - cs[b0] == block] = block
                block *= 2
            i = int(np.lexsort((start, span))[0])
            key = (int(span[i]), int(start[i]))
            if best is None or key < best:
                best = key
        if best is None:
            return None
        return np.arange(best[1], best[1] + k, dtype=np.int32)

    @staticmethod
    def _whole_servers(
        topo: Topology, free: NDArray[np.bool_], k: int, sizes: NDArray[np.int32]
    ) -> NDArray[np.int32] | None:
        cs = np.concatenate([[0], np.cumsum(free, dtype=np.int64)])
        whole = (cs[topo.server_gpu_hi] - cs[topo.server_gpu_lo]) == sizes
        best: tuple[int, int, int] | None = None
        pick: list[int] = []
        for node in np.flatnonzero(topo.kind == SWITCH).tolist():
            lo, hi = int(topo.node_srv_lo[node]), int(topo.node_srv_hi[node])
            srv = lo + np.flatnonzero(whole[lo:hi])
            cap = np.cumsum(sizes[srv])
            if len(srv) == 0 or cap[-1] < k:
                continue
            need = int(np.searchsorted(cap, k) + 1)
            key = (hi - lo, len(srv), node)  # lowest switch, then the most used one
            if best is None or key < best:
                best = key
                pick = srv[:need].tolist()
        if best is None:
            return None
        gpus = np.concatenate(
            [np.arange(topo.server_gpu_lo[s], topo.server_gpu_hi[s]) for s in pick]
        )
        return gpus[:k].astype(np.int32)


class CommGreedyPolicy(PlacementPolicy):
    """Communication-only greedy that ignores abnormal devices.

    Args:
        max_candidates: Candidates considered per job (health-blind generator).
    """

    name = "comm-greedy"

    def __init__(self, max_candidates: int = 8) -> None:
        check_range("max_candidates", max_candidates, 1)
        self.max_candidates = max_candidates

    def place(
        self, state: ClusterState, queue: Sequence[Job], rng: np.random.Generator | None = None
    ) -> list[Placement]:
        """Serve the queue in order; each job takes its candidate with the least all-reduce time."""
        jobs = pending_jobs(state, queue)
        view = blind_state(state)
        out: list[Placement] = []
        for job in jobs:
            if job.num_gpus > view.num_free:
                continue
            cands = candidate_placements(
                view, job.num_gpus, robust=False, max_candidates=self.max_candidates
            )
            if len(cands) == 0:
                continue
            times = own_comm_times(view, job, cands.gpus)
            gpus = cands.gpus[int(np.argmin(times))]  # first (best-ranked) on ties
            view.add(job, gpus)
            out.append(Placement(job, gpus))
        return out
