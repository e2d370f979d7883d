"""The generator's result, :class:`CandidateSet`, and the rows it is built from.

Both generators (:mod:`~crop_gym.candidates.small`, :mod:`~crop_gym.candidates.vectorised`) produce
candidate rows (:data:`_Row`: plain tuples, cheap to make and to sort) and hand them to
:func:`_assemble`, which ranks, deduplicates and caps them into a :class:`CandidateSet` whose arrays
are built only when read.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray


class CandidateSet:
    """Candidate placements for one job size (immutable).

    The generator hands over its rows as tuples and builds the arrays on first access: the
    environments mostly read :meth:`row_keys` and one row.

    Attributes:
        gpus: ``int32[C, k]`` sorted GPU indices of each candidate.
        num_servers: ``int32[C]`` servers spanned by each candidate.
        subtree: ``int32[C]`` node index of the subtree the candidate was taken from.
        quality: ``float64[C]`` sum of the GPUs' badness scores (lower is healthier).
        keys: Each candidate's GPUs as a tuple of ints (hashable; see :meth:`row_keys`).
    """

    __slots__ = ("_arrays", "_src", "keys")

    _arrays: list[NDArray[Any] | None]
    _src: tuple[int, list[tuple[Any, ...]]] | None
    keys: tuple[tuple[int, ...], ...]

    def __init__(
        self,
        gpus: NDArray[np.int32],
        num_servers: NDArray[np.int32],
        subtree: NDArray[np.int32],
        quality: NDArray[np.float64],
        keys: tuple[tuple[int, ...], ...] | None = None,
    ) -> None:
        if keys is None:
            keys = tuple(map(tuple, gpus.tolist()))
        _set_arrays(self, [gpus, num_servers, subtree, quality])
        _set_src(self, None)
        _set_keys(self, keys)

    @classmethod
    def _from_rows(cls, k: int, rows: list[tuple[Any, ...]]) -> CandidateSet:
        """A set of the (non-empty) generator rows ``rows`` of ``k`` GPUs (see ``_Row``: servers
        spanned at index 0, subtree node at 3, GPUs at 5, badness at 6), whose arrays are built
        when first read."""
        self = object.__new__(cls)
        _set_arrays(self, [None, None, None, None])
        _set_src(self, (k, rows))
        _set_keys(self, tuple(map(_gpus_of, rows)))
        return self

    def _array(self, j: int) -> NDArray[Any]:
        """Array ``j`` of (gpus, num_servers, subtree, quality), built on first use."""
        a = self._arrays[j]
        if a is None:
            src, keys = self._src, self.keys
            assert src is not None
            k, rows = src
            if j == 0:
                n = len(keys)
                a = np.fromiter(chain.from_iterable(keys), np.int32, n * k).reshape(n, k)
            elif j == 1:
                a = np.array([r[0] for r in rows], dtype=np.int32)
            elif j == 2:
                a = np.array([r[3] for r in rows], dtype=np.int32)
            else:
                a = np.array([r[6] for r in rows], dtype=np.float64)
            self._arrays[j] = a
        return a

    @property
    def gpus(self) -> NDArray[np.int32]:
        """``int32[C, k]`` sorted GPU indices of each candidate."""
        return self._array(0)

    @property
    def num_servers(self) -> NDArray[np.int32]:
        """``int32[C]`` servers spanned by each candidate."""
        return self._array(1)

    @property
    def subtree(self) -> NDArray[np.int32]:
        """``int32[C]`` node index of the subtree each candidate was taken from."""
        return self._array(2)

    @property
    def quality(self) -> NDArray[np.float64]:
        """``float64[C]`` sum of each candidate's badness scores (lower is healthier)."""
        return self._array(3)

    def __len__(self) -> int:
        return len(self.keys)

    def row(self, c: int) -> NDArray[np.int32]:
        """``int32[k]`` sorted GPU indices of candidate ``c`` (without building :attr:`gpus`)."""
        a = self._arrays[0]
        if a is not None:
            return a[c]
        return np.array(self.keys[c], dtype=np.int32)

    def row_keys(self) -> tuple[tuple[int, ...], ...]:
        """Each candidate's GPU indices as a tuple."""
        return self.keys

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Slots and a frozen __setattr__: pickle and copy through the public constructor.
        return (CandidateSet, (self.gpus, self.num_servers, self.subtree, self.quality, self.keys))

    def __repr__(self) -> str:
        return (
            f"CandidateSet(gpus={self.gpus!r}, num_servers={self.num_servers!r}, "
            f"subtree={self.subtree!r}, quality={self.quality!r})"
        )


# The slots' setters, which bypass the frozen __setattr__ (faster than object.__setattr__).
_set_arrays = vars(CandidateSet)["_arrays"].__set__
_set_src = vars(CandidateSet)["_src"].__set__
_set_keys = vars(CandidateSet)["keys"].__set__


#: A candidate row: (servers spanned, badness rounded to 1e-9, free GPUs left in its subtree,
#: subtree node, kind, GPUs, badness); kind is 0 for a single-server row, 1 for a multi-server
#: compact row, 2 for a health-first row. Rows rank by their first five items, which tell any
#: two rows of a job size apart (a subtree has at most one row of each kind), so sorting never
#: compares the GPUs.
_Row = tuple[int, float, int, int, int, tuple[int, ...], float]

_n_srv_of = itemgetter(0)
_gpus_of = itemgetter(5)
_badness_of = itemgetter(6)


def _empty(k: int) -> CandidateSet:
    return CandidateSet(
        np.empty((0, k), np.int32), np.empty(0, np.int32), np.empty(0, np.int32), np.empty(0)
    )


def _assemble(k: int, cap: int, singles: list[_Row], extras: list[_Row]) -> CandidateSet:
    """The candidate set from the single-server rows (in rank order) and the extra rows: the
    best ``cap`` rows in rank order (see :data:`_Row`), a row that repeats a better one dropped.
    """
    if not extras:
        top = singles[:cap]
        if not top:
            return _empty(k)
        return CandidateSet._from_rows(k, top)
    # Only the extra rows can repeat another row (single-server rows are disjoint), and each
    # repeat drops one row: the best cap + len(extras) single rows are enough.
    pool = singles[: cap + len(extras)]
    pool += extras
    pool.sort()  # never compares past the kind
    if min(map(_n_srv_of, extras)) > 1 and len(set(map(_gpus_of, extras))) == len(extras):
        # No repeat: the extra rows differ from each other and span more servers than a
        # single-server row.
        return CandidateSet._from_rows(k, pool[:cap])
    seen: set[tuple[int, ...]] = set()
    kept: list[_Row] = []
    for p in pool:
        row = p[5]
        if row in seen:
            continue
        seen.add(row)
        kept.append(p)
        if len(kept) == cap:
            break
    return CandidateSet._from_rows(k, kept)
