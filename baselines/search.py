"""A budgeted search for good static placements: CROP rollouts with lookahead (the pilot method).

:func:`rollout_search` builds an answer one placement at a time. At each step it lists the moves
(each pending job class on each of its candidates, :func:`~crop_gym.model.candidates.candidate_placements`),
keeps the ``top`` with the largest immediate ΔF, and scores each by what follows it: with
``depth=1`` CROP (:func:`~crop_gym.baselines.crop.crop_greedy`) placing the rest; with ``depth=2``
the best of the ``top`` next moves each followed by CROP. It makes the best-scoring move and
repeats until no move gains. Every completion scored is a full answer; the best one seen is
returned, so the result is never below CROP's (the root's CROP completion is the first scored).
This is rollout with CROP as the base policy (Bertsekas, *Rollout, Policy Iteration, and
Distributed Reinforcement Learning*, 2020, ch. 2), the state-level twin of
:class:`~crop_gym.baselines.rollout_expert.CropRolloutExpert` with a deeper lookahead.

Cost: about ``steps x top^depth`` CROP runs (``Placement-Severe-v0``: 16 steps, ``top=8``,
``depth=1``: about 5 s on one core).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from crop_gym.baselines.crop import crop_greedy
from crop_gym.errors import check_range
from crop_gym.model.candidates import candidate_placements
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.policy import Placement, pending_jobs

__all__ = ["SearchResult", "rollout_search"]


@dataclass
class SearchResult:
    """The best answer a search found.

    Attributes:
        placements: Its placements, in order.
        F: F after applying them.
        completions: CROP completions scored.
        seconds: Wall time.
    """

    placements: list[Placement]
    F: float
    completions: int = 0
    seconds: float = 0.0


class _Rollout:
    def __init__(self, top: int, max_candidates: int, min_gain: float) -> None:
        self.top = top
        self.C = max_candidates
        self.min_gain = min_gain
        self.best_F = -np.inf
        self.best: list[Placement] = []
        self.completions = 0

    def moves(self, state: ClusterState, pending: list[Job]) -> list[tuple[float, int, np.ndarray]]:
        """The ``top`` moves (ΔF, index in ``pending``, GPUs) by immediate gain."""
        out: list[tuple[float, int, np.ndarray]] = []
        seen: set[tuple[str, int, float, float]] = set()
        for i, job in enumerate(pending):
            key = (job.model, job.num_gpus, float(job.batch_size), float(job.weight))
            if key in seen or job.num_gpus > state.num_free:
                continue
            seen.add(key)
            cands = candidate_placements(state, job.num_gpus, max_candidates=self.C)
            for gpus in cands.gpus:
                gain = float(state.gains(job, state.facts_for(gpus), interference=True).total[0])
                if gain > self.min_gain:
                    out.append((gain, i, gpus))
        out.sort(key=lambda m: -m[0])
        return out[: self.top]

    def complete(self, state: ClusterState, pending: list[Job], path: list[Placement]) -> float:
        """F after CROP places ``pending`` on ``state`` (``path`` led there; the best is kept)."""
        self.completions += 1
        r = crop_greedy(state, pending, max_candidates=self.C, min_gain=self.min_gain)
        got = float(r.F)
        if got > self.best_F + 1e-12:
            self.best_F = got
            self.best = [*path, *r.placements]
        return got

    def score(
        self, state: ClusterState, pending: list[Job], path: list[Placement], depth: int
    ) -> float:
        """The best final F of ``depth`` levels of moves, then CROP."""
        value = self.complete(state, pending, path)
        if depth <= 0:
            return value
        for _, i, gpus in self.moves(state, pending):
            nxt = state.copy()
            nxt.add(pending[i], gpus)
            rest = pending[:i] + pending[i + 1 :]
            value = max(
                value, self.score(nxt, rest, [*path, Placement(pending[i], gpus)], depth - 1)
            )
        return value


def rollout_search(
    state: ClusterState,
    queue: Sequence[Job],
    *,
    depth: int = 1,
    top: int = 8,
    max_candidates: int = 8,
    min_gain: float = 1e-9,
) -> SearchResult:
    """The pilot method on CROP (module docstring).

    Args:
        state: The cluster (not mutated).
        queue: Pending jobs.
        depth: Lookahead levels before CROP completes (1 or 2).
        top: Moves scored per level (>= 1).
        max_candidates: Candidates per job size (CROP's cap).
        min_gain: Moves of ΔF at or below this are not made.

    Returns:
        The best answer seen (never below CROP's).

    Raises:
        ConfigError: If ``depth``, ``top`` or ``max_candidates`` is out of range.
    """
    check_range("depth", depth, 1, 2)
    check_range("top", top, 1, 1000)
    check_range("max_candidates", max_candidates, 1, 1024)
    t0 = time.perf_counter()
    r = _Rollout(int(top), int(max_candidates), float(min_gain))
    work = state.copy()
    pending = list(pending_jobs(state, queue))
    path: list[Placement] = []
    r.complete(work, pending, path)
    while True:
        moves = r.moves(work, pending)
        if not moves:
            break
        scored = []
        for _, i, gpus in moves:
            nxt = work.copy()
            nxt.add(pending[i], gpus)
            rest = pending[:i] + pending[i + 1 :]
            scored.append(r.score(nxt, rest, [*path, Placement(pending[i], gpus)], depth - 1))
        _, i, gpus = moves[int(np.argmax(scored))]  # ties: the larger immediate ΔF
        work.add(pending[i], gpus)
        path.append(Placement(pending[i], gpus))
        del pending[i]
    last = float(work.F)
    if last > r.best_F + 1e-12:
        r.best_F, r.best = last, list(path)
    return SearchResult(r.best, float(r.best_F), r.completions, time.perf_counter() - t0)
