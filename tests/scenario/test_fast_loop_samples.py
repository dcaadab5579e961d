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
from orchestrator.run import idle_spans
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock, VirtualEventLoop

LLAMA = load_model("llama-3.1-70b")


class _Looks(Orchestrator):
    """Looks at the cluster at every sample and at every idle span's first sample (the
    restamps never taken)."""

    def _sample(self, now_s, loop=None):
        super()._sample(now_s, None)

    def _next_idle_obs(self, next_s):
        touched, self._touched = self._touched, True  # as if the decision moved something
        try:
            return super()._next_idle_obs(next_s)
        finally:
            self._touched = touched


class _Heard:
    def __init__(self):
        self.samples = []

    def on_sample(self, orch, obs, now_s):
        self.samples.append((now_s, obs))


def _run(cls, controller):
    control = ControlConfig(realloc_enabled=True)
    heard = _Heard()
    orch = cls(small_cluster().bind(LLAMA), short_agent_sessions(6, 8, seed=3),
               make_policy(controller, control, 4), control,
               LoadOptions(sessions_per_hour=600, think_scale=0.2), 1, listeners=[heard])
    result = VirtualClock().run(orch.run())
    return result, summarize(result, control.ttft_target_s, control.tpot_target_s), heard


def _count_calls(monkeypatch, owner, name: str) -> list[float]:
    """Replace `owner.name(obs, time_s, pools=None)` by a wrapper that also records each
    call's time_s; the list it records into."""
    times: list[float] = []
    original = getattr(owner, name)

    def counted(obs, time_s, pools=None):
        times.append(time_s)
        return original(obs, time_s, pools)

    monkeypatch.setattr(owner, name, counted)
    return times


@pytest.mark.parametrize("controller", ["retire", "buffered"])
def test_restamped_samples_are_the_samples_of_looking(controller, monkeypatch):
    restamps = _count_calls(monkeypatch, Observation, "restamped")
    idle = _count_calls(monkeypatch, idle_spans, "observation_at")
    result, summary, heard = _run(Orchestrator, controller)
    assert len(restamps) > 20  # the unchanged cluster was restamped, not looked at
    looked, idle_restamps = len(restamps), len(idle)
    l_result, l_summary, l_heard = _run(_Looks, controller)
    assert len(restamps) == looked  # looking every time restamps nothing
    # An idle span's first sample was restamped too (the lead samples' copies aside).
    assert idle_restamps - (len(idle) - idle_restamps) > 5
    assert heard.samples == l_heard.samples
    assert result.decisions == l_result.decisions
    for name in ("decode_occupancy", "backlog", "in_flight", "admitted", "time_s"):
        assert (result.series.array(name) == l_result.series.array(name)).all(), name
    flat = {k: v for k, v in summary.items() if k != "sim"}
    for key, value in flat.items():
        other = l_summary[key]
        assert value == other or (isinstance(value, float) and math.isnan(value)), key


class _Walks(Orchestrator):
    """Walks every worker's state at every look (the last look's figures never reused)."""

    @staticmethod
    def _unchanged(fill_states, decode_states, looked):
        return False


@pytest.mark.parametrize("controller", ["retire", "buffered"])
def test_a_look_at_unchanged_workers_is_the_look_that_walks_them(controller, monkeypatch):
    reused = []
    original = Orchestrator._unchanged

    def counted(fill_states, decode_states, looked):
        same = original(fill_states, decode_states, looked)
        reused.append(same)
        return same

    monkeypatch.setattr(Orchestrator, "_unchanged", staticmethod(counted))
    result, summary, heard = _run(Orchestrator, controller)
    assert sum(reused) > 20  # looks that found every worker's state as at the last look
    w_result, w_summary, w_heard = _run(_Walks, controller)
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


def test_a_fast_observation_is_the_dataclass_built_field_by_field():
    from dataclasses import asdict, fields

    from orchestrator.control.observe import PoolObservation, observation

    values = {f.name: i for i, f in enumerate(fields(Observation))}
    values["pools"] = (PoolObservation("decode", "decode", 2, 0, 1, 8, 0.5),)
    fast, slow = observation(**values), Observation(**values)
    assert fast == slow and asdict(fast) == asdict(slow) and hash(fast.pools) == hash(slow.pools)
    with pytest.raises(TypeError, match="admission_queue"):
        observation(**{k: v for k, v in values.items() if k != "admission_queue"})
    with pytest.raises(AttributeError):
        fast.time_s = 1.0  # still frozen


def test_a_snapshot_of_the_cluster_has_every_field_and_no_other():
    from dataclasses import fields

    from orchestrator.control.observe import PoolObservation
    from orchestrator.control.snapshot import observe

    heard = _Heard()
    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(LLAMA), short_agent_sessions(2, 3, seed=2),
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1,
                        listeners=[heard])
    VirtualClock().run(orch.run())
    names = [f.name for f in fields(Observation)]
    obs = observe(orch.runtime, 1.0, orch.counters, 0, 0, orch.predictor, {})
    assert list(vars(obs)) == names
    assert obs == Observation(**{name: getattr(obs, name) for name in names})
    assert all(list(vars(o)) == names for _, o in heard.samples)
    # Its pools too: built directly (snapshot.pool_observation), every field, in order.
    pool_names = [f.name for f in fields(PoolObservation)]
    pools = [p for _, o in heard.samples for p in o.pools]
    assert pools and all(list(vars(p)) == pool_names and p == PoolObservation(**vars(p))
                         and hash(p) == hash(PoolObservation(**vars(p))) for p in pools)
