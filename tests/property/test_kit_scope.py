"""Where `buffered` stops holding the overload properties, and why (docs/plugins.md,
"Scope").

`buffered` holds the oscillation and starvation bounds inside the decode-bound scope
(`strategies.overload_scenarios`) but for the start-up cases pinned below. Each case
here is a counterexample Hypothesis found (or a scenario built the same way), pinned:
the test asserts what happens there and what causes it, not that it passes. The
fill-bound and lull cases are single scenarios of the kit's other scopes
(`scopes.OverloadScope`); tests/property/test_kit_builtins.py has every built-in in
every scope.
"""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.control.config import ControlConfig
from orchestrator.kit import checks
from orchestrator.kit import strategies as kit_st
from orchestrator.kit.scenario import Scenario, run_scenario
from orchestrator.run.summary import window_mask
from tests.conftest import run_cli

CASES = Path(__file__).parent / "data" / "kit_scope"
MAX_INDEX, MAX_FRACTION = 0.25, 0.05  # the bounds the project's own tests hold buffered to


def starved_times(result) -> np.ndarray:
    """Window samples counted as starved (docs/metrics.md)."""
    s, w = result.series, window_mask(result)
    running, slots = s.array("decode_running"), s.array("decode_slots")
    starved = (running < 0.5 * slots) & (s.array("upstream_waiting") > 0) & w
    return s.array("time_s")[starved]


def overload_traffic(mean: int, seconds: float, seed: int, kind: str = "poisson", load=2.0,
                     burst: int = 3) -> tuple[float, ...]:
    """`seconds` of arrivals at `load` x the kit cluster's capacity for `mean` outputs."""
    capacity = kit_st.capacity_calls_per_s(2048, mean)
    return kit_st.arrival_times(kind, load * capacity, round(load * capacity * seconds),
                                np.random.default_rng(seed), burst=burst)


def assert_starves_before_decode_first_fills(result):
    """The starvation bound fails, and every starved sample precedes decode's first full
    batch (start-up)."""
    with pytest.raises(checks.StabilityViolation, match="decode starves while work waits"):
        checks.starvation_below(result, MAX_FRACTION)
    s = result.series
    full = s.array("time_s")[s.array("decode_running") >= s.array("decode_slots")]
    assert starved_times(result).max() < full.min()


def test_a_lag_beyond_5_s_starves_decode_at_start_up_only():
    """Lag 6.07 s: the first observation, hence the first admission, comes so late that
    decode is still ramping up when the measurement window opens (10% into the arrivals);
    every starved sample precedes decode's first full batch. The same traffic at 5 s,
    inside the scope, holds."""
    scenario = Scenario.load_file(CASES / "buffered_lag_6s_starves.json")
    assert scenario.observation_lag_s > kit_st.OVERLOAD_LAG_S[1]
    result = run_scenario(scenario)
    assert_starves_before_decode_first_fills(result)
    checks.oscillation_below(result, MAX_INDEX)
    inside = run_scenario(replace(scenario, observation_lag_s=kit_st.OVERLOAD_LAG_S[1]))
    checks.starvation_below(inside, MAX_FRACTION)


def test_a_lost_decode_worker_no_longer_reads_as_oscillation_while_it_drains():
    """A decode worker lost (a case Hypothesis found when occupancy counted every decode
    worker's sequences against the slots left: it read up to 2 while the lost worker
    drained, index 0.254). Occupancy is now over the serving slots: it stays at most 1,
    the draining sequences are counted apart, and the index is about the one without the
    loss; decode never starves."""
    scenario = Scenario.load_file(CASES / "buffered_decode_worker_lost.json")
    result = run_scenario(scenario)
    checks.oscillation_below(result, MAX_INDEX)
    occupancy = result.series.array("decode_occupancy")[window_mask(result)]
    assert occupancy.max() <= 1.0
    assert result.series.array("decode_draining").max() > 0
    checks.starvation_below(result, MAX_FRACTION)
    checks.oscillation_below(run_scenario(replace(scenario, lose_workers=())), MAX_INDEX)


def test_an_agent_call_longer_than_the_ready_buffer_covers_starves_decode_while_it_fills():
    """An agent session's cold 98,068-token prefill holds the kit's one prefill worker for
    ~15 s (19-34 s), longer than the ready buffer's 8 s of decode service: decode drains,
    and every starved sample (29-34 s, 0.098 of the window) falls inside that fill.
    Hypothesis found it (the kit's counterexample file) drawing `overload_scenarios` with
    agent calls up to 131,072 tokens, for a starvation failure whose starved samples all
    fall inside a fill longer than the limit. (The case found on the prices before issue
    33's recalibration, a 127k-token fill of ~25 s, then took 22 s and no longer starved:
    decode had a lull in the arrivals to drain through it.)"""
    scenario = Scenario.load_file(CASES / "buffered_long_cold_fill_starves.json")
    limit = kit_st.longest_cold_fill_tokens(ControlConfig().ready_buffer_s)
    assert scenario.agent_max_tokens > limit
    result = run_scenario(scenario)
    with pytest.raises(checks.StabilityViolation, match="decode starves while work waits"):
        checks.starvation_below(result, MAX_FRACTION)
    long = [r for r in result.requests if r.computed_tokens > limit]
    assert long
    starved = starved_times(result)
    assert len(starved)
    inside = np.zeros(len(starved), dtype=bool)
    for r in long:
        inside |= (starved >= r.fill_start_s) & (starved <= r.fill_end_s + 1.0)
    assert inside.all()


def test_fill_bound_overload_lands_fills_in_batches_that_decode_drains_within_a_period():
    """Outputs of 32 tokens: the kit's fill pool (6.6 calls/s) is the bottleneck, not
    decode (18.2). `buffered` admits a period's worth at once, the fills land together and
    decode empties them within the period: it alternates between all its slots and none
    (idle in 63% of the window's samples, full in 37%), and no filled call ever waits for
    it (the ready buffer stays empty). Both bounds fail: 1.291 and 0.296 (`retire` 1.849
    and 0.778). `local`, admitting on every arrival, fills more evenly (0.617 and 0.278,
    never full). At 64 tokens, the case pinned before issue 33's recalibration (0.81 and
    0.40 then), the fill pool is now 6.6 calls/s against decode's 8.9: decode is idle in
    only 22% of the samples (full in the rest; 0.534 and 0.204) and `local` holds both
    (0.115, 0.000)."""
    capacity = kit_st.capacity_calls_per_s(2048, 32)
    arrivals = overload_traffic(32, 60, 1)
    arrivals, _ = kit_st.without_lulls(arrivals, (32,) * len(arrivals), 32, capacity)
    result = run_scenario(Scenario(arrivals_s=arrivals, output_tokens=32))
    with pytest.raises(checks.StabilityViolation):
        checks.oscillation_below(result, MAX_INDEX)
    with pytest.raises(checks.StabilityViolation):
        checks.starvation_below(result, MAX_FRACTION)
    w = window_mask(result)
    running = result.series.array("decode_running")[w]
    slots = result.series.array("decode_slots")[w]
    assert np.mean(running == 0) > 0.25 and np.mean(running == slots) > 0.25
    assert result.series.array("ready_depth")[w].max() == 0



def test_a_lull_in_the_traffic_reads_as_oscillation_and_the_start_queue_removes_it():
    """Bursts of 6 at 1.5x capacity, 60 calls of 1,024 tokens: the realised arrivals fall
    behind decode for a while, decode idles with no work anywhere (nothing queued nor
    admitted), and the index counts the dip. With `without_lulls`' queue at the start (11
    calls here) the same traffic holds."""
    capacity = kit_st.capacity_calls_per_s(2048, 1024)
    arrivals = overload_traffic(1024, 60 / (1.5 * capacity), 1, "bursts", 1.5, burst=6)
    result = run_scenario(Scenario(arrivals_s=arrivals, output_tokens=1024))
    with pytest.raises(checks.StabilityViolation, match="decode occupancy oscillates"):
        checks.oscillation_below(result, MAX_INDEX)
    s, w = result.series, window_mask(result)
    idle = ((s.array("decode_running") < s.array("decode_slots")) & (s.array("backlog") == 0)
            & (s.array("admission_queue") == 0) & w)
    assert idle.sum() >= 5
    padded, _ = kit_st.without_lulls(arrivals, (1024,) * len(arrivals), 1024, capacity)
    assert len(padded) - len(arrivals) == 11
    checks.oscillation_below(run_scenario(Scenario(arrivals_s=padded, output_tokens=1024)),
                             MAX_INDEX)


def test_an_agent_cold_fill_before_the_ready_buffer_exists_starves_decode():
    """An agent session whose first call (63,851 tokens, within the cold-fill limit of
    64,512) comes with the first arrivals holds the prefill worker ~8 s (2.0-9.9 s) before
    any ready buffer exists: decode starves at start-up (7-11 s, 0.081 of the window).
    Joining after the first quarter of the arrivals, as the strategy has agents do, the
    same session leaves decode fed (0.000). (The session pinned before issue 33's
    recalibration, agent seed 33, opens with 54,111 tokens, now filled in ~6 s: 0.032,
    within the bound.)"""
    arrivals = overload_traffic(256, 75, 2)
    capacity = kit_st.capacity_calls_per_s(2048, 256)
    arrivals, _ = kit_st.without_lulls(arrivals, (256,) * len(arrivals), 256, capacity)
    limit = kit_st.longest_cold_fill_tokens(ControlConfig().ready_buffer_s)
    early = Scenario(arrivals_s=arrivals, output_tokens=256, agent_sessions=1, agent_calls=2,
                     agent_seed=362, agent_starts_s=(arrivals[0],), agent_max_tokens=limit)
    first = next(s for s in early.sessions() if s.source == "synth").calls[0]
    assert first.input_tokens == 63_851
    with pytest.raises(checks.StabilityViolation, match="decode starves while work waits"):
        checks.starvation_below(run_scenario(early), MAX_FRACTION)
    late = replace(early, agent_starts_s=(arrivals[0] + 0.25 * (arrivals[-1] - arrivals[0]),))
    checks.starvation_below(run_scenario(late), MAX_FRACTION)

def test_without_lulls_keeps_decode_in_work_in_the_fluid_model():
    rng = np.random.default_rng(4)
    arrivals = kit_st.arrival_times("bursts", 1.0, 60, rng, burst=6)
    outputs = tuple(int(x) for x in rng.integers(50, 500, 60))
    padded, lengths = kit_st.without_lulls(arrivals, outputs, 256, 1.0)
    extra = len(padded) - len(arrivals)
    assert extra > 0 and padded[extra:] == arrivals and lengths[extra:] == outputs
    assert padded[:extra] == (arrivals[0],) * extra and lengths[:extra] == (256,) * extra
    work = np.cumsum(lengths) / 256 / 1.0
    assert np.all(np.asarray(padded[1:]) - padded[0] <= work[:-1] + 1e-9)
    # Traffic that already keeps decode busy gets nothing added.
    assert kit_st.without_lulls((0.0, 0.1, 0.2), (256, 256, 256), 256, 1.0)[0] == (
        0.0, 0.1, 0.2)


@settings(max_examples=10)
@given(st.data())
def test_overload_scenarios_stay_inside_their_stated_scope(data):
    scenario = data.draw(kit_st.overload_scenarios("buffered"))
    assert kit_st.OVERLOAD_LAG_S[0] <= scenario.observation_lag_s <= kit_st.OVERLOAD_LAG_S[1]
    assert 0.7 <= scenario.predictor_error <= 1.3
    assert scenario.output_tokens in kit_st.OVERLOAD_MEAN_OUTPUTS
    assert len(scenario.output_tokens_each) == len(scenario.arrivals_s)
    assert scenario.agent_sessions <= kit_st.OVERLOAD_MAX_AGENTS
    limit = kit_st.longest_cold_fill_tokens(ControlConfig().ready_buffer_s)
    arrivals = scenario.arrivals_s
    for session in scenario.sessions():
        if session.source == "synth":
            assert session.start_s >= arrivals[0] + 0.25 * (arrivals[-1] - arrivals[0])
            assert all(c.input_tokens + c.output_tokens <= limit for c in session.calls)


def test_the_cold_fill_limit_is_the_ready_buffers_seconds_on_the_prefill_pool():
    limit = kit_st.longest_cold_fill_tokens(8.0)
    assert limit == 64_512  # the figure docs/plugins.md states (56,320 before issue 33)
    assert kit_st.longest_cold_fill_tokens(4.0) < limit < kit_st.longest_cold_fill_tokens(16.0)



def test_a_pinned_case_replays_from_the_command_line(capsys):
    code, out, _ = run_cli(["replay", "--from-counterexample",
                            str(CASES / "buffered_long_cold_fill_starves.json"), "--json"],
                           capsys)
    assert code == 0
    assert json.loads(out)["control"]["decode_starvation_fraction"] > MAX_FRACTION


def test_a_counterexample_with_a_bad_predictor_error_is_one_line(tmp_path, capsys):
    data = json.loads((CASES / "buffered_decode_worker_lost.json").read_text())
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**data, "predictor_error": 0}))
    code, out, err = run_cli(["replay", "--from-counterexample", str(path)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "predictor error" in err and "bad.json" in err


def test_inside_the_scope_a_5_s_lag_with_bursts_starves_decode_at_start_up():
    """A SECOND KNOWN FAILURE INSIDE THE SCOPE, the same mechanism: 100 calls of 512
    tokens in bursts of 4 at twice capacity, a 5 s observation lag. The first admission
    waits for the first observation (5 s); buffered then admits ~2 a period, so decode runs
    0 and 2 of its 8 slots at 5 and 6 s while calls wait: 2 of 35 window samples (0.057).
    Hypothesis drew it while a test's examples still depended on the project modules
    imported before it (tests/conftest.py now keeps that pool empty)."""
    scenario = Scenario.load_file(CASES / "buffered_startup_lag_5s_bursts_starves.json")
    assert kit_st.OVERLOAD_LAG_S[0] <= scenario.observation_lag_s <= kit_st.OVERLOAD_LAG_S[1]
    result = run_scenario(scenario)
    assert_starves_before_decode_first_fills(result)
    assert list(starved_times(result)) == [5.0, 6.0]


def test_inside_the_scope_a_5_s_lag_with_long_outputs_starves_decode_at_start_up():
    """A THIRD KNOWN FAILURE INSIDE THE SCOPE, the same mechanism, and the one the 200
    derandomised examples of the starvation property draw and shrink to this
    (tests/property/test_orchestrator_stability.py's slow test, an xfail for it; it drew
    the same case, 0.056, before issue 33's recalibration too): 50 calls in bursts of 2,
    log-normal outputs about 1,024 tokens, a 5 s lag. No admission before the first
    observation (5 s), so decode runs 0 and 2 of its 8 slots at 5 and 6 s while calls
    wait: 2 of 37 window samples (0.054). At a 4 s lag, 1 sample (0.027)."""
    scenario = Scenario.load_file(CASES / "buffered_startup_lag_5s_long_outputs_starves.json")
    assert kit_st.OVERLOAD_LAG_S[0] <= scenario.observation_lag_s <= kit_st.OVERLOAD_LAG_S[1]
    result = run_scenario(scenario)
    assert_starves_before_decode_first_fills(result)
    assert list(starved_times(result)) == [5.0, 6.0]
    checks.starvation_below(run_scenario(replace(scenario, observation_lag_s=4.0)),
                            MAX_FRACTION)


def test_inside_the_scope_a_3_s_lag_with_short_outputs_starves_decode_at_start_up():
    """A KNOWN FAILURE INSIDE THE SCOPE, kept so that it stays visible: a burst of 270
    calls with log-normal outputs (some under 100 tokens) and a 3 s observation lag.
    The 200 derandomised examples of the starvation property do not draw it; Hypothesis
    found it when replaying another property's saved examples. As in the 6 s case,
    every starved sample (7-9 s, 0.057) comes before decode's first full batch (12 s): the
    measurement window opens while decode is still ramping up. So the property's scope
    claim is false for start-up at lags of a few seconds; the ramp is not fixed here."""
    scenario = Scenario.load_file(CASES / "buffered_startup_lag_3s_starves.json")
    assert kit_st.OVERLOAD_LAG_S[0] <= scenario.observation_lag_s <= kit_st.OVERLOAD_LAG_S[1]
    result = run_scenario(scenario)
    assert_starves_before_decode_first_fills(result)


@pytest.mark.parametrize(("edit", "message"), [
    ({"seed": -1}, "seed: expected an integer >= 0, got -1"),
    ({"think_scale": "x"}, "think_scale: expected a number >= 0, got 'x'"),
    ({"cluster": 5}, "cluster: expected a str, got 5"),
    ({"arrivals_s": [1.0, float("nan")]}, "arrivals_s: expected a number >= 0, got nan"),
])
def test_a_hand_edited_counterexample_field_of_the_wrong_kind_is_one_line(
        tmp_path, capsys, edit, message):
    """Each used to end in a traceback (numpy's seed check, the cluster loader's
    str.endswith, the load options' ValueError)."""
    data = json.loads((CASES / "buffered_decode_worker_lost.json").read_text())
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**data, **edit}))
    code, out, err = run_cli(["replay", "--from-counterexample", str(path)], capsys)
    assert code == 2 and out == ""
    assert err == f"tokenfactory replay: error: {path}: not a counterexample file: {message}\n"


@pytest.mark.parametrize("text", ['"x"', "5", "[1]"])
def test_a_counterexample_that_is_not_an_object_is_one_line(tmp_path, capsys, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    code, out, err = run_cli(["replay", "--from-counterexample", str(path)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "not a tokenfactory counterexample" in err
