"""The store's pins kept as chains against a plain per-blob model, driven by Hypothesis.

A fetch's or a hand-off's chain is pinned as one entry (`Holds.pin_fetched`,
`pin_present`, `pin_more`) and released whole by `unpin` of that tuple; anything that
reads a place's pins counts its chains in first. The model is a `Counter` of
(blob, place), one count a pin; after every step the store's answers (`pinned`,
`pinned_bytes`, `pin_counts`) must be the model's, whatever order chains are pinned,
extended, read, released whole or unpinned blob by blob in.
"""

import copy
from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage.store import BlobStore
from storage.tiers import Location, StoreLayout, Tier, TierSpec
from workers.kv_io import fetch, handoff_fetched, release_fetch, release_handoff

HBMS = (Location(Tier.HBM, "w0"), Location(Tier.HBM, "w1"))
DRAM = Location(Tier.DRAM, "n0")
BLOCK_TOKENS = 4
KV_BYTES_PER_TOKEN = 10


def roomy_store() -> BlobStore:
    def spec(tier):
        return TierSpec(tier, 10_000 * BLOCK_TOKENS * KV_BYTES_PER_TOKEN, 1000.0, 1000.0)

    layout = StoreLayout.build([(HBMS[0], spec(Tier.HBM), DRAM),
                                (HBMS[1], spec(Tier.HBM), DRAM),
                                (DRAM, spec(Tier.DRAM), None)])
    return BlobStore(layout, BLOCK_TOKENS, KV_BYTES_PER_TOKEN)


# Sessions' inputs: a shared first block, then a few of a small alphabet (chains share
# prefixes, so one copy is often pinned by several chains at once).
inputs = st.lists(st.integers(0, 2), min_size=0, max_size=5).map(lambda rest: (7, *rest))
hbms = st.sampled_from(HBMS)


class PinRunsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = roomy_store()
        self.now_s = 0.0
        self.model: Counter = Counter()  # (blob, place) -> pins
        self.held: list[tuple[Location, object]] = []  # (place, fetch result or hand-off)
        self.loose: list[tuple[int, Location]] = []  # pins released one by one
        self.sessions = 0
        self.inputs: dict[int, tuple] = {}  # a kept fetch's input, by the result's id

    def _tick(self) -> float:
        self.now_s += 1.0
        return self.now_s

    def _pin(self, where, ids) -> None:
        self.model.update((b, where) for b in ids)

    def _unpin(self, where, ids) -> None:
        self.model.subtract((b, where) for b in ids)
        self.model = +self.model

    @rule(blocks=inputs, where=hbms)
    def fetch_kept(self, blocks, where):
        """A fetch whose chain stays pinned (`kv_io.fetch`); a first write seeds it."""
        self.sessions += 1
        session = f"s{self.sessions}"
        got = fetch(self.store, blocks, where, self._tick(), None)
        self._pin(where, got.pinned)
        if got.pinned:
            self.held.append((where, got))
            self.inputs[id(got)] = blocks
        else:  # nothing cached yet: the call writes its KV, handed off and kept
            _, handoff = handoff_fetched(self.store, got, session, blocks, where, DRAM,
                                           self._tick())
            if handoff is not None:
                self._pin(where, handoff.pinned)
                self.held.append((where, handoff))

    @precondition(lambda self: any(not hasattr(h, "hbm") for _, h in self.held))
    @rule(data=st.data(), more=inputs)
    def hand_off(self, data, more):
        """A kept fetch's call writes more and hands it off (`kv_io.handoff_fetched`:
        the fetch's pins pass to the hand-off, the new copies pinned with them)."""
        fetches = [i for i, (_, h) in enumerate(self.held) if not hasattr(h, "hbm")]
        where, got = self.held.pop(data.draw(st.sampled_from(fetches)))
        written = self.inputs.pop(id(got)) + more[1:]
        self.sessions += 1
        _, handoff = handoff_fetched(self.store, got, f"s{self.sessions}", written,
                                         where, DRAM, self._tick())
        self._unpin(where, got.pinned)
        if handoff is not None:
            self._pin(where, handoff.pinned)
            self.held.append((where, handoff))

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release_whole(self, data):
        where, held = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
        if hasattr(held, "hbm"):
            release_handoff(self.store, held, self._tick())
            self._unpin(where, held.pinned)
        else:
            release_fetch(self.store, where, held)
            self._unpin(where, held.pinned)

    @precondition(lambda self: any(not hasattr(h, "hbm") and h.pinned for _, h in self.held))
    @rule(data=st.data())
    def unpin_one(self, data):
        """One copy of a kept fetch unpinned alone; the rest are released one by one."""
        fetches = [i for i, (_, h) in enumerate(self.held) if not hasattr(h, "hbm")]
        where, got = self.held.pop(data.draw(st.sampled_from(fetches)))
        k = data.draw(st.integers(0, len(got.pinned) - 1))
        self.store.unpin(where, [got.pinned[k]])
        self._unpin(where, [got.pinned[k]])
        self.loose.extend((b, where) for b in got.pinned[:k] + got.pinned[k + 1:])

    @precondition(lambda self: self.loose)
    @rule(data=st.data())
    def unpin_loose(self, data):
        blob_id, where = self.loose.pop(data.draw(st.integers(0, len(self.loose) - 1)))
        self.store.unpin(where, [blob_id])
        self._unpin(where, [blob_id])

    @rule(where=hbms)
    def read(self, where):
        """Something reads the pins there (a plan's draft, the sampler): the chains
        pinned there are counted in."""
        sizes = self.store.index.sizes
        assert self.store.pinned_bytes(where) == sum(
            sizes[b] for (b, w) in self.model if w == where)

    @invariant()
    def counts_as_the_model(self):
        # On a copy: reading counts chains in, and the next rules must find them whole.
        store = copy.deepcopy(self.store)
        for (blob_id, where) in self.model:
            assert store.pinned(blob_id, where)
        expected: dict[Location, dict[int, int]] = {}
        for (blob_id, where), n in self.model.items():
            expected.setdefault(where, {})[blob_id] = n
        assert copy.deepcopy(self.store).pin_counts() == expected


TestPinRuns = PinRunsMachine.TestCase
TestPinRuns.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
