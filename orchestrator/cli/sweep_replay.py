"""`tokenfactory sweep-replay`: one replay per point of a grid, on local cores or Ray.

Writes `table.csv` (one row per point: the grid's keys, then the replay's
`--json` summary with dotted column names), `frontiers.csv`, three PNGs of
goodput in the load window against p99 TTFT, p99 TPOT and energy per call, and
`report.html` (all of it on one page); prints the results table
(docs/sweep-replay.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator.cli._common import UserError, positive_int, print_json
from orchestrator.cli._replay_opts import FORMATS


def register(sub: argparse._SubParsersAction) -> None:
    from orchestrator.executors import EXECUTORS

    p = sub.add_parser(
        "sweep-replay", help="replay every point of a grid of options; table and frontiers",
        description="Run one replay per combination of a TOML grid of replay options (each "
                    "key an option without its dashes, each value a list) on all local cores "
                    "or on a Ray cluster; write a table of summaries and the Pareto frontiers "
                    "of goodput against p99 TTFT, p99 TPOT and energy per call.")
    p.add_argument("grid", metavar="GRID_FILE", help="TOML grid (see docs/sweep-replay.md)")
    p.add_argument("--trace", action="append", metavar="PATH",
                   help="trace file or directory, repeatable (default: the bundled sample)")
    p.add_argument("--format", default="auto", choices=FORMATS,
                   help="trace format (default: auto-detect)")
    p.add_argument("--executor", default="local", choices=EXECUTORS,
                   help="local: a process pool on this machine (default); ray: Ray tasks")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="Ray head HOST:PORT or ray://HOST:PORT (default: start a local Ray)")
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="local: processes (default: every core); ray without an address: CPUs")
    p.add_argument("--out", type=Path, default=Path("sweep-replay-out"), metavar="DIR",
                   help="output directory (default ./sweep-replay-out)")
    p.add_argument("--resume", action="store_true",
                   help="continue the sweep already in --out: run only points not done")
    p.add_argument("--overwrite", "--force", dest="force", action="store_true",
                   help="replace the results of another (or this) grid held in --out "
                        "(default: refuse, exit 2)")
    p.add_argument("--plots", action=argparse.BooleanOptionalAction, default=True,
                   help="write PNG plots of the frontiers (default yes)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from orchestrator.executors import ExecutorError
    from orchestrator.sweeps import GridError, SweepOptions, load_grid, run_sweep_replay

    if args.resume and args.force:
        raise UserError("--resume and --overwrite: choose one")
    from traces import sample_path

    traces = args.trace or [str(sample_path())]
    options = SweepOptions(out=args.out, executor=args.executor, workers=args.workers,
                           ray_address=args.ray_address, resume=args.resume, force=args.force,
                           plots=args.plots, progress=False if args.no_progress else None)
    try:
        grid = load_grid(args.grid)
        report = run_sweep_replay(grid, traces, args.format, options)
    except (GridError, ExecutorError) as exc:
        raise UserError(str(exc)) from None
    if args.json:
        print_json({"out": str(args.out), "points": report.points, "ran": report.ran,
                    "skipped": report.skipped, "failed": report.failed,
                    "wall_s": round(report.wall_s, 3), "files": list(report.files)})
        return 0
    from orchestrator.sweeps.report import print_results

    print_results(list(report.rows), list(report.varying),
                  title=f"sweep-replay: {report.points} points")
    sys.stdout.write(
        f"{report.points} points: {report.ran} run, {report.skipped} already done, "
        f"{report.failed} failed; {report.wall_s:.1f} s on {args.executor}; wrote "
        f"{', '.join(report.files)} to {args.out}/\n")
    return 0
