"""`tokenfactory replay`: replay traces closed-loop onto a cluster under one controller."""

from __future__ import annotations

import argparse
from contextlib import nullcontext

from orchestrator.cli._common import add_overwrite_option, print_json
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
    series_format_or_fail,
    warn_if_trace_runs_out,
)
from orchestrator.run.output import run_dir
from orchestrator.run.settings import DEFAULT_CLUSTER, DEFAULT_CONTROLLER, DEFAULT_MODEL


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay", help="replay traces onto a cluster in virtual time",
        description="Replay agent sessions closed-loop onto a modelled cluster. Defaults: "
                    f"--model {DEFAULT_MODEL}, --cluster {DEFAULT_CLUSTER}, "
                    f"--controller {DEFAULT_CONTROLLER}, the bundled sample when no TRACE.")
    add_trace_args(p)
    add_run_options(p)
    p.add_argument("--out", metavar="DIR", help=OUT_HELP)
    add_overwrite_option(p)
    p.add_argument("--series-format", choices=("csv", "parquet"), default="csv",
                   help="--out: the series as series.csv (default) or series.parquet "
                        "(needs pyarrow), written as the run goes")
    p.add_argument("--from-counterexample", metavar="FILE",
                   help="replay a scenario saved by the stability kit (its traffic, cluster, "
                        "perturbations, controller and seed; other options are ignored)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.from_counterexample:
        return run_counterexample(args)
    settings = settings_from_args(args)
    series_format_or_fail(args)
    out = out_dir_or_fail(args.out, args.overwrite)
    prepared = prepare_or_fail(trace_paths(args), args.format, settings)
    warn_if_trace_runs_out(prepared, settings)
    with run_dir(out, args.overwrite) if out is not None else nullcontext(None) as directory:
        _, summary = replay_into(prepared, settings, directory, args)
    if args.json:
        print_json(summary)
    else:
        from orchestrator.run.tables import summary_table

        summary_table({settings.controller: summary})
    return exit_status(summary)


def run_counterexample(args: argparse.Namespace) -> int:
    from pathlib import Path

    from orchestrator.cli._common import UserError
    from orchestrator.control.policies import PluginError
    from orchestrator.kit.scenario import Scenario, run_scenario
    from orchestrator.run.output import write_json, write_series_csv
    from orchestrator.run.summary import summarize

    path = Path(args.from_counterexample)
    try:
        scenario = Scenario.load_file(path)
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise UserError(f"{path}: not a counterexample file: {exc}") from None
    out = out_dir_or_fail(args.out, args.overwrite)
    try:
        result = run_scenario(scenario)
    except PluginError as exc:
        raise UserError(str(exc)) from None
    control = scenario.control()
    summary = summarize(result, control.ttft_target_s, control.tpot_target_s,
                        run=path.stem, controller=scenario.controller)
    if out is not None:
        with run_dir(out, args.overwrite) as directory:
            write_json(directory / "summary.json", summary)
            write_series_csv(directory / "series.csv", result.series)
    if args.json:
        print_json(summary)
    else:
        from orchestrator.run.tables import summary_table

        summary_table({scenario.controller: summary}, title=f"counterexample {path.name}")
    return 0
