"""The queue view and the padded ``(job, candidate)`` action table of every placement environment.

The *view* is the first ``Q`` pending jobs, in queue order, that fit in the free GPUs now (a job of
``k`` GPUs has a candidate exactly when ``k`` GPUs are free: some subtree then holds them). With
``group_identical=True`` jobs that are identical for the objective (:func:`job_key`: same model,
size, batch and weight) share one view slot, held by the earliest of them: they have the same
candidates and gains, so one slot expresses every choice and the view reaches further down the
queue.

Each slot has ``C`` rows, one per candidate of its job (from
:func:`~crop_gym.model.candidates.candidate_sets`, the generator CROP uses), padded. Action
``a = q * C + c`` places view job ``q`` on its candidate ``c``; action ``Q * C`` is *stop*, which is
always valid. :func:`build_action_table` makes one immutable :class:`ActionTable` per state; it also
evaluates every valid row once (its placement facts and its marginal gain), which the observation,
the reward and the privileged features read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.model.candidates import CandidateSet, candidate_sets_many
from crop_gym.model.facts import PlacementFacts, memo_facts_many
from crop_gym.model.jobs import Job
from crop_gym.model.placed import Gains
from crop_gym.model.state import ClusterState
from crop_gym.model.timing import job_constants

__all__ = [
    "ActionTable",
    "PendingQueue",
    "action_index",
    "action_space",
    "build_action_table",
    "build_action_tables",
    "job_key",
]


def job_key(job: Job) -> tuple[str, int, float, float]:
    """What makes two jobs identical for the objective: ``(model, k, batch, weight)``."""
    return (job.model, job.num_gpus, float(job.batch_size), float(job.weight))


@dataclass(frozen=True, eq=False)
class PendingQueue:
    """The pending jobs: a job queue compiled once (its jobs are immutable), and which are pending.

    Attributes:
        queue: Every job of the queue, in queue order.
        job_class: ``int64[K]`` one number per :func:`job_key` (identical jobs share it).
        num_gpus: ``int64[K]`` GPUs of each job.
        const: ``float64[K, 5]`` each job's :func:`~crop_gym.model.timing.job_constants`.
        index: ``int64[P]`` positions in :attr:`queue` of the pending jobs, in queue order.
    """

    queue: tuple[Job, ...]
    job_class: NDArray[np.int64]
    num_gpus: NDArray[np.int64]
    const: NDArray[np.float64]
    index: NDArray[np.int64]

    @classmethod
    def of(cls, state: ClusterState, jobs: Sequence[Job]) -> PendingQueue:
        """Every job of ``jobs`` pending, with its constants on ``state``'s cluster."""
        classes: dict[tuple[str, int, float, float], int] = {}
        job_class = [classes.setdefault(job_key(j), len(classes)) for j in jobs]
        return cls(
            tuple(jobs),
            np.array(job_class, dtype=np.int64),
            np.array([j.num_gpus for j in jobs], dtype=np.int64),
            job_constants(state.topology, state.perf, jobs),
            np.arange(len(jobs), dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.index)

    @property
    def jobs(self) -> list[Job]:
        """The pending jobs, in queue order."""
        return [self.queue[i] for i in self.index.tolist()]

    def without(self, position: int) -> PendingQueue:
        """The same queue less its ``position``-th pending job."""
        index = self.index
        return replace(self, index=np.concatenate((index[:position], index[position + 1 :])))


def action_space(num_slots: int, max_candidates: int) -> spaces.Discrete:
    """``Discrete(Q * C + 1)``: a row per (slot, candidate), then stop."""
    return spaces.Discrete(num_slots * max_candidates + 1)


def action_index(action: Any) -> int | None:
    """An action as a Python int, or ``None`` if it is not one integer.

    Booleans, non-integral floats, strings and arrays of more than one element are not actions
    (``None``); an integral float such as ``3.0`` is read as ``3``.
    """
    if isinstance(action, (bool, np.bool_)):
        return None
    if isinstance(action, (int, np.integer)):
        return int(action)
    try:
        arr = np.asarray(action)
    except (TypeError, ValueError):
        return None
    if arr.size != 1 or arr.dtype == np.bool_:
        return None
    value = arr.reshape(())[()]
    if np.issubdtype(arr.dtype, np.integer):
        return int(value)
    if np.issubdtype(arr.dtype, np.floating) and np.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


@dataclass(frozen=True)
class ActionTable:
    """The padded (job, candidate) action table of one state: ``Q`` view slots × ``C`` rows, then stop.

    Attributes:
        num_slots: ``Q``.
        max_candidates: ``C``.
        jobs: The view job of each filled slot, in queue order.
        positions: Index in the pending queue of each view job.
        copies: ``int64[Q]`` pending jobs each slot stands for (0 for an empty slot).
        const: ``float64[n, 5]`` the :func:`~crop_gym.model.timing.job_constants` of each view job.
        sets: The candidate set of each filled slot.
        distinct: The distinct candidate sets of the view, one per job size, in order of first
            appearance (slots of one size share one).
        row_slot: ``int64[M]`` slot of each valid row (``M`` candidates in all).
        row_cand: ``int64[M]`` candidate index of each valid row in its slot's set.
        row_src: ``int64[M]`` row of each valid row among the rows of :attr:`distinct`, in order.
        facts: Placement facts of the ``M`` valid rows (under the true health).
        gains: ΔF of each valid row (its job's own value and, if evaluated, the interference it
            causes).
        mask: ``bool[Q * C + 1]`` valid actions (read-only); stop, the last, is always valid.
        pending_gpus: GPUs requested by all pending jobs.
        in_view: Pending jobs the view stands for (the sum of ``copies``).
    """

    num_slots: int
    max_candidates: int
    jobs: tuple[Job, ...]
    positions: tuple[int, ...]
    copies: NDArray[np.int64]
    const: NDArray[np.float64]
    sets: tuple[CandidateSet, ...]
    distinct: tuple[CandidateSet, ...]
    row_slot: NDArray[np.int64]
    row_cand: NDArray[np.int64]
    row_src: NDArray[np.int64]
    facts: PlacementFacts
    gains: Gains
    mask: NDArray[np.bool_]
    pending_gpus: int
    in_view: int

    @property
    def stop_action(self) -> int:
        """``Q * C``."""
        return self.num_slots * self.max_candidates

    @property
    def row_action(self) -> NDArray[np.int64]:
        """``int64[M]`` action ``q * C + c`` of each valid row."""
        out: NDArray[np.int64] = self.row_slot * self.max_candidates + self.row_cand
        return out

    @property
    def has_placement(self) -> bool:
        """Whether any action other than stop is valid."""
        return len(self.jobs) > 0

    def decode(self, action: Any) -> tuple[int, int] | None:
        """``(view slot, candidate index)`` of a valid placement action, else ``None`` (stop,
        out of range, masked, or not an integer)."""
        a = action_index(action)
        if a is None or not 0 <= a < self.stop_action or not self.mask[a]:
            return None
        return divmod(a, self.max_candidates)

    def is_stop(self, action: Any) -> bool:
        """Whether ``action`` is the stop action."""
        return action_index(action) == self.stop_action

    def row_of(self, q: int, c: int) -> int:
        """Index among the valid rows of candidate ``c`` of slot ``q`` (which must be valid)."""
        return int(np.flatnonzero((self.row_slot == q) & (self.row_cand == c))[0])

    def gpus(self, q: int, c: int) -> NDArray[np.int32]:
        """GPU indices of candidate ``c`` of view slot ``q``."""
        return self.sets[q].gpus[c]

    def index_of(
        self, job_id: str, gpus: NDArray[np.integer[Any]], job: Job | None = None
    ) -> int | None:
        """The action placing job ``job_id`` on exactly ``gpus``, or ``None`` if no row does.

        With ``job`` given, a view job identical to it (:func:`job_key`) also matches: placing
        either changes F the same way.
        """
        want = np.sort(np.asarray(gpus)).tolist()
        key = job_key(job) if job is not None else None
        for q, vjob in enumerate(self.jobs):
            if vjob.job_id != job_id and (key is None or job_key(vjob) != key):
                continue
            for c, row in enumerate(self.sets[q].gpus.tolist()):
                if row == want:
                    return q * self.max_candidates + c
        return None


def select_view(
    job_class: NDArray[np.int64], num_gpus: NDArray[np.int64], num_free: int, num_slots: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The view of the pending jobs: each slot's queue position and the pending jobs it stands for.

    A slot is held by the earliest pending job of its class, in queue order, if it fits.

    Args:
        job_class: ``int[P]`` per pending job (in queue order) its class, a small integer: jobs
            of one class share a slot (with every job its own class, no two do).
        num_gpus: ``int[P]`` GPUs of each pending job (a job fits when at most ``num_free``).
        num_free: Free usable GPUs.
        num_slots: ``Q``.
    """
    P = len(job_class)
    first = np.full(int(job_class.max(initial=-1)) + 1, P, dtype=np.int64)
    np.minimum.at(first, job_class, np.arange(P))  # the earliest pending job of each class
    holds = (first[job_class] == np.arange(P)) & (num_gpus <= num_free)
    positions = np.flatnonzero(holds)[:num_slots]
    return positions, np.bincount(job_class)[job_class[positions]]


def build_action_table(
    state: ClusterState,
    pending: Sequence[Job] | PendingQueue,
    *,
    num_slots: int,
    max_candidates: int,
    robust: bool = True,
    group_identical: bool = True,
    interference: bool = True,
) -> ActionTable:
    """The action table of ``state`` with ``pending`` jobs (in queue order; a
    :class:`PendingQueue` saves compiling them).

    One candidate generation for the view's distinct sizes, one placement-facts evaluation over
    the distinct candidate sets, and one vectorised gains evaluation over every valid row
    (without the interference of each row unless ``interference``: a step needs it only for the
    chosen row, the privileged features for all).
    """
    if not isinstance(pending, PendingQueue):
        pending = PendingQueue.of(state, pending)
    return build_action_tables(
        [state],
        [pending],
        num_slots=num_slots,
        max_candidates=max_candidates,
        robust=robust,
        group_identical=group_identical,
        interference=interference,
    )[0]


def build_action_tables(
    states: Sequence[ClusterState],
    pending: Sequence[PendingQueue],
    *,
    num_slots: int,
    max_candidates: int,
    robust: bool = True,
    group_identical: bool = True,
    interference: bool = True,
) -> list[ActionTable]:
    """:func:`build_action_table` of several states of one topology (``pending[i]`` on
    ``states[i]``), with one candidate generation for all of them
    (:func:`~crop_gym.model.candidates.candidate_sets_many`) and one facts evaluation of the candidate
    sets not yet evaluated (:func:`~crop_gym.model.facts.memo_facts_many`)."""
    Q, C = num_slots, max_candidates
    views = [
        _View.of(state, queue, Q, group_identical)
        for state, queue in zip(states, pending, strict=True)
    ]
    sizes = [list(dict.fromkeys(v.ks)) for v in views]
    distinct_all = candidate_sets_many(states, sizes, robust=robust, max_candidates=C)
    # The facts of each distinct candidate once (the sets new to their memo: of all states
    # together), then of each row.
    keys = [[key for cs in distinct for key in cs.keys] for distinct in distinct_all]
    healths = [st.health for st in states]
    facts_all = memo_facts_many(states[0].topology, healths, keys) if states else []
    return [
        _table(state, queue, view, ks, tuple(distinct), facts, Q, C, interference)
        for state, queue, view, ks, distinct, facts in zip(
            states, pending, views, sizes, distinct_all, facts_all, strict=True
        )
    ]


@dataclass(frozen=True)
class _View:
    """One state's view of its pending jobs (:func:`select_view`).

    Attributes:
        queue_index: ``int64[V]`` each slot's job, as a position in the queue.
        positions: ``int64[V]`` each slot's job, as a position among the pending jobs.
        copies: ``int64[V]`` pending jobs each slot stands for.
        ks: GPUs of each slot's job.
        pending_gpus: GPUs requested by all pending jobs.
    """

    queue_index: NDArray[np.int64]
    positions: NDArray[np.int64]
    copies: NDArray[np.int64]
    ks: list[int]
    pending_gpus: int

    @classmethod
    def of(cls, state: ClusterState, queue: PendingQueue, Q: int, group_identical: bool) -> _View:
        index = queue.index
        num_gpus = queue.num_gpus[index]
        group = queue.job_class[index] if group_identical else np.arange(len(index))
        positions, copies = select_view(group, num_gpus, state.num_free, Q)
        ks = num_gpus[positions].tolist()
        return cls(index[positions], positions, copies, ks, int(num_gpus.sum()))


def _table(
    state: ClusterState,
    pending: PendingQueue,
    v: _View,
    sizes: list[int],
    distinct: tuple[CandidateSet, ...],
    distinct_facts: PlacementFacts,
    Q: int,
    C: int,
    interference: bool,
) -> ActionTable:
    """One state's table from its view and the candidate sets of its distinct sizes with their
    facts."""
    view, positions, copies, ks = v.queue_index, v.positions, v.copies, v.ks
    jobs = tuple(pending.queue[i] for i in view.tolist())
    by_size = dict(zip(sizes, distinct, strict=True))
    first, n = {}, 0  # size -> its first row among the distinct sets' rows
    for k, cs in by_size.items():
        first[k], n = n, n + len(cs)
    sets = tuple(by_size[k] for k in ks)
    counts = np.array([len(s) for s in sets], dtype=np.int64)
    row_slot = np.repeat(np.arange(len(jobs), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    row_cand = np.arange(len(row_slot), dtype=np.int64) - np.repeat(starts, counts)
    row_src = np.repeat(np.array([first[k] for k in ks], dtype=np.int64), counts)
    row_src += row_cand
    facts = distinct_facts.take(row_src)
    # Gains of every row in one vectorised call (each row alone against the state).
    const = pending.const[view]
    gains = state.row_gains(const[row_slot], facts, interference=interference)
    mask = np.zeros(Q * C + 1, dtype=bool)
    mask[row_slot * C + row_cand] = True
    mask[-1] = True
    mask.setflags(write=False)
    copies_arr = np.zeros(Q, dtype=np.int64)
    copies_arr[: len(copies)] = copies
    copies_arr.setflags(write=False)
    return ActionTable(
        num_slots=Q,
        max_candidates=C,
        jobs=jobs,
        positions=tuple(positions.tolist()),
        copies=copies_arr,
        const=const,
        sets=sets,
        distinct=distinct,
        row_slot=row_slot,
        row_cand=row_cand,
        row_src=row_src,
        facts=facts,
        gains=gains,
        mask=mask,
        pending_gpus=v.pending_gpus,
        in_view=int(copies.sum()),
    )
