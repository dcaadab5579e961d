"""Chunked prefill planning (workers.batching.plan_fill_batch) over random queues: within
the budget and sequence limit, oldest first, and every request's tokens exactly once."""

from hypothesis import given
from hypothesis import strategies as st

from workers.batching import fill_tokens, plan_fill_batch
from workers.cluster import BatchPolicySpec
from workers.request import Request

queues = st.lists(st.tuples(st.integers(1, 20_000), st.integers(0, 16_000)), min_size=1,
                  max_size=12)


@given(queues, st.integers(512, 20_000), st.integers(1, 8))
def test_steps_take_every_token_once_oldest_first_within_the_limits(rows, budget, sequences):
    reqs = []
    for i, (tokens, prefix) in enumerate(rows):
        r = Request(i, f"s{i}", tokens, 1)
        r.prefix_tokens = min(prefix, tokens)
        reqs.append(r)
    policy = BatchPolicySpec(max_batch_tokens=budget, max_batch_sequences=sequences,
                             target_batch=1)
    planned: dict[int, int] = {}
    waiting = list(reqs)
    finished: list[int] = []
    for _ in range(100_000):  # a bound, far above what the sizes need
        if not waiting:
            break
        chunks = plan_fill_batch(waiting, policy, planned)
        assert chunks, "a non-empty queue always makes progress"
        assert sum(c.tokens for c in chunks) <= budget and len(chunks) <= sequences
        # The oldest waiting requests, in order; only the last chunk may leave a remainder.
        assert [c.request for c in chunks] == waiting[:len(chunks)]
        assert all(c.last for c in chunks[:-1])
        for c in chunks:
            done = planned.get(c.request.call_id, 0)
            assert c.tokens >= 1 and c.cached_tokens == c.request.prefix_tokens + done
            planned[c.request.call_id] = done + c.tokens
            if c.last:
                finished.append(c.request.call_id)
                waiting.remove(c.request)
    assert finished == [r.call_id for r in reqs]
    assert all(planned[r.call_id] == fill_tokens(r) for r in reqs)
