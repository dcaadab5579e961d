"""The KV placement policies (workers.kv_policy) and the router's use of residency."""

from orchestrator.control.router import BALANCE_ABS_TOKENS, FillCandidate, choose_fill_worker
from storage.plans import FetchAction
from storage.store import BlobStore
from storage.tiers import Location, StoreLayout, Tier, TierSpec
from workers.kv_policy import (
    KVPolicy,
    finish_call,
    resident_bytes,
    trim_retained,
    write_and_retain,
)

BLOCK_TOKENS = 4
PER_TOKEN = 10
BLOCK = BLOCK_TOKENS * PER_TOKEN
HBM = Location(Tier.HBM, "w0")
HBM1 = Location(Tier.HBM, "w1")
DRAM = Location(Tier.DRAM, "n0")
PFS = Location(Tier.PFS, "pfs")


def store(hbm_blocks: int = 8) -> BlobStore:
    def spec(tier, blocks):
        return TierSpec(tier, blocks * BLOCK, 1000.0, 1000.0)

    layout = StoreLayout.build([
        (HBM, spec(Tier.HBM, hbm_blocks), DRAM), (HBM1, spec(Tier.HBM, hbm_blocks), DRAM),
        (DRAM, spec(Tier.DRAM, 64), PFS), (PFS, spec(Tier.PFS, 256), None)])
    return BlobStore(layout, BLOCK_TOKENS, PER_TOKEN)


def test_offload_leaves_hbm_and_retain_keeps_the_kv_written_through():
    off, ret = store(), store()
    blocks = (1, 2, 3)
    finish_call(KVPolicy.OFFLOAD, off, "s", blocks, HBM, DRAM, 0.0)
    finish_call(KVPolicy.RETAIN, ret, "s", blocks, HBM, DRAM, 0.0)
    assert off.placement.used_bytes[HBM] == 0
    assert off.placement.used_bytes[DRAM] == 3 * BLOCK
    # Retained: resident, unpinned, and a copy in host memory (write-through).
    assert ret.placement.used_bytes[HBM] == 3 * BLOCK
    assert ret.placement.used_bytes[DRAM] == 3 * BLOCK
    assert ret.pinned_bytes(HBM) == 0
    # The next turn finds it in HBM: nothing moves.
    plan = ret.plan_fetch((1, 2, 3, 4), HBM, 1.0)
    assert plan.action is FetchAction.HIT and plan.moved_bytes == 0
    assert plan.hit_tokens == {Tier.HBM: 3 * BLOCK_TOKENS}
    assert off.plan_fetch((1, 2, 3, 4), HBM, 1.0).hit_tokens == {Tier.DRAM: 3 * BLOCK_TOKENS}


def test_only_new_kv_is_written_through():
    s = store()
    write_and_retain(s, "s", (1, 2), HBM, DRAM, 0.0)
    moved = sum(s.snapshot().moved_bytes.values())
    write_and_retain(s, "s", (1, 2, 3), HBM, DRAM, 1.0)
    assert sum(s.snapshot().moved_bytes.values()) - moved == BLOCK


def test_retained_blobs_never_block_a_call_that_fits_once_they_are_evicted():
    s = store(hbm_blocks=4)
    write_and_retain(s, "a", (1, 2, 3, 4), HBM, DRAM, 0.0)  # HBM full of retained KV
    finish_call(KVPolicy.OFFLOAD, s, "b", (5, 6, 7, 8), HBM1, DRAM, 0.0)
    plan = s.plan_fetch((5, 6, 7, 8), HBM, 1.0)
    assert plan.fits and plan.action is FetchAction.LOAD
    s.apply(plan)
    # The evicted blobs were dropped (host memory has them): no copy was needed.
    assert plan.moved_bytes == 4 * BLOCK
    assert s.plan_fetch((1, 2, 3, 4), HBM1, 2.0).hit_tokens == {Tier.DRAM: 4 * BLOCK_TOKENS}


def test_eviction_takes_a_chains_tail_before_its_root():
    s = store(hbm_blocks=4)
    write_and_retain(s, "a", (1, 2), HBM, DRAM, 0.0)
    write_and_retain(s, "a", (1, 2, 3, 4), HBM, DRAM, 1.0)  # chain: (1, 2) then (3, 4)
    root, tail = s.match((1, 2, 3, 4)).blob_ids
    s.apply(s.plan_evict(HBM, 2 * BLOCK, 2.0))
    assert root in s.placement.at[HBM] and tail not in s.placement.at[HBM]


def test_trim_keeps_retained_kv_within_what_the_sequences_leave():
    s = store(hbm_blocks=8)
    write_and_retain(s, "a", (1, 2, 3, 4), HBM, DRAM, 0.0)
    write_and_retain(s, "b", (5, 6), HBM, DRAM, 1.0)
    pinned = s.match((5, 6)).blob_ids
    s.pin(HBM, pinned)
    trim_retained(s, HBM, 0.75, 2.0)  # sequences hold 6 of 8 blocks: 2 left for retained
    retained = s.placement.used_bytes[HBM] - s.pinned_bytes(HBM)
    assert retained <= 2 * BLOCK
    assert all(b in s.placement.at[HBM] for b in pinned)
    trim_retained(s, HBM, 1.0, 3.0)
    assert s.placement.used_bytes[HBM] == s.pinned_bytes(HBM) == 2 * BLOCK


def test_resident_bytes_by_worker():
    s = store()
    write_and_retain(s, "a", (1, 2), HBM, DRAM, 0.0)
    write_and_retain(s, "b", (1, 2, 3), HBM1, DRAM, 0.0)  # only the new block goes to w1
    chain = s.match((1, 2, 3)).blob_ids
    assert resident_bytes(s, chain) == {"w0": 2 * BLOCK, "w1": BLOCK}


def _candidates(queued, resident):
    return [FillCandidate(f"m{i}", "midfill", "n0", q, True, r)
            for i, (q, r) in enumerate(zip(queued, resident, strict=True))]


def test_the_router_prefers_the_worker_holding_the_prefix():
    assert choose_fill_worker(8192, _candidates([0, 1000], [0, 8192]), frozenset()) == "m1"
    # Nothing resident: the least queued, as without retention.
    assert choose_fill_worker(8192, _candidates([1000, 0], [0, 0]), frozenset()) == "m1"


def test_the_router_leaves_a_worker_out_of_balance_for_the_shortest_queue():
    far = BALANCE_ABS_TOKENS + 1
    assert choose_fill_worker(8192, _candidates([0, far], [0, 8192]), frozenset()) == "m0"
    # Beyond the absolute margin but within 1.5 times the shortest queue: still balanced.
    assert choose_fill_worker(8192, _candidates([4 * far, 5 * far], [0, 8192]),
                              frozenset()) == "m1"


def test_the_ready_buffer_offers_a_call_first_to_the_preferred_decode_worker():
    from workers.ready import ReadyBuffer
    from workers.request import Request

    woken = []

    class Worker:
        def __init__(self, name):
            self.name = name

        def on_ready(self):
            woken.append(self.name)

    a, b = Worker("a"), Worker("b")
    ready = ReadyBuffer()
    ready.subscribe(a.on_ready)
    ready.subscribe(b.on_ready)
    req = Request.__new__(Request)
    ready.put(req)
    assert woken == ["a", "b"]  # no preference: in subscription order
    woken.clear()
    ready.prefer = lambda r: b.on_ready
    ready.put(req)
    assert woken == ["b", "a"]  # each woken once, the preferred first
