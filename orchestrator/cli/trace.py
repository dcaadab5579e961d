"""`tokenfactory trace stats|validate|convert|synth`: look at, check and make traces."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator.cli._common import (
    add_overwrite_option,
    atomic_path,
    check_new_file,
    non_negative_int,
    positive_int,
    print_json,
)
from traces.formats import Format

FORMATS = tuple(f.value for f in Format)
MAX_SHOWN_PROBLEMS = 20


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="describe, check, convert and synthesise traces")
    p.set_defaults(run=lambda args: p.error("expected one of: stats, validate, convert, synth"))
    tsub = p.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", parser_class=type(p))

    def add_traces(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "traces",
            nargs="*",
            type=Path,
            metavar="TRACE",
            help="trace files or directories (default: the bundled sample)",
        )
        q.add_argument(
            "--format",
            choices=FORMATS,
            default="auto",
            help="trace format (default: detected from each file)",
        )

    q = tsub.add_parser("stats", help="counts and percentiles of a trace")
    add_traces(q)
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(run=run_stats)

    q = tsub.add_parser("validate", help="check traces; exit 2 listing every problem")
    add_traces(q)
    q.set_defaults(run=run_validate)

    q = tsub.add_parser("convert", help="convert a trace to the native format")
    q.add_argument("trace", type=Path, metavar="TRACE", help="trace file or directory")
    q.add_argument("--format", choices=FORMATS, default="auto",
                   help="input format (default: detected from each file)")
    q.add_argument("--to", choices=("native",), required=True, help="output format")
    q.add_argument("--out", type=Path, required=True, metavar="FILE",
                   help="output file (.gz compresses it)")
    add_overwrite_option(q, "an existing FILE")
    q.set_defaults(run=run_convert)

    q = tsub.add_parser("synth", help="generate agent sessions like the real collection")
    q.add_argument("--sessions", type=positive_int, required=True, metavar="N",
                   help="sessions to generate")
    q.add_argument("--seed", type=non_negative_int, required=True, metavar="S",
                   help="random seed: the same seed, the same sessions")
    q.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="FILE",
        help="native trace to write (.gz compresses it)",
    )
    add_overwrite_option(q, "an existing FILE")
    q.set_defaults(run=run_synth)


def _paths(args: argparse.Namespace) -> list[Path]:
    from traces import sample_path

    return list(args.traces) or [sample_path()]


def run_stats(args: argparse.Namespace) -> int:
    from traces import read_sessions
    from traces.stats import compute_stats

    stats = compute_stats(read_sessions(_paths(args), args.format))
    if args.json:
        print_json(stats.as_dict())
    else:
        _print_stats_table(stats)
    return 0


def _print_stats_table(stats) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"{stats.sessions:,} sessions, {stats.calls:,} calls "
        f"({stats.subagent_calls:,} by sub-agents), {stats.resets:,} context resets; "
        f"{stats.total_input_tokens:,} input and {stats.total_output_tokens:,} output tokens"
    )
    table = Table("figure", "p50", "p90", "p99", "mean")
    for name, dist in stats.distributions.items():
        scale, fmt = (100.0, "{:.1f}%") if name == "prefix_hit" else (1.0, "{:,.0f}")
        if name == "think_s":
            fmt = "{:,.1f}"
        cells = [
            fmt.format(v * scale) if v == v else "-"
            for v in (dist.p50, dist.p90, dist.p99, dist.mean)
        ]
        table.add_row(name, *cells)
    console.print(table)


def run_validate(args: argparse.Namespace) -> int:
    from traces.validate import validate

    result = validate(_paths(args), args.format, keep=MAX_SHOWN_PROBLEMS)
    if result.ok:
        sys.stdout.write(
            f"ok: {result.files} files, {result.sessions:,} sessions, {result.calls:,} calls\n"
        )
        return 0
    for problem in result.problems:
        sys.stderr.write(f"{problem}\n")
    hidden = result.problem_count - len(result.problems)
    if hidden:
        sys.stderr.write(f"... and {hidden:,} more problems ({result.problem_count:,} in all)\n")
    return 2


def run_convert(args: argparse.Namespace) -> int:
    from traces import read_sessions
    from traces.native import write_native_file

    check_new_file(args.out, args.overwrite)
    sessions = read_sessions([args.trace], args.format)
    with atomic_path(args.out, args.overwrite) as tmp:
        n_calls = write_native_file(
            sessions, tmp, gzip_out=args.out.name.endswith(".gz"), source=str(args.trace)
        )
    sys.stderr.write(f"wrote {n_calls:,} calls to {args.out}\n")
    return 0


def run_synth(args: argparse.Namespace) -> int:
    import numpy as np

    from traces.native import write_native_file
    from traces.synth import generate

    check_new_file(args.out, args.overwrite)
    sessions = generate(args.sessions, np.random.default_rng(args.seed))
    with atomic_path(args.out, args.overwrite) as tmp:
        n_calls = write_native_file(
            sessions,
            tmp,
            gzip_out=args.out.name.endswith(".gz"),
            source=f"tokenfactory trace synth --seed {args.seed}",
        )
    sys.stderr.write(f"wrote {args.sessions:,} sessions, {n_calls:,} calls to {args.out}\n")
    return 0
