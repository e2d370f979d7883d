"""The candidate action table shared by every placement environment.

:class:`CandidateActions` is the padded list of ``(job, candidate placement)`` pairs. The first
``num_jobs`` pending jobs that can be placed now (the *queue view*) get up to ``max_candidates``
candidates each from :func:`~crop_gym.candidates.candidate_placements` (the generator CROP uses).
Action ``a = q * max_candidates + c`` places view job ``q`` on its candidate ``c``; action
``num_jobs * max_candidates`` is *stop*, which is always valid.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from itertools import compress, islice
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.candidates import CandidateSet, candidate_placements, candidate_sets
from crop_gym.jobs import Job
from crop_gym.objective import ClusterState

__all__ = ["CandidateActions", "job_key"]


class CandidateActions:
    """Padded ``(job, candidate placement)`` action table over a window of pending jobs.

    After :meth:`build`, ``mask[a]`` says whether action ``a`` is valid; the stop action
    (:attr:`stop_action`, the last index) is always valid. Candidate sets come from the cached
    generator, so jobs of equal size share one computation per state version.

    The *view* is the first ``num_jobs`` pending jobs, in queue order, that have at least one
    candidate now (jobs too big for the free GPUs are skipped and stay pending). With
    ``group_identical=True`` (default) jobs that are identical for the objective — same model,
    size, batch and weight — share one view slot, held by the earliest of them in the queue: they
    have the same candidates and the same gains, so one slot expresses every choice and the view
    reaches further down the queue. (CROP breaks ties between identical jobs the same way.)

    Args:
        num_jobs: View size ``Q`` (slots).
        max_candidates: Candidates per job ``C`` (rows per slot).
        robust: Whether device health steers candidate choice (CROP's default: ``True``).
        group_identical: Whether identical pending jobs share a slot.

    Attributes:
        num_actions: ``Q * C + 1``.
        stop_action: ``Q * C``.
        mask: ``bool[Q * C + 1]`` valid actions (read-only; each build replaces it).
        sets: Per view slot, its :class:`CandidateSet` (``None`` for an empty slot).
        view: The pending job of each view slot.
        positions: Index in ``pending`` of each view job.
        copies: ``int[Q]`` pending jobs each slot stands for (1 without grouping; 0 if empty;
            read-only).
        view_copies: The same for the filled slots only, as a tuple.
        in_view: Pending jobs the view stands for (the sum of :attr:`copies`).
        groups: The distinct candidate sets of the view (one per job size).
        slot_group: ``int[Q]`` index into :attr:`groups` of each slot (-1 if empty; read-only).
        slot_groups: The same for the filled slots only, as a tuple.
        view_classes: A class id per view job (equal ids = jobs identical for the objective, see
            :func:`job_key`; ids are stable for the lifetime of this object).
        pending_gpus: GPUs requested by all pending jobs.
    """

    def __init__(
        self,
        num_jobs: int,
        max_candidates: int,
        *,
        robust: bool = True,
        group_identical: bool = True,
    ) -> None:
        if num_jobs < 1 or max_candidates < 1:
            raise ValueError(
                f"num_jobs={num_jobs} and max_candidates={max_candidates} must be >= 1"
            )
        self.num_jobs = int(num_jobs)
        self.max_candidates = int(max_candidates)
        self.robust = bool(robust)
        self.group_identical = bool(group_identical)
        self.num_actions = self.num_jobs * self.max_candidates + 1
        self.stop_action = self.num_actions - 1
        # Only stop is valid until the first build.
        self.mask = np.frombuffer(bytes(self.stop_action) + b"\x01", dtype=np.bool_)
        self.sets: list[CandidateSet | None] = [None] * self.num_jobs
        self.view: tuple[Job, ...] = ()
        self.positions: tuple[int, ...] = ()
        self.view_copies: tuple[int, ...] = ()
        # The copies array, made when first read after it changes.
        self._copies_arr: NDArray[np.int64] | None = None
        self.groups: list[CandidateSet] = []
        self.slot_groups: tuple[int, ...] = ()
        # The slot_group array, made when first read after it changes.
        self._slot_group_arr: NDArray[np.int64] | None = None
        self.in_view = 0
        self.view_classes: tuple[int, ...] = ()
        # Per job object (by id; the job is kept alive in _jobs, so ids are not reused): its
        # class id. Per class id: its size.
        self._jobs: dict[int, Job] = {}
        self._cls_of: dict[int, int] = {}
        self._cls_k: dict[int, int] = {}
        self.pending_gpus = 0
        self._class_ids: dict[tuple[str, int, float, float], int] = {}
        self._built: tuple[Any, int] = (None, -1)
        self._masks: dict[tuple[tuple[int, ...], tuple[int, ...]], NDArray[np.bool_]] = {}
        # A slot's mask bytes by its number of candidates.
        C = self.max_candidates
        self._mask_rows = [b"\x01" * m + bytes(C - m) for m in range(C + 1)]
        # The pending queue of the last build, indexed (see _QueueIndex).
        self._index: _QueueIndex | None = None

    @property
    def copies(self) -> NDArray[np.int64]:
        """``int[Q]`` pending jobs each slot stands for, 0 if empty (read-only)."""
        arr = self._copies_arr
        if arr is None:
            arr = self._copies_arr = self._padded(self.view_copies, 0)
        return arr

    @property
    def slot_group(self) -> NDArray[np.int64]:
        """``int[Q]`` index into :attr:`groups` of each slot, -1 if empty (read-only)."""
        arr = self._slot_group_arr
        if arr is None:
            arr = self._slot_group_arr = self._padded(self.slot_groups, -1)
        return arr

    def _padded(self, values: tuple[int, ...], pad: int) -> NDArray[np.int64]:
        """``values`` padded with ``pad`` to one per slot, as a read-only array."""
        arr = np.array(values + (pad,) * (self.num_jobs - len(values)), dtype=np.int64)
        arr.setflags(write=False)
        return arr

    def __getstate__(self) -> dict[str, Any]:
        # The per-job caches are keyed by object id, which means nothing in another process
        # (or for the copied jobs of a deep copy): drop them; the next build relearns the jobs.
        st = self.__dict__.copy()
        st["_jobs"], st["_cls_of"], st["_index"] = {}, {}, None
        # The read-only arrays are made again when read (unpickled arrays would be writable).
        st["_copies_arr"] = st["_slot_group_arr"] = None
        return st

    @property
    def space(self) -> spaces.Discrete:
        """The action space, ``Discrete(Q * C + 1)``."""
        return spaces.Discrete(self.num_actions)

    @property
    def has_placement(self) -> bool:
        """Whether any action other than stop is valid."""
        return len(self.view) > 0

    def is_current(self, state: ClusterState) -> bool:
        """Whether the table was built for ``state`` as it is now (same object, same version):
        then every row is a valid placement in it."""
        built, version = self._built
        return built is state and version == state.version

    def _learn_job(self, job: Job) -> None:
        """Cache a job's class id (the class id interns :func:`job_key`) and its class's size."""
        cls = self._class_ids.setdefault(job_key(job), len(self._class_ids))
        i = id(job)
        self._jobs[i] = job
        self._cls_of[i] = cls
        self._cls_k[cls] = job.num_gpus

    def forget_jobs(self) -> None:
        """Drop the per-job cache (call at reset, so finished episodes' jobs can be freed)."""
        self._jobs.clear()
        self._cls_of.clear()
        self._index = None

    def build(self, state: ClusterState, pending: Sequence[Job]) -> None:
        """Rebuild the table for ``state`` and the pending jobs (in queue order).

        Args:
            state: The cluster state.
            pending: Pending jobs in queue order.
        """
        index = self._index_queue(list(map(id, pending)), pending)
        self.pending_gpus = index.gpus
        # A size has candidates exactly when it fits in the free GPUs (some server or switch
        # subtree then holds it), so the view is known before any candidate set is computed;
        # the sets of all its sizes are then computed together.
        view = self._select_fitting(index, state.num_free)
        sizes = view[0]
        robust, cap = self.robust, self.max_candidates
        groups = candidate_sets(state, sizes, robust=robust, max_candidates=cap)
        counts = list(map(len, groups))
        if 0 in counts:  # never happens; kept for safety
            found: dict[int, CandidateSet] = {}

            def has(k: int) -> bool:
                cs = candidate_placements(
                    state, k, robust=self.robust, max_candidates=self.max_candidates
                )
                found[k] = cs
                return len(cs) > 0

            view = self._select((index.classes, index.ks), has)
            sizes = view[0]
            groups = [found[k] for k in sizes]
            counts = list(map(len, groups))
        _, slot_group, copies, pos, slot_classes = view
        self._store(state, pending, slot_classes, groups, slot_group, copies, pos, counts)

    def _index_queue(self, ids: list[int], pending: Sequence[Job]) -> _QueueIndex:
        """The :class:`_QueueIndex` of ``pending`` (whose job ids are ``ids``).

        The previous build's index is reused when the queue is unchanged, and updated when the
        queue is the previous one less one job (a placement in the static environment); any
        other queue is indexed from scratch.
        """
        index = self._index
        if index is not None:
            old = index.ids
            if len(ids) == len(old):
                if ids == old:
                    return index
            elif len(ids) + 1 == len(old):
                # The removed job's id is the difference of the id sums; a queue that is not
                # the old one less that job fails the comparisons below.
                id_sum = sum(ids)
                try:
                    i = old.index(index.id_sum - id_sum)
                except ValueError:
                    i = -1
                if i >= 0 and ids[i:] == old[i + 1 :] and ids[:i] == old[:i]:
                    index.remove(i, ids, id_sum)
                    return index
        cls_of = self._cls_of
        try:
            classes = list(map(cls_of.__getitem__, ids))
        except KeyError:
            for j in pending:
                if id(j) not in cls_of:
                    self._learn_job(j)
            classes = list(map(cls_of.__getitem__, ids))
        index = self._index = _QueueIndex(ids, classes, self._cls_k, self.group_identical)
        return index

    def _select_fitting(
        self, index: _QueueIndex, n_free: int
    ) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
        """:meth:`_select` of the indexed queue with ``has_candidates(k) = k <= n_free``, from
        the index's lists (list operations instead of a loop over the jobs)."""
        Q = self.num_jobs
        if self.group_identical:
            order, first, count, size = index.order, index.first, index.count, index.size
            if index.kmax <= n_free:
                slots, pos, copies, slot_ks = order[:Q], first[:Q], count[:Q], size[:Q]
            else:
                keep = list(islice(compress(range(len(size)), map(n_free.__ge__, size)), Q))
                slots = list(map(order.__getitem__, keep))
                pos = list(map(first.__getitem__, keep))
                copies = list(map(count.__getitem__, keep))
                slot_ks = list(map(size.__getitem__, keep))
        else:
            ks = index.ks
            if index.kmax <= n_free:
                pos = list(range(min(Q, len(ks))))
            else:
                pos = list(islice(compress(range(len(ks)), map(n_free.__ge__, ks)), Q))
            slots = list(map(index.classes.__getitem__, pos))
            slot_ks = list(map(ks.__getitem__, pos))
            copies = [1] * len(pos)
        sizes = list(dict.fromkeys(slot_ks))
        return sizes, list(map(sizes.index, slot_ks)), copies, pos, slots

    def _select(
        self, infos: tuple[list[int], list[int]], has_candidates: Any
    ) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
        """The view of the pending jobs given by ``infos`` (their class ids and sizes, in queue
        order), keeping the sizes for which ``has_candidates(k)``.

        Returns:
            The distinct sizes of the view (in order of first use), each slot's index into them,
            each slot's number of pending copies, each slot's position in the queue, and each
            slot's class id.
        """
        Q = self.num_jobs
        classes, ks = infos
        group_of_size: dict[int, int] = {}
        sizes: list[int] = []
        copies: list[int] = []
        slot_group: list[int] = []
        pos: list[int] = []
        slot_classes: list[int] = []

        def group(k: int) -> int:
            """The index of size ``k`` in ``sizes`` (added at first use), -1 if it does not fit."""
            gi = group_of_size.get(k)
            if gi is None:
                gi = -1
                if has_candidates(k):
                    gi = len(sizes)
                    sizes.append(k)
                group_of_size[k] = gi
            return gi

        if self.group_identical:
            # A class gets a slot at its first job if the view has room and its size fits; the
            # slot stands for every pending job of the class.
            counts = Counter(classes)
            cls_k = self._cls_k
            for cls in dict.fromkeys(classes):
                if len(slot_group) == Q:
                    break
                gi = group(cls_k[cls])
                if gi < 0:
                    continue
                copies.append(counts[cls])
                slot_group.append(gi)
                pos.append(classes.index(cls))
                slot_classes.append(cls)
            return sizes, slot_group, copies, pos, slot_classes
        n = 0
        for i, (k, cls) in enumerate(zip(ks, classes, strict=True)):
            if n == Q:
                break
            gi = group(k)
            if gi < 0:
                continue
            copies.append(1)
            slot_group.append(gi)
            pos.append(i)
            slot_classes.append(cls)
            n += 1
        return sizes, slot_group, copies, pos, slot_classes

    def _store(
        self,
        state: ClusterState,
        pending: Sequence[Job],
        slot_classes: list[int],
        groups: list[CandidateSet],
        slot_group: list[int],
        copies: list[int],
        pos: list[int],
        counts: list[int],
    ) -> None:
        """Store a built view: mask, sets, copies and the view's jobs (``counts``: the number
        of candidates of each group)."""
        Q, C = self.num_jobs, self.max_candidates
        n = len(slot_group)
        vc = tuple(copies)
        if vc != self.view_copies:
            self.view_copies = vc
            self._copies_arr = None
        self.in_view = sum(copies)
        sg = tuple(slot_group)
        if sg != self.slot_groups:
            self.slot_groups = sg
            self._slot_group_arr = None
        # The mask only depends on each slot's number of candidates, which the key determines.
        key = (tuple(counts), sg)
        pattern = self._masks.get(key)
        if pattern is None:
            # Slot q's rows: its number of candidates in ones, then zeros; empty slots all
            # zeros; stop valid.
            rows = list(map(self._mask_rows.__getitem__, counts))
            raw = b"".join(map(rows.__getitem__, slot_group)) + bytes((Q - n) * C) + b"\x01"
            pattern = np.frombuffer(raw, dtype=np.bool_)
            if len(self._masks) >= 4096:
                self._masks.clear()
            self._masks[key] = pattern
        self.mask = pattern  # (read-only: frombuffer of bytes; shared with the cache)
        self.sets[:] = list(map(groups.__getitem__, slot_group)) + [None] * (Q - n)
        self.groups = groups
        self.positions = tuple(pos)
        self.view = tuple(map(pending.__getitem__, pos))
        self.view_classes = tuple(slot_classes)
        self._built = (state, state.version)

    def decode(self, action: Any) -> tuple[int, int] | None:
        """``(view slot, candidate index)`` of a valid placement action, else ``None``.

        Stop, out-of-range, non-integer and masked actions all give ``None``; tell them apart with
        :meth:`is_stop` and ``mask``.
        """
        a = _as_index(action)
        if a is None or a < 0 or a >= self.stop_action or not self.mask[a]:
            return None
        return divmod(a, self.max_candidates)

    def is_stop(self, action: Any) -> bool:
        """Whether ``action`` is the stop action."""
        return _as_index(action) == self.stop_action

    def gpus(self, q: int, c: int) -> NDArray[np.int32]:
        """GPU indices of candidate ``c`` of view slot ``q``."""
        cs = self.sets[q]
        assert cs is not None
        return cs.row(c)

    def gpu_key(self, q: int, c: int) -> tuple[int, ...]:
        """GPU indices of candidate ``c`` of view slot ``q`` as a sorted tuple."""
        cs = self.sets[q]
        assert cs is not None
        return cs.keys[c]

    def index_of(
        self, job_id: str, gpus: NDArray[np.integer[Any]], job: Job | None = None
    ) -> int | None:
        """The action that places job ``job_id`` on exactly ``gpus``, or ``None`` if the table has no
        such row (the job is outside the view or the GPU set is not one of its candidates).

        With ``job`` given and identical jobs grouped, a view job identical to it (same model,
        size, batch and weight) also matches: placing either changes F the same way.
        """
        want = np.sort(np.asarray(gpus, dtype=np.int32))
        key = job_key(job) if job is not None and self.group_identical else None
        for q, vjob in enumerate(self.view):
            if vjob.job_id != job_id and (key is None or job_key(vjob) != key):
                continue
            cs = self.sets[q]
            if cs is None or len(cs) == 0 or cs.gpus.shape[1] != len(want):
                return None
            hit = np.flatnonzero((cs.gpus == want).all(axis=1))
            return int(q * self.max_candidates + hit[0]) if len(hit) else None
        return None


class _QueueIndex:
    """A pending queue indexed for view selection, updatable when one job leaves it.

    Attributes:
        ids: ``id`` of each pending job, in queue order.
        id_sum: ``sum(ids)`` (finds the job a one-shorter queue lost).
        classes: Each pending job's class id.
        ks: Each pending job's size.
        gpus: ``sum(ks)``.
        kmax: ``max(ks)`` (0 for an empty queue).
        order: With grouping only (else empty): the distinct classes in order of first
            occurrence in the queue.
        first: Position in the queue of each class's first job (increasing).
        count: Pending jobs of each class.
        size: Size of each class.
    """

    __slots__ = (
        "classes",
        "count",
        "first",
        "gpus",
        "id_sum",
        "ids",
        "kmax",
        "ks",
        "order",
        "size",
    )

    def __init__(
        self, ids: list[int], classes: list[int], cls_k: dict[int, int], grouped: bool
    ) -> None:
        self.ids = ids
        self.id_sum = sum(ids)
        self.classes = classes
        self.ks = list(map(cls_k.__getitem__, classes))
        self.gpus = sum(self.ks)
        self.kmax = max(self.ks, default=0)
        order: list[int] = []
        first: list[int] = []
        count: list[int] = []
        if grouped:
            order = list(dict.fromkeys(classes))
            n = len(classes)
            if n <= 32:  # C-level scans, quadratic but cheap for short queues
                first = list(map(classes.index, order))
                count = list(map(classes.count, order))
            else:
                # Filled from the back, each class's entry ends at its first position.
                at = dict(zip(reversed(classes), range(n - 1, -1, -1), strict=True))
                first = list(map(at.__getitem__, order))
                counts = Counter(classes)
                count = list(map(counts.__getitem__, order))
        self.order, self.first, self.count = order, first, count
        self.size = list(map(cls_k.__getitem__, order))

    def remove(self, i: int, ids: list[int], id_sum: int) -> None:
        """Update the index for the queue less its job at position ``i`` (whose ids are ``ids``,
        summing to ``id_sum``)."""
        self.ids = ids
        self.id_sum = id_sum
        c = self.classes.pop(i)
        k = self.ks.pop(i)
        self.gpus -= k
        if k == self.kmax:
            self.kmax = max(self.ks, default=0)
        order = self.order
        if not order:
            return
        first, count = self.first, self.count
        o = order.index(c)
        count[o] -= 1
        if count[o] == 0:
            # The class's only job left: drop it; every later class's first job moves up.
            del order[o], first[o], count[o], self.size[o]
            first[o:] = [f - 1 for f in first[o:]]
        elif first[o] == i:
            # The class's first job left: its next job becomes its first, which may move the
            # class behind classes that came after it.
            j = self.classes.index(c, i)
            n_c, k_c = count.pop(o), self.size.pop(o)
            del order[o], first[o]
            first[o:] = [f - 1 for f in first[o:]]
            b = bisect_left(first, j, o)
            order.insert(b, c)
            first.insert(b, j)
            count.insert(b, n_c)
            self.size.insert(b, k_c)
        else:
            # A later job of the class left: only the classes first seen after it move up.
            b = bisect_right(first, i, o + 1)
            first[b:] = [f - 1 for f in first[b:]]


def job_key(job: Job) -> tuple[str, int, float, float]:
    """What makes two jobs identical for the objective: ``(model, k, batch, weight)``."""
    return (job.model, job.num_gpus, float(job.batch_size), float(job.weight))


def _as_index(action: Any) -> int | None:
    """An action as a Python int, or ``None`` if it is not a scalar integer."""
    if type(action) is int:
        return action
    try:
        arr = np.asarray(action)
        if arr.size != 1 or not (
            np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.bool_)
        ):
            if arr.size == 1 and np.issubdtype(arr.dtype, np.floating) and float(arr) == int(arr):
                return int(arr)
            return None
        return int(arr.reshape(()))
    except (TypeError, ValueError, OverflowError):
        return None
