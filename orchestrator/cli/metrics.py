"""`tokenfactory metrics backfill RUN_DIR --tsdb DIR`: a replay's metrics into Prometheus.

Each `*metrics.om.gz` of a run directory (one per controller for `compare`;
`*metrics.om` as earlier runs wrote them) goes, decompressed into the temporary
directory, through `promtool tsdb create-blocks-from openmetrics` (which reads
plain text only) into a temporary directory beside DIR; the blocks move into DIR only when every file went
through, so a failure leaves no partial TSDB. Start Prometheus with
`--storage.tsdb.path DIR` (or copy the blocks into its data directory) and
open the dashboard over the printed time range.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.cli._common import UserError
from orchestrator.run.openmetrics import time_range
from orchestrator.run.output import RUN_MARKER


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("metrics", help="Prometheus metrics of replays: backfill",
                       description="Work with the metrics.om files replays write under --out.")
    msub = p.add_subparsers(dest="metrics_command", metavar="ACTION", parser_class=type(p))
    msub.required = True
    b = msub.add_parser("backfill", help="load a run's metrics.om into a Prometheus TSDB",
                        description="Load every metrics.om of RUN_DIR into the Prometheus data "
                                    "directory DIR with promtool, all or nothing.")
    b.add_argument("run_dir", metavar="RUN_DIR", help="a replay's or compare's --out")
    b.add_argument("--tsdb", required=True, metavar="DIR",
                   help="Prometheus data directory (created if missing)")
    b.set_defaults(run=run_backfill)


def om_files(run_dir: Path) -> list[Path]:
    if not run_dir.is_dir() or not (run_dir / RUN_MARKER).exists():
        raise UserError(f"{run_dir}: not a tokenfactory run directory (no {RUN_MARKER})")
    files = sorted([*run_dir.glob("*metrics.om.gz"), *run_dir.glob("*metrics.om")])
    if not files:
        raise UserError(f"{run_dir}: no metrics.om.gz in this run directory")
    return files


def check_tsdb(tsdb: Path) -> Path:
    parent = tsdb.parent if str(tsdb.parent) else Path(".")
    if tsdb.exists() and not tsdb.is_dir():
        raise UserError(f"--tsdb {tsdb}: exists and is not a directory")
    if not parent.is_dir():
        raise UserError(f"--tsdb {tsdb}: parent directory {parent} does not exist")
    writable = tsdb if tsdb.exists() else parent
    if not os.access(writable, os.W_OK):
        raise UserError(f"--tsdb {tsdb}: {writable} is not writable")
    return parent


def backfill(run_dir: Path, tsdb: Path, promtool: str | None = None) -> tuple[float, float, int]:
    """Load the run's files into `tsdb`; returns (first, last) Unix time and blocks added."""
    files = om_files(run_dir)
    parent = check_tsdb(tsdb)
    promtool = promtool or shutil.which("promtool")
    if promtool is None:
        raise UserError("promtool not found on PATH: install Prometheus "
                        "(Debian: apt-get install prometheus)")
    try:
        ranges = [r for r in (time_range(f) for f in files) if r is not None]
    except ValueError as exc:
        raise UserError(str(exc)) from None
    except (OSError, EOFError) as exc:  # a broken gzip stream
        raise UserError(f"{exc.filename or run_dir}: not a readable metrics file: "
                        f"{exc}") from None
    if not ranges:
        raise UserError(f"{run_dir}: its metrics.om files hold no samples")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{tsdb.name}.backfill.", dir=parent))
    except OSError as exc:
        raise UserError(f"--tsdb {tsdb}: cannot write in {parent}: {exc.strerror or exc}") from None
    created = not tsdb.exists()
    try:
        for f in files:
            text = f
            if f.suffix == ".gz":  # promtool reads plain text: decompressed beside the blocks
                text = tmp / f".{f.stem}"
                with gzip.open(f, "rb") as src, text.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                                   str(text), str(tmp)], capture_output=True, text=True)
            if text != f:
                text.unlink()
            if done.returncode != 0:
                lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
                raise UserError(f"{f}: promtool refused it: {lines[-1]}")
        blocks = sorted(d for d in tmp.iterdir() if d.is_dir())
        tsdb.mkdir(exist_ok=True)
        moved: list[Path] = []
        try:
            for block in blocks:
                target = tsdb / block.name
                os.replace(block, target)
                moved.append(target)
        except OSError as exc:
            for target in moved:
                shutil.rmtree(target, ignore_errors=True)
            if created:
                shutil.rmtree(tsdb, ignore_errors=True)
            raise UserError(f"--tsdb {tsdb}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return min(r[0] for r in ranges), max(r[1] for r in ranges), len(blocks)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def run_backfill(args: argparse.Namespace) -> int:
    first, last, blocks = backfill(Path(args.run_dir), Path(args.tsdb))
    print(f"{args.run_dir}: {blocks} block(s) into {args.tsdb}, {_iso(first)} to {_iso(last)}")
    print(f"start Prometheus with --storage.tsdb.path {args.tsdb}; in Grafana open the "
          f"dashboard with ?from={int(first * 1000)}&to={int(last * 1000) + 1000}")
    return 0
