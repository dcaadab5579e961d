"""Blob store: chains and sharing, tiers, plans, eviction, counters."""

import math

import pytest

from storage.blobs import BlobIndex
from storage.plans import FetchAction, NoFit, StepKind
from storage.store import BlobStore
from storage.tiers import Location, StoreLayout, Tier, TierSpec

GB = 10**9
HBM = Location(Tier.HBM, "w0")
HBM1 = Location(Tier.HBM, "w1")
DRAM = Location(Tier.DRAM, "n0")
RACK = Location(Tier.RACK, "r0")
PFS = Location(Tier.PFS, "pfs")


def make_store(hbm_bytes=10 * GB, dram_bytes=20 * GB, pfs_bytes=1000 * GB, pfs_read=10 * GB):
    layout = StoreLayout.build(
        [
            (HBM, TierSpec(Tier.HBM, hbm_bytes, 3000 * GB, 400 * GB), DRAM),
            (HBM1, TierSpec(Tier.HBM, hbm_bytes, 3000 * GB, 400 * GB), DRAM),
            (DRAM, TierSpec(Tier.DRAM, dram_bytes, 50 * GB, 50 * GB), PFS),
            (RACK, TierSpec(Tier.RACK, 100 * GB, 100 * GB, 100 * GB), PFS),
            (PFS, TierSpec(Tier.PFS, pfs_bytes, pfs_read, 10 * GB), None),
        ]
    )
    # 64-token blocks of 1 MB of KV per token keep the numbers readable: 64 MB a block.
    return BlobStore(layout, block_tokens=64, kv_bytes_per_token=1_000_000)


def write(store, blocks, where=HBM, now_s=0.0, segment_ends=()):
    plan = store.plan_write(blocks, where, now_s, segment_ends)
    assert plan.fits
    store.apply(plan)
    return plan


# -- tiers -----------------------------------------------------------------
@pytest.mark.parametrize(
    "field, kwargs",
    [
        ("capacity_bytes", {"capacity_bytes": 0}),
        ("capacity_bytes", {"capacity_bytes": -5}),
        ("read_bytes_per_s", {"read_bytes_per_s": math.nan}),
        ("write_bytes_per_s", {"write_bytes_per_s": math.inf}),
    ],
)
def test_tier_spec_refuses_bad_numbers_naming_field_and_value(field, kwargs):
    args = {"capacity_bytes": GB, "read_bytes_per_s": 1.0, "write_bytes_per_s": 1.0} | kwargs
    value = next(iter(kwargs.values()))
    with pytest.raises(ValueError, match=rf"TierSpec\.{field}.*{value!r}"):
        TierSpec(Tier.DRAM, **args)


def test_layout_refuses_a_lower_location_that_is_not_slower():
    spec = TierSpec(Tier.DRAM, GB, 1.0, 1.0)
    with pytest.raises(ValueError, match="lower must be a slower tier"):
        StoreLayout.build([(DRAM, spec, HBM)])
    with pytest.raises(ValueError, match="not a listed location"):
        StoreLayout.build([(DRAM, spec, PFS)])


def test_path_bandwidth_defaults_to_min_of_read_and_write_and_can_be_overridden():
    store = make_store()
    assert store.layout.path_bytes_per_s(DRAM, HBM) == 50 * GB
    layout = StoreLayout(store.layout.locations, {(Tier.DRAM, Tier.HBM): 25 * GB})
    assert layout.path_bytes_per_s(DRAM, HBM) == 25 * GB


# -- blobs -----------------------------------------------------------------
def test_same_blocks_after_same_prefix_are_one_blob_and_branches_fork():
    index = BlobIndex(block_tokens=64, kv_bytes_per_token=10)
    for seq, ends in (([1, 2, 3, 4], [2]), ([1, 2, 3, 4], []), ([1, 2, 9], []), ([1, 2, 3, 7], [])):
        _, new = index.describe(seq, ends)
        for blob in new:
            index.register(blob)
    # [1,2] system prompt, [3,4] one session's turn, [9] a branch, [7] a fork inside [3,4].
    assert len(index) == 4
    assert [index[i].block_ids for i in range(4)] == [(1, 2), (3, 4), (9,), (7,)]
    assert (index[3].parent, index[3].first_block) == (1, 3)
    match = index.match([1, 2, 3, 7, 5])
    assert (match.blob_ids, match.matched_blocks, match.matched_tokens) == ((0, 1, 3), 4, 256)
    assert index.match([1, 2, 3, 4, 5]).blob_ids == (0, 1)
    assert index.match([2, 1]).blob_ids == ()
    assert index.chain_of(3) == (0, 1, 3)


def test_a_request_leaving_a_long_blob_matches_up_to_where_it_leaves():
    # One blob of 300 blocks; requests leave it at every kind of place the slice-wise
    # compare meets: inside the first slice, on a slice edge, past it, at its last block.
    index = BlobIndex(block_tokens=64, kv_bytes_per_token=10)
    blocks = list(range(1000, 1300))
    _, (blob,) = index.describe(blocks)
    index.register(blob)
    for leave in (1, 2, 63, 64, 65, 128, 200, 299):
        seq = [*blocks[:leave], -1, *blocks[leave + 1:]]
        assert index.match(seq).matched_blocks == leave
    assert index.match(blocks[:150]).matched_blocks == 150  # the request ends inside it
    assert index.match([*blocks, 7]).matched_blocks == 300


def test_register_refuses_a_stale_or_duplicate_blob():
    index = BlobIndex(64, 10)
    _, (blob,) = index.describe([1, 2])
    index.register(blob)
    with pytest.raises(ValueError, match="stale"):
        index.register(blob)


# -- fetch -----------------------------------------------------------------
def test_fetch_of_a_resident_prefix_is_a_hit_with_no_moves():
    store = make_store()
    write(store, [1, 2, 3])
    plan = store.plan_fetch([1, 2, 3, 4], HBM, 1.0)
    assert (plan.action, plan.steps, plan.prefix_tokens) == (FetchAction.HIT, (), 192)
    store.apply(plan)
    snap = store.snapshot()
    assert snap.hit_tokens[Tier.HBM] == 192
    assert snap.miss_tokens == dict.fromkeys(Tier, 64)
    assert snap.requested_tokens == 256


def test_fetch_with_nothing_cached_is_a_miss():
    plan = make_store().plan_fetch([5, 6], HBM, 0.0)
    assert (plan.action, plan.prefix_tokens, plan.fits) == (FetchAction.MISS, 0, True)


def test_several_gigabytes_striped_across_eight_holders_load_in_well_under_a_second():
    holders = [Location(Tier.DRAM, f"n{i}") for i in range(8)]
    entries = [(HBM, TierSpec(Tier.HBM, 80 * GB, 3000 * GB, 400 * GB), holders[0])]
    entries += [(h, TierSpec(Tier.DRAM, 100 * GB, 50 * GB, 50 * GB), None) for h in holders]
    store = BlobStore(StoreLayout.build(entries), block_tokens=64, kv_bytes_per_token=70_000)
    blocks = list(range(1563))  # 100k tokens x 70 kB = 7 GB, the essay's per-turn move
    write(store, blocks, where=holders[0])
    (blob_id,) = store.match(blocks).blob_ids
    for holder in holders[1:]:
        store.apply(store.plan_promote([blob_id], holder, 0.0))
    plan = store.plan_fetch(blocks, HBM, 1.0)
    (step,) = plan.steps
    assert plan.action is FetchAction.LOAD
    assert step.kv_bytes == 1563 * 64 * 70_000 > 7 * GB
    assert len(step.sources) == 8 and sum(s.kv_bytes for s in step.sources) == step.kv_bytes
    assert plan.time_s == pytest.approx(step.kv_bytes / (400 * GB))  # 8 x 50 GB/s, capped at 400
    assert plan.time_s < 0.05


def test_slow_tier_makes_the_plan_recompute_and_fast_tier_makes_it_load():
    store = make_store(pfs_read=0.1 * GB)
    write(store, list(range(10)), where=PFS)
    prefill_s = lambda tokens: tokens * 20e-6  # noqa: E731 - 50k tokens/s of prefill
    slow = store.plan_fetch(list(range(10)), HBM, 1.0, recompute_s=prefill_s)
    assert slow.action is FetchAction.RECOMPUTE
    assert slow.recompute_tokens == 640
    assert slow.recompute_time_s < slow.load_time_s
    assert [s.kind for s in slow.steps] == [StepKind.PLACE]
    store.apply(slow)
    assert HBM in store.holders(0) and store.snapshot().recomputed_tokens == 640

    fast = make_store()
    write(fast, list(range(10)), where=DRAM)
    plan = fast.plan_fetch(list(range(10)), HBM, 1.0, recompute_s=prefill_s)
    assert plan.action is FetchAction.LOAD and plan.moved_bytes == 640 * 1_000_000


# -- eviction, offload, sessions --------------------------------------------
def test_eviction_demotes_lru_blobs_down_a_tier_and_never_pinned_ones():
    store = make_store(hbm_bytes=64 * 1_000_000 * 4)  # room for four blocks
    for i, now_s in ((0, 0.0), (1, 1.0), (2, 2.0)):
        write(store, [10 * i, 10 * i + 1], now_s=now_s, segment_ends=[1])
    # The third write pushed the oldest, blobs 0 and 1, down to DRAM.
    assert sorted(store.placement.at[HBM]) == [2, 3, 4, 5]
    assert store.holders(0) == store.holders(1) == (DRAM,)
    store.pin(HBM, [2])  # the least recently used copy, but in use
    plan = store.plan_evict(HBM, 64 * 1_000_000 * 2, 3.0)
    store.apply(plan)
    # Demoting is a copy down then a drop, blob by blob: the steps alternate.
    assert [(s.kind, s.blob_ids) for s in plan.steps] == [
        (StepKind.COPY, (3,)),
        (StepKind.DROP, (3,)),
        (StepKind.COPY, (4,)),
        (StepKind.DROP, (4,)),
    ]
    assert all(s.location == DRAM for s in plan.steps if s.kind is StepKind.COPY)
    assert sorted(store.placement.at[HBM]) == [2, 5]


def test_eviction_that_cannot_free_enough_is_a_value_not_an_error():
    store = make_store(hbm_bytes=64 * 1_000_000 * 2)
    plan = write(store, [1, 2])
    store.pin(HBM, plan.chain)
    result = store.plan_evict(HBM, 64 * 1_000_000, 1.0)
    assert (result.fits, result.no_fit, result.steps) == (False, NoFit.NO_ROOM, ())
    with pytest.raises(ValueError, match="does not fit"):
        store.apply(result)


def test_resize_grows_at_once_and_shrinks_by_demoting_lru_blobs():
    block = 64 * 1_000_000
    store = make_store(hbm_bytes=block * 4)
    for i, now_s in ((0, 0.0), (1, 1.0)):
        write(store, [10 * i, 10 * i + 1], now_s=now_s, segment_ends=[1])
    assert store.resize(HBM, block * 8, 2.0) is None
    assert store.placement.capacity_bytes[HBM] == block * 8
    plan = store.resize(HBM, block * 3, 3.0)  # four blocks held: the oldest one goes down
    assert [s.blob_ids for s in plan.steps if s.kind is StepKind.COPY] == [(0,)]
    assert store.holders(0) == (DRAM,) and sorted(store.placement.at[HBM]) == [1, 2, 3]
    assert store.placement.used_bytes[HBM] == block * 3
    store.pin(HBM, [1, 2, 3])
    with pytest.raises(ValueError, match="cannot shrink"):
        store.resize(HBM, block, 4.0)
    assert store.placement.capacity_bytes[HBM] == block * 3


def test_offload_between_turns_leaves_hbm_in_under_a_second():
    store = make_store()
    plan = write(store, list(range(100)))  # 6.4 GB of KV
    store.ref("s1", plan.chain)
    offload = store.plan_offload(store.session_blobs("s1"), HBM, 5.0)
    store.apply(offload)
    assert store.placement.used_bytes[HBM] == 0
    assert store.holders(plan.chain[0]) == (DRAM,)
    assert offload.time_s == pytest.approx(6.4 * GB / (50 * GB))


def test_the_links_hook_hears_of_the_plans_that_move_bytes_only():
    store = make_store()
    told = []
    store.on_apply = lambda plan: told.append(plan) or len(told)
    assert store.apply(store.plan_fetch(list(range(10)), HBM, 0.0)) is None  # a miss
    plan = write(store, list(range(10)))  # placed where it was computed
    store.ref("s1", plan.chain)
    assert store.apply(store.plan_fetch(list(range(10)), HBM, 1.0)) is None  # a local hit
    assert told == []
    offload = store.plan_offload(plan.chain, HBM, 2.0)  # down to DRAM, dropped at HBM
    assert store.apply(offload) == 1
    assert told == [offload]
    fetch = store.plan_fetch(list(range(10)), HBM1, 3.0)
    assert fetch.action is FetchAction.LOAD and store.apply(fetch) == 2
    drops = store.plan_offload(plan.chain, HBM1, 4.0)  # DRAM holds them: plain drops
    assert [s.kind for s in drops.steps] == [StepKind.DROP]
    assert store.apply(drops) is None
    assert told == [offload, fetch]


def test_the_last_copy_of_a_live_blob_is_never_dropped():
    store = make_store(
        hbm_bytes=64 * 1_000_000, dram_bytes=64 * 1_000_000, pfs_bytes=64 * 1_000_000
    )
    store.ref("s", write(store, [1]).chain)
    store.apply(store.plan_offload([0], HBM, 1.0))  # down to DRAM
    write(store, [2], where=PFS)
    store.ref("t", [1])
    # DRAM is full of blob 0, PFS of blob 1: the live blob 0 has nowhere to go.
    assert store.plan_evict(DRAM, 1, 2.0).fits is False
    store.release("s")
    plan = store.plan_evict(DRAM, 1, 3.0)
    assert plan.fits and [s.kind for s in plan.steps] == [StepKind.DROP]


def test_stale_plans_and_bad_pins_raise():
    store = make_store()
    plan = store.plan_write([1], HBM, 0.0)
    store.apply(store.plan_write([2], HBM, 0.0))
    with pytest.raises(ValueError, match="stale"):
        store.apply(plan)
    with pytest.raises(ValueError, match="no copy"):
        store.pin(DRAM, [0])
    with pytest.raises(ValueError, match="not pinned"):
        store.unpin(HBM, [0])


def test_hot_shared_prefix_is_promoted_to_the_rack_cache():
    store = make_store()
    chain = write(store, [1, 2, 3], segment_ends=[1]).chain
    store.ref("a", chain[:1])
    store.ref("b", chain)
    assert store.hot_blobs(min_sessions=2) == (0,)
    plan = store.plan_promote(store.hot_blobs(2), RACK, 1.0)
    store.apply(plan)
    assert store.holders(0) == (HBM, RACK)
    assert store.snapshot().moved_bytes == {(Tier.HBM, Tier.RACK): 64 * 1_000_000}
