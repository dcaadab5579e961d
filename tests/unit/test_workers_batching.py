from workers.batching import plan_decode_admission, plan_fill_batch
from workers.cluster import BatchPolicySpec
from workers.request import Request

POLICY = BatchPolicySpec(max_batch_tokens=10_000, max_batch_sequences=3, target_batch=2)


def req(i, tokens, prefix=0, out=10):
    r = Request(i, f"s{i}", tokens, out)
    r.prefix_tokens = prefix
    return r


def test_fill_batch_takes_oldest_within_token_limit():
    waiting = [req(1, 4000), req(2, 5000), req(3, 2000)]
    assert [r.call_id for r in plan_fill_batch(waiting, POLICY)] == [1, 2]


def test_fill_batch_counts_new_tokens_not_cached_ones():
    waiting = [req(1, 100_000, prefix=99_000), req(2, 100_000, prefix=98_000), req(3, 500)]
    assert len(plan_fill_batch(waiting, POLICY)) == 3


def test_oversized_request_runs_alone():
    assert [r.call_id for r in plan_fill_batch([req(1, 50_000), req(2, 10)], POLICY)] == [1]


def test_fill_batch_respects_sequence_cap():
    assert len(plan_fill_batch([req(i, 10) for i in range(10)], POLICY)) == 3


def test_decode_admission_fills_to_target_within_kv():
    ready = [req(i, 1000) for i in range(5)]

    def kv(r):
        return 100.0

    assert len(plan_decode_admission(0, 0, ready, POLICY, 1e9, kv)) == 2
    assert len(plan_decode_admission(1, 0, ready, POLICY, 1e9, kv)) == 1
    assert len(plan_decode_admission(0, 0, ready, POLICY, 1e9, kv, target_batch=3)) == 3
    assert plan_decode_admission(0, 950, ready, POLICY, 1000, kv, target_batch=3) == [ready[0]]
    assert plan_decode_admission(1, 950, ready, POLICY, 1000, kv, target_batch=3) == []
