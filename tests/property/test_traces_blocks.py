"""The readers' fast prefix tracking against the definition, on random sessions."""

from hypothesis import given
from hypothesis import strategies as st

from traces._blocks import LOCAL_BITS, SessionBlocks, common_prefix_len

ids = st.lists(st.integers(0, 12), max_size=30)


@given(
    st.lists(st.tuples(st.sampled_from(["main", "agent_1"]), ids), max_size=12), st.integers(1, 5)
)
def test_cached_blocks_are_the_leading_run_already_computed(calls, namespace):
    blocks = SessionBlocks(namespace)
    computed: set[int] = set()
    for agent, local in calls:
        expected = 0
        while expected < len(local) and local[expected] in computed:
            expected += 1
        computed.update(local)
        cached, global_ids = blocks.add(agent, tuple(local))
        assert cached == expected
        assert global_ids == tuple((namespace << LOCAL_BITS) + x for x in local)


@given(ids, ids)
def test_common_prefix_len(a, b):
    n = common_prefix_len(a, b)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]
