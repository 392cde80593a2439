"""Float arithmetic on a few values, done as numpy did it when these values were arrays.

A device's flows are a handful of numbers per tick; numpy costs more to set up than the
arithmetic. Element by element, numpy's float64 operations are Python's (IEEE doubles);
a sum is not: numpy adds a contiguous float64 array pairwise, eight partial sums at a
time from eight values on, while Python's ``sum`` adds from left to right (and, from
Python 3.12, with compensation). ``np_sum`` adds as numpy does, so results stay the
same to the last bit (``tests/test_numpy_equivalence.py`` checks it against numpy).
"""
from __future__ import annotations

_BLOCK = 128  # numpy's PW_BLOCKSIZE: above it, the halves are summed apart


def np_sum(values: list[float]) -> float:
    """``float(np.array(values, dtype=float).sum())``."""
    return _pairwise(values, 0, len(values))


def left_sum(values) -> float:
    """Python's ``sum`` of floats from left to right, as it adds numpy floats (on plain
    floats, Python 3.12's ``sum`` compensates rounding and gives other results)."""
    total = 0.0
    for v in values:
        total += v
    return total


def _pairwise(a: list[float], lo: int, n: int) -> float:
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= _BLOCK:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo:lo + 8]
        i = 8
        whole = n - n % 8
        while i < whole:
            j = lo + i
            r0 += a[j]
            r1 += a[j + 1]
            r2 += a[j + 2]
            r3 += a[j + 3]
            r4 += a[j + 4]
            r5 += a[j + 5]
            r6 += a[j + 6]
            r7 += a[j + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for j in range(lo + i, lo + n):
            res += a[j]
        return res
    half = n // 2
    half -= half % 8
    return _pairwise(a, lo, half) + _pairwise(a, lo + half, n - half)
