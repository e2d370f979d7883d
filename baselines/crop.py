"""CROP: efficient and robust multi-job placement by greedy maximisation of F (docs/CROP.md).

The algorithm (a reconstruction; docs/CROP.md has the pseudo-code and the measured ratios):

1. **Candidates.** A pending job of ``k`` GPUs may go on one of the candidates that
   :func:`crop_gym.model.candidates.candidate_placements` returns for ``k`` in the *current* state (jobs of
   equal size share one list; the environments use the same generator). After every acceptance each
   size's list is marked stale and recomputed only when that size can still win (its bound reaches
   the top of the heap), so the answer is exactly as if every list were regenerated after every
   acceptance while only the lists and candidates that changed cost work.
2. **Greedy on the true ΔF.** Repeatedly place the (job, candidate) pair that ranks first, where the
   rank is the marginal gain ``ΔF`` (:meth:`ClusterState.gains <crop_gym.model.state.ClusterState.gains>`) (the job's own value plus the change it
   causes to the placed jobs that share its links), or ΔF per GPU. Stop when nothing ranks above
   ``min_gain``.
3. **Lazy evaluation (Minoux).** A max-heap holds (upper bound of the rank, job, candidate). The top is
   popped; if its bound is stale it is re-evaluated and pushed back, otherwise it is accepted. Because
   F with link contention is not exactly submodular, stale gains are *not* assumed to be upper bounds:
   a cached ΔF is kept only while it is provably exact (no placement since touched a link that the
   candidate, or a job sharing its links, uses) and is otherwise replaced by the valid bound
   ``w·k·s·min(1, T*/(t·σ))`` (the job's value with no communication; ΔF never exceeds it because link
   loads only grow during the greedy and a placement never speeds others up). So the lazy greedy
   returns exactly what the plain greedy (``lazy=False``: every gain recomputed every round) returns.
4. **Two rankings, best of both (``rule="best"``, the default).** GPUs are a capacity: ranking by ΔF
   alone lets one large, mediocre job take the GPUs of several good small ones, ranking by ΔF per GPU
   does the opposite mistake. As for submodular maximisation under a knapsack constraint (Krause &
   Golovin; Leskovec et al.'s CELF), CROP runs both greedy passes and keeps the one with the larger F.
   ``rule="gain"`` or ``"density"`` runs one pass.
5. **Robustness switch.** ``robust=False`` is the ablation "CROP without robustness": candidates are
   chosen health-blind and gains evaluated as if every device were healthy (failed GPUs are still
   avoided); the caller measures F on the true state.

Memos (``baselines/crop_memo.py``, pure functions of immutable inputs, no result changes): candidate
facts and lists per health across calls, and gains, lists and F by prefix of acceptances shared by
the two passes of one call.

Ties are broken deterministically: higher rank (rounded to 1e-9) first, then the job earlier in the
queue, then the better-ranked candidate (fewest servers, healthiest, tightest fit). Identical jobs
(same model, size, batch and weight) share their gain computations. Re-running one pass on the state
after its first placement, with the rest of the queue, yields its second placement, and so on.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from crop_gym.baselines._common import blind_state
from crop_gym.baselines.crop_memo import CandidatePool, PrefixMemo, candidate_pool
from crop_gym.errors import ConfigError, check_range
from crop_gym.model.candidates import CandidateSet, candidate_placements
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import model_constants
from crop_gym.policy import Placement, PlacementPolicy, pending_jobs

__all__ = ["RULES", "CandidateFn", "CropPolicy", "GreedyResult", "GreedyStats", "crop_greedy"]

#: Signature of a candidate generator: ``fn(state, k, robust=..., max_candidates=...)``.
CandidateFn = Callable[..., CandidateSet]

#: Ranking rules: ``gain`` (ΔF), ``density`` (ΔF per GPU), ``best`` (both passes, larger F wins).
RULES: tuple[str, ...] = ("best", "gain", "density")

_NDIGITS = 9  # ranks are compared after rounding to 1e-9, so float noise does not break ties


@dataclass
class GreedyStats:
    """Work counters of a greedy run (summed over passes).

    Attributes:
        rounds: Accepted placements.
        gain_evals: Calls of ``state.gain`` (shared by identical jobs).
        refreshes: Candidate-list computations.
        heap_pops: Heap pops (lazy mode).
        seconds: Wall time.
    """

    rounds: int = 0
    gain_evals: int = 0
    refreshes: int = 0
    heap_pops: int = 0
    seconds: float = 0.0

    def add(self, other: GreedyStats) -> None:
        """Accumulate another run's counters."""
        self.rounds += other.rounds
        self.gain_evals += other.gain_evals
        self.refreshes += other.refreshes
        self.heap_pops += other.heap_pops


@dataclass
class GreedyResult:
    """Outcome of :func:`crop_greedy`.

    Attributes:
        placements: Accepted placements, in acceptance order.
        gains: ΔF of each acceptance, as evaluated in the decision state (the health-blind view for
            ``robust=False``).
        F: F of the decision state at the end.
        rule: The ranking of the pass that was kept (``"gain"`` or ``"density"``).
        stats: Work counters (of every pass run).
    """

    placements: list[Placement] = field(default_factory=list)
    gains: list[float] = field(default_factory=list)
    F: float = 0.0
    rule: str = "gain"
    stats: GreedyStats = field(default_factory=GreedyStats)


class _Greedy:
    """One greedy pass from the decision state ``view`` (not changed: the pass works on a copy).

    The pass's state is the view plus its acceptances. It is materialised (copied and the
    acceptances applied) only when something the call's memo does not hold must be computed on
    it; a pass that follows the other pass's choices mostly reads the memo.
    """

    def __init__(
        self,
        view: ClusterState,
        jobs: list[Job],
        *,
        robust: bool,
        cap: int,
        min_gain: float,
        lazy: bool,
        density: bool,
        candidate_fn: CandidateFn,
        pool: CandidatePool,
        memo: PrefixMemo,
    ) -> None:
        self.view = view
        self.topo = view.topology
        self._state: ClusterState | None = None  # the view's copy, once needed
        self._unapplied: list[tuple[Job, int]] = []  # acceptances not applied to it yet
        self.robust = robust
        self.cap = cap
        self.min_gain = min_gain
        self.lazy = lazy
        self.candidate_fn = candidate_fn
        self.jobs = jobs
        self.result = GreedyResult(rule="density" if density else "gain")
        self.st = self.result.stats
        # Classes of identical jobs (their gains are identical).
        self.cls_k: list[int] = []
        self.cls_scale: list[float] = []  # rank = gain * scale
        self.cls_w: list[float] = []
        self.cls_ratio: list[float] = []  # T* / t_c
        self.cls_members: list[deque[int]] = []
        self.size_classes: dict[int, list[int]] = {}
        index: dict[tuple[str, int, float, float], int] = {}
        for q, job in enumerate(jobs):
            if job.num_gpus > self.topo.num_gpus:
                continue  # can never be placed
            key = (job.model, job.num_gpus, float(job.batch_size), float(job.weight))
            c = index.get(key)
            if c is None:
                c = len(self.cls_k)
                index[key] = c
                self.cls_k.append(job.num_gpus)
                self.cls_scale.append(1.0 / job.num_gpus if density else 1.0)
                self.cls_w.append(job.weight)
                self.cls_ratio.append(view.ideal_time(job) / model_constants(self.topo, job)[1])
                self.cls_members.append(deque())
                self.size_classes.setdefault(job.num_gpus, []).append(c)
            self.cls_members[c].append(q)
        # Candidates (ids, facts, bounds, links) live in the pool of the decision state's health,
        # shared with the other pass and later calls; gains after a prefix of acceptances in the
        # call's prefix memo (baselines/crop_memo.py).
        self.pool = pool
        self.memo = memo
        self.node = 0  # the prefix of acceptances so far (a node of memo's trie)
        self.size_list: dict[int, list[int]] = {}
        # (class, candidate) -> [gain or None (bound only), stamp, rank in its list]
        self.entry: dict[tuple[int, int], list] = {}
        self.heap: list[tuple[float, int, int, int, int, int]] = []
        self.size_stamp: dict[int, int] = {}
        self.stamp = 0

    # ------------------------------------------------------------------ helpers
    def _next_stamp(self) -> int:
        self.stamp += 1
        return self.stamp

    def _ws(self) -> ClusterState:
        """The pass's state (the view plus every acceptance so far), materialised now."""
        if self._state is None:
            self._state = self.view.copy()
        ws, pool = self._state, self.pool
        for job, cid in self._unapplied:
            ws.add(job, pool.gpus[cid], facts=pool.facts[cid])
        self._unapplied.clear()
        return ws

    def _candidates(self, k: int) -> list[int]:
        self.st.refreshes += 1
        pool = self.pool
        if self.candidate_fn is not candidate_placements:  # any generator: called every time
            ws = self._ws()
            cs = self.candidate_fn(ws, k, robust=self.robust, max_candidates=self.cap)
            return pool.ids(ws.conditions, cs)
        # The default generator reads the topology, the health and the free GPUs only.
        ids = self.memo.lists.get((self.node, k))
        if ids is None:
            ws = self._ws()
            key = (ws.free_mask.tobytes(), k, self.robust, self.cap)
            ids = pool.lists.get(key)
            if ids is None:
                cs = candidate_placements(ws, k, robust=self.robust, max_candidates=self.cap)
                ids = pool.lists[key] = pool.ids(ws.conditions, cs)
            self.memo.lists[(self.node, k)] = ids
        return ids

    def _bound(self, c: int, cid: int) -> float:
        """Upper bound of ΔF of class ``c`` on ``cid``: its value with zero communication."""
        k, survival, slowdown = self.pool.bound[cid]
        return self.cls_w[c] * k * survival * min(1.0, self.cls_ratio[c] / slowdown)

    def _size_bound(self, k: int) -> float:
        """Upper bound of the rank of any candidate of size ``k`` (``w k`` scaled)."""
        return max(self.cls_w[c] * k * self.cls_scale[c] for c in self.size_classes[k])

    def _evaluate(self, c: int, cid: int) -> float:
        key = (self.node, c, cid)
        gain = self.memo.gains.get(key)
        if gain is None:
            self.st.gain_evals += 1
            job = self.jobs[self.cls_members[c][0]]
            gain = self.memo.gains[key] = float(
                self._ws().gains(job, self.pool.facts[cid]).total[0]
            )
        return gain

    def _rank(self, c: int, value: float) -> float:
        return round(value * self.cls_scale[c], _NDIGITS)

    # --------------------------------------------------------------- lazy heap
    def _push_entry(self, c: int, cid: int, ent: list) -> None:
        ent[1] = self._next_stamp()
        value = ent[0] if ent[0] is not None else self._bound(c, cid)
        heapq.heappush(
            self.heap, (-self._rank(c, value), self.cls_members[c][0], ent[2], c, cid, ent[1])
        )

    def _push_refresh(self, k: int) -> None:
        """Mark size ``k``'s list stale: an item that pops before any entry the new list could hold.

        Any entry of size ``k`` (from the stale list or the fresh one) has a key of at least
        ``(-bound_k, q_k, 0)`` with ``q_k`` the earliest queue position among the size's pending
        jobs, so the item ``(-bound_k, q_k, -1)`` is refreshed before such an entry can be accepted,
        and not earlier than needed.
        """
        s = self._next_stamp()
        self.size_stamp[k] = s
        q = min(self.cls_members[c][0] for c in self.size_classes[k])
        heapq.heappush(self.heap, (-round(self._size_bound(k), _NDIGITS), q, -1, -k, -1, s))

    def _kill_size(self, k: int) -> None:
        for c in self.size_classes.pop(k, []):
            for cid in self.size_list.get(k, []):
                self.entry.pop((c, cid), None)
        self.size_list.pop(k, None)
        self.size_stamp.pop(k, None)

    def _refresh(self, k: int) -> None:
        """Recompute size ``k``'s candidate list; keep cached gains of unchanged candidates."""
        new = self._candidates(k)
        if not new:  # fewer than k free GPUs: never placeable again (free GPUs only shrink)
            self._kill_size(k)
            return
        self.size_stamp[k] = -1  # fresh until the next acceptance
        old = self.size_list.get(k, [])
        if new == old:
            return
        self.size_list[k] = new
        gone = set(old) - set(new)
        for c in self.size_classes[k]:
            for cid in gone:
                self.entry.pop((c, cid), None)
            for rank, cid in enumerate(new):
                ent = self.entry.get((c, cid))
                if ent is None:
                    ent = [None, 0, rank]
                    self.entry[(c, cid)] = ent
                elif ent[2] == rank:
                    continue  # its heap item is still valid
                ent[2] = rank
                if self.lazy:
                    self._push_entry(c, cid, ent)

    # --------------------------------------------------------------- acceptance
    def _accept(self, c: int, cid: int, gain: float) -> None:
        q = self.cls_members[c].popleft()
        job = self.jobs[q]
        pool = self.pool
        self._unapplied.append((job, cid))
        self.node = self.memo.child(self.node, c, cid)
        self.result.placements.append(Placement(job, pool.gpus[cid]))
        self.result.gains.append(gain)
        self.st.rounds += 1
        k = self.cls_k[c]
        if not self.cls_members[c]:
            classes = self.size_classes[k]
            classes.remove(c)
            for cid2 in self.size_list.get(k, []):
                self.entry.pop((c, cid2), None)
            if not classes:
                self._kill_size(k)
        elif self.lazy:  # the class's queue position changed
            for cid2 in self.size_list.get(k, []):
                self._push_entry(c, cid2, self.entry[(c, cid2)])
        # Cached gains that this placement may have changed become bounds again: those of candidates
        # whose links meet its links or the links of the jobs that share them (the placed jobs, this
        # one included, are the rows of the state's table; its root padding, node 0, is no link).
        if len(pool.links[cid]):
            touched = self._touched(cid)
            for k2, lst in self.size_list.items():
                hit = touched[pool.linkmat[lst]].any(axis=1)
                for cid2 in np.asarray(lst)[hit].tolist():
                    for c2 in self.size_classes[k2]:
                        ent = self.entry[(c2, cid2)]
                        ent[0] = None
                        if self.lazy:
                            self._push_entry(c2, cid2, ent)
        # Every size's candidate list may have changed with the free GPUs.
        if self.lazy:
            for k2 in self.size_classes:
                self._push_refresh(k2)

    def _touched(self, cid: int) -> NDArray[np.bool_]:
        """``bool[N]``: the links of the jobs that share a link with the one just accepted on
        ``cid`` (itself included), in the state after the acceptance (memoised by prefix)."""
        touched = self.memo.touched.get(self.node)
        if touched is None:
            ws = self._ws()
            sharing = ws.placed.links[ws.sharing_slots(self.pool.links[cid])]
            touched = np.zeros(self.topo.num_nodes, dtype=bool)
            touched[sharing] = True
            touched[0] = False
            self.memo.touched[self.node] = touched
        return touched

    def final_F(self) -> float:
        """F of the pass's state at its end (memoised by prefix)."""
        F = self.memo.F.get(self.node)
        if F is None:
            F = self.memo.F[self.node] = self._ws().F
        return F

    # ---------------------------------------------------------------- drivers
    def run_lazy(self, max_rounds: int | None) -> None:
        st = self.st
        for k in list(self.size_classes):
            self._push_refresh(k)
        heap = self.heap
        while heap and (max_rounds is None or st.rounds < max_rounds):
            negkey, _, _, c, cid, stamp = heapq.heappop(heap)
            st.heap_pops += 1
            if c < 0:  # a stale candidate list of size -c
                if self.size_stamp.get(-c) == stamp:
                    self._refresh(-c)
                continue
            ent = self.entry.get((c, cid))
            if ent is None or ent[1] != stamp:
                continue  # superseded heap item
            if ent[0] is None:
                ent[0] = self._evaluate(c, cid)
                self._push_entry(c, cid, ent)
                continue
            if -negkey <= self.min_gain:
                break  # nothing ranks above min_gain
            self._accept(c, cid, ent[0])

    def run_plain(self, max_rounds: int | None) -> None:
        st = self.st
        while self.size_classes and (max_rounds is None or st.rounds < max_rounds):
            for k in list(self.size_classes):
                self._refresh(k)
            best: tuple[float, int, int, int, int] | None = None
            best_gain = 0.0
            for classes in self.size_classes.values():
                for c in classes:
                    for rank, cid in enumerate(self.size_list[self.cls_k[c]]):
                        g = self._evaluate(c, cid)
                        key = (-self._rank(c, g), self.cls_members[c][0], rank, c, cid)
                        if best is None or key < best:
                            best, best_gain = key, g
            if best is None or -best[0] <= self.min_gain:
                break
            self._accept(best[3], best[4], best_gain)


def _one_pass(
    view: ClusterState,
    jobs: list[Job],
    density: bool,
    lazy: bool,
    max_rounds: int | None,
    **kw: object,
) -> GreedyResult:
    g = _Greedy(view, jobs, lazy=lazy, density=density, **kw)  # type: ignore[arg-type]
    if lazy:
        g.run_lazy(max_rounds)
    else:
        g.run_plain(max_rounds)
    g.result.F = g.final_F()
    return g.result


def crop_greedy(
    state: ClusterState,
    queue: Sequence[Job],
    *,
    robust: bool = True,
    lazy: bool = True,
    rule: str = "best",
    max_candidates: int = 8,
    min_gain: float = 1e-9,
    max_rounds: int | None = None,
    candidate_fn: CandidateFn = candidate_placements,
) -> GreedyResult:
    """Run CROP's greedy on a copy of ``state``.

    Args:
        state: The cluster (not mutated).
        queue: Pending jobs, in queue order (ties go to the earlier job).
        robust: Whether device health is seen when choosing (``False``: the ablation).
        lazy: Lazy (Minoux) evaluation; ``False`` recomputes every gain every round. Both return
            the same placements.
        rule: ``"best"`` (both rankings, the larger F wins; ties go to ``gain``), ``"gain"`` (ΔF) or
            ``"density"`` (ΔF per GPU).
        max_candidates: Candidates per job size (the candidate generator's cap).
        min_gain: A pair is accepted only if its rank (ΔF, or ΔF per GPU) exceeds this.
        max_rounds: Return at most this many placements (the first ones of the kept pass; ``1`` gives
            CROP's next decision).
        candidate_fn: The candidate generator, called as ``fn(state, k, robust=..., max_candidates=...)``
            (default :func:`crop_gym.model.candidates.candidate_placements`, the one the environments use).

    Returns:
        The placements in acceptance order, their gains, the final F of the decision state, the
        ranking kept and work counters.

    Raises:
        ConfigError: For an unknown rule, a bad cap or a bad queue.
    """
    if rule not in RULES:
        raise ConfigError(f"rule={rule!r} is not one of {', '.join(RULES)}")
    check_range("max_candidates", max_candidates, 1)
    if max_rounds is not None:
        check_range("max_rounds", max_rounds, 0)
    t0 = time.perf_counter()
    jobs = pending_jobs(state, queue)
    view = state if robust else blind_state(state)
    kw = {
        "robust": robust,
        "cap": max_candidates,
        "min_gain": min_gain,
        "candidate_fn": candidate_fn,
        "pool": candidate_pool(view.conditions),
        "memo": PrefixMemo(),
    }
    if rule == "best":
        a = _one_pass(view, jobs, False, lazy, None, **kw)
        b = _one_pass(view, jobs, True, lazy, None, **kw)
        result = b if b.F > a.F + 1e-9 else a
        stats = GreedyStats()
        stats.add(a.stats)
        stats.add(b.stats)
        result.stats = stats
        if max_rounds is not None:
            result.placements = result.placements[:max_rounds]
            result.gains = result.gains[:max_rounds]
    else:
        result = _one_pass(view, jobs, rule == "density", lazy, max_rounds, **kw)
    result.stats.seconds = time.perf_counter() - t0
    return result


class CropPolicy(PlacementPolicy):
    """CROP as a :class:`~crop_gym.policy.PlacementPolicy`.

    Args:
        robust: Device health steers the choice (``False``: "CROP without robustness").
        lazy: Lazy greedy (default) or plain greedy; both return the same placements.
        rule: Ranking: ``"best"`` (default), ``"gain"`` or ``"density"`` (see :func:`crop_greedy`).
        max_candidates: Candidates per job size.
        min_gain: Smallest rank worth a placement.
    """

    name = "crop"

    def __init__(
        self,
        *,
        robust: bool = True,
        lazy: bool = True,
        rule: str = "best",
        max_candidates: int = 8,
        min_gain: float = 1e-9,
    ) -> None:
        if rule not in RULES:
            raise ConfigError(f"rule={rule!r} is not one of {', '.join(RULES)}")
        check_range("max_candidates", max_candidates, 1)
        self.robust = robust
        self.lazy = lazy
        self.rule = rule
        self.max_candidates = max_candidates
        self.min_gain = min_gain

    def run(
        self, state: ClusterState, queue: Sequence[Job], max_rounds: int | None = None
    ) -> GreedyResult:
        """:func:`crop_greedy` with this policy's settings (placements, gains and counters)."""
        return crop_greedy(
            state,
            queue,
            robust=self.robust,
            lazy=self.lazy,
            rule=self.rule,
            max_candidates=self.max_candidates,
            min_gain=self.min_gain,
            max_rounds=max_rounds,
        )

    def place(
        self, state: ClusterState, queue: Sequence[Job], rng: np.random.Generator | None = None
    ) -> list[Placement]:
        """CROP's placements in acceptance order (``rng`` is ignored: CROP is deterministic)."""
        return self.run(state, queue).placements

    def next_placement(self, state: ClusterState, queue: Sequence[Job]) -> Placement | None:
        """CROP's first decision in ``state`` (``None``: it would place nothing), e.g. for an expert."""
        placements = self.run(state, queue, max_rounds=1).placements
        return placements[0] if placements else None

    def __repr__(self) -> str:
        return (
            f"CropPolicy(name={self.name!r}, robust={self.robust}, lazy={self.lazy}, rule={self.rule!r}, "
            f"max_candidates={self.max_candidates})"
        )
