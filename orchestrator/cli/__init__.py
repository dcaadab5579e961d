"""`tokenfactory`: the command line. Each subcommand lives in its own module here.

Every module exposes `register(subparsers)`, which adds its parser and sets
`run=<function(args) -> int>`. Errors that are the user's (bad options, bad
files) are raised as `UserError` or as a package's own error type and
reported in one line with exit status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from orchestrator.cli import _common
from orchestrator.cli._common import EXIT_USAGE, Parser, UserError

# Subcommand modules are discovered: every public module in this package that
# defines `register`. Listed in `--help` in this order first, then alphabetically.
_FIRST = ("demo", "replay", "compare", "plan", "cost", "sweep", "trace")


def _command_modules() -> list[str]:
    import pkgutil

    names = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    return sorted(names, key=lambda n: (_FIRST.index(n) if n in _FIRST else len(_FIRST), n))


def _user_error_types() -> tuple[type[BaseException], ...]:
    from orchestrator.run.output import OutputError

    types: list[type[BaseException]] = [UserError, OutputError]
    try:
        from costmodel.errors import CostModelError

        types.append(CostModelError)
    except ImportError:
        pass
    try:
        from traces.errors import TraceError

        types.append(TraceError)
    except ImportError:
        pass
    return tuple(types)


def build_parser() -> Parser:
    import importlib

    parser = Parser(
        prog="tokenfactory",
        description="Emulate a disaggregated MoE inference service on modelled hardware.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in _command_modules():
        module = importlib.import_module(f"orchestrator.cli.{name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.run(args) or 0)
        hub = getattr(args, "_metrics_hub", None)
        if hub is not None:  # --metrics-port: until one scrape has read the final values
            hub.finish()
        return code
    except _user_error_types() as exc:
        sys.stderr.write(f"tokenfactory {args.command}: error: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("tokenfactory: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    finally:
        hub = getattr(args, "_metrics_hub", None)
        if hub is not None:
            hub.close()


__all__ = ["_common", "main"]
