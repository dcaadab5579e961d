"""The kit catches known-bad policies, each with a shrunk counterexample that replays."""

import json

import pytest

from orchestrator.cli import main
from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason
from orchestrator.kit import properties as kit
from orchestrator.kit.checks import StabilityViolation


class DropsCalls:
    """Admits the first few calls, then nothing ever again: the rest are never served."""

    name = "drops-calls"

    def __init__(self, config):
        self.admitted = 0

    def decide(self, obs, now_s):
        if obs is None or self.admitted >= 3:
            return AdmissionDecision(0, AdmissionReason.HOLD)
        self.admitted += obs.admission_queue and 1
        return AdmissionDecision(1 if obs.admission_queue else 0, AdmissionReason.HOLD)


def failure(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StabilityViolation) as info:
        test()
    message = str(info.value)
    path = tmp_path / info.value.path
    return message, path


@pytest.mark.slow
def test_retire_fails_the_oscillation_check_in_overload(tmp_path, monkeypatch, capsys):
    message, path = failure(kit.oscillation_below("retire", 0.25, max_examples=10), tmp_path,
                            monkeypatch)
    assert "decode occupancy oscillates" in message and "oscillation index" in message
    assert "tokenfactory replay --from-counterexample" in message
    assert main(["replay", "--from-counterexample", str(path), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["control"]["oscillation_index"] > 0.25


@pytest.mark.slow
def test_a_policy_that_drops_calls_fails_conservation_with_a_small_example(
        tmp_path, monkeypatch, capsys):
    spec = f"{__name__}:DropsCalls"
    message, path = failure(kit.no_loss(spec, max_examples=20), tmp_path, monkeypatch)
    assert "calls never completed" in message and "still in flight" in message
    scenario = json.loads(path.read_text())
    # Shrunk: a handful of calls is enough to show it.
    assert len(scenario["arrivals_s"]) <= 6 or scenario["agent_sessions"] <= 2
    assert main(["replay", "--from-counterexample", str(path), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["requests"]["in_flight"] > 0
