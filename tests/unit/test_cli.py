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


def test_controller_help_names_every_registered_controller(capsys):
    # `--controller` takes any registered name (the built-ins: pyproject.toml's
    # tokenfactory.controllers) or module:Class; its help must not leave one out.
    from importlib.metadata import entry_points

    names = [ep.name for ep in entry_points(group="tokenfactory.controllers")]
    assert {"retire", "buffered", "predictive", "local"} <= set(names)
    for command in ("replay", "serve"):
        try:
            main([command, "--help"])
        except SystemExit as exc:
            assert exc.code == 0
        text = " ".join(capsys.readouterr().out.split())
        entry = text.rsplit("--controller CONTROLLER", 1)[1][:200]  # the option's entry
        assert all(name in entry for name in names) and "module:Class" in entry


def test_every_trace_subcommand_option_has_help():
    # `tokenfactory trace <sub> --help` says what each argument is.
    import argparse

    def subparsers(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                yield from action.choices.items()

    trace = dict(subparsers(build_parser()))["trace"]
    for name, sub in subparsers(trace):
        for action in sub._actions:
            assert action.help, f"trace {name}: {action.dest} has no help"
