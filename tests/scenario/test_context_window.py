"""Calls beyond the model's context window, as an engine treats them: a prompt that fills
the window is refused, a generation that would pass it is cut to fit."""

import dataclasses

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock

MODEL = load_model("llama-3.1-70b")
WINDOW = MODEL.max_context_tokens  # 131,072


def resized(call, input_tokens, output_tokens):
    """The call with `input_tokens` of input (new blocks past its cached ones)."""
    blocks = input_tokens // call.block_size
    fresh = range(10**9, 10**9 + max(0, blocks - len(call.block_ids)))
    ids = (*call.block_ids, *fresh)[:blocks]
    return dataclasses.replace(call, input_tokens=input_tokens, output_tokens=output_tokens,
                               cached_tokens=min(call.cached_tokens, input_tokens),
                               new_tokens=input_tokens - min(call.cached_tokens, input_tokens),
                               block_ids=ids)


def run(sessions):
    control = ControlConfig()
    orch = Orchestrator(small_cluster().bind(MODEL), sessions,
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600), 1)
    result = VirtualClock().run(orch.run())
    return result, summarize(result, control.ttft_target_s, control.tpot_target_s)


def test_a_prompt_that_fills_the_window_is_refused_and_ends_its_session():
    sessions = short_agent_sessions(3, 4, seed=2)
    first = sessions[0]
    calls = list(first.calls)
    calls[1] = resized(calls[1], WINDOW + 5_000, 300)
    sessions[0] = dataclasses.replace(first, calls=tuple(calls))
    _, s = run(sessions)
    r = s["requests"]
    assert r["context_rejected"] == 1 and r["context_truncated"] == 0
    assert r["rejected"] == 1 and r["lost"] == 0 and r["in_flight"] == 0
    # the refused call ended its session: its last two calls were never issued
    assert r["submitted"] == sum(len(x.calls) for x in sessions) - 2


def test_an_output_that_would_pass_the_window_is_cut_to_fit():
    sessions = short_agent_sessions(3, 4, seed=2)
    first = sessions[0]
    calls = list(first.calls)
    calls[0] = resized(calls[0], WINDOW - 1_000, 4_000)
    sessions[0] = dataclasses.replace(first, calls=tuple(calls))
    result, s = run(sessions)
    r = s["requests"]
    assert r["context_truncated"] == 1 and r["context_rejected"] == 0 and r["rejected"] == 0
    longest = max(result.requests.column("input_tokens"))
    assert longest == WINDOW - 1_000
    cut = [out for inp, out in zip(result.requests.column("input_tokens"),
                                    result.requests.column("output_tokens"), strict=True)
           if inp == longest]
    assert cut == [1_000]


def test_calls_within_the_window_are_untouched():
    _, s = run(short_agent_sessions(3, 4, seed=2))
    assert s["requests"]["context_rejected"] == s["requests"]["context_truncated"] == 0
