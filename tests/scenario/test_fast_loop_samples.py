"""A sample of a cluster nothing touched since the last one is that one restamped.

The fast loop samples every period while calls are in flight; when nothing but its own
timer ran since its last sample (the virtual loop counts callbacks) and its decision
changed nothing, it restamps the last observation (with no busy time in the period)
instead of asking every worker again. The run must be the one that looks every time.
"""

import math

import pytest

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies import make_policy
from orchestrator.run.fast_loop import FastLoop
from orchestrator.run.idle_spans import IdleSpans
from orchestrator.run.replay import Orchestrator
from orchestrator.run.sampler import Sampler
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock, VirtualEventLoop

LLAMA = load_model("llama-3.1-70b")


def _looks_every_time(monkeypatch):
    """The fast loop looks at the cluster at every sample and at every idle span's first
    sample (the restamps never taken)."""
    sample, next_idle = FastLoop.sample, IdleSpans._next_idle_obs

    def looks(self, now_s, loop=None):
        sample(self, now_s, None)

    def next_idle_looks(self, next_s):
        fast = self.loop
        touched, fast.touched = fast.touched, True  # as if the decision moved something
        try:
            return next_idle(self, next_s)
        finally:
            fast.touched = touched

    monkeypatch.setattr(FastLoop, "sample", looks)
    monkeypatch.setattr(IdleSpans, "_next_idle_obs", next_idle_looks)


class _Heard:
    def __init__(self):
        self.samples = []

    def on_sample(self, orch, obs, now_s):
        self.samples.append((now_s, obs))


def _run(controller):
    control = ControlConfig(realloc_enabled=True)
    heard = _Heard()
    orch = Orchestrator(small_cluster().bind(LLAMA), short_agent_sessions(6, 8, seed=3),
               make_policy(controller, control, 4), control,
               LoadOptions(sessions_per_hour=600, think_scale=0.2), 1, listeners=[heard])
    result = VirtualClock().run(orch.run())
    return result, summarize(result, control.ttft_target_s, control.tpot_target_s), heard


def _count_calls(monkeypatch, owner, name: str) -> list[float]:
    """Replace the method `owner.name(self, obs_or_time, ...)` by a wrapper that also
    records each call's second argument; the list it records into."""
    seen: list = []
    original = getattr(owner, name)

    def counted(self, first, *args):
        seen.append(first)
        return original(self, first, *args)

    monkeypatch.setattr(owner, name, counted)
    return seen


@pytest.mark.parametrize("controller", ["retire", "buffered"])
def test_restamped_samples_are_the_samples_of_looking(controller, monkeypatch):
    restamps = _count_calls(monkeypatch, Observation, "restamped")
    idle = _count_calls(monkeypatch, Sampler, "idle")
    result, summary, heard = _run(controller)
    restamped, idle_restamps = len(restamps), len(idle)
    assert idle_restamps > 5  # an idle span's first sample was restamped
    del restamps[:], idle[:]
    _looks_every_time(monkeypatch)
    l_result, l_summary, l_heard = _run(controller)
    assert not idle  # looking every time restamps no idle span's sample
    # The unchanged cluster was restamped, not looked at (the rest: the observation
    # lag's copies of a held sample and the idle spans' lead samples, in both runs).
    assert restamped - len(restamps) > 20
    assert heard.samples == l_heard.samples
    assert result.decisions == l_result.decisions
    for name in ("decode_occupancy", "backlog", "in_flight", "admitted", "time_s"):
        assert (result.series.array(name) == l_result.series.array(name)).all(), name
    flat = {k: v for k, v in summary.items() if k != "sim"}
    for key, value in flat.items():
        other = l_summary[key]
        assert value == other or (isinstance(value, float) and math.isnan(value)), key


@pytest.mark.parametrize("controller", ["retire", "buffered"])
def test_a_look_at_unchanged_workers_is_the_look_that_walks_them(controller, monkeypatch):
    reused = []
    original = Sampler.unchanged

    def counted(fill_states, decode_states, looked):
        same = original(fill_states, decode_states, looked)
        reused.append(same)
        return same

    monkeypatch.setattr(Sampler, "unchanged", staticmethod(counted))
    result, summary, heard = _run(controller)
    assert sum(reused) > 20  # looks that found every worker's state as at the last look
    # Walks every worker's state at every look (the last look's figures never reused).
    monkeypatch.setattr(Sampler, "unchanged", staticmethod(lambda *_: False))
    w_result, w_summary, w_heard = _run(controller)
    assert heard.samples == w_heard.samples  # every observation, field for field
    assert result.decisions == w_result.decisions
    for name in ("decode_occupancy", "backlog", "in_flight", "admitted", "time_s"):
        assert (result.series.array(name) == w_result.series.array(name)).all(), name
    assert result.series.workers_by_pool == w_result.series.workers_by_pool
    flat = {k: v for k, v in summary.items() if k != "sim"}
    for key, value in flat.items():
        other = w_summary[key]
        assert value == other or (isinstance(value, float) and math.isnan(value)), key


def test_the_virtual_loop_counts_the_callbacks_it_runs():
    loop = VirtualEventLoop()
    try:
        seen = []
        loop.call_soon(lambda: seen.append(loop.handles_run))
        loop.call_later(5.0, lambda: seen.append(loop.handles_run))
        cancelled = loop.call_later(1.0, seen.append, "never")
        cancelled.cancel()
        loop.call_later(6.0, loop.stop)
        loop.run_forever()
        assert seen == [1, 2]  # the callback running is counted; a cancelled one is not
        assert loop.handles_run == 3 and loop.time() == 6.0
    finally:
        loop.close()


def test_the_samples_heard_are_observations_of_the_cluster_as_it_was():
    from dataclasses import fields

    from orchestrator.control.observe import PoolObservation

    heard = _Heard()
    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(LLAMA), short_agent_sessions(2, 3, seed=2),
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1,
                        listeners=[heard])
    VirtualClock().run(orch.run())
    obs = orch.sampler.look_still(1.0, orch.counters, 0, 0)
    assert obs.time_s == 1.0 and obs.admission_queue == 0
    assert obs.completed_total == orch.counters["completed"] > 0
    assert all(p.busy_fraction == 0.0 for p in obs.pools)  # no busy time: a still look
    names = [f.name for f in fields(Observation)]
    assert all(type(o) is Observation and o == Observation(**{n: getattr(o, n) for n in names})
               for _, o in heard.samples)
    pools = [p for _, o in heard.samples for p in o.pools]
    assert pools and all(type(p) is PoolObservation for p in pools)
    assert any(p.busy_fraction > 0 for p in pools)  # a period's busy share, in [0, 1]
    assert all(0.0 <= p.busy_fraction <= 1.0 for p in pools)
