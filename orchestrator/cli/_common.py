"""What every subcommand shares: one-line errors, typed option parsers, atomic output."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

EXIT_USAGE = 2


class UserError(Exception):
    """A mistake in the user's input: reported in one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def comma_names(option: str, text: str) -> list[str]:
    """The names of a comma-separated option value, stripped; an empty item (`a,,b`, a
    trailing comma) or no name at all is a UserError naming the option and the value."""
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise UserError(f"{option}: expected a comma-separated list, got {text!r}")
    if not all(names):
        raise UserError(f"{option}: empty item in {text!r}")
    return names


def print_json(obj: Any) -> None:
    """`--json`: one object on stdout and nothing else there."""
    sys.stdout.write(json.dumps(obj, sort_keys=False, allow_nan=False) + "\n")


def add_overwrite_option(p: argparse.ArgumentParser, what: str = "an earlier run in --out") -> None:
    """`--overwrite`: the one way to let a command replace what it wrote before."""
    p.add_argument("--overwrite", action="store_true",
                   help=f"replace {what} (default: refuse, exit 2)")


def set_help(p: argparse.ArgumentParser, dest: str, text: str) -> None:
    """Replace an option's help: a command whose default is computed says so."""
    for action in p._actions:  # argparse has no public way to reach an added option
        if action.dest == dest:
            action.help = text
            return
    raise KeyError(dest)


def check_new_file(path: Path, overwrite: bool, option: str = "--out") -> None:
    """Refuse an existing file unless `overwrite` (one line, exit 2)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path}: is a directory")
    if path.exists() and not overwrite:
        raise UserError(f"{option} {path}: exists; --overwrite replaces it")


@contextmanager
def atomic_path(path: Path, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it into place only on success, with
    the mode a plain `open` would give it (mkstemp's are private). An existing `path`
    is refused unless `overwrite`."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    check_new_file(path, overwrite)
    if not parent.is_dir():
        raise UserError(f"{path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UserError(f"{path}: directory {parent} is not writable")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        from orchestrator.run.output import current_umask

        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def engine_name(text: str) -> str:
    """An engine of costmodel/data/engines.toml (argparse type: one line, exit 2)."""
    from costmodel.engines import engine_names

    names = engine_names()
    if text not in names:
        raise argparse.ArgumentTypeError(f"unknown engine {text!r} (known: {', '.join(names)})")
    return text


def acceptance(text: str) -> tuple[float, ...]:
    """`0.85,0.7,0.5`: MTP acceptance by draft position (argparse type)."""
    from costmodel.errors import CostModelError
    from costmodel.mtp import parse_acceptance

    try:
        return parse_acceptance(text, "")
    except CostModelError as exc:
        raise argparse.ArgumentTypeError(str(exc).lstrip(": ")) from None


def add_service_options(p: argparse.ArgumentParser) -> None:
    """`--engine` and `--mtp-acceptance`: the serving engine's host cost per step and per
    draft (costmodel/data/engines.toml) and the MTP acceptance on the traffic."""
    p.add_argument("--engine", type=engine_name, metavar="NAME",
                   help="serving engine whose host cost per step and per MTP draft the "
                        "steps pay: sglang, trtllm or vllm (costmodel/data/engines.toml; "
                        "default: the cluster file's engine, else sglang)")
    p.add_argument("--mtp-acceptance", type=acceptance, metavar="P1,P2,...",
                   help="MTP acceptance by draft position on this traffic, not increasing "
                        "(default: the cluster file's, else the model file's, else "
                        "DeepSeek-V3's; docs/costmodel.md)")


def add_cost_source_option(p: argparse.ArgumentParser) -> None:
    """`--cost-source`: what prices the steps (costmodel.measured.source)."""
    p.add_argument("--cost-source", choices=("roofline", "measured", "auto"),
                   help="what prices the steps: the roofline; measured kernel tables "
                        "(the 'measured' extra) where they cover the hardware, engine and "
                        "layout, the roofline elsewhere; or auto (measured if the extra is "
                        "installed) (default: the cluster file's cost_source, else "
                        "roofline; docs/measured-tables.md)")
