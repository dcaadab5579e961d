"""numpy's pairwise summation in Python floats: `np.add.reduce` of a float64 vector, the
same double, for a short list where numpy's per-call cost is most of the work (the KV
budget's footprints, `workers.kv_budget`; a batch step's per-request attention terms,
`workers.fast_batch`). Property-tested against numpy (tests/unit/test_workers_kv_budget.py)."""

from __future__ import annotations

# numpy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src): blocks of
# at most 128 summed with eight accumulators, halves (rounded to multiples of 8) above.
_PW_BLOCK = 128


def pairwise_sum(a: list[float], lo: int = 0, n: int | None = None) -> float:
    """`np.add.reduce` of a float64 vector, the same double (same order of additions)."""
    count = len(a) - lo if n is None else n
    if count < 8:
        res = 0.0
        for i in range(lo, lo + count):
            res += a[i]
        return res
    if count <= _PW_BLOCK:
        head = a[lo:lo + 8]
        r0, r1, r2, r3, r4, r5, r6, r7 = head
        i, end = 8, count - count % 8
        while i < end:
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
        for j in range(lo + i, lo + count):
            res += a[j]
        return res
    n2 = count // 2
    n2 -= n2 % 8
    return pairwise_sum(a, lo, n2) + pairwise_sum(a, lo + n2, count - n2)
