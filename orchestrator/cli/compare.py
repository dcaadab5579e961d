"""`tokenfactory compare`: the same sessions and seed under several controllers, side by side."""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from dataclasses import replace

from orchestrator.cli._common import UserError, print_json
from orchestrator.cli._replay_opts import (
    add_run_options,
    add_trace_args,
    settings_from_args,
    trace_paths,
)
from orchestrator.cli._replay_run import out_dir_or_fail, prepare_or_fail, replay_into
from orchestrator.config import ControlConfig
from orchestrator.output import run_dir, write_json
from orchestrator.plugins import load_policy
from orchestrator.policies import PluginError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="replay under several controllers and compare",
                       description="Replay the same sessions and seed under each controller; "
                                   "print them side by side and write an HTML report.")
    add_trace_args(p)
    p.add_argument("--controllers", default="retire,buffered",
                   help="comma-separated controllers (default: retire,buffered)")
    add_run_options(p, controller=False)
    p.add_argument("--out", default="compare-out",
                   help="directory for report.html and each run's files (default: compare-out)")
    p.set_defaults(run=run)


def parse_controllers(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"--controllers: expected a comma-separated list, got {text!r}")
    for name in names:
        try:
            load_policy(name, ControlConfig())
        except PluginError as exc:
            raise UserError(f"--controllers: {exc}") from None
    if len(set(names)) != len(names):
        raise UserError(f"--controllers: {text!r} names a controller twice")
    return names


def compare(args: argparse.Namespace, names: list[str], title: str, notes: str = "") -> dict:
    base = settings_from_args(args, controller=names[0])
    out = out_dir_or_fail(args.out)
    prepared = prepare_or_fail(trace_paths(args), args.format, base)
    results, summaries = {}, {}
    with run_dir(out) if out is not None else nullcontext(None) as directory:
        for name in names:
            settings = replace(base, controller=name)
            results[name], summaries[name] = replay_into(prepared, settings, directory, args,
                                                         prefix=f"{name}-")
        if directory is not None:
            from orchestrator.report import write_report

            write_json(directory / "compare.json", {"runs": summaries})
            write_report(directory / "report.html", results, summaries, title, notes)
    return summaries


def run(args: argparse.Namespace) -> int:
    names = parse_controllers(args.controllers)
    summaries = compare(args, names, "tokenfactory compare: " + " vs ".join(names))
    if args.json:
        print_json({"runs": summaries})
    else:
        from orchestrator.tables import summary_table

        summary_table(summaries, title="compare")
        if args.out:
            print(f"report: {args.out}/report.html")
    return 0
