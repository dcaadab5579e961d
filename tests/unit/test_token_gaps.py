"""The client's inter-token gaps (workers.token_gaps): recorded per run of steps, read as
percentiles over tokens; a prefill chunk riding in a decode step shows as a spike."""

import asyncio

import numpy as np
import pytest

from costmodel.model import load_model
from tests.conftest import ROOT
from workers.clock import VirtualClock
from workers.cluster_toml import load_cluster
from workers.request import Request
from workers.runtime import ClusterRuntime
from workers.token_gaps import GapHistogram, TokenGaps


def test_a_run_counts_each_step_once_per_sequence():
    gaps = TokenGaps(keep=True)
    gaps.run(10.0, [10.5, 11.25, 12.0], 3, sequences=4)
    gaps.run(12.0, np.array([12.1, 12.2]), 1, sequences=2)  # interrupted after one step
    h = gaps.histogram()
    assert h.count == 3 * 4 + 2
    assert h.sums.sum() == pytest.approx(4 * (0.5 + 0.75 + 0.75) + 2 * 0.1)
    # The largest of 14 tokens: a gap of 0.75 s (8 of them); the smallest 0.1 s (2).
    assert h.percentile(100) == pytest.approx(0.75)
    assert h.percentile(0) == pytest.approx(0.1)
    assert h.percentile(50) == pytest.approx(0.75)


def test_percentiles_are_those_of_the_tokens_to_a_bucket():
    rng = np.random.default_rng(3)
    values = rng.lognormal(np.log(0.02), 0.8, size=5000)
    weights = rng.integers(1, 5, size=5000)
    h = GapHistogram()
    h.add(values, weights)
    tokens = np.repeat(values, weights)
    for q in (1, 50, 90, 99):
        want = float(np.percentile(tokens, q, method="inverted_cdf"))
        assert h.percentile(q) == pytest.approx(want, rel=1.5e-3)
    assert h.mean_s() == pytest.approx(float(tokens.mean()), rel=1e-12)


def test_folding_as_it_goes_gives_the_kept_records_histogram(monkeypatch):
    import workers.token_gaps as tg

    monkeypatch.setattr(tg, "FOLD_AT", 8)
    kept, folded = TokenGaps(keep=True), TokenGaps()
    t = 0.0
    for i in range(200):
        ends = [t + 0.01 * (1 + (i % 7)) * k for k in range(1, 4)]
        for g in (kept, folded):
            g.run(t, ends, 3, 1 + i % 5)
            g.tokens_at([ends[0]], [0.3], [1.0])
        t = ends[-1]
    a, b = kept.histogram(), folded.histogram()
    assert np.array_equal(a.tokens, b.tokens)
    assert np.allclose(a.sums, b.sums, rtol=1e-12)
    with pytest.raises(ValueError, match="keep=True"):
        folded.histogram(0.0, 1.0)


def test_a_window_keeps_the_tokens_streamed_in_it():
    gaps = TokenGaps(keep=True)
    gaps.run(0.0, [1.0, 2.0, 3.0, 4.0], 4, sequences=3)
    assert gaps.tokens(1.5, 3.0) == 6  # the steps ending at 2 and 3, 3 sequences each
    assert gaps.histogram(1.5, 3.0).count == 6
    assert gaps.tokens() == 12


def test_a_resumed_sequences_first_gap_spans_its_stall():
    gaps = TokenGaps(keep=True)
    # Three sequences run a step from 5.0 to 5.2; one of them last streamed at 3.0.
    gaps.run(5.0, [5.2], 1, sequences=3)
    gaps.resumed(5.2, 5.0, 3.0)
    h = gaps.histogram()
    assert h.count == 3 and h.sums.sum() == pytest.approx(0.2 * 2 + 2.2)
    assert h.percentile(100) == pytest.approx(2.2)
    assert h.percentile(50) == pytest.approx(0.2)


def test_a_multi_token_step_shares_its_gap_among_its_tokens():
    gaps = TokenGaps(keep=True)
    # Two steps of 0.1 s; sequence 0 gets 2 then 1 tokens, sequence 1 gets 1 then 3.
    gaps.mtp_run(1.0, np.array([1.1, 1.2]), np.array([[2, 1], [1, 3]]))
    h = gaps.histogram()
    assert h.count == 7 and h.sums.sum() == pytest.approx(0.4)
    # Tokens: 2 of 0.05, 1 of 0.1 (step 0); 1 of 0.1, 3 of 0.1/3 (step 1).
    assert h.percentile(0) == pytest.approx(0.1 / 3)
    assert h.percentile(100) == pytest.approx(0.1)


def test_a_prefill_chunk_in_a_mixed_step_is_a_spike_in_the_decoding_calls_gaps():
    """One HGX H100 aggregated (two mixed TP4 workers, 4,096 tokens a step): a call
    decoding alone, then an 8,192-token prompt arriving on its worker. Its chunks ride
    in the decoding call's steps: two steps carry ~4k tokens of prefill each."""
    llama = load_model("llama-3.1-70b")
    bound = load_cluster(str(ROOT / "examples" / "clusters" / "hgx-h100-llama70b.toml")
                         ).bind(llama)

    async def main():
        rt = ClusterRuntime(bound, 64, keep_token_gaps=True)
        rt.start()
        a = Request(1, "a", 1024, 400, tuple(range(1, 17)))
        b = Request(2, "b", 8192, 2, tuple(range(100, 228)))
        rt.submit_fill("mixed-0", a, 0.0)
        await asyncio.sleep(1.0)
        rt.submit_fill("mixed-0", b, 1.0)
        while len(rt.done) < 2:
            await asyncio.sleep(0.5)
        await rt.stop()
        return rt, a, b

    rt, a, b = VirtualClock().run(main())
    gaps = rt.token_gaps.histogram()
    # Every token after each call's first has a gap, adding up to first token to last.
    assert gaps.count == (a.output_tokens - 1) + (b.output_tokens - 1)
    assert gaps.sums.sum() == pytest.approx(
        a.done_s - a.first_token_s + b.done_s - b.first_token_s, rel=1e-9)
    pricer = rt.pricers["mixed"]
    decode_s = float(pricer.decode_step_times_s(1, [a.input_tokens + 100])[0])
    chunk_s = pricer.fill_step_s([4095], [0])[0]  # a 4k chunk alone, no decode beside
    assert gaps.percentile(50) == pytest.approx(decode_s, rel=0.05)
    assert gaps.percentile(100) >= chunk_s > 5 * decode_s
    # The spikes: the two steps that carried 4,095 prompt tokens each (the third chunk,
    # 2 tokens, costs about a decode step).
    spikes = gaps.tokens[gaps.sums / np.maximum(gaps.tokens, 1e-300) > 3 * decode_s].sum()
    assert spikes == 2
