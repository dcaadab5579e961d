from workers.batching import plan_decode_admission, plan_fill_batch
from workers.cluster import BatchPolicySpec
from workers.request import Request

POLICY = BatchPolicySpec(max_batch_tokens=10_000, max_batch_sequences=3, target_batch=2)


def req(i, tokens, prefix=0, out=10):
    r = Request(i, f"s{i}", tokens, out)
    r.prefix_tokens = prefix
    return r


def test_fill_batch_takes_oldest_within_token_limit_and_chunks_the_last():
    waiting = [req(1, 4000), req(2, 5000), req(3, 2000)]
    chunks = plan_fill_batch(waiting, POLICY)
    assert [(c.request.call_id, c.tokens, c.last) for c in chunks] == [
        (1, 4000, True), (2, 5000, True), (3, 1000, False)]


def test_fill_batch_counts_new_tokens_not_cached_ones():
    waiting = [req(1, 100_000, prefix=99_000), req(2, 100_000, prefix=98_000), req(3, 500)]
    assert len(plan_fill_batch(waiting, POLICY)) == 3


def test_a_long_prompt_is_split_into_chunks_over_its_cached_prefix():
    long = req(1, 25_000, prefix=1_000)
    planned = {}
    steps = []
    while True:
        chunks = plan_fill_batch([long], POLICY, planned)
        if not chunks:
            break
        (c,) = chunks
        steps.append((c.tokens, c.cached_tokens, c.last))
        planned[1] = planned.get(1, 0) + c.tokens
    assert steps == [(10_000, 1_000, False), (10_000, 11_000, False), (4_000, 21_000, True)]


def test_a_chunk_fills_the_budget_and_the_next_request_waits():
    chunks = plan_fill_batch([req(1, 50_000), req(2, 10)], POLICY)
    assert [(c.request.call_id, c.tokens) for c in chunks] == [(1, 10_000)]
    later = plan_fill_batch([req(1, 50_000), req(2, 10)], POLICY, {1: 45_000})
    assert [(c.request.call_id, c.tokens) for c in later] == [(1, 5_000), (2, 10)]


def test_a_smaller_budget_leaves_room_for_decodes():
    chunks = plan_fill_batch([req(1, 50_000)], POLICY, budget_tokens=300)
    assert [c.tokens for c in chunks] == [300]
    assert plan_fill_batch([req(1, 50_000)], POLICY, budget_tokens=0) == []


def test_fill_batch_respects_sequence_cap():
    assert len(plan_fill_batch([req(i, 10) for i in range(10)], POLICY)) == 3


def test_decode_admission_fills_to_target_within_kv():
    ready = [req(i, 1000) for i in range(5)]

    def kv(r):
        return 100.0

    assert len(plan_decode_admission(0, 0, ready, 2, 1e9, kv)) == 2
    assert len(plan_decode_admission(1, 0, ready, 2, 1e9, kv)) == 1
    assert len(plan_decode_admission(0, 0, ready, 3, 1e9, kv)) == 3
    assert plan_decode_admission(0, 950, ready, 3, 1000, kv) == [ready[0]]
    assert plan_decode_admission(1, 950, ready, 3, 1000, kv) == []
