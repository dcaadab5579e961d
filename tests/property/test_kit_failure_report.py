"""A failing kit property says so in one short paragraph: the property, the measured
figure against its bound, the scope, the counterexample file (small) and how to replay
it; not the drawn scenario's hundreds of arrival times and output lengths."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason
from orchestrator.kit import properties as kit
from orchestrator.kit.checks import PropertyFailed
from orchestrator.kit.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]


class NeverAdmits:
    """Admits nothing, ever: no call is served."""

    name = "never-admits"

    def __init__(self, config):
        pass

    def decide(self, obs, now_s):
        return AdmissionDecision(0, AdmissionReason.HOLD)


def test_a_failing_property_is_one_paragraph_naming_a_small_counterexample(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PropertyFailed) as info:
        kit.no_loss(f"{__name__}:NeverAdmits", max_examples=5)()
    exc = info.value
    message = str(exc)
    lines = message.splitlines()
    assert len(lines) <= 7
    assert lines[0].startswith("kit property no_loss failed for ")
    assert "calls never completed" in lines[0]
    assert "still in flight when the run ended" in message  # the measured figure
    assert "scope: 10-150% of capacity" in message
    path = tmp_path / exc.path
    assert f"counterexample: {exc.path}" in message
    assert f"tokenfactory replay --from-counterexample {exc.path}" in message
    # Hypothesis' notes (the drawn scenario, its explanation) are not carried.
    assert not getattr(exc, "__notes__", None)
    assert "arrivals_s" not in message and "Falsifying" not in message
    # Shrunk and small; it loads back.
    assert path.stat().st_size < 1500
    assert Scenario.load_file(path).controller == f"{__name__}:NeverAdmits"


def test_a_counterexample_file_is_a_field_a_line(tmp_path):
    """600 arrivals with their outputs: ~15 bytes a call (a time to the microsecond and
    an output length), not ~25 as a number a line, indented."""
    arrivals = tuple(round(0.1 * i + 0.012345, 6) for i in range(600))
    scenario = Scenario(arrivals_s=arrivals, output_tokens_each=(512,) * 600,
                        output_tokens=512, lose_workers=((12.5, "decode", 1),))
    path = scenario.save(tmp_path / "c.json")
    assert path.stat().st_size < 15 * 600 + 800
    indented = json.dumps(json.loads(path.read_text()), indent=2)
    assert path.stat().st_size < 0.6 * len(indented)
    assert len(path.read_text().splitlines()) == len(json.loads(path.read_text())) + 2
    assert Scenario.load_file(path) == scenario


def test_a_drawn_scenario_prints_briefly():
    from hypothesis.vendor.pretty import pretty

    arrivals = tuple(float(i) for i in range(300))
    text = pretty(Scenario(arrivals_s=arrivals, lose_workers=((5.0, "decode", 1),)))
    assert text == ("Scenario('buffered': 300 open-loop calls over 299 s, outputs 64 tokens; "
                    "1 decode worker(s) lost at 5 s; lag 2 s)")


USER_TESTS = """
from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason
from tokenfactory.kit import properties as kit


class NeverAdmits:
    name = "never-admits"

    def __init__(self, config):
        pass

    def decide(self, obs, now_s):
        return AdmissionDecision(0, AdmissionReason.HOLD)


test_no_loss = kit.no_loss(NeverAdmits)
"""


def test_pytest_prints_the_paragraph_and_no_traceback(tmp_path):
    """As a user's test file reads in pytest's output (the kit's plugin): the failure
    section is the paragraph alone."""
    (tmp_path / "test_mine.py").write_text(textwrap.dedent(USER_TESTS))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--kit-examples", "3", "test_mine.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    section = out.split("_ test_no_loss _")[1].split("short test summary")[0]
    body = [line for line in section.splitlines() if line.strip("_= ")]
    assert body[0].startswith("kit property no_loss failed for test_mine:NeverAdmits")
    assert 4 <= len(body) <= 7, section
    assert "Traceback" not in out and "Failing test case" not in out
    assert "arrivals_s" not in out and "def test" not in out
