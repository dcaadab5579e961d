"""Blob store on runs of blobs: grouped steps, shared striping, resumed prefix walks."""

import pytest

from storage.blobs import BlobIndex, KnownIds
from storage.plans import Step, StepKind
from storage.store import BlobStore
from storage.tiers import Location, StoreLayout, Tier, TierSpec

GB = 10**9
MB_BLOCK = 64 * 1_000_000  # 64-token blocks of 1 MB of KV per token
HBM = Location(Tier.HBM, "w0")
DRAM0 = Location(Tier.DRAM, "n0")
DRAM1 = Location(Tier.DRAM, "n1")
PFS = Location(Tier.PFS, "pfs")


def make_store(hbm_bytes=10 * GB):
    layout = StoreLayout.build(
        [
            (HBM, TierSpec(Tier.HBM, hbm_bytes, 3000 * GB, 400 * GB), DRAM0),
            (DRAM0, TierSpec(Tier.DRAM, 20 * GB, 50 * GB, 50 * GB), PFS),
            (DRAM1, TierSpec(Tier.DRAM, 20 * GB, 20 * GB, 20 * GB), PFS),
            (PFS, TierSpec(Tier.PFS, 1000 * GB, 10 * GB, 10 * GB), None),
        ]
    )
    return BlobStore(layout, block_tokens=64, kv_bytes_per_token=1_000_000)


def write(store, blocks, where, now_s=0.0, segment_ends=()):
    plan = store.plan_write(blocks, where, now_s, segment_ends)
    assert plan.fits
    store.apply(plan)
    return plan


def alternating_chain(store):
    """Turns written alternately on two nodes, as prefill and decode do: blobs 0..3."""
    blocks = [1, 2, 3, 4, 5, 6]
    for end, where in ((1, DRAM0), (3, DRAM1), (4, DRAM0), (6, DRAM1)):
        write(store, blocks[:end], where)
    return blocks


def test_a_fetch_copies_its_blobs_in_one_step_whatever_holds_each():
    store = make_store()
    blocks = alternating_chain(store)
    plan = store.plan_fetch(blocks, HBM, 1.0)
    (step,) = plan.steps
    assert (step.kind, step.blob_ids, step.location) == (StepKind.COPY, (0, 1, 2, 3), HBM)
    # Each source sends the blobs it holds: n0 blobs 0 and 2, n1 blobs 1 and 3.
    assert [(s.location, s.kv_bytes) for s in step.sources] == [
        (DRAM0, 2 * MB_BLOCK),
        (DRAM1, 4 * MB_BLOCK),
    ]
    assert step.kv_bytes == plan.moved_bytes == 6 * MB_BLOCK
    # Blob by blob: each copy runs at its own holder's rate.
    assert step.time_s == pytest.approx(2 * MB_BLOCK / (50 * GB) + 4 * MB_BLOCK / (20 * GB))
    assert plan.time_s == plan.load_time_s == step.time_s
    store.apply(plan)
    snap = store.snapshot()
    assert snap.moved_bytes == {(Tier.DRAM, Tier.HBM): 6 * MB_BLOCK}
    assert list(store.placement.at[HBM]) == [0, 1, 2, 3]


def test_offload_drops_a_run_then_demotes_in_blob_order():
    store = make_store()
    blocks = alternating_chain(store)
    store.apply(store.plan_fetch(blocks, HBM, 1.0))
    write(store, [*blocks, 7, 8], HBM, 2.0)  # blob 4 exists in HBM only
    plan = store.plan_offload(range(5), HBM, 3.0)
    assert [(s.kind, s.blob_ids, s.location) for s in plan.steps] == [
        (StepKind.DROP, (0, 1, 2, 3), HBM),
        (StepKind.COPY, (4,), DRAM0),
        (StepKind.DROP, (4,), HBM),
    ]
    store.apply(plan)
    assert store.placement.used_bytes[HBM] == 0
    assert store.holders(4) == (DRAM0,)
    assert store.snapshot().dropped_blobs == 5


def drafted(store, plan_, *args):
    """The plan ``plan_`` makes with the store's paths without a draft shut."""
    store._has_room = lambda location, need_bytes: False
    store._plain_offload = lambda ids, drops, src, protect: None
    try:
        return plan_(*args)
    finally:
        del store._has_room, store._plain_offload


def test_an_offload_demoting_between_drops_is_the_plan_a_draft_makes():
    store = make_store()
    blocks = [1, 2, 3, 4]
    for end, where in ((1, DRAM0), (2, HBM), (3, DRAM1), (4, HBM)):
        write(store, blocks[:end], where, float(end))
    store.apply(store.plan_fetch(blocks, HBM, 5.0))  # blobs 0 and 2 join 1 and 3 in HBM
    plan = store.plan_offload(range(4), HBM, 6.0)
    assert [(s.kind, s.blob_ids, s.location) for s in plan.steps] == [
        (StepKind.DROP, (0,), HBM),
        (StepKind.COPY, (1,), DRAM0),
        (StepKind.DROP, (1, 2), HBM),
        (StepKind.COPY, (3,), DRAM0),
        (StepKind.DROP, (3,), HBM),
    ]
    assert repr(plan) == repr(drafted(store, store.plan_offload, range(4), HBM, 6.0))
    fetch = store.plan_fetch(blocks, HBM, 6.0)
    assert repr(fetch) == repr(drafted(store, store.plan_fetch, blocks, HBM, 6.0))
    write_ = store.plan_write([*blocks, 5], HBM, 6.0)
    assert repr(write_) == repr(drafted(store, store.plan_write, [*blocks, 5], HBM, 6.0))
    store.apply(plan)
    assert store.placement.used_bytes[HBM] == 0


def test_an_offload_making_room_below_is_the_plan_a_draft_makes():
    block = 64 * 1_000_000
    layout = StoreLayout.build(
        [
            (HBM, TierSpec(Tier.HBM, 10 * block, 3000 * GB, 400 * GB), DRAM0),
            (DRAM0, TierSpec(Tier.DRAM, 4 * block, 50 * GB, 50 * GB), PFS),
            (PFS, TierSpec(Tier.PFS, 1000 * GB, 10 * GB, 10 * GB), None),
        ]
    )
    store = BlobStore(layout, block_tokens=64, kv_bytes_per_token=1_000_000)
    a, b, c, d = (write(store, [first], DRAM0, 1.0).chain[0] for first in (10, 20, 30, 40))
    store.pin(DRAM0, [b])
    store.apply(store.plan_promote([c], PFS, 2.0))  # c is held below too
    (e,) = write(store, [50, 51], HBM, 3.0).chain
    # Host memory is full: the oldest copies go, a is moved down to the file system, b
    # is pinned, c is dropped (held below); then the room is made and d stays.
    plan = store.plan_offload([e], HBM, 4.0)
    assert [(s.kind, s.blob_ids, s.location) for s in plan.steps] == [
        (StepKind.COPY, (a,), PFS),
        (StepKind.DROP, (a, c), DRAM0),
        (StepKind.COPY, (e,), DRAM0),
        (StepKind.DROP, (e,), HBM),
    ]
    assert repr(plan) == repr(drafted(store, store.plan_offload, [e], HBM, 4.0))
    store.apply(plan)
    assert list(store.placement.at[DRAM0]) == [b, d, e]


def test_a_step_names_at_least_one_blob():
    with pytest.raises(ValueError, match="blob_ids"):
        Step(StepKind.DROP, (), HBM)


def test_locations_are_values_that_refuse_bad_fields():
    assert Location(Tier.HBM, "w0") == Location(tier=Tier.HBM, holder="w0")
    assert Location(Tier.HBM, "w9") < Location(Tier.DRAM, "a0")  # by tier, then holder
    assert str(DRAM1) == "DRAM:n1"
    with pytest.raises(TypeError, match="Location.tier"):
        Location(1, "n0")
    with pytest.raises(ValueError, match="Location.holder"):
        Location(Tier.DRAM, "")


def test_a_walk_matched_again_sees_blobs_registered_since():
    index = BlobIndex(block_tokens=4, kv_bytes_per_token=1)
    request = (1, 2, 3, 4, 5)
    _, new = index.describe(request[:2])
    for blob in new:
        index.register(blob)
    assert index.match(request).matched_blocks == 2
    _, more = index.describe(request, segment_ends=[4])
    for blob in more:
        index.register(blob)
    again = index.match(request)
    assert again.blob_ids == (0, 1, 2) and again.matched_tokens == 20
    assert index.match(list(request)) == again


def test_a_repeated_session_shares_every_block_but_its_first():
    """--repeat shifts a copy's first block id: its blobs keep their own first ids and
    fork keys, and share the rest of their block ids with the session they repeat."""
    store = make_store()
    base = tuple(range(1, 41))
    copy = (base[0] + (1 << 60), *base[1:])
    for calls in (base[:30], base):
        write(store, calls, DRAM0)
    for calls in (copy[:30], copy):
        write(store, calls, DRAM1)
    blobs = [store.index[b] for b in range(4)]
    assert [(b.parent, b.first_block, b.first_id) for b in blobs] == [
        (None, 0, 1), (0, 30, 31), (None, 0, 1 + (1 << 60)), (2, 30, 31)]
    assert blobs[2].block_ids == copy[:30] and blobs[3].block_ids == copy[30:]
    assert blobs[2].rest is blobs[0].rest and blobs[3].rest is blobs[1].rest
    assert store.match(copy).blob_ids == (2, 3) and store.match(base).blob_ids == (0, 1)


def replay_against_fresh(index, fresh, calls):
    """Register each call's new blobs in both indexes, `fresh` walking from the root
    every time, and check that both match each call alike."""
    for call in calls:
        for walker in (index, fresh):
            if walker is fresh:
                walker._tips.clear()  # a walk from the root every time
            _, new = walker.describe(call)
            for blob in new:
                walker.register(blob)
        assert index.match(call) == fresh.match(call)


def test_a_walk_resumes_where_the_last_call_of_the_session_ended():
    """The next call resends the last one and adds to it: its walk starts where that
    one ended, and finds what a walk from the root finds, also once it backs up."""
    index = BlobIndex(block_tokens=4, kv_bytes_per_token=1)
    fresh = BlobIndex(block_tokens=4, kv_bytes_per_token=1)
    calls = [(7, 1, 2), (7, 1, 2, 3, 4), (7, 1, 2, 3, 4, 5, 6), (7, 1, 2, 3, 9), (7, 1, 8)]
    replay_against_fresh(index, fresh, calls)
    assert index.match((7, 1, 2, 3, 4, 5)).blob_ids == (0, 1, 2)
    assert index.match((7, 1, 2, 3, 4, 5)).matched_blocks == 6
    assert index.match((7, 1, 2, 3)).matched_blocks == 4  # ends inside blob 1: no resuming
    assert index.match((7, 1, 2, 3, 4, 5, 6, 0)).matched_blocks == 7


def test_sessions_sharing_a_prompt_each_resume_their_own_walk():
    """Sessions that start with the same blocks (a shared system prompt) keep a walk each
    to resume: the next call of one resumes its own last walk, not the latest walk of
    any session with that first block, and finds what a walk from the root finds."""
    index = BlobIndex(block_tokens=4, kv_bytes_per_token=1)
    fresh = BlobIndex(block_tokens=4, kv_bytes_per_token=1)
    prompt = (7, 1, 2)
    a, b = (*prompt, 10, 11), (*prompt, 20, 21)
    calls = [a, b, (*a, 12), (*b, 22), (*a, 12, 13), (*b, 22, 23), (*a, 14), (*b, 22, 23, 24)]
    replay_against_fresh(index, fresh, calls)
    # A call continuing a's third call after b's calls resumes that call's walk (b's
    # latest walks and a's branch to 14 part from it earlier), at its end.
    nxt = (*a, 12, 13, 15)
    resumed = index._resume(nxt)
    assert resumed is not None and resumed[0] == (*a, 12, 13) and resumed[3] == 7
    assert index.match(nxt) == fresh.match(nxt)


def test_a_walk_resumes_on_what_its_ids_know_of_themselves():
    """Ids that say they start with a walked sequence, or begin the sequence walked
    next (`KnownIds`, as a retiring call's write-back ids do), resume that walk without
    comparing the ids they share, and find what a walk from the root finds."""
    index = BlobIndex(block_tokens=4, kv_bytes_per_token=1)
    fresh = BlobIndex(block_tokens=4, kv_bytes_per_token=1)
    prompt = (7, 1, 2)
    other = (*prompt, 30, 31)  # another session's walk, latest in the group
    first = (*prompt, 10, 11)
    nxt = (*first, 12, 13, 14)
    written = KnownIds.of((*first, 12), first, nxt)
    replay_against_fresh(index, fresh, [first, other])
    assert index._resume(written)[0] is first
    replay_against_fresh(index, fresh, [written])
    assert index._resume(nxt)[0] is written
    replay_against_fresh(index, fresh, [nxt])
    # The maker's word is taken: a claim is not checked (so only its maker may make one).
    liar = KnownIds.of((*first, 99, 98, 97), nxt, None)
    assert index._resume(liar)[0] is nxt
