"""The candidate action table shared by every placement environment.

:class:`CandidateActions` is the padded list of ``(job, candidate placement)`` pairs. The first
``num_jobs`` pending jobs that can be placed now (the *queue view*) get up to ``max_candidates``
candidates each from :func:`~crop_gym.candidates.candidate_placements` (the generator CROP uses).
Action ``a = q * max_candidates + c`` places view job ``q`` on its candidate ``c``; action
``num_jobs * max_candidates`` is *stop*, which is always valid.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from crop_gym.candidates import CandidateSet, candidate_placements
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
        mask: ``bool[Q * C + 1]`` valid actions (owned by this object; copy before keeping it).
        sets: Per view slot, its :class:`CandidateSet` (``None`` for an empty slot).
        view: The pending job of each view slot.
        positions: Index in ``pending`` of each view job.
        copies: ``int[Q]`` pending jobs each slot stands for (1 without grouping; 0 if empty).
        in_view: Pending jobs the view stands for (the sum of :attr:`copies`).
        groups: The distinct candidate sets of the view (one per job size).
        slot_group: ``int[Q]`` index into :attr:`groups` of each slot (-1 if empty).
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
        self.mask = np.zeros(self.num_actions, dtype=bool)
        self.mask[self.stop_action] = True
        self.sets: list[CandidateSet | None] = [None] * self.num_jobs
        self.view: tuple[Job, ...] = ()
        self.positions: tuple[int, ...] = ()
        self.copies = np.zeros(self.num_jobs, dtype=np.int64)
        self.groups: list[CandidateSet] = []
        self.slot_group = np.full(self.num_jobs, -1, dtype=np.int64)
        self.slot_groups: tuple[int, ...] = ()
        self.in_view = 0
        self.view_classes: tuple[int, ...] = ()
        # Per job object (by id; the job is kept alive in _jobs, so ids are not reused): its size
        # and class id.
        self._jobs: dict[int, Job] = {}
        self._k_of: dict[int, int] = {}
        self._cls_of: dict[int, int] = {}
        self._cls_k: dict[int, int] = {}
        self._col = np.arange(self.max_candidates)
        self.pending_gpus = 0
        self._class_ids: dict[tuple[str, int, float, float], int] = {}
        self._built: tuple[Any, int] = (None, -1)
        self._masks: dict[tuple[int, ...], NDArray[np.bool_]] = {}

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
        """Cache a job's size and class id (the class id interns :func:`job_key`)."""
        cls = self._class_ids.setdefault(job_key(job), len(self._class_ids))
        i = id(job)
        self._jobs[i] = job
        self._k_of[i] = job.num_gpus
        self._cls_of[i] = cls
        self._cls_k[cls] = job.num_gpus

    def forget_jobs(self) -> None:
        """Drop the per-job cache (call at reset, so finished episodes' jobs can be freed)."""
        self._jobs.clear()
        self._k_of.clear()
        self._cls_of.clear()

    def build(self, state: ClusterState, pending: Sequence[Job]) -> None:
        """Rebuild the table for ``state`` and the pending jobs (in queue order).

        Args:
            state: The cluster state.
            pending: Pending jobs in queue order.
        """
        ids = list(map(id, pending))
        cls_of = self._cls_of
        if not cls_of.keys() >= set(ids):
            for j in pending:
                if id(j) not in cls_of:
                    self._learn_job(j)
        classes = list(map(cls_of.__getitem__, ids))
        sizes_of_jobs = list(map(self._k_of.__getitem__, ids))
        self.pending_gpus = sum(sizes_of_jobs)
        infos = (classes, sizes_of_jobs)
        # A size has candidates exactly when it fits in the free GPUs (some server or switch
        # subtree then holds it), so the view is known before any candidate set is computed;
        # the sets of all its sizes are then computed together.
        view = self._select(infos, lambda k, n_free=state.num_free: k <= n_free)
        sizes = view[0]
        robust, cap = self.robust, self.max_candidates
        groups = [candidate_placements(state, k, robust=robust, max_candidates=cap) for k in sizes]
        if not all(len(cs) for cs in groups):  # never happens; kept for safety
            found: dict[int, CandidateSet] = {}

            def has(k: int) -> bool:
                cs = candidate_placements(
                    state, k, robust=self.robust, max_candidates=self.max_candidates
                )
                found[k] = cs
                return len(cs) > 0

            view = self._select(infos, has)
            sizes = view[0]
            groups = [found[k] for k in sizes]
        _, slot_group, copies, pos, slot_classes = view
        self._store(state, pending, slot_classes, groups, slot_group, copies, pos)

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
        if self.group_identical:
            # A class gets a slot at its first job if the view has room and its size fits; the
            # slot stands for every pending job of the class.
            counts = Counter(classes)
            cls_k = self._cls_k
            for cls in dict.fromkeys(classes):
                if len(slot_group) == Q:
                    break
                k = cls_k[cls]
                gi = group_of_size.get(k)
                if gi is None:
                    gi = -1
                    if has_candidates(k):
                        gi = len(sizes)
                        sizes.append(k)
                    group_of_size[k] = gi
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
            gi = group_of_size.get(k)
            if gi is None:
                gi = -1
                if has_candidates(k):
                    gi = len(sizes)
                    sizes.append(k)
                group_of_size[k] = gi
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
    ) -> None:
        """Store a built view: mask, sets, copies and the view's jobs."""
        Q, C = self.num_jobs, self.max_candidates
        n = len(slot_group)
        self.copies[:] = copies + [0] * (Q - n)
        self.in_view = sum(copies)
        self.slot_group[:] = slot_group + [-1] * (Q - n)
        self.slot_groups = tuple(slot_group)
        # The mask only depends on each slot's number of candidates.
        sizes = [len(cs) for cs in groups]
        lens = tuple([sizes[g] for g in slot_group])
        pattern = self._masks.get(lens)
        if pattern is None:
            pattern = np.zeros(self.num_actions, dtype=bool)
            pattern[self.stop_action] = True
            for q, m in enumerate(lens):
                pattern[q * C : q * C + m] = True
            if len(self._masks) >= 4096:
                self._masks.clear()
            self._masks[lens] = pattern
        self.mask[:] = pattern
        self.sets[:] = [groups[g] for g in slot_group] + [None] * (Q - n)
        self.groups = groups
        self.positions = tuple(pos)
        self.view = tuple(pending[i] for i in pos)
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
        return cs.gpus[c]

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
