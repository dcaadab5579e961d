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
