"""The router's choice (`choose_fill_worker`, one pass over the candidates) is the rule
as written in its module docstring, stated here as filters and a minimum: over any
candidates, prefix lengths and prefix nodes."""

from hypothesis import example, given, settings
from hypothesis import strategies as st

from costmodel.fill_phase import MIDFILL_MIN_PREFIX_TOKENS
from orchestrator.control.router import (
    BALANCE_ABS_TOKENS,
    BALANCE_REL,
    FillCandidate,
    choose_fill_worker,
)


def rule(prefix_tokens, candidates, prefix_nodes):
    open_ = [c for c in candidates if c.accepting]
    if not open_:
        return None
    want = "midfill" if prefix_tokens >= MIDFILL_MIN_PREFIX_TOKENS else "prefill"
    pool = ([c for c in open_ if c.phase == "mixed"] or [c for c in open_ if c.phase == want]
            or open_)
    # Out of balance with the shortest queue: no call for its cache (HBM or host memory).
    least = min(c.queued_tokens for c in pool)
    pool = [c for c in pool if c.queued_tokens - least <= BALANCE_ABS_TOKENS
            or c.queued_tokens <= BALANCE_REL * least]
    if any(c.resident_tokens for c in pool):
        return min(pool, key=lambda c: (-c.resident_tokens, c.node not in prefix_nodes,
                                        c.queued_tokens, c.name)).name
    return min(pool, key=lambda c: (c.node not in prefix_nodes, c.queued_tokens, c.name)).name


candidate = st.builds(
    FillCandidate, name=st.sampled_from([f"w{i}" for i in range(6)]),
    phase=st.sampled_from(["prefill", "midfill", "mixed"]), node=st.sampled_from(["n0", "n1"]),
    queued_tokens=st.sampled_from([0, 1, 4096, 40_000, 100_000]), accepting=st.booleans(),
    resident_tokens=st.sampled_from([0, 0, 0, 512, 8192]))


@settings(max_examples=400)
@given(st.sampled_from([0, 4095, 4096, 50_000]), st.lists(candidate, max_size=7),
       st.frozensets(st.sampled_from(["n0", "n1"])))
# Resident KV outweighs a shorter queue; a mixed worker takes any call; none accepting.
@example(0, [FillCandidate("a", "prefill", "n0", 1, True, 8192),
             FillCandidate("b", "prefill", "n0", 0, True)], frozenset())
@example(50_000, [FillCandidate("a", "midfill", "n1", 0, True),
                  FillCandidate("b", "mixed", "n0", 9, True)], frozenset({"n1"}))
@example(0, [FillCandidate("a", "prefill", "n0", 0, False)], frozenset())
# The node holding the prefix in host memory, out of balance: the shortest queue wins.
@example(0, [FillCandidate("a", "prefill", "n0", 100_000, True),
             FillCandidate("b", "prefill", "n1", 0, True)], frozenset({"n0"}))
def test_the_choice_is_the_rule(prefix_tokens, candidates, prefix_nodes):
    assert choose_fill_worker(prefix_tokens, candidates, prefix_nodes) == rule(
        prefix_tokens, candidates, prefix_nodes)
