"""Hot shared prefixes go to the rack cache and are read back from it; a filled call's KV
goes GPU to GPU to its decode worker (workers.kv_io)."""

from costmodel.model import load_model
from storage.plans import StepKind
from storage.store import BlobStore
from storage.tiers import Location, Tier
from workers.cluster_toml import load_cluster
from workers.kv_io import (
    fetch,
    promote_hot,
    release_fetch,
    release_handoff,
    write_and_offload,
    write_for_handoff,
)

B200 = load_cluster("b200x8").bind(load_model("kimi-k3-like"))
SYSTEM = tuple(range(100, 132))  # a shared prompt of 32 blocks


def store():
    return BlobStore(B200.store_layout, block_tokens=64, kv_bytes_per_token=70_000)


def workers_on_two_nodes():
    """Two workers on two servers of one rack."""
    for a in B200.workers:
        for b in B200.workers:
            if a.rack == b.rack and a.node != b.node:
                return a, b
    raise AssertionError("b200x8 has no rack with two servers in use")


def test_a_blob_shared_by_enough_live_sessions_is_promoted_and_read_back_from_the_rack():
    s = store()
    a, b = workers_on_two_nodes()
    hbm_a, host_a = Location(Tier.HBM, a.name), Location(Tier.DRAM, a.node)
    rack = Location(Tier.RACK, a.rack)
    write_and_offload(s, "s1", (*SYSTEM, 1, 2), hbm_a, host_a, 0.0)
    chain = write_and_offload(s, "s2", (*SYSTEM, 3, 4), hbm_a, host_a, 1.0)
    shared = chain[0]
    assert s.sessions_referencing(shared) == 2 and s.sessions_referencing(chain[-1]) == 1
    # One session short of the threshold: nothing moves.
    assert promote_hot(s, chain, rack, 3, 2.0) == 0
    assert promote_hot(s, chain, rack, 2, 2.0) == 1
    assert rack in s.holders(shared) and rack not in s.holders(chain[-1])
    assert promote_hot(s, chain, rack, 2, 2.5) == 0  # already there
    # Host DRAM of node a drops its copy; a worker on node b now finds the prompt in the
    # rack cache (and the session's own tail on the PFS).
    evict = s.plan_evict(host_a, s.placement.capacity_bytes[host_a], 3.0)  # all of it
    s.apply(evict)
    assert set(s.holders(shared)) == {rack}
    hbm_b = Location(Tier.HBM, b.name)
    plan = s.plan_fetch((*SYSTEM, 5), hbm_b, 4.0)
    sources = {src.location for step in plan.steps if step.kind is StepKind.COPY
               for src in step.sources}
    assert sources == {rack}
    before = s.snapshot().hit_tokens[Tier.RACK]
    result = fetch(s, (*SYSTEM, 5), hbm_b, 4.0, None)
    assert s.snapshot().hit_tokens[Tier.RACK] - before == len(SYSTEM) * 64
    assert s.snapshot().moved_bytes[(Tier.RACK, Tier.HBM)] > 0
    release_fetch(s, hbm_b, result)


def test_a_handoff_keeps_the_kv_in_the_fill_workers_hbm_until_decode_copies_it():
    s = store()
    a, b = workers_on_two_nodes()
    hbm_a, host_a = Location(Tier.HBM, a.name), Location(Tier.DRAM, a.node)
    hbm_b = Location(Tier.HBM, b.name)
    chain, handoff = write_for_handoff(s, "s1", (*SYSTEM, 1), hbm_a, host_a, 0.0)
    assert handoff is not None and all(s.pinned(blob, hbm_a) for blob in chain)
    plan = s.plan_fetch((*SYSTEM, 1), hbm_b, 1.0)
    sources = {src.location for step in plan.steps for src in step.sources}
    assert sources == {hbm_a}  # GPU to GPU: nothing went through host memory
    fetch(s, (*SYSTEM, 1), hbm_b, 1.0, None)
    release_handoff(s, handoff, 1.0)
    release_handoff(s, handoff, 2.0)  # once only: the fill worker stopping later is a no-op
    # The fill worker's copy left its HBM for its node's DRAM.
    assert all(set(s.holders(blob)) == {hbm_b, host_a} for blob in chain)
