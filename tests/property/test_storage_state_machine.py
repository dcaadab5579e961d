"""The blob store against a simple model, driven by Hypothesis.

The model keeps only what the store must never get wrong: the content of
every blob ever written, which sessions are live and what they reference,
which copies are pinned, the tokens looked up and the bytes planned to move.
Sessions also grow chains call by call (each call resends the last one and
adds a few blocks, or backs up and branches), and every prefix match is
checked against a block-by-block walk of the model's blobs (a write's new blobs
without cuts against the general path's), and every fetch,
write and offload plan against the one a draft makes. Calls also end
as the retain policy ends them (workers.kv_policy: resident in HBM, written
through) and workers trim what they retain: every fetch's hits name a tier
that holds the blob they count, at the tier a walk of the placement gives.
Workers fetch and pin a prefix and hand a call's KV off as `workers.kv_io` does
(a fetch's chain pinned without a check for each copy, a hand-off's copies
pinned where they are): every copy pinned is there. The store keeps such a chain's
pins as one entry until something reads the pins where it is; the model keeps every
pin blob by blob, and the store's counts must equal the model's after every step.
"""

import copy
import itertools
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage.plans import FetchAction, Purpose, StepKind
from storage.store import BlobStore
from storage.tiers import Location, StoreLayout, Tier, TierSpec
from workers.kv_io import (
    fetch,
    handoff_fetched,
    offload,
    release_fetch,
    release_handoff,
    write_and_offload,
    write_chain,
    write_for_handoff,
)
from workers.kv_policy import trim_retained, write_and_retain

BLOCK_TOKENS = 4
KV_BYTES_PER_TOKEN = 10
BLOCK_BYTES = BLOCK_TOKENS * KV_BYTES_PER_TOKEN

HBMS = (Location(Tier.HBM, "w0"), Location(Tier.HBM, "w1"))
DRAM = Location(Tier.DRAM, "n0")
RACK = Location(Tier.RACK, "r0")
PFS = Location(Tier.PFS, "pfs")
ALL = (*HBMS, DRAM, RACK, PFS)


def small_layout(dram_blocks: int = 8) -> StoreLayout:
    def spec(tier, blocks, bytes_per_s):
        return TierSpec(tier, blocks * BLOCK_BYTES, bytes_per_s, bytes_per_s)

    return StoreLayout.build(
        [
            (HBMS[0], spec(Tier.HBM, 7, 4000.0), DRAM),
            (HBMS[1], spec(Tier.HBM, 7, 4000.0), DRAM),
            (DRAM, spec(Tier.DRAM, dram_blocks, 1000.0), PFS),
            (RACK, spec(Tier.RACK, 4, 800.0), PFS),
            (PFS, spec(Tier.PFS, 12, 100.0), None),
        ]
    )


def written_then_offloaded(store: BlobStore, session: str, blocks: tuple, where: Location,
                           now_s: float) -> tuple:
    """A call's end under the offload policy as two plans: the write applied, then the
    offload (what `kv_io.write_and_offload` does when one plan cannot do both)."""
    plan = write_chain(store, session, blocks, where, DRAM, now_s)
    if plan is None:
        return ()
    if plan.location.tier is Tier.HBM:
        offload(store, plan.chain, where, now_s)
    return plan.chain


def same_store(store: BlobStore, twin: BlobStore) -> None:
    """Two stores hold the same: blobs, copies, each place's use order and times, bytes,
    counters, session references and pins."""
    assert [store.index[b] for b in range(len(store.index))] == [
        twin.index[b] for b in range(len(twin.index))]
    a, b = store.placement, twin.placement
    assert a.copies == b.copies
    for where in ALL:
        assert list(a.at[where].items()) == list(b.at[where].items()), where
    assert a.used_bytes == b.used_bytes
    assert store.snapshot() == twin.snapshot()
    assert store._refs == twin._refs and store._ref_count == twin._ref_count
    assert store.pin_counts() == twin.pin_counts()


# Few distinct block ids and a shared "system prompt" make prefixes collide often.
prompts = st.lists(st.integers(0, 3), min_size=1, max_size=6).map(lambda rest: [9, *rest])
sessions = st.sampled_from(["s0", "s1", "s2", "s3"])
hbms = st.sampled_from(HBMS)
now_steps = st.floats(0.0, 5.0, allow_nan=False)


class BlobStoreMachine(RuleBasedStateMachine):
    dram_blocks = 8  # host memory fills up: offloads and evictions demote further down

    def __init__(self) -> None:
        super().__init__()
        self.store = BlobStore(small_layout(self.dram_blocks), BLOCK_TOKENS, KV_BYTES_PER_TOKEN)
        self.now_s = 0.0
        self.contents: dict[int, tuple] = {}
        self.refs: dict[str, set[int]] = {}
        self.pins: list[tuple[int, Location]] = []  # pins released blob by blob
        self.kept: list[tuple[Location, tuple]] = []  # pinned chains, to release whole
        self.requested_tokens = 0
        self.moved_bytes = 0
        self.written: list[tuple[int, ...]] = []  # every sequence written, in order
        # Every plan applied, by these rules or by the policy helpers they call.
        apply = self.store.apply

        def applied(plan):
            apply(plan)
            if plan.purpose is Purpose.OFFLOAD:
                # An offload that dropped as many copies at its place as its chain holds
                # left none of them there (apply then touches none).
                dropped = sum(len(step.blob_ids) for step in plan.steps
                              if step.kind is StepKind.DROP and step.location == plan.location)
                # (A write and offload as one plan: its new blobs were never placed there.)
                if dropped + len(plan.new_blobs) == len(plan.chain):
                    at = self.store.placement.at[plan.location]
                    assert not any(blob_id in at for blob_id in plan.chain)
            self.moved_bytes += plan.moved_bytes
            for blob in plan.new_blobs:
                self.contents[blob.id] = (blob.parent, blob.first_block, blob.block_ids,
                                          blob.kv_bytes)

        self.store.apply = applied
        for name in ("plan_fetch", "plan_write", "plan_offload"):
            setattr(self.store, name, self._drafted_twin(getattr(self.store, name)))

    def _drafted_twin(self, plan_):
        """``plan_`` checked against the plan a draft makes: the store builds a plan
        without a draft when nothing must be evicted (a fetch or a write with room as
        committed, an offload whose demotions find room below), and a fetch of which
        nothing is cached without the lookup's walk; the same plan made with those
        paths shut must be the same value, down to each float's bits."""
        store = self.store

        def planned(*args, **kwargs):
            plan = plan_(*args, **kwargs)
            store._has_room = lambda location, need_bytes: False
            store._plain_offload = lambda ids, drops, src, protect: None
            store._miss_directly = False
            try:
                twin = plan_(*args, **kwargs)
            finally:
                del store._has_room, store._plain_offload, store._miss_directly
            assert repr(plan) == repr(twin)
            return plan

        return planned

    def _apply(self, plan) -> None:
        if not plan.fits:
            assert plan.steps == ()
            return
        self.store.apply(plan)

    def _tick(self, dt_s: float) -> float:
        self.now_s += dt_s
        return self.now_s

    @rule(blocks=prompts, where=hbms, dt=now_steps, cut=st.integers(1, 4))
    def write(self, blocks, where, dt, cut):
        self._write(tuple(blocks), where, dt, [cut])

    def _write(self, blocks, where, dt, segment_ends=()):
        plan = self.store.plan_write(blocks, where, self._tick(dt), segment_ends=segment_ends)
        self._apply(plan)
        if plan.fits:
            self.written.append(blocks)

    @precondition(lambda self: self.written)
    @rule(data=st.data(), where=hbms, dt=now_steps,
          more=st.lists(st.integers(0, 5), min_size=1, max_size=4))
    def next_call(self, data, where, dt, more):
        """A session's next call: an earlier call resent, cut short (a branch that
        backs up) or not, with new blocks after it; chains grow blob by blob."""
        earlier = data.draw(st.sampled_from(self.written))
        keep = data.draw(st.integers(1, len(earlier)))
        self._write((*earlier[:keep], *more), where, dt)

    def reference_match(self, blocks) -> tuple[tuple[int, ...], int]:
        """The cached prefix found block by block over the model's blobs: the child of
        (parent, position) that starts with the next block, followed while its blocks
        match; a blob with no copy left ends the match where it starts."""
        children = {(parent, first, ids[0]): blob_id
                    for blob_id, (parent, first, ids, _) in self.contents.items()}
        chain, pos, parent = [], 0, None
        while pos < len(blocks):
            child = children.get((parent, pos, blocks[pos]))
            if child is None or not self.store.holders(child):
                break
            chain.append(child)
            ids = self.contents[child][2]
            k = 0
            while k < len(ids) and pos + k < len(blocks) and blocks[pos + k] == ids[k]:
                k += 1
            pos, parent = pos + k, child
        return tuple(chain), pos

    @precondition(lambda self: self.written)
    @rule(data=st.data(), more=st.lists(st.integers(0, 9), max_size=3))
    def match_equals_the_block_by_block_walk(self, data, more):
        earlier = data.draw(st.sampled_from(self.written))
        keep = data.draw(st.integers(0, len(earlier)))
        blocks = (*earlier[:keep], *more)
        for _ in range(2):  # the second walk of the same tuple resumes the first
            match = self.store.match(blocks)
            assert (match.blob_ids, match.matched_blocks) == self.reference_match(blocks)
            assert match.matched_tokens == match.matched_blocks * BLOCK_TOKENS

    @precondition(lambda self: self.written)
    @rule(data=st.data(), more=st.lists(st.integers(0, 9), max_size=3))
    def describe_without_cuts_is_the_general_path(self, data, more):
        """A write without segment ends (the workers') describes its new blob directly;
        a cut at the sequence's end, which the general path drops, must give the same."""
        earlier = data.draw(st.sampled_from(self.written))
        keep = data.draw(st.integers(0, len(earlier)))
        blocks = (*earlier[:keep], *more)
        if blocks:
            index = self.store.index
            assert repr(index.describe(blocks)) == repr(index.describe(blocks, (len(blocks),)))

    def reference_hits(self, blocks, where) -> tuple[dict, int]:
        """Tokens of the cached prefix by the tier holding each blob (``where`` when it
        holds the blob, else the fastest holder, checked to hold it), and those at
        ``where``: a fetch that loads nothing counts its hits so."""
        chain, matched = self.reference_match(blocks)
        hits, local = {}, 0
        for i, blob_id in enumerate(chain):
            first = self.contents[blob_id][1]
            end = self.contents[chain[i + 1]][1] if i + 1 < len(chain) else matched
            held = self.store.holders(blob_id)
            tier = where.tier if where in held else min(held).tier
            assert any(loc.tier is tier for loc in held)
            hits[tier] = hits.get(tier, 0) + (end - first) * BLOCK_TOKENS
            local += (end - first) * BLOCK_TOKENS if where in held else 0
        return {t: n for t, n in hits.items() if n}, local

    @rule(
        blocks=prompts,
        where=hbms,
        dt=now_steps,
        prefill_s_per_token=st.sampled_from([None, 1e-3, 1.0]),
    )
    def fetch(self, blocks, where, dt, prefill_s_per_token):
        recompute = None if prefill_s_per_token is None else (lambda n: n * prefill_s_per_token)
        plan = self.store.plan_fetch(blocks, where, self._tick(dt), recompute_s=recompute)
        hits, local = self.reference_hits(blocks, where)
        assert plan.local_tokens == local
        served = {t: n for t, n in plan.hit_tokens.items() if n}
        if plan.action is FetchAction.LOAD:
            # A load's tokens are served by the tiers that sent its bytes (holders of the
            # chain's blobs), each within a token of its share of the bytes.
            sent: dict[Tier, int] = {}
            for step in plan.steps:
                if step.kind is StepKind.COPY and step.location == where:
                    for src in step.sources:
                        assert any(src.location in self.store.holders(b) for b in plan.chain)
                        sent[src.location.tier] = sent.get(src.location.tier, 0) + src.kv_bytes
            loaded = sum(hits.values()) - local
            assert sum(served.values()) == loaded + local
            for tier in Tier:
                exact = Fraction(loaded * sent.get(tier, 0), sum(sent.values()))
                exact += local if tier is where.tier else 0
                assert abs(served.get(tier, 0) - exact) < 1
        else:
            assert served == hits
        if plan.fits:
            self.requested_tokens += len(blocks) * BLOCK_TOKENS
        if plan.action is FetchAction.RECOMPUTE:
            assert plan.recompute_time_s < plan.load_time_s
        self._apply(plan)

    @rule(blocks=prompts, where=hbms, dt=now_steps,
          release=st.sampled_from(["now", "whole", "by blob"]))
    def worker_fetch(self, blocks, where, dt, release):
        """A worker's fetch (`kv_io.fetch`): its chain is pinned where it computes,
        until `release_fetch` (now, or later by the release rule) or the unpin rule
        (copy by copy)."""
        before = self.store.snapshot().requested_tokens
        result = fetch(self.store, tuple(blocks), where, self._tick(dt), None)
        requested = self.store.snapshot().requested_tokens - before
        assert requested in (0, len(blocks) * BLOCK_TOKENS)
        self.requested_tokens += requested
        for blob_id in result.pinned:
            assert self.store.pinned(blob_id, where)
        if release == "now":
            release_fetch(self.store, where, result)
        elif release == "whole":
            self.kept.append((where, result.pinned))
        else:
            self.pins.extend((blob_id, where) for blob_id in result.pinned)

    @rule(session=sessions, blocks=prompts, where=hbms, dt=now_steps, keep=st.booleans())
    def handoff(self, session, blocks, where, dt, keep):
        """A fill worker's call handed off (`kv_io.write_for_handoff`): its copies at
        ``where`` pinned until the decode worker has them, then offloaded."""
        chain, handoff = write_for_handoff(self.store, session, tuple(blocks), where, DRAM,
                                           self._tick(dt))
        if chain:
            self.written.append(tuple(blocks))
            self.refs.setdefault(session, set()).update(self.store.index.chain_of(chain[-1]))
        if handoff is not None:
            at = self.store.placement.at[where]
            assert handoff.pinned == tuple(b for b in chain if b in at)
            for blob_id in handoff.pinned:
                assert self.store.pinned(blob_id, where)
            if keep:  # (the decode worker pulls it later: the release rule)
                self.kept.append((where, handoff))
            else:
                release_handoff(self.store, handoff, self._tick(dt))

    @rule(session=sessions, blocks=prompts, where=hbms, dt=now_steps, keep=st.booleans())
    def fetched_handoff(self, session, blocks, where, dt, keep):
        """A fill worker's call from its fetch to its hand-off: `kv_io.handoff_fetched`
        passes the fetch's pins on to the hand-off. Its twin, a copy of the store taken
        after the fetch, releases the fetch and then writes for the hand-off
        (`release_fetch`, `write_for_handoff`): both must end the same, pins included."""
        blocks = tuple(blocks)
        before = self.store.snapshot().requested_tokens
        result = fetch(self.store, blocks, where, self._tick(dt), None)
        requested = self.store.snapshot().requested_tokens - before
        assert requested in (0, len(blocks) * BLOCK_TOKENS)
        self.requested_tokens += requested
        now_s = self._tick(dt)
        twin = copy.deepcopy(self.store)
        for name in ("apply", "plan_fetch", "plan_write", "plan_offload"):
            del twin.__dict__[name]  # (this machine's checks, which act on self.store)
        chain, handoff = handoff_fetched(self.store, result, session, blocks, where, DRAM,
                                         now_s)
        release_fetch(twin, where, result)
        twin_chain, twin_handoff = write_for_handoff(twin, session, blocks, where, DRAM, now_s)
        assert chain == twin_chain
        assert (handoff is None) == (twin_handoff is None)
        same_store(self.store, twin)
        if chain:
            self.written.append(blocks)
            self.refs.setdefault(session, set()).update(self.store.index.chain_of(chain[-1]))
        if handoff is not None:
            assert handoff.pinned == twin_handoff.pinned
            if keep:
                self.kept.append((where, handoff))
            else:
                release_handoff(self.store, handoff, self._tick(dt))

    @rule(session=sessions, blocks=prompts, where=hbms, dt=now_steps)
    def offload_call(self, session, blocks, where, dt):
        """A call ends under the offload policy (`kv_io.write_and_offload`): its KV
        written at ``where`` (or host memory), then offloaded, as one plan when the store
        can (`plan_write_offload`). Its twin, a copy of the store taken before, applies
        the write and then the offload as two plans: the same copies must reach the links
        (every float's bits), and the two stores must end the same (`same_store`)."""
        now_s = self._tick(dt)
        twin = copy.deepcopy(self.store)
        for name in ("apply", "plan_fetch", "plan_write", "plan_offload"):
            del twin.__dict__[name]  # (this machine's checks, which act on self.store)
        seen: list = []
        twin_seen: list = []
        self.store.on_apply = lambda plan: seen.extend(map(repr, plan.steps))
        twin.on_apply = lambda plan: twin_seen.extend(map(repr, plan.steps))
        try:
            chain = write_and_offload(self.store, session, tuple(blocks), where, DRAM, now_s)
        finally:
            self.store.on_apply = None
        assert chain == written_then_offloaded(twin, session, tuple(blocks), where, now_s)
        copies = [step for step in seen if step.startswith("Step(kind=<StepKind.COPY")]
        assert copies == [step for step in twin_seen if step.startswith("Step(kind=<StepKind.COPY")]
        same_store(self.store, twin)
        if chain:
            self.written.append(tuple(blocks))
            self.refs.setdefault(session, set()).update(self.store.index.chain_of(chain[-1]))

    @rule(session=sessions, blocks=prompts)
    def ref(self, session, blocks):
        chain = self.store.match(blocks).blob_ids
        if chain:
            self.store.ref(session, chain[-1:])
            self.refs.setdefault(session, set()).update(self.store.index.chain_of(chain[-1]))

    @rule(session=sessions, blocks=prompts, where=hbms, dt=now_steps)
    def retain_call(self, session, blocks, where, dt):
        """A call ends under the retain policy: its KV stays at ``where``, unpinned,
        written through to host memory."""
        chain = write_and_retain(self.store, session, tuple(blocks), where, DRAM, self._tick(dt))
        if chain:
            self.written.append(tuple(blocks))
            for blob_id in chain:
                self.refs.setdefault(session, set()).update(self.store.index.chain_of(blob_id))

    @rule(where=hbms, share=st.floats(0.0, 1.0), dt=now_steps)
    def trim(self, where, share, dt):
        """A worker's sequences hold ``share`` of its HBM: what it retains is trimmed to
        the rest, pinned copies kept."""
        before = dict(self.store.placement.at[where])
        fits = trim_retained(self.store, where, share, self._tick(dt))
        capacity = self.store.placement.capacity_bytes[where]
        retained = self.store.placement.used_bytes[where] - self.store.pinned_bytes(where)
        if fits:
            assert retained <= capacity * (1 - share)
        else:  # a copy a live session needs had no room below: nothing was evicted
            assert self.store.placement.at[where].keys() == before.keys()

    @rule(session=sessions)
    def release(self, session):
        self.store.release(session)
        self.refs.pop(session, None)

    @rule(session=sessions, where=hbms, dt=now_steps)
    def offload(self, session, where, dt):
        plan = self.store.plan_offload(self.store.session_blobs(session), where, self._tick(dt))
        self._apply(plan)

    @precondition(lambda self: self.written)
    @rule(data=st.data(), where=hbms, dt=now_steps)
    def offload_written(self, data, where, dt):
        """A call's end under the offload policy: the chain it wrote leaves HBM."""
        chain = self.store.match(data.draw(st.sampled_from(self.written))).blob_ids
        self._apply(self.store.plan_offload(chain, where, self._tick(dt)))

    @rule(where=st.sampled_from(ALL), blocks=st.integers(0, 12), dt=now_steps)
    def evict(self, where, blocks, dt):
        self._apply(self.store.plan_evict(where, blocks * BLOCK_BYTES, self._tick(dt)))

    @rule(min_sessions=st.integers(1, 3), dt=now_steps)
    def promote_hot(self, min_sessions, dt):
        hot = self.store.hot_blobs(min_sessions)
        self._apply(self.store.plan_promote(hot, RACK, self._tick(dt)))

    @rule(where=hbms, data=st.data())
    def pin(self, where, data):
        resident = sorted(self.store.placement.at[where])
        if resident:
            blob_id = data.draw(st.sampled_from(resident))
            self.store.pin(where, [blob_id])
            self.pins.append((blob_id, where))

    @precondition(lambda self: self.pins)
    @rule(data=st.data())
    def unpin(self, data):
        blob_id, where = self.pins.pop(data.draw(st.integers(0, len(self.pins) - 1)))
        self.store.unpin(where, [blob_id])

    @precondition(lambda self: self.kept)
    @rule(data=st.data(), dt=now_steps)
    def release_kept(self, data, dt):
        """A kept fetch released whole (`release_fetch`), or a kept hand-off pulled
        (`release_handoff`: unpinned whole, then offloaded)."""
        where, kept = self.kept.pop(data.draw(st.integers(0, len(self.kept) - 1)))
        if isinstance(kept, tuple):
            self.store.unpin(where, kept)
        else:
            release_handoff(self.store, kept, self._tick(dt))

    @precondition(lambda self: any(isinstance(k, tuple) and k for _, k in self.kept))
    @rule(data=st.data())
    def unpin_one_of_kept(self, data):
        """One copy of a kept fetch's chain unpinned by itself; the rest of its pins
        are the unpin rule's from then on (copy by copy)."""
        fetches = [i for i, (_, k) in enumerate(self.kept) if isinstance(k, tuple) and k]
        where, chain = self.kept.pop(data.draw(st.sampled_from(fetches)))
        k = data.draw(st.integers(0, len(chain) - 1))
        self.store.unpin(where, [chain[k]])
        self.pins.extend((blob_id, where) for blob_id in chain[:k] + chain[k + 1:])

    # -- invariants ---------------------------------------------------------
    @invariant()
    def blobs_never_change(self):
        for blob_id, content in self.contents.items():
            blob = self.store.index[blob_id]
            assert (blob.parent, blob.first_block, blob.block_ids, blob.kv_bytes) == content
        assert len(self.store.index) == len(self.contents)

    @invariant()
    def identical_prefixes_are_one_blob(self):
        full = set()
        for blob_id in self.contents:
            chain = self.store.index.chain_of(blob_id)
            prefix = []
            for i, link in enumerate(chain):
                blob = self.store.index[link]
                is_last = i + 1 == len(chain)
                end = blob.end_block if is_last else self.store.index[chain[i + 1]].first_block
                prefix += blob.block_ids[: end - blob.first_block]
            assert tuple(prefix) not in full
            full.add(tuple(prefix))

    @invariant()
    def capacity_never_exceeded_and_bytes_add_up(self):
        placement = self.store.placement
        for where in ALL:
            resident = sum(self.store.index[b].kv_bytes for b in placement.at[where])
            assert placement.used_bytes[where] == resident
            assert resident <= self.store.layout.spec(where).capacity_bytes

    @invariant()
    def referenced_blobs_stay_reachable(self):
        for session, blob_ids in self.refs.items():
            assert self.store.session_blobs(session) == blob_ids
            for blob_id in blob_ids:
                assert self.store.holders(blob_id), f"live blob {blob_id} of {session} lost"

    @invariant()
    def holder_sets_are_shared_and_true(self):
        """Each blob's holders are the one shared set of the places whose list holds
        it; reference counts are the live sessions that reference the blob."""
        placement = self.store.placement
        where_held: dict[int, set] = {}
        for where in ALL:
            for blob_id in placement.at[where]:
                where_held.setdefault(blob_id, set()).add(where)
        assert {b: set(h) for b, h in placement.copies.items()} == where_held
        for held in placement.copies.values():
            assert placement.shared_set(held) is held
            assert placement.fastest_tier[held] == min(held).tier
            assert placement.slowest_tier[held] == max(held).tier
        for blob_id in self.contents:
            live = sum(blob_id in refs for refs in self.refs.values())
            assert self.store.sessions_referencing(blob_id) == live
            assert self.store.referenced(blob_id) == (live > 0)

    @invariant()
    def equal_contents_share_one_tuple(self):
        by_rest: dict[tuple, tuple] = {}
        for blob_id in self.contents:
            rest = self.store.index[blob_id].rest
            assert by_rest.setdefault(rest, rest) is rest

    def _model_pins(self) -> Counter:
        """The model's pins, blob by blob: (blob, place) counted once a pin."""
        pins = Counter(self.pins)
        for where, kept in self.kept:
            pins.update((blob_id, where) for blob_id in (
                kept if isinstance(kept, tuple) else kept.pinned))
        return pins

    @invariant()
    def pinned_copies_stay(self):
        for blob_id, where in self._model_pins():
            assert blob_id in self.store.placement.at[where]

    @invariant()
    def pins_count_as_the_model(self):
        # Read on a copy: a read counts a place's pinned chains in, and the rules that
        # follow must find them still pinned whole. Through `pinned` first, then every
        # count at once.
        model = self._model_pins()
        store = copy.deepcopy(self.store)
        for blob_id, where in model:
            assert store.pinned(blob_id, where)
        by_place: dict[Location, dict[int, int]] = {}
        for (blob_id, where), n in model.items():
            by_place.setdefault(where, {})[blob_id] = n
        assert copy.deepcopy(self.store).pin_counts() == by_place

    @invariant()
    def hits_and_misses_add_up(self):
        snap = self.store.snapshot()
        assert snap.requested_tokens == self.requested_tokens
        assert snap.lookup_tokens(Tier.HBM) == self.requested_tokens
        tiers = list(Tier)
        for faster, slower in itertools.pairwise(tiers):
            assert snap.lookup_tokens(slower) == snap.miss_tokens[faster]
        found = sum(snap.hit_tokens.values())
        assert found + snap.miss_tokens[Tier.PFS] == self.requested_tokens

    @invariant()
    def moved_bytes_match_the_plans(self):
        assert sum(self.store.snapshot().moved_bytes.values()) == self.moved_bytes


class RoomyBlobStoreMachine(BlobStoreMachine):
    """Host memory with room to spare: offloads demote copies to it without evicting
    (the plans a store builds without a draft)."""

    dram_blocks = 64


class TestBlobStoreMachine(BlobStoreMachine.TestCase):
    settings = settings(max_examples=60, stateful_step_count=40)


class TestRoomyBlobStoreMachine(RoomyBlobStoreMachine.TestCase):
    settings = settings(max_examples=60, stateful_step_count=40)


@pytest.mark.slow(seconds=40)
class TestBlobStoreMachineLong(BlobStoreMachine.TestCase):
    settings = settings(max_examples=1000, stateful_step_count=60)
