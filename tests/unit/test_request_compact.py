"""A completed call keeps what the summary reads and drops its block ids."""

import pytest

from workers.request import LatencyPart, Request


def test_compact_drops_the_payload_of_a_done_call_and_keeps_its_figures():
    req = Request(7, "s", input_tokens=640, output_tokens=5, block_ids=tuple(range(10)),
                  writeback_block_ids=tuple(range(12)), arrival_s=1.0)
    req.kv_chain = ("blob",)
    req.enter(LatencyPart.DECODE, 2.0)
    req.first_token_s = 2.0
    req.generated = 5
    req.finish(3.0)
    req.compact()
    assert req.block_ids == req.writeback_block_ids == req.kv_chain == ()
    # First token at 2.0, last at 3.0, four tokens after the first: 0.25 s each, as the
    # client sees them and as decode spent them (no stall between).
    assert req.ttft_s == 1.0 and req.tpot_s == pytest.approx(0.25)
    assert req.decode_s_per_token == pytest.approx(0.25)
    assert req.latency_breakdown_s["decode"] == 1.0 and req.input_tokens == 640


def test_compacting_a_call_in_flight_is_misuse():
    with pytest.raises(RuntimeError, match="call 3 .* QUEUED"):
        Request(3, "s", 64, 1, block_ids=(1,)).compact()
