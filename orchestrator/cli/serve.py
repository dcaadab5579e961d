"""`tokenfactory serve`: a live run with no end, fed by a trace in a loop, until a signal.

The same run as `replay --clock live`: the orchestrator here, the workers in
worker processes, /metrics with --metrics-port. The trace is replayed over and
over (--repeat defaults to its maximum: with the bundled sample, hundreds of
hours of sessions) until SIGINT or SIGTERM; the summary then reports the calls
still in flight.
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext

from orchestrator.cli._common import UserError, add_overwrite_option, print_json
from orchestrator.cli._replay_opts import (
    add_run_options,
    add_trace_args,
    settings_from_args,
    trace_paths,
)
from orchestrator.cli._replay_run import (
    OUT_HELP,
    exit_status,
    out_dir_or_fail,
    prepare_or_fail,
    replay_into,
)
from orchestrator.run.output import run_dir
from traces.replay import MAX_REPEAT


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="run live on worker processes, the trace in a loop, until a signal",
        description="Run the orchestrator and its worker processes in real time scaled by "
                    "--speed, replaying the traces in a loop, until SIGINT or SIGTERM; then "
                    "print the summary (calls in flight reported as such).")
    add_trace_args(p)
    add_run_options(p)
    p.add_argument("--out", metavar="DIR", help=OUT_HELP)
    add_overwrite_option(p)
    p.set_defaults(run=run, clock="live", repeat=MAX_REPEAT)


def run(args: argparse.Namespace) -> int:
    if args.clock != "live":
        raise UserError(f"--clock {args.clock}: serve runs on the live clock only")
    settings = settings_from_args(args)
    out = out_dir_or_fail(args.out, args.overwrite)
    prepared = prepare_or_fail(trace_paths(args), args.format, settings)
    with run_dir(out, args.overwrite) if out is not None else nullcontext(None) as directory:
        _, summary = replay_into(prepared, settings, directory, args)
    if args.json:
        print_json(summary)
    else:
        from orchestrator.run.tables import summary_table

        summary_table({settings.controller: summary}, title="serve")
    # A signal is how serve ends (exit 0); stopped for want of workers: 1.
    return exit_status(summary, signal_ends_run=True)
