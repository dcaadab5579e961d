"""The garbage collector during a replay and its summary: its young generation collected
less often (`fewer_young_collections`), then as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Allocations between young collections during a run (the collector's default: 700).
GC_YOUNG_THRESHOLD = 100_000


@contextmanager
def fewer_young_collections() -> Iterator[None]:
    """The collector's young generation collected every GC_YOUNG_THRESHOLD allocations
    inside (a replay, its summary). Nearly everything a replay allocates lives for a call
    or longer (sessions' block ids, requests, the store's entries): collected every 700
    allocations, the default, the young generation hands them on to be traversed again
    and again; and the summary's few thousand allocations after a run would set off a
    collection of everything the run kept (~20 ms on the 113 development sessions).

    On the way out, what is tracked goes to the oldest generation as it stands
    (`gc.freeze` then `gc.unfreeze`, two list splices) before the threshold comes back:
    the first young collection after would otherwise traverse everything allocated since
    the last one, most of what the run keeps (20 ms at the end of the Azure open loop's
    10,000 requests, 30 ms after the 113 development sessions), to promote it there. Its
    garbage cycles, if any, wait for the next full collection. Not done when the caller
    froze objects itself (`gc.get_freeze_count`): those stay frozen."""
    thresholds = gc.get_threshold()
    if thresholds[0]:  # 0: collection switched off, left so
        gc.set_threshold(max(thresholds[0], GC_YOUNG_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        if thresholds[0] and not gc.get_freeze_count():
            gc.freeze()
            gc.unfreeze()
        gc.set_threshold(*thresholds)
