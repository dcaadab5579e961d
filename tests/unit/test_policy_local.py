"""`local`: the engines' admission, deciding at every event on the cluster as it is, with a
decode slot reserved for every call admitted and not yet decoding."""

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies import make_policy
from orchestrator.control.policies.base import AdmissionReason
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock


def obs(running, slots, fill_queue=0, ready=0, loading=0):
    return Observation(time_s=0.0, admission_queue=50, admission_queue_interactive=50,
                       fill_queue=fill_queue, fill_running=0, ready_depth=ready,
                       decode_loading=loading, decode_running=running, decode_slots=slots,
                       admitted_total=0, retired_total=0, completed_total=0, rejected_total=0,
                       predicted_decode_calls_per_s=1.0, predicted_fill_latency_s=1.0)


def test_admits_only_the_slots_nobody_has_reserved():
    local = make_policy("local", ControlConfig())
    d = local.decide(obs(running=4, slots=10, fill_queue=2, ready=1), 0.0)
    assert (d.admit, d.reason) == (3, AdmissionReason.RESERVED)
    assert local.decide(obs(running=6, slots=10, fill_queue=3, loading=1), 0.0).admit == 0
    assert local.decide(obs(running=12, slots=10), 0.0).reason is AdmissionReason.HOLD


class Reserved:
    """Decode running plus calls on their way, at every sample."""

    def __init__(self):
        self.over, self.samples, self.queued = 0, 0, 0

    def on_sample(self, orch, o, now_s):
        self.samples += 1
        self.queued += o.admission_queue > 0
        self.over = max(self.over, o.decode_running + o.backlog - o.decode_slots)


def run(controller):
    control = ControlConfig(realloc_enabled=False)
    probe = Reserved()
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")),
                        short_agent_sessions(30, 6, seed=5), make_policy(controller, control, 4),
                        control, LoadOptions(sessions_per_hour=36_000), 1, listeners=[probe])
    result = VirtualClock().run(orch.run())
    return probe, summarize(result, control.ttft_target_s, control.tpot_target_s)


def test_under_load_it_never_reserves_more_than_decode_has_and_loses_nothing():
    probe, s = run("local")
    assert probe.queued > 0  # calls did wait for a slot: the reservation bound
    assert probe.over <= 0
    assert s["requests"]["lost"] == 0 and s["requests"]["completed"] == s["requests"]["submitted"]
    retire_probe, _ = run("retire")
    assert retire_probe.over > 0  # retire, lagged and blind to the pipeline, over-admits
