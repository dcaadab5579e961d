import subprocess
import sys

from orchestrator.cli import build_parser, main


def test_help_lists_demo():
    text = build_parser().format_help()
    assert "demo" in text


def test_unknown_command_is_one_line_exit_2(capsys):
    try:
        main(["no-such-command"])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-command" in err


def test_console_entry_runs_as_module():
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "tokenfactory" in out.stdout
