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
    collection of everything the run kept (~20 ms on the 113 development sessions)."""
    thresholds = gc.get_threshold()
    if thresholds[0]:  # 0: collection switched off, left so
        gc.set_threshold(max(thresholds[0], GC_YOUNG_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
