"""The call ledger in virtual mode: lost and in flight are measured (calls issued against
calls final and calls found where the service holds them), not subtracted."""

import pytest

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock


class Stopper:
    """Drops the `drop`-th call as it arrives (if `drop`), and stops the run at `stop_s`."""

    def __init__(self, stop_s, drop=None):
        self.stop_s, self.drop, self.submitted, self.dropped = stop_s, drop, 0, None

    def on_submit(self, orch, req, now_s):
        self.submitted += 1
        if self.submitted == self.drop:
            assert orch.queue[-1].request is req
            orch.queue.pop()
            self.dropped = req.call_id

    def on_sample(self, orch, obs, now_s):
        if now_s >= self.stop_s:
            orch.interrupt()


def run(listener):
    control = ControlConfig()
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")),
                        short_agent_sessions(8, 6, seed=3), make_policy("buffered", control, 4),
                        control, LoadOptions(sessions_per_hour=3600), 1, listeners=[listener])
    result = VirtualClock().run(orch.run())
    return summarize(result, control.ttft_target_s, control.tpot_target_s)


def test_a_run_to_its_end_has_every_call_final():
    s = run(Stopper(stop_s=float("inf")))
    ledger = s["requests"]["ledger"]
    assert ledger["issued"] == ledger["completed"] == s["requests"]["submitted"] > 0
    assert s["requests"]["lost"] == 0 and s["requests"]["in_flight"] == 0


@pytest.mark.parametrize("stop_s", [3.0, 7.0, 12.0, 20.0])
def test_a_stopped_run_finds_its_calls_in_flight_where_they_are_not_lost(stop_s):
    s = run(Stopper(stop_s))
    ledger = s["requests"]["ledger"]
    assert s["requests"]["lost"] == 0, ledger
    assert ledger["completed"] + ledger["in_flight"] == ledger["issued"]


def test_a_call_dropped_on_purpose_is_lost():
    stopper = Stopper(stop_s=20.0, drop=5)
    s = run(stopper)
    ledger = s["requests"]["ledger"]
    assert stopper.dropped is not None
    assert s["requests"]["lost"] == 1 and ledger["lost_call_ids"] == [stopper.dropped]
    assert ledger["completed"] + ledger["in_flight"] + 1 == ledger["issued"]
