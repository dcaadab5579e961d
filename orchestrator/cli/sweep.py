"""`tokenfactory sweep`: hardware x PP x TP x EP x batch, frontiers, CSV and PNGs.

With no options it runs the worked example (Kimi K3-like on GB200, B200, B300,
all seven workloads) and writes `sweep.csv`, `frontier.csv` and four PNGs under
`./sweep-out`. Output is written into a temporary directory beside `--out` and
moved into place only when every file is complete.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.cli._common import (
    UserError,
    add_overwrite_option,
    comma_names,
    positive_int,
    print_json,
)
from orchestrator.executors import EXECUTORS

PHASES = ("all", "prefill", "midfill", "decode")


def register(sub: argparse._SubParsersAction) -> None:
    from costmodel.worked_example import HARDWARE, MODEL, workload_names

    p = sub.add_parser("sweep", help="sweep layouts and batches; write frontiers and plots")
    p.add_argument("--model", default=MODEL, metavar="NAME",
                   help=f"model preset or config.json path (default {MODEL})")
    p.add_argument("--hardware", default=",".join(HARDWARE), metavar="A,B,...",
                   help=f"hardware presets or TOML paths, comma-separated "
                        f"(default {','.join(HARDWARE)})")
    p.add_argument("--phase", choices=PHASES, default="all", help="phase to sweep (default all)")
    p.add_argument("--workload", action="append", metavar="NAME",
                   help=f"workload, repeatable (default all of: {', '.join(workload_names())})")
    p.add_argument("--out", type=Path, default=Path("sweep-out"), metavar="DIR",
                   help="write sweep.csv, frontier.csv and the PNGs into DIR (default "
                        "./sweep-out; a DIR holding files is refused unless --overwrite)")
    add_overwrite_option(p, "the files of an earlier sweep in --out")
    p.add_argument("--plots", action=argparse.BooleanOptionalAction, default=True,
                   help="write PNG plots (default yes)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--executor", default="local", choices=EXECUTORS,
                   help="local: this machine (default); ray: one Ray task per workload. "
                        "Outputs are the same either way")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="Ray head HOST:PORT or ray://HOST:PORT (default: start a local Ray)")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="local: split the workloads over N processes (default 1: the sweep "
                        "is vectorised and takes well under a second in one process)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from costmodel.sweep import write_csv
    from costmodel.worked_example import (
        check_findings,
        print_worked_example,
        run_worked_example,
        select_workloads,
        summary_rows,
    )

    hardware = tuple(comma_names("--hardware", args.hardware))
    workloads = select_workloads(args.phase, args.workload)
    out = args.out
    parent = _check_out(out, args.overwrite)

    started = time.perf_counter()  # wall-clock ok
    result = _run(args, hardware, workloads, run_worked_example)
    sweep_s = time.perf_counter() - started  # wall-clock ok

    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        raise UserError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    try:
        rows = write_csv(result, tmp / "sweep.csv")
        frontier_rows = write_csv(result, tmp / "frontier.csv", result.columns["on_frontier"])
        pngs = []
        if args.plots:
            from costmodel.plots import write_plots

            pngs = [p.name for p in write_plots(result, tmp)]
        _move_into_place(tmp, out)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    files = ["sweep.csv", "frontier.csv", *pngs]
    if args.json:
        print_json({
            "model": args.model, "hardware": list(result.hardware_names),
            "workloads": [w.name for w in result.workloads], "out": str(out),
            "files": files, "configs_evaluated": result.configs_evaluated,
            "rows": rows, "frontier_rows": frontier_rows, "sweep_s": round(sweep_s, 4),
            "summary": summary_rows(result),
            "findings": [{"claim": f.claim, "holds": f.holds, "detail": f.detail,
                          "why": f.why}
                         for f in check_findings(result)],
        })
        return 0
    print_worked_example(result=result)
    sys.stdout.write(f"{result.configs_evaluated:,} configurations swept in {sweep_s:.2f} s; "
                     f"wrote {', '.join(files)} to {out}/\n")
    return 0


def _run(args: argparse.Namespace, hardware, workloads, run_worked_example):
    """In this process, or split by workload over an executor's workers."""
    if args.executor == "local" and args.workers == 1:
        if args.ray_address:
            raise UserError("--ray-address needs --executor ray")
        return run_worked_example(args.model, hardware, workloads)
    # Models and hardware are checked here, in this process, before any worker starts.
    from costmodel.hardware import load_hardware
    from costmodel.model import load_model
    from orchestrator.executors import ExecutorError, make_executor, map_ordered

    load_model(args.model)
    for name in hardware:
        load_hardware(name)
    try:
        workers = args.workers if args.executor == "local" else None
        with make_executor(args.executor, workers, args.ray_address) as executor:
            return run_worked_example(
                args.model, hardware, workloads,
                map_parts=lambda fn, shared, items: map_ordered(executor, fn, shared, items))
    except ExecutorError as exc:
        raise UserError(str(exc)) from None


def _check_out(out: Path, overwrite: bool) -> Path:
    """Refuse, before any work, an --out that cannot become a directory of results, or
    that holds files and may not be overwritten."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(f"--out {out}: holds files (an earlier sweep?); --overwrite replaces "
                        "them, or choose another directory")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise UserError(f"--out {out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (out.is_dir() and not os.access(out, os.W_OK)):
        raise UserError(f"--out {out}: not writable")
    return parent


def _move_into_place(tmp: Path, out: Path) -> None:
    """A new --out appears whole (one rename); into an existing one each file is
    replaced whole, so a reader never sees a half-written file."""
    if not out.exists():
        os.rename(tmp, out)
        return
    for path in sorted(tmp.iterdir()):
        os.replace(path, out / path.name)
