"""Skipping idle spans gives the run that sampling every period gives.

Agent sessions at their real think times leave the cluster idle most of the
time; the fast loop then stops sampling until the next arrival and brings the
policy up to date on waking: the run's numbers must be those of sampling every
period, for `retire` and `buffered` (closed forms) and for a policy without
`skip_idle` (ticked through).
"""

import math
from dataclasses import replace

import pytest

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation, ObservationLag
from orchestrator.control.policies import make_policy
from orchestrator.run.fast_loop import FastLoop
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock

LLAMA = load_model("llama-3.1-70b")


def _flat(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


class _NoSkip:
    """`buffered` without its closed form: the shell ticks it through idle spans."""

    def __init__(self, inner):
        self._inner, self.name = inner, inner.name

    def decide(self, obs, now_s):
        return self._inner.decide(obs, now_s)

    def loop_model(self, config):
        return self._inner.loop_model(config)


def _run(controller, skip_idle, wrap=False):
    control = ControlConfig(realloc_enabled=True)
    policy = make_policy(controller, control, 4)
    orch = Orchestrator(small_cluster().bind(LLAMA), short_agent_sessions(5, 6, seed=2),
                        _NoSkip(policy) if wrap else policy, control,
                        LoadOptions(sessions_per_hour=120), 1,
                        skip_idle=skip_idle)
    result = VirtualClock().run(orch.run())
    return result, dict(_flat(summarize(result, control.ttft_target_s, control.tpot_target_s)))


def _skipped(result):
    """Samples in skipped idle spans."""
    return sum(t for t in result.series.ticks if t > 1)


@pytest.fixture(scope="module")
def ticked():
    return {c: _run(c, skip_idle=False) for c in ("retire", "buffered")}


@pytest.mark.parametrize("controller, wrap", [("retire", False), ("buffered", False),
                                              ("buffered", True)])
def test_skipping_gives_the_numbers_of_sampling_every_period(ticked, controller, wrap):
    result, summary = _run(controller, skip_idle=True, wrap=wrap)
    t_result, t_summary = ticked[controller]
    assert _skipped(result) > len(result.series) // 4
    assert len(result.series) == len(t_result.series)
    for key, value in t_summary.items():
        if key.startswith("sim."):
            continue  # wall time, and events (same) are not the run's results
        assert summary[key] == value or (isinstance(value, float) and math.isnan(value)
                                         and math.isnan(summary[key])), key
    for name in ("decode_occupancy", "admission_queue", "held", "in_flight", "admitted",
                 "time_s"):
        assert (result.series.array(name) == t_result.series.array(name)).all(), name
    # One decision a record but the last (a span caught up as one period once appended
    # its decision twice, shifting `admit` and `reason` against the records after it).
    s = result.series
    assert len(s.admit) == len(s.reason) == s.records - 1


def test_buffered_closed_form_over_a_long_span_matches_deciding_every_period():
    control = ControlConfig()
    closed, ticked = (make_policy("buffered", control, 4) for _ in range(2))
    busy = _obs(0.0, queue=0)
    for policy in (closed, ticked):
        policy.decide(replace(busy, fill_queue=30), 0.0)  # a backlog to decay from
    first = 1.0
    decision = closed.skip_idle(replace(busy, time_s=first), first, 20_000)
    for k in range(20_000):
        last = ticked.decide(replace(busy, time_s=first + k), first + k)
    assert (decision.admit, decision.reason) == (last.admit, last.reason)
    assert closed._credit == pytest.approx(ticked._credit, abs=1e-9)
    assert closed._ewma == pytest.approx(ticked._ewma, abs=1e-12)
    assert closed._last_time_s == ticked._last_time_s


def _obs(t, queue=0):
    return Observation(time_s=t, admission_queue=queue, admission_queue_interactive=0,
                       fill_queue=0, fill_running=0, ready_depth=0, decode_loading=0,
                       decode_running=0, decode_slots=8, admitted_total=3, retired_total=3,
                       completed_total=3, rejected_total=0, predicted_decode_calls_per_s=1.0,
                       predicted_fill_latency_s=0.1)


def test_a_held_observation_is_seen_restamped_on_the_sampling_grid_until_the_next():
    lag = ObservationLag(2.0)
    for t in (0.0, 1.0, 2.0):
        lag.record(_obs(t))
    lag.hold(1.0)
    assert lag.seen_at(3.0).time_s == 1.0  # still recorded ones
    assert lag.seen_at(4.0).time_s == 2.0
    seen = lag.seen_at(7.5)
    assert seen.time_s == 5.0 and seen.admission_queue == 0 and seen.decode_slots == 8
    lag.record(_obs(9.0, queue=4))
    assert lag.seen_at(10.0).time_s == 8.0  # held samples before the new record
    assert lag.seen_at(11.0).admission_queue == 4
    assert lag.seen_at(15.0).time_s == 9.0  # the hold ended at the new record


class _Timeline:
    """Every listener call, in order, with the simulated time it speaks of."""

    def __init__(self):
        self.calls = []

    def on_sample(self, orch, obs, now_s):
        self.calls.append(("sample", now_s, obs.time_s, obs.admission_queue))

    def on_decision(self, orch, decision, now_s):
        self.calls.append(("decision", now_s))

    def on_submit(self, orch, req, now_s):
        self.calls.append(("submit", now_s))

    def on_done(self, orch, req, now_s):
        self.calls.append(("done", now_s))

    def on_reallocation(self, orch, decision, now_s):
        self.calls.append(("realloc", now_s))


def _timeline(skip_idle, monkeypatch):
    """The run, its listener's calls, and the samples the fast loop took awake."""
    taken = []
    sample = FastLoop.sample

    def counted(self, now_s, loop=None):
        taken.append(now_s)
        sample(self, now_s, loop)

    monkeypatch.setattr(FastLoop, "sample", counted)
    control = ControlConfig(realloc_enabled=True)
    timeline = _Timeline()
    orch = Orchestrator(small_cluster().bind(LLAMA), short_agent_sessions(5, 6, seed=2),
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=120), 1, listeners=[timeline],
                        skip_idle=skip_idle)
    result = VirtualClock().run(orch.run())
    monkeypatch.setattr(FastLoop, "sample", sample)
    return taken, result, timeline.calls


def test_the_lead_of_an_idle_span_is_taken_without_waking_and_in_order(monkeypatch):
    taken, result, calls = _timeline(True, monkeypatch)
    _, t_result, t_calls = _timeline(False, monkeypatch)
    sampled = sum(1 for t in result.series.ticks if t == 1)
    # The loop sleeps as soon as the cluster is quiet: fewer samples taken awake than
    # samples recorded one by one (the lead's are taken on waking).
    assert len(taken) < sampled - 10
    for name in ("admitted", "backlog", "in_flight", "time_s"):
        assert (result.series.array(name) == t_result.series.array(name)).all(), name
    # Listeners hear of every sample in time order, each before the arrival that ended
    # its span, with the figures a loop sampling every period saw. (The decisions of a
    # span's skipped periods are told on waking, as before.)
    times = [c[1] for c in calls if c[0] != "decision"]
    assert times == sorted(times)
    samples = [c for c in calls if c[0] == "sample"]
    assert all(c[1] == c[2] for c in samples)
    ticked = {c[1]: c for c in t_calls if c[0] == "sample"}
    assert all(ticked[c[1]] == c for c in samples)
    events = [c for c in calls if c[0] in ("submit", "done", "realloc")]
    assert events == [c for c in t_calls if c[0] in ("submit", "done", "realloc")]


def test_repeats_not_recorded_are_seen_as_recorded_samples_and_the_last_held():
    lag = ObservationLag(2.0)
    for t in (0.0, 1.0):
        lag.record(_obs(t))
    lag.hold(1.0, replace(_obs(2.0), decode_slots=4), repeats=2)  # samples at 2 and 3
    assert lag.seen_at(3.0).time_s == 1.0  # recorded
    assert lag.seen_at(4.0).decode_slots == 4 and lag.seen_at(4.0).time_s == 2.0
    assert lag.seen_at(6.0).time_s == 4.0 and lag.seen_at(6.0).decode_slots == 4  # held
    assert lag.seen_at(5.0).time_s == 3.0  # never older than what was delivered
    lag.record(_obs(7.0, queue=2))
    assert lag.seen_at(8.5).time_s == 6.0  # held until the new record is due
    assert lag.seen_at(9.0).admission_queue == 2
    released = ObservationLag(2.0)
    released.record(_obs(0.0))
    released.hold(1.0, _obs(1.0, queue=5), repeats=3)
    released.release(1)  # only the sample at 1 was taken; the next recorded is at 2
    released.record(_obs(2.0, queue=1))
    assert released.seen_at(3.0).admission_queue == 5
    assert released.seen_at(4.0).admission_queue == 1
    assert released.seen_at(9.0).time_s == 2.0  # nothing held
