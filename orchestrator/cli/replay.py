"""`tokenfactory replay`: replay traces closed-loop onto a cluster under one controller."""

from __future__ import annotations

import argparse
from contextlib import nullcontext

from orchestrator.cli._common import print_json
from orchestrator.cli._replay_opts import (
    add_run_options,
    add_trace_args,
    settings_from_args,
    trace_paths,
)
from orchestrator.cli._replay_run import out_dir_or_fail, prepare_or_fail, replay_into
from orchestrator.output import run_dir
from orchestrator.run import DEFAULT_CLUSTER, DEFAULT_CONTROLLER, DEFAULT_MODEL


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay", help="replay traces onto a cluster in virtual time",
        description="Replay agent sessions closed-loop onto a modelled cluster. Defaults: "
                    f"--model {DEFAULT_MODEL}, --cluster {DEFAULT_CLUSTER}, "
                    f"--controller {DEFAULT_CONTROLLER}, the bundled sample when no TRACE.")
    add_trace_args(p)
    add_run_options(p)
    p.add_argument("--out", help="directory for summary.json, series.csv, decisions.jsonl")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    out = out_dir_or_fail(args.out)
    prepared = prepare_or_fail(trace_paths(args), args.format, settings)
    with run_dir(out) if out is not None else nullcontext(None) as directory:
        _, summary = replay_into(prepared, settings, directory, args)
    if args.json:
        print_json(summary)
    else:
        from orchestrator.tables import summary_table

        summary_table({settings.controller: summary})
    return 0
