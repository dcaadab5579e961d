"""`kv_io.write_and_offload` marks a chain used at HBM once, not twice.

Its write is applied without the touch of its chain at HBM when the offload that follows
takes that very chain (the offload drops those copies and touches the ones that stay);
otherwise the write's touch is made before the offload is applied. The same calls made
on two stores, one touching once and one as `apply` does by default (the write's touch,
then the offload's), must leave the same store after every call: every place's copies
in the same use order with the same use times, holders, pins, references, counters and
version.
"""

from hypothesis import given, settings
from hypothesis import strategies as st

import workers.kv_io as kv_io
from storage.store import BlobStore
from tests.property.test_storage_state_machine import (
    BLOCK_TOKENS,
    DRAM,
    HBMS,
    KV_BYTES_PER_TOKEN,
    small_layout,
)
from workers.kv_io import (
    fetch,
    release_fetch,
    release_handoff,
    write_and_offload,
    write_for_handoff,
)

# Few distinct block ids after a shared first one: chains share prefixes and grow.
blocks = st.lists(st.integers(0, 3), min_size=1, max_size=8).map(lambda rest: (9, *rest))
sessions = st.sampled_from(["s0", "s1", "s2"])
where = st.integers(0, len(HBMS) - 1)
dt = st.floats(0.0, 3.0, allow_nan=False)
ops = st.lists(st.one_of(
    st.tuples(st.just("finish"), sessions, blocks, where, dt),
    st.tuples(st.just("fetch"), blocks, where, dt, st.booleans()),
    st.tuples(st.just("unpin"), st.integers(0, 10)),
    st.tuples(st.just("handoff"), sessions, blocks, where, dt, st.booleans()),
    st.tuples(st.just("end"), sessions),
), min_size=1, max_size=40)


def _state(store: BlobStore) -> tuple:
    placement = store.placement
    return ({loc: list(copies.items()) for loc, copies in placement.at.items()},
            dict(placement.copies), dict(placement.used_bytes),
            {loc: dict(pins) for loc, pins in store._pins.items() if pins},
            {s: frozenset(b) for s, b in store._refs.items()}, store.version,
            store.snapshot())


class _Run:
    """One store and the pins its calls keep, driven with touching once or not."""

    def __init__(self, once: bool, dram_blocks: int) -> None:
        self.once = once
        self.store = BlobStore(small_layout(dram_blocks), BLOCK_TOKENS, KV_BYTES_PER_TOKEN)
        self.held: list = []  # fetches and hand-offs not released yet
        self.now_s = 0.0

    def do(self, op: tuple) -> None:
        store, kind = self.store, op[0]
        if kind == "finish":
            _, session, seq, w, step = op
            self.now_s += step
            saved = kv_io._TOUCH_ONCE
            kv_io._TOUCH_ONCE = self.once
            try:
                write_and_offload(store, session, seq, HBMS[w], DRAM, self.now_s)
            finally:
                kv_io._TOUCH_ONCE = saved
        elif kind == "fetch":
            _, seq, w, step, keep = op
            self.now_s += step
            result = fetch(store, seq, HBMS[w], self.now_s, None)
            if keep:
                self.held.append((HBMS[w], result))
            else:
                release_fetch(store, HBMS[w], result)
        elif kind == "unpin":
            if self.held:
                hbm, held = self.held.pop(op[1] % len(self.held))
                if isinstance(held, kv_io.Handoff):
                    release_handoff(store, held, self.now_s)
                else:
                    release_fetch(store, hbm, held)
        elif kind == "handoff":
            _, session, seq, w, step, keep = op
            self.now_s += step
            _, handoff = write_for_handoff(store, session, seq, HBMS[w], DRAM, self.now_s)
            if handoff is not None:
                if keep:
                    self.held.append((HBMS[w], handoff))
                else:
                    release_handoff(store, handoff, self.now_s)
        else:
            store.release(op[1])


@settings(max_examples=300, deadline=None)
@given(ops, st.sampled_from([3, 8, 30]))
def test_touching_a_written_chain_once_leaves_the_store_as_touching_it_twice(calls,
                                                                            dram_blocks):
    once, twice = _Run(True, dram_blocks), _Run(False, dram_blocks)
    for op in calls:
        once.do(op)
        twice.do(op)
        assert _state(once.store) == _state(twice.store), op
