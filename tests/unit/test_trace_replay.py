"""Replay semantics: load options and session start times."""

import argparse
import itertools
import math

import numpy as np
import pytest

from orchestrator.cli._common import Parser
from orchestrator.cli._load import add_load_options, load_options_from_args
from traces.model import Call, Session
from traces.replay import DEFAULT_AGENT_SESSIONS_PER_HOUR, LoadOptions, session_starts


def session(name, start_s=None, think_s=5.0):
    call = Call(name, 0, 64, 0, 64, 1, 0.0, False, False, 64, (1,), arrival_s=start_s)
    second = Call(
        name,
        1,
        64,
        64,
        0,
        1,
        think_s,
        False,
        False,
        64,
        (1,),
        arrival_s=None if start_s is None else start_s + think_s,
    )
    return Session(name, "test", start_s, (call, second))


def starts(sessions, load, seed=0):
    return [
        (round(t, 9), s.session_id)
        for t, s in session_starts(sessions, load, np.random.default_rng(seed))
    ]


def test_poisson_starts_are_seeded_increasing_and_at_the_asked_rate():
    many = [session(f"s{i}") for i in range(4000)]
    a = starts(many, LoadOptions(sessions_per_hour=360))
    assert a == starts(many, LoadOptions(sessions_per_hour=360))
    assert a != starts(many, LoadOptions(sessions_per_hour=360), seed=1)
    times = [t for t, _ in a]
    assert all(x < y for x, y in itertools.pairwise(times))
    assert np.mean(np.diff(times)) == pytest.approx(10.0, rel=0.05)  # 3600 s / 360


def test_agent_sessions_without_a_rate_use_the_default():
    times = [t for t, _ in starts([session(f"s{i}") for i in range(3000)], LoadOptions())]
    assert np.mean(np.diff(times)) == pytest.approx(
        3600 / DEFAULT_AGENT_SESSIONS_PER_HOUR, rel=0.06
    )


def test_open_loop_sessions_keep_their_own_times_unless_a_rate_is_given():
    timed = [session("a", 0.0), session("b", 2.5), session("c", 7.0)]
    assert starts(timed, LoadOptions()) == [(0.0, "a"), (2.5, "b"), (7.0, "c")]
    paced = starts(timed, LoadOptions(sessions_per_hour=1))
    assert [name for _, name in paced] == ["a", "b", "c"]
    assert [t for t, _ in paced] != [0.0, 2.5, 7.0]


def test_max_sessions_and_duration_stop_admission():
    many = [session(f"s{i}") for i in range(100)]
    assert len(starts(many, LoadOptions(max_sessions=7))) == 7
    within = starts(many, LoadOptions(sessions_per_hour=3600, duration_s=20))
    assert within and all(t < 20 for t, _ in within) and len(within) < 100
    timed = [session("a", 0.0), session("b", 30.0), session("c", 5.0)]
    assert starts(timed, LoadOptions(duration_s=10)) == [(0.0, "a"), (5.0, "c")]


def test_think_scale_multiplies_gaps():
    call = session("a").calls[1]
    assert LoadOptions(think_scale=0.5).think_s(call) == 2.5
    assert LoadOptions(think_scale=0).think_s(call) == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sessions_per_hour": 0},
        {"sessions_per_hour": math.inf},
        {"max_sessions": 0},
        {"max_sessions": 2.5},
        {"think_scale": -1},
        {"think_scale": math.nan},
        {"duration_s": -5},
    ],
)
def test_bad_load_options_are_refused_naming_the_field(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        LoadOptions(**kwargs)


def test_cli_load_options_parse_to_load_options():
    parser = Parser(prog="x")
    add_load_options(parser)
    args = parser.parse_args(
        [
            "--sessions-per-hour",
            "30",
            "--max-sessions",
            "5",
            "--think-scale",
            "0.5",
            "--duration",
            "600",
        ]
    )
    assert load_options_from_args(args) == LoadOptions(30.0, 5, 0.5, 600.0)
    assert load_options_from_args(parser.parse_args([])) == LoadOptions()


@pytest.mark.parametrize(
    "argv",
    [
        ["--think-scale", "-1"],
        ["--max-sessions", "0"],
        ["--sessions-per-hour", "nan"],
        ["--duration", "x"],
    ],
)
def test_cli_load_options_refuse_bad_values(argv, capsys):
    parser = Parser(prog="x")
    add_load_options(parser)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(argv)
    assert info.value.code == 2 and argv[0] in capsys.readouterr().err


def test_help_texts_are_shared():
    parser = argparse.ArgumentParser()
    add_load_options(parser)
    text = parser.format_help()
    for option in ("--sessions-per-hour", "--max-sessions", "--think-scale", "--duration"):
        assert option in text
