"""The queue view and the padded ``(job, candidate)`` action table of every placement environment.

The *view* is the first ``Q`` pending jobs, in queue order, that fit in the free GPUs now (a job of
``k`` GPUs has a candidate exactly when ``k`` GPUs are free: some subtree then holds them). With
``group_identical=True`` jobs that are identical for the objective (:func:`job_key`: same model,
size, batch and weight) share one view slot, held by the earliest of them: they have the same
candidates and gains, so one slot expresses every choice and the view reaches further down the
queue.

Each slot has ``C`` rows, one per candidate of its job (from
:func:`~crop_gym.model.candidates.generate`, the generator CROP uses), padded. Action
``a = q * C + c`` places view job ``q`` on its candidate ``c``; action ``Q * C`` is *stop*, which is
always valid. :func:`build_action_tables` makes one immutable :class:`ActionTable` per episode of a
state (one per region: a single environment is the batch of one); it also evaluates every valid row
once (its placement facts and its marginal gain), which the observation, the reward and the
privileged features read.

Masks are predicates over the rows: action ``q * C + c`` is valid ⇔ slot ``q`` holds a view job ∧
that job has at least ``c + 1`` candidates; stop is always valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.envs.job_features import class_columns
from crop_gym.model import kernels
from crop_gym.model.candidates import CandidateSet, candidate_inputs, generate
from crop_gym.model.facts import PlacementFacts, upper_links_by_depth
from crop_gym.model.jobs import Job
from crop_gym.model.state import ClusterState, Gains, perf_args
from crop_gym.model.timing import JOB_COLUMNS, job_constants

__all__ = [
    "ActionTable",
    "PendingQueue",
    "action_index",
    "action_space",
    "build_action_tables",
    "job_key",
    "select_view",
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
        const: ``float64[K, 7]`` each job's :func:`~crop_gym.model.timing.job_constants`.
        columns: ``float64[K, 3]`` each job's class feature columns (grad_size, compute_time,
            weight: :func:`~crop_gym.envs.job_features.class_columns`).
        index: ``int64[P]`` positions in :attr:`queue` of the pending jobs, in queue order.
        pending_gpus: GPUs requested by the pending jobs.
    """

    queue: tuple[Job, ...]
    job_class: NDArray[np.int64]
    num_gpus: NDArray[np.int64]
    const: NDArray[np.float64]
    columns: NDArray[np.float64]
    index: NDArray[np.int64]
    pending_gpus: int

    @classmethod
    def of(cls, state: ClusterState, jobs: Sequence[Job]) -> PendingQueue:
        """Every job of ``jobs`` pending, with its constants on ``state``'s cluster."""
        classes: dict[tuple[str, int, float, float], int] = {}
        job_class = [classes.setdefault(job_key(j), len(classes)) for j in jobs]
        num_gpus = [j.num_gpus for j in jobs]
        columns = [class_columns(j.model, j.num_gpus, j.batch_size, j.weight) for j in jobs]
        return cls(
            tuple(jobs),
            np.array(job_class, dtype=np.int64),
            np.array(num_gpus, dtype=np.int64),
            job_constants(state.topology, state.perf, jobs),
            np.array(columns, dtype=np.float64).reshape(len(jobs), 3),
            np.arange(len(jobs), dtype=np.int64),
            sum(num_gpus),
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
        gone = int(index[position])
        rest = np.concatenate((index[:position], index[position + 1 :]))
        left = self.pending_gpus - int(self.num_gpus[gone])
        return PendingQueue(
            self.queue, self.job_class, self.num_gpus, self.const, self.columns, rest, left
        )


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
        region: The region (episode) of the state the table is of (0 for a single cluster).
        jobs: The view job of each filled slot, in queue order.
        positions: Index in the pending queue of each view job.
        queue_index: ``int64[n]`` position in the queue of each view job.
        copies: ``int64[Q]`` pending jobs each slot stands for (0 for an empty slot).
        const: ``float64[n, 7]`` the :func:`~crop_gym.model.timing.job_constants` of each view job.
        sets: The candidate set of each filled slot.
        distinct: The distinct candidate sets of the view, one per job size, in order of first
            appearance (slots of one size share one).
        row_slot: ``int64[M]`` slot of each valid row (``M`` candidates in all).
        row_cand: ``int64[M]`` candidate index of each valid row in its slot's set.
        row_src: ``int64[M]`` row of each valid row among the rows of :attr:`distinct`, in order.
        row_index: ``int64[Q * C]`` the valid row of each placement action (-1 if masked).
        facts: Placement facts of the ``M`` valid rows (under the true health).
        gains: ΔF of each valid row (its job's own value and, if evaluated, the interference it
            causes).
        mask: ``bool[Q * C + 1]`` valid actions (read-only); stop, the last, is always valid.
        pending_gpus: GPUs requested by all pending jobs.
        in_view: Pending jobs the view stands for (the sum of ``copies``).
        row_gpus: ``(gpus, lo, hi)``: the GPUs of valid row ``m`` are ``gpus[lo[m]:hi[m]]`` (the
            distinct sets' GPUs, one after the other); derived from :attr:`distinct` when not
            given.
    """

    num_slots: int
    max_candidates: int
    region: int
    jobs: tuple[Job, ...]
    positions: tuple[int, ...]
    queue_index: NDArray[np.int64]
    copies: NDArray[np.int64]
    const: NDArray[np.float64]
    sets: tuple[CandidateSet, ...]
    distinct: tuple[CandidateSet, ...]
    row_slot: NDArray[np.int64]
    row_cand: NDArray[np.int64]
    row_src: NDArray[np.int64]
    row_index: NDArray[np.int64]
    facts: PlacementFacts
    gains: Gains
    mask: NDArray[np.bool_]
    pending_gpus: int
    in_view: int
    row_gpus: tuple[NDArray[np.int32], NDArray[np.int64], NDArray[np.int64]] = field(
        default=None,  # type: ignore[assignment]
        repr=False,
    )

    @property
    def stop_action(self) -> int:
        """``Q * C``."""
        return self.num_slots * self.max_candidates

    def __post_init__(self) -> None:
        if self.row_gpus is None:
            object.__setattr__(self, "row_gpus", _row_gpus(self.distinct, self.row_src))

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

    def row(self, action: Any) -> int | None:
        """The valid row placed by ``action``, else ``None`` (stop, out of range, masked, or not
        an integer)."""
        a = action_index(action)
        if a is None or not 0 <= a < self.stop_action:
            return None
        r = int(self.row_index[a])
        return r if r >= 0 else None

    def equal_gain_actions(
        self, action: Any, gain: NDArray[np.float64], rtol: float = 1e-9
    ) -> NDArray[np.bool_]:
        """``bool[Q * C + 1]``: the actions that place ``action``'s job (its view slot) with the
        same ΔF as ``action``'s row, within ``rtol`` (relative, at least 1e-9 GPUs); for stop or
        an invalid action, ``action`` alone.

        On a regular, healthy cluster many rows of one job are mirror images (another server of
        the same rack, another rack), so an expert's choice among them is a tie-break. Equal ΔF
        now does not make two rows equal later (what they leave free can differ).

        Args:
            action: The action whose equals are wanted.
            gain: ``float64[M]`` ΔF of each valid row, the interference included
                (:meth:`crop_gym.envs.placement.PlacementEnv.equal_gain_actions` evaluates it).
            rtol: Relative tolerance on ΔF.
        """
        out = np.zeros(self.stop_action + 1, dtype=bool)
        a = action_index(action)
        r = self.row(action)
        if r is None:
            if a is not None and 0 <= a <= self.stop_action:
                out[a] = True
            return out
        same = (self.row_slot == self.row_slot[r]) & (
            np.abs(gain - gain[r]) <= rtol * max(1.0, abs(float(gain[r])))
        )
        out[self.row_action[same]] = True
        return out

    def is_stop(self, action: Any) -> bool:
        """Whether ``action`` is the stop action."""
        return action_index(action) == self.stop_action

    def row_of(self, q: int, c: int) -> int:
        """Index among the valid rows of candidate ``c`` of slot ``q`` (which must be valid)."""
        r = int(self.row_index[q * self.max_candidates + c])
        if r < 0:
            raise IndexError(f"slot {q} has no candidate {c}")
        return r

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


def _row_gpus(
    sets: tuple[CandidateSet, ...], row_src: NDArray[np.int64]
) -> tuple[NDArray[np.int32], NDArray[np.int64], NDArray[np.int64]]:
    """:attr:`ActionTable.row_gpus` from the table's distinct sets."""
    if not sets:
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros(0, dtype=np.int32), empty, empty
    flat = np.concatenate([cs.gpus.ravel() for cs in sets])
    k = np.concatenate([np.full(len(cs), cs.k, dtype=np.int64) for cs in sets])
    start = np.cumsum(k) - k
    lo = start[row_src]
    return flat, lo, lo + k[row_src]


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


@dataclass(frozen=True)
class _View:
    """One episode's view of its pending jobs (:func:`select_view`).

    Attributes:
        queue_index: ``int64[V]`` each slot's job, as a position in the queue.
        positions: ``int64[V]`` each slot's job, as a position among the pending jobs.
        copies: ``int64[V]`` pending jobs each slot stands for.
        ks: GPUs of each slot's job.
        sizes: The distinct sizes of ``ks``, in order of first appearance.
    """

    queue_index: NDArray[np.int64]
    positions: NDArray[np.int64]
    copies: NDArray[np.int64]
    ks: list[int]
    sizes: list[int]

    @classmethod
    def of(cls, queue: PendingQueue, num_free: int, Q: int, group_identical: bool) -> _View:
        index = queue.index
        num_gpus = queue.num_gpus[index]
        group = queue.job_class[index] if group_identical else np.arange(len(index))
        positions, copies = select_view(group, num_gpus, num_free, Q)
        ks = num_gpus[positions].tolist()
        return cls(index[positions], positions, copies, ks, list(dict.fromkeys(ks)))


_EMPTY_VIEW = _View(
    np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [], []
)


def build_action_tables(
    state: ClusterState,
    pending: Sequence[PendingQueue | None],
    *,
    num_slots: int,
    max_candidates: int,
    robust: bool = True,
    group_identical: bool = True,
    interference: bool = True,
    backend: str | None = None,
) -> list[ActionTable | None]:
    """The action table of every episode of ``state`` with its ``pending`` jobs.

    ``pending[r]`` is the queue of the episode in region ``r`` (a single cluster has one region),
    or ``None`` for a region whose table is not wanted. One candidate generation for the views'
    distinct sizes in every region (:func:`~crop_gym.model.candidates.generate`), one facts look-up
    of their candidates (:meth:`Conditions.facts <crop_gym.model.conditions.Conditions.facts>`),
    and one vectorised gains evaluation over every valid row of every table (without the
    interference of each row unless ``interference``: a step needs it only for the chosen row, the
    privileged features for all).

    ``backend``: ``"numpy"`` (the reference: the steps above, one after the other), ``"numba"``
    (:func:`crop_gym.model.kernels.table_rows`: the same rows, facts and gains in one compiled
    call) or ``None``: the compiled kernel when it is available.

    Returns:
        One table per region (``None`` where ``pending`` is ``None``).
    """
    Q, C = num_slots, max_candidates
    topo = state.topology
    R, Gr = topo.regions, topo.region_gpus
    if len(pending) != R:
        raise ValueError(f"build_action_tables: {len(pending)} queues for {R} regions")
    if state.compiled if backend is None else backend == "numba":
        return _compiled_tables(state, pending, Q, C, robust, group_identical, interference)
    free = state.free_mask
    n_free = (
        [int(np.count_nonzero(free))]
        if R == 1
        else np.count_nonzero(free.reshape(R, Gr), axis=1).tolist()
    )
    views = [
        _EMPTY_VIEW if queue is None else _View.of(queue, n_free[r], Q, group_identical)
        for r, queue in enumerate(pending)
    ]
    distinct_all = generate(
        state.conditions, free, [v.sizes for v in views], C, robust=robust, backend="numpy"
    )
    # The facts of each distinct candidate once, then of each row; the gains of every row of
    # every table in one call (each row alone against the state).
    keys = [key for distinct in distinct_all for cs in distinct for key in cs.keys]
    facts = state.conditions.facts(keys)
    layouts: list[_Layout | None] = []
    src_off = 0
    row_src, consts = [], []
    for queue, view, distinct in zip(pending, views, distinct_all, strict=True):
        n_distinct = sum(len(cs) for cs in distinct)
        if queue is None:
            layouts.append(None)
            src_off += n_distinct
            continue
        lay = _Layout.of(view, distinct, C)
        layouts.append(lay)
        row_src.append(lay.row_src + src_off)
        consts.append(queue.const[view.queue_index][lay.row_slot])
        src_off += n_distinct
    all_src = np.concatenate(row_src) if row_src else np.zeros(0, dtype=np.int64)
    row_facts = facts.take(all_src)
    const = np.concatenate(consts) if consts else np.zeros((0, len(JOB_COLUMNS)))
    gains = state.gains(const, row_facts, interference=interference)
    out: list[ActionTable | None] = []
    start = 0
    for r, (queue, view, layout) in enumerate(zip(pending, views, layouts, strict=True)):
        if queue is None or layout is None:
            out.append(None)
            continue
        lay = layout
        rows = slice(start, start + len(lay.row_slot))
        start = rows.stop
        out.append(_table(r, queue, view, lay, row_facts.take(rows), _gains_of(gains, rows), Q, C))
    return out


def _compiled_tables(
    state: ClusterState,
    pending: Sequence[PendingQueue | None],
    Q: int,
    C: int,
    robust: bool,
    group_identical: bool,
    interference: bool,
) -> list[ActionTable | None]:
    """:func:`build_action_tables` by the compiled kernel (one call for every region; Python
    only wraps its arrays into one :class:`ActionTable` per region)."""
    cond = state.conditions
    topo = state.topology
    R = topo.regions
    if R == 1 and pending[0] is not None:
        q = pending[0]
        q_cls, q_gpus, q_const, p_index = q.job_class, q.num_gpus, q.const, q.index
        q_ptr = np.array([0, len(q.queue)], dtype=np.int64)
        p_ptr = np.array([0, len(q)], dtype=np.int64)
    else:
        queues = [q for q in pending if q is not None]
        q_ptr = np.fromiter(
            accumulate((0 if q is None else len(q.queue) for q in pending), initial=0),
            np.int64,
            R + 1,
        )
        p_ptr = np.fromiter(
            accumulate((0 if q is None else len(q) for q in pending), initial=0), np.int64, R + 1
        )
        if queues:
            q_cls = np.concatenate([q.job_class for q in queues])
            q_gpus = np.concatenate([q.num_gpus for q in queues])
            q_const = np.concatenate([q.const for q in queues])
            p_index = np.concatenate([q.index for q in queues])
        else:
            q_cls = q_gpus = p_index = np.zeros(0, dtype=np.int64)
            q_const = np.zeros((0, len(JOB_COLUMNS)))
    badness, uniform, base, _, *tree = candidate_inputs(cond, cond.usable, robust)
    (
        reg, slot, slot_const, copies, req, gpus, cand, quality, row, values, links, gains,
        mask, row_index,
    ) = kernels.action_tables(
        badness, uniform, base, state.gpu_owner, cond.usable, *tree,
        cond.device_table, cond.link_table, upper_links_by_depth(topo), cond.eff_bw,
        state.link_load, q_ptr, q_cls, q_gpus, q_const, p_ptr, p_index, group_identical, Q, C,
        *perf_args(state.perf),
    )  # fmt: skip
    other = state.interference(PlacementFacts(values, links)) if interference else None
    mask.setflags(write=False)
    row_index.setflags(write=False)
    copies.setflags(write=False)
    req_k, count = req[0].tolist(), req[1].tolist()
    servers, subtree = cand[0], cand[1]
    own, eta, comm, b_inter = gains[0], gains[1], gains[2], gains[3]
    out: list[ActionTable | None] = []
    i = c0 = gpu = 0
    for r, queue in enumerate(pending):
        # This region's distinct sets, then its table.
        sets_of: dict[int, CandidateSet] = {}
        first_gpu = gpu
        for i in range(int(reg[1, r]), int(reg[1, r + 1])):
            k, n = req_k[i], count[i]
            sets_of[k] = CandidateSet(
                gpus[gpu : gpu + n * k].reshape(n, k),
                servers[c0 : c0 + n],
                subtree[c0 : c0 + n],
                quality[c0 : c0 + n],
            )
            c0 += n
            gpu += n * k
        if queue is None:
            out.append(None)
            continue
        if R == 1:
            rows: Any = slice(None)
            slots: Any = slice(None)
        else:
            rows = slice(int(reg[2, r]), int(reg[2, r + 1]))
            slots = slice(int(reg[0, r]), int(reg[0, r + 1]))
        qidx = slot[1, slots]
        out.append(
            ActionTable(
                num_slots=Q,
                max_candidates=C,
                region=r,
                jobs=tuple(queue.queue[i] for i in qidx.tolist()),
                positions=tuple(slot[0, slots].tolist()),
                queue_index=qidx,
                copies=copies[r],
                const=slot_const[slots],
                sets=tuple(sets_of[k] for k in slot[2, slots].tolist()),
                distinct=tuple(sets_of.values()),
                row_slot=row[0, rows],
                row_cand=row[1, rows],
                row_src=row[2, rows],
                row_index=row_index[r],
                facts=PlacementFacts(values[rows], links[rows]),
                gains=Gains(
                    own=own[rows],
                    interference=None if other is None else other[rows],
                    eta=eta[rows],
                    comm=comm[rows],
                    b_inter=b_inter[rows],
                ),
                mask=mask[r],
                pending_gpus=queue.pending_gpus,
                in_view=int(reg[3, r]),
                row_gpus=(gpus[first_gpu:gpu], row[3, rows], row[4, rows]),
            )
        )
    return out


@dataclass(frozen=True)
class _Layout:
    """Where a table's rows come from: per valid row its slot, its candidate and its row among the
    table's distinct candidate sets, and the set of each slot."""

    sets: tuple[CandidateSet, ...]
    distinct: tuple[CandidateSet, ...]
    row_slot: NDArray[np.int64]
    row_cand: NDArray[np.int64]
    row_src: NDArray[np.int64]

    @classmethod
    def of(cls, v: _View, distinct: list[CandidateSet], C: int) -> _Layout:
        by_size = dict(zip(v.sizes, distinct, strict=True))
        first, n = {}, 0  # size -> its first row among the distinct sets' rows
        for k, cs in by_size.items():
            first[k], n = n, n + len(cs)
        sets = tuple(by_size[k] for k in v.ks)
        counts = np.array([len(s) for s in sets], dtype=np.int64)
        row_slot = np.repeat(np.arange(len(sets), dtype=np.int64), counts)
        starts = np.cumsum(counts) - counts
        row_cand = np.arange(len(row_slot), dtype=np.int64) - np.repeat(starts, counts)
        row_src = np.repeat(np.array([first[k] for k in v.ks], dtype=np.int64), counts)
        row_src += row_cand
        return cls(sets, tuple(distinct), row_slot, row_cand, row_src)


def _gains_of(g: Gains, rows: slice) -> Gains:
    return Gains(
        own=g.own[rows],
        interference=None if g.interference is None else g.interference[rows],
        eta=g.eta[rows],
        comm=g.comm[rows],
        b_inter=g.b_inter[rows],
    )


def _table(
    region: int,
    pending: PendingQueue,
    v: _View,
    lay: _Layout,
    facts: PlacementFacts,
    gains: Gains,
    Q: int,
    C: int,
) -> ActionTable:
    """One episode's table from its view, the layout of its rows and their facts and gains."""
    jobs = tuple(pending.queue[i] for i in v.queue_index.tolist())
    actions = lay.row_slot * C + lay.row_cand
    row_index = np.full(Q * C, -1, dtype=np.int64)
    row_index[actions] = np.arange(len(actions))
    row_index.setflags(write=False)
    mask = np.zeros(Q * C + 1, dtype=bool)
    mask[actions] = True
    mask[-1] = True
    mask.setflags(write=False)
    copies = np.zeros(Q, dtype=np.int64)
    copies[: len(v.copies)] = v.copies
    copies.setflags(write=False)
    return ActionTable(
        num_slots=Q,
        max_candidates=C,
        region=region,
        jobs=jobs,
        positions=tuple(v.positions.tolist()),
        queue_index=v.queue_index,
        copies=copies,
        const=pending.const[v.queue_index],
        sets=lay.sets,
        distinct=lay.distinct,
        row_slot=lay.row_slot,
        row_cand=lay.row_cand,
        row_src=lay.row_src,
        row_index=row_index,
        facts=facts,
        gains=gains,
        mask=mask,
        pending_gpus=pending.pending_gpus,
        in_view=int(v.copies.sum()),
    )
