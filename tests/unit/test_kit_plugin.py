"""The kit's pytest plugin: the fixture, and a user's test file of one line per property."""

import subprocess
import sys
import textwrap

from orchestrator.kit.scenario import Scenario


def test_stability_fixture_runs_and_checks(stability):
    result = stability.run(Scenario(controller="buffered", arrivals_s=(0.0, 0.5, 1.0)))
    stability.no_loss(result)
    stability.bounded_buffers(result)


def test_a_users_test_file_needs_one_line_per_property(tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent('''
        from orchestrator.control.policies.buffered import BufferedAdmission

        class Mine(BufferedAdmission):
            name = "mine"
    '''))
    (tmp_path / "test_mine.py").write_text(textwrap.dedent('''
        from orchestrator.kit import properties as kit
        from mine import Mine

        test_bounded = kit.bounded_buffers(Mine)
        test_no_loss = kit.no_loss(Mine)
    '''))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--kit-examples", "3",
                           "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_a_policy_admitting_one_call_a_period_passes_bounded_buffers_and_fails_starvation(
        tmp_path):
    # Issue 35: bounded_buffers bounds from above only; starvation_below catches a trickle.
    (tmp_path / "trickle.py").write_text(textwrap.dedent('''
        from tokenfactory import AdmissionDecision, AdmissionReason

        class Trickle:
            name = "trickle"

            def __init__(self, config):
                pass

            def decide(self, obs, now_s):
                if obs is None:
                    return AdmissionDecision(admit=0, reason=AdmissionReason.NO_OBSERVATION)
                return AdmissionDecision(admit=1, reason=AdmissionReason.BACKLOG_LOW)
    '''))
    (tmp_path / "test_trickle.py").write_text(textwrap.dedent('''
        from tokenfactory.kit import properties as kit
        from trickle import Trickle

        test_bounded = kit.bounded_buffers(Trickle)
        test_fed = kit.starvation_below(Trickle, 0.05)
    '''))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--kit-examples", "3",
                           "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True)
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert "starvation_below failed" in done.stdout
