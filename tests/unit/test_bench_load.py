"""The benchmark's load (orchestrator.bench.load): the public harnesses' random lengths,
a seed, K calls per user after the warm-up, everyone at 0 and no think time."""

import numpy as np
import pytest

from orchestrator.bench.load import BLOCK_TOKENS, BenchLoad, LoadError


def test_lengths_lie_in_the_range_and_reach_its_ends():
    load = BenchLoad(isl=1000, osl=300, range_ratio=0.8, calls_per_user=40, seed=5)
    inputs, outputs = load.lengths(25)
    assert inputs.shape == outputs.shape == (25, 41)
    # bench_serving: randint(max(int(I * R), 1), I + 1), both ends included.
    assert inputs.min() == 800 and inputs.max() == 1000
    assert outputs.min() == 240 and outputs.max() == 300
    # Uniform: the mean of 1,025 draws sits near the range's middle.
    assert abs(inputs.mean() - 900) < 5 and abs(outputs.mean() - 270) < 2


def test_a_ratio_of_one_is_fixed_lengths_and_a_tiny_one_starts_at_one_token():
    inputs, outputs = BenchLoad(isl=512, osl=64).lengths(3)
    assert set(inputs.ravel()) == {512} and set(outputs.ravel()) == {64}
    inputs, _ = BenchLoad(isl=10, osl=10, range_ratio=0.01, calls_per_user=200).lengths(5)
    assert inputs.min() == 1


def test_the_same_seed_gives_the_same_sessions_and_another_seed_others():
    def calls(seed):
        return [(c.session_id, c.input_tokens, c.output_tokens, c.block_ids)
                for s in BenchLoad(isl=2048, osl=256, range_ratio=0.5, seed=seed).sessions(6)
                for c in s.calls]

    assert calls(1) == calls(1)
    assert calls(1) != calls(2)


def test_each_user_sends_its_warmup_then_k_calls_from_zero_with_no_think_time():
    load = BenchLoad(isl=700, osl=50, range_ratio=0.9, calls_per_user=4)
    sessions = load.sessions(5)
    assert len(sessions) == 5 and load.calls == 1 + 4
    for s in sessions:
        assert s.start_s == 0.0 and len(s.calls) == 5
        assert all(c.think_s == 0.0 and c.cached_tokens == 0 for c in s.calls)
        assert all(len(c.block_ids) == c.input_tokens // BLOCK_TOKENS for c in s.calls)
    firsts = [c.block_ids[0] for s in sessions for c in s.calls]
    assert len(set(firsts)) == len(firsts)  # no call shares a prefix with another


@pytest.mark.parametrize("field, value, match", [
    ("range_ratio", 0.0, r"range_ratio: expected a number in \(0, 1\], got 0.0"),
    ("range_ratio", 1.5, r"range_ratio: expected a number in \(0, 1\], got 1.5"),
    ("isl", 0, "isl: expected an integer >= 1, got 0"),
    ("calls_per_user", 0, "calls_per_user: expected an integer >= 1"),
    ("warmup_calls", -1, "warmup_calls: expected an integer >= 0"),
])
def test_a_load_that_cannot_be_is_refused_naming_its_field(field, value, match):
    kwargs = {"isl": 100, "osl": 10, field: value}
    with pytest.raises(LoadError, match=match):
        BenchLoad(**kwargs)
    with pytest.raises(LoadError, match="concurrency"):
        BenchLoad(isl=100, osl=10).sessions(0)


def test_lengths_are_integers_numpy_draws():
    inputs, _ = BenchLoad(isl=100, osl=10, range_ratio=0.5).lengths(2)
    assert np.issubdtype(inputs.dtype, np.integer)
