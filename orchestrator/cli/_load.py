"""The load options every replaying command shares, spelled the same everywhere."""

from __future__ import annotations

import argparse
import math

from orchestrator.cli._common import non_negative_int, positive_float, positive_int
from traces.replay import DEFAULT_AGENT_SESSIONS_PER_HOUR, LoadOptions


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def add_load_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("load")
    group.add_argument(
        "--sessions-per-hour",
        type=positive_float,
        metavar="R",
        help="start sessions as a seeded Poisson process at R per hour (default: the trace's "
        f"own timestamps if it has them, else {DEFAULT_AGENT_SESSIONS_PER_HOUR:g} per hour)",
    )
    group.add_argument(
        "--max-sessions", type=positive_int, metavar="N", help="admit at most N sessions"
    )
    group.add_argument(
        "--think-scale",
        type=non_negative_float,
        default=1.0,
        metavar="F",
        help="multiply every think/tool gap by F (default %(default)g; 0 removes them)",
    )
    group.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        metavar="K",
        help="replay the trace K times over, each copy as new sessions (default %(default)s)",
    )
    group.add_argument(
        "--shared-prefix-tokens",
        type=non_negative_int,
        metavar="N",
        help="the first N tokens of every session are one chain of KV shared by all "
        "sessions (an assumption: docs/trace-format.md); default: as the trace says (weka "
        "agent traces: each session's tool definitions, shared by sessions whose "
        "definitions have the same length); 0: none",
    )
    group.add_argument(
        "--duration",
        type=positive_float,
        metavar="S",
        help="admit no new session after S simulated seconds (default: no limit)",
    )


def load_options_from_args(args: argparse.Namespace) -> LoadOptions:
    return LoadOptions(
        sessions_per_hour=args.sessions_per_hour,
        max_sessions=args.max_sessions,
        think_scale=args.think_scale,
        duration_s=args.duration,
        repeat=args.repeat,
        shared_prefix_tokens=args.shared_prefix_tokens,
    )
