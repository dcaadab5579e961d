"""A load's hit tokens count at the tiers that sent its bytes, in proportion to the bytes
each sent (storage.counters.served_hits), whole tokens that add up to the hits exactly."""

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from storage.counters import served_hits
from storage.plans import FetchAction, StepKind
from storage.tiers import Location, Tier
from tests.unit.test_kv_promotion import SYSTEM, store, workers_on_two_nodes
from workers.kv_io import promote_hot, write_and_offload


def test_loaded_tokens_are_shared_by_bytes_sent_largest_remainder_first():
    # 10 tokens, 2:1 bytes: 6.67 and 3.33 -> 7 and 3.
    assert served_hits({Tier.DRAM: 10}, 0, Tier.HBM, {Tier.DRAM: 2, Tier.RACK: 1}) == {
        Tier.DRAM: 7, Tier.RACK: 3}
    # Equal remainders: the faster tier takes the odd token.
    assert served_hits({Tier.HBM: 3}, 0, Tier.HBM, {Tier.RACK: 5, Tier.DRAM: 5}) == {
        Tier.DRAM: 2, Tier.RACK: 1}
    # What the destination held stays its own tier's; only the rest was sent.
    assert served_hits({Tier.HBM: 5, Tier.DRAM: 10}, 5, Tier.HBM, {Tier.RACK: 1}) == {
        Tier.HBM: 5, Tier.RACK: 10}
    # Nothing sent (a recompute): the hits as the lookup found them.
    assert served_hits({Tier.DRAM: 10}, 0, Tier.HBM, {}) == {Tier.DRAM: 10}


@given(
    st.integers(0, 10**7),
    st.integers(0, 10**6),
    st.dictionaries(st.sampled_from(list(Tier)), st.integers(0, 10**12), min_size=1),
)
def test_served_tokens_add_up_exactly_and_each_tier_is_within_a_token_of_its_share(
        loaded, local, sent):
    out = served_hits({Tier.DRAM: loaded, Tier.HBM: local}, local, Tier.HBM, sent)
    assert sum(out.values()) == loaded + local
    total = sum(sent.values())
    if loaded and total:
        for tier in Tier:
            exact = Fraction(loaded * sent.get(tier, 0), total) + (local if tier is Tier.HBM
                                                                   else 0)
            assert abs(out.get(tier, 0) - exact) < 1
    assert out == served_hits({Tier.DRAM: loaded, Tier.HBM: local}, local, Tier.HBM, sent)


def test_a_load_striped_over_host_dram_and_the_rack_counts_hits_at_both_by_bytes_sent():
    s = store()
    a, _ = workers_on_two_nodes()
    hbm, host = Location(Tier.HBM, a.name), Location(Tier.DRAM, a.node)
    rack = Location(Tier.RACK, a.rack)
    write_and_offload(s, "s1", (*SYSTEM, 1), hbm, host, 0.0)
    chain = write_and_offload(s, "s2", (*SYSTEM, 2), hbm, host, 1.0)
    assert promote_hot(s, chain, rack, 2, 2.0) == 1
    assert set(s.holders(chain[0])) == {host, rack}  # the prompt: in DRAM and the rack

    plan = s.plan_fetch(SYSTEM, hbm, 3.0)
    assert plan.action is FetchAction.LOAD and plan.local_tokens == 0
    sent = {src.location.tier: src.kv_bytes for step in plan.steps
            if step.kind is StepKind.COPY and step.location == hbm for src in step.sources}
    assert set(sent) == {Tier.DRAM, Tier.RACK}
    hits = plan.hit_tokens
    assert hits[Tier.DRAM] > 0 and hits[Tier.RACK] > 0 and Tier.HBM not in hits
    assert sum(hits.values()) == plan.prefix_tokens == len(SYSTEM) * 64
    for tier in (Tier.DRAM, Tier.RACK):
        exact = Fraction(plan.prefix_tokens * sent[tier], sum(sent.values()))
        assert abs(hits[tier] - exact) < 1
    # The misses follow the served tiers: the lookups of a tier are the misses of the one
    # before, and every requested token is looked up in HBM.
    s.apply(plan)
    snap = s.snapshot()
    assert snap.hit_tokens[Tier.RACK] == hits[Tier.RACK]
    assert snap.lookup_tokens(Tier.HBM) == snap.requested_tokens
    for faster, slower in zip(Tier, list(Tier)[1:], strict=False):
        assert snap.miss_tokens[faster] == snap.lookup_tokens(slower)

    # Fetched again: now the worker's own HBM holds it, and nothing is sent.
    again = s.plan_fetch(SYSTEM, hbm, 4.0)
    assert again.action is FetchAction.HIT and again.hit_tokens == {Tier.HBM: len(SYSTEM) * 64}
