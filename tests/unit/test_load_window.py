"""Load and goodput that mean what they say (issue 35, items 1-3): a trace that runs out
before the asked-for load is said so, with the sessions started and the rate achieved;
goodput is reported inside the load window beside the whole-run figure; on a decode
almost idle the oscillation index and measured period are null, with the reason."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orchestrator.run.load_window import asked_sessions, shortfall, window_bounds_s
from orchestrator.run.settings import RunSettings, prepare, run_replay
from orchestrator.run.summary import IDLE_OCCUPANCY, oscillation_null_reason
from tests.conftest import run_cli
from traces import sample_path
from traces.replay import LoadOptions

SAMPLE_SESSIONS = len(list(sample_path().glob("*.json.gz")))


def test_asked_sessions_come_from_max_sessions_or_rate_times_duration():
    assert asked_sessions(LoadOptions()) is None
    assert asked_sessions(LoadOptions(sessions_per_hour=160)) is None  # no window: no count
    assert asked_sessions(LoadOptions(sessions_per_hour=160, duration_s=3600)) == 160
    assert asked_sessions(LoadOptions(max_sessions=30)) == 30
    assert asked_sessions(LoadOptions(sessions_per_hour=160, duration_s=3600,
                                      max_sessions=50)) == 50


def test_a_shortfall_names_the_figures_and_the_repeat_that_suffices():
    load = LoadOptions(sessions_per_hour=160, duration_s=3600)
    short = shortfall(load, 113)
    assert (short.asked, short.available, short.repeat_needed) == (160, 113, 2)
    note = short.note(load)
    assert note.startswith("warning: the trace runs out before the load asked for: ")
    assert "--sessions-per-hour 160 for --duration 3600 s asks for about 160 sessions" in note
    assert "the trace has 113" in note and "--repeat 2 replays it 2 times over (226" in note
    b300 = LoadOptions(sessions_per_hour=300, duration_s=3600, repeat=2)
    assert shortfall(b300, 20).repeat_needed == 15  # the README's b300 example on 20
    assert "the trace has 20, 40 with --repeat 2" in shortfall(b300, 20).note(b300)
    assert shortfall(LoadOptions(sessions_per_hour=160, duration_s=3600, repeat=2), 113) is None
    assert shortfall(LoadOptions(max_sessions=18), 18) is None


def test_replay_says_when_the_trace_runs_out_and_reports_the_load_it_got(capsys):
    argv = ["replay", "--sessions-per-hour", "3600", "--duration", "30", "--think-scale",
            "0.01", "--no-progress"]
    code, out, err = run_cli([*argv, "--json"], capsys)
    assert code == 0
    [warning] = [line for line in err.splitlines() if "runs out" in line]
    assert f"asks for about 30 sessions, the trace has {SAMPLE_SESSIONS}" in warning
    assert "--repeat 2 replays it 2 times over" in warning
    load = json.loads(out)["load"]
    assert load["sessions_started"] == SAMPLE_SESSIONS == load["sessions_available"]
    assert load["sessions_asked"] == 30 and load["trace_ran_out"] is True
    assert load["sessions_per_hour_asked"] == 3600
    assert load["sessions_per_hour_achieved"] == pytest.approx(SAMPLE_SESSIONS / 30 * 3600)
    code, out, err = run_cli(argv, capsys)  # the table says so too
    [row] = [line for line in out.splitlines() if "sessions started / asked for" in line]
    assert f"{SAMPLE_SESSIONS} / 30" in row
    assert err.count("runs out") == 1
    code, _, err = run_cli([*argv, "--repeat", "2", "--json"], capsys)
    assert code == 0 and "runs out" not in err


def test_goodput_is_reported_in_the_load_window_and_over_the_whole_run():
    """At recorded think times the drain after the last start lasts simulated hours: the
    whole-run average is far below the rate while sessions start."""
    settings = RunSettings(load=LoadOptions(max_sessions=4), seed=3)
    result, summary = run_replay(prepare([sample_path()], "auto", settings), settings)
    lo, hi = window_bounds_s(result)
    good = settings.control
    met = [r for r in result.requests if r.done_s is not None and lo <= r.done_s <= hi
           and r.ttft_s is not None and r.ttft_s <= good.ttft_target_s
           and (r.tpot_s is None or r.tpot_s <= good.tpot_target_s)]
    window = summary["goodput"]["window"]
    assert window["output_tokens_per_s"] == sum(r.output_tokens for r in met) / (hi - lo)
    assert (window["start_s"], window["end_s"]) == (lo, hi) == (
        summary["load"]["window_s"]["start"], summary["load"]["window_s"]["end"])
    assert window["output_tokens_per_s"] <= summary["throughput"]["window"][
        "output_tokens_per_s"]
    whole = summary["goodput"]["output_tokens_per_s"]
    assert result.simulated_s > 10 * hi and window["output_tokens_per_s"] > 3 * whole


def test_an_index_on_an_idle_decode_is_null_with_the_reason():
    assert oscillation_null_reason(np.array([0.5, 0.6, 0.4])) is None
    assert "1 sample" in oscillation_null_reason(np.array([0.5]))
    idle = oscillation_null_reason(np.full(100, IDLE_OCCUPANCY / 2))
    assert idle.startswith("decode almost idle: mean occupancy 0.025") and "0.05" in idle


def test_the_idle_sample_run_reports_no_oscillation_figure(capsys):
    argv = ["replay", "--max-sessions", "2", "--think-scale", "0.01", "--no-progress"]
    code, out, _ = run_cli([*argv, "--json"], capsys)
    control = json.loads(out)["control"]
    assert code == 0 and control["decode_occupancy_mean"] < IDLE_OCCUPANCY
    assert control["oscillation_index"] is None and control["oscillation_period_s"] is None
    assert control["ringing_period_s"]["measured"] is None
    assert control["oscillation_null_reason"].startswith("decode almost idle")
    code, out, _ = run_cli(argv, capsys)
    [row] = [line for line in out.splitlines() if line.startswith("│ oscillation index")]
    assert row.split("│")[2].strip() == "-"
    assert "note: buffered: oscillation index and measured ringing period not reported: " \
           "decode almost idle" in out
