"""The fill queue's running figures equal what a walk of the queue gives: on random
sequences of joins, leaves, prefix changes and clears, `queued_tokens` is the sum of
input less prefix over the queued calls and `has_repeats` says whether one is queued
twice, beside a plain list doing the same."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workers.fill_queue import FillQueue
from workers.request import Request


def _call(i: int, tokens: int) -> Request:
    return Request(call_id=i, session_id="s", input_tokens=tokens, output_tokens=1)


OPS = st.lists(st.tuples(st.sampled_from(["append", "appendleft", "popleft", "remove",
                                          "prefix", "clear", "extendleft"]),
                         st.integers(0, 5), st.integers(0, 5_000)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_running_figures_match_a_walk(ops) -> None:
    calls = [_call(i, 5_000 + 100 * i) for i in range(6)]
    queue, model = FillQueue(), []
    for op, i, tokens in ops:
        req = calls[i]
        if op == "append":
            queue.append(req)
            model.append(req)
        elif op == "appendleft":
            queue.appendleft(req)
            model.insert(0, req)
        elif op == "extendleft":
            queue.extendleft([req, calls[(i + 1) % 6]])
            model[:0] = [calls[(i + 1) % 6], req]
        elif op == "popleft" and model:
            assert queue.popleft() is model.pop(0)
        elif op == "remove" and req in model:
            queue.remove(req)
            model.remove(req)
        elif op == "prefix" and model.count(req) == 1:
            queue.set_prefix(req, min(tokens, req.input_tokens))
        elif op == "clear":
            queue.clear()
            model.clear()
        assert list(queue) == model
        assert len(queue) == len(model) and bool(queue) == bool(model)
        assert queue.queued_tokens == sum(r.input_tokens - r.prefix_tokens for r in model)
        assert queue.has_repeats == (len({id(r) for r in model}) != len(model))
