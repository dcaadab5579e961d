"""The replay's progress line: sessions, calls, calls per wall second, simulated/wall."""

import io
import itertools
from types import SimpleNamespace

from rich.console import Console

from costmodel.model import load_model
from orchestrator.cli._replay_run import ReplayProgress, replay_progress
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock


class FakeWall:
    """Wall seconds that the test sets."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_the_line_shows_calls_and_both_rates_since_the_start():
    wall, shown = FakeWall(), []
    progress = ReplayProgress(lambda *line: shown.append(line), wall_clock=wall)
    progress.on_sessions(2, 10)
    wall.now_s += 4.0
    orch = SimpleNamespace(counters={"completed": 2000})
    progress.on_done(orch, None, 1200.0)
    assert shown[-1] == (2, 10, "2,000 calls, 500 calls/s, 300 sim s/wall s")


def test_redraws_at_most_every_tenth_of_a_wall_second():
    wall, shown = FakeWall(), []
    progress = ReplayProgress(lambda *line: shown.append(line), wall_clock=wall)
    orch = SimpleNamespace(counters={"completed": 0})
    for k in range(1, 101):  # 100 calls within 50 ms of wall time: one redraw
        orch.counters["completed"] = k
        wall.now_s += 0.0005
        progress.on_done(orch, None, float(k))
    assert len(shown) == 1
    wall.now_s += 0.1
    progress.on_skip(orch, 101.0, 400.0, 300)
    assert len(shown) == 2 and shown[-1][2].startswith("100 calls, ")


def test_the_bar_on_a_terminal_carries_the_line():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    with replay_progress("replay (buffered)", enabled=True, console=console) as progress:
        progress.on_sessions(3, 7)
        progress.on_done(SimpleNamespace(counters={"completed": 42}), None, 60.0)
    text = out.getvalue()
    assert "replay (buffered)" in text and "3/7" in text and "42 calls, " in text
    assert "calls/s" in text and "sim s/wall s" in text


def test_hidden_when_asked_or_when_stderr_is_not_a_terminal():
    with replay_progress("x", enabled=False) as progress:
        assert progress is None
    with replay_progress("x") as progress:  # pytest's captured stderr is no terminal
        assert progress is None


def test_as_a_listener_it_counts_every_completed_call():
    sessions = short_agent_sessions(2, 4, seed=1)
    control = ControlConfig(realloc_enabled=False)
    shown = []
    ticks = itertools.count()
    progress = ReplayProgress(lambda *line: shown.append(line), wall_clock=lambda: next(ticks))
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")), sessions,
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1,
                        on_progress=progress.on_sessions, listeners=[progress])
    result = VirtualClock().run(orch.run())
    assert progress.calls == len(result.requests) == 8
    assert shown[-1][:2] == (2, 2)
    assert progress.simulated_s > 0


def _mixed_sessions():
    """Three one-call sessions (run without a task each) among two agent sessions."""
    from tests.factories import single_call_sessions

    return [*single_call_sessions([0.0, 0.5, 1.0]), *short_agent_sessions(2, 3, seed=2)]


def test_one_call_sessions_are_counted_and_waited_for():
    control = ControlConfig(realloc_enabled=False)
    finished = []
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")), _mixed_sessions(),
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1,
                        on_progress=lambda done, total: finished.append((done, total)))
    result = VirtualClock().run(orch.run())
    assert len(result.requests) == 3 + 6 == result.counters["submitted"]
    assert result.sessions == 5
    # Each session's end told as it ends (the feeder tells the count so far once more when
    # the last session has started), the last of the five at the end.
    done = [d for d, _ in finished]
    assert done == sorted(done) and [d for d in dict.fromkeys(done) if d] == [1, 2, 3, 4, 5]
    assert finished[-1] == (5, 5)


def test_a_deadline_leaves_one_call_sessions_in_flight():
    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")), _mixed_sessions(),
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1,
                        deadline_s=3.0)
    result = VirtualClock().run(orch.run())
    c = result.counters
    # Two one-call sessions started and their calls still running at the deadline: the
    # run stops, with them reported in flight.
    assert orch.timed_out and c["completed"] == 0 and c["submitted"] == 2
    assert [p.future for p in orch._pending.values()] == [None, None]
