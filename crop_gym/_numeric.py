"""Plain-Python twins of the numpy reductions used on hot paths, bit-for-bit identical.

Calling numpy on a handful of numbers costs a microsecond or more per call, which dominates the
step time of the small environments. These helpers reproduce numpy's results *exactly* (same
floating-point operations in the same order), so a code path may switch between them and numpy
without changing any output:

* :func:`np_sum`: ``float(np.asarray(values, dtype=np.float64).sum())`` — numpy's pairwise summation
  of a contiguous ``float64`` vector (blocks of 8 partial sums up to 128 items, halving above);
* :func:`np_sum_sparse`: the same sum of a vector that is zero but at a few positions.

Both are checked against numpy on random inputs in ``tests/test_fastpaths.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["np_sum", "np_sum_sparse"]


def np_sum(values: Sequence[float]) -> float:
    """``float(np.sum(values))`` for a sequence of floats, with numpy's exact summation order.

    Args:
        values: The numbers (a list or tuple of Python floats).

    Returns:
        Their sum, bit-identical to numpy's ``add.reduce`` of a contiguous ``float64`` array.
    """
    n = len(values)
    if n < 8:
        r = 0.0
        for v in values:
            r += v
        return r
    if n < 16:
        # _pairwise's first block inlined (no 8-wide loop below 16 items): the common case.
        r0, r1, r2, r3, r4, r5, r6, r7 = values[:8]
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for i in range(8, n):
            res += values[i]
        return res
    return _pairwise(values, 0, n)


def _pairwise(a: Sequence[float], lo: int, n: int) -> float:
    """numpy's ``pairwise_sum`` of ``a[lo:lo + n]`` (loops_utils.h.src)."""
    if n < 8:
        r = 0.0
        for i in range(lo, lo + n):
            r += a[i]
        return r
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo : lo + 8]
        i = lo + 8
        end = lo + n - (n % 8)
        while i < end:
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < lo + n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)


def np_sum_sparse(n: int, items: Sequence[tuple[int, float]]) -> float:
    """:func:`np_sum` of a length-``n`` vector that is zero except at ``items``.

    The result equals the dense sum exactly, up to the sign of a zero result: adding ``0.0`` never
    changes a partial sum, so only the positions of the non-zeros (which decide the pairwise
    grouping) matter.

    Args:
        n: Length of the dense vector.
        items: ``(position, value)`` pairs, positions increasing and in ``[0, n)``.
    """
    if not items:
        return 0.0
    if len(items) == 1:
        return 0.0 + items[0][1]
    return _sparse(items, 0, n)


def _sparse(items: Sequence[tuple[int, float]], lo: int, n: int) -> float:
    if n < 8:
        r = 0.0
        for _, v in items:
            r += v
        return r
    if n <= 128:
        end = lo + n - (n % 8)
        lanes = [0.0] * 8
        res_tail: list[float] = []
        for pos, v in items:
            if pos < end:
                lanes[(pos - lo) % 8] += v
            else:
                res_tail.append(v)
        r0, r1, r2, r3, r4, r5, r6, r7 = lanes
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for v in res_tail:
            res += v
        return res
    n2 = n // 2
    n2 -= n2 % 8
    cut = lo + n2
    left = [it for it in items if it[0] < cut]
    right = [it for it in items if it[0] >= cut]
    return _sparse(left, lo, n2) + _sparse(right, cut, n - n2)
