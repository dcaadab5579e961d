"""A run's output directory, written whole or not at all.

Files go into a temporary directory beside `--out`, which is renamed into
place when the run succeeds; on any error it is removed, so a failed or
interrupted run leaves nothing half-written. An existing `--out` is replaced
only if it is empty or holds an earlier run of ours (marked by `RUN_MARKER`).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from orchestrator.run.series import Series

RUN_MARKER = ".tokenfactory-run"


class OutputError(ValueError):
    """An --out the run may not write: names the path and why."""


def check_out_dir(out: Path) -> None:
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / RUN_MARKER).exists():
        raise OutputError(f"--out {out}: exists, is not empty and is not an earlier run; "
                          "choose another directory")
    if not parent.is_dir():
        raise OutputError(f"--out {out}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"--out {out}: parent directory {parent} is not writable")


@contextmanager
def run_dir(out: Path) -> Iterator[Path]:
    """Yield a temporary directory; move it to `out` only if the block succeeds."""
    out = Path(out)
    check_out_dir(out)
    parent = out.parent if str(out.parent) else Path(".")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    except OSError as exc:
        raise OutputError(f"--out {out}: cannot write in {parent}: {exc.strerror}") from None
    try:
        (tmp / RUN_MARKER).write_text("tokenfactory run directory\n")
        yield tmp
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=parent))
            os.replace(out, old / "run")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
        os.chmod(out, 0o755)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n")


SERIES_COLUMNS = ("time_s", "decode_occupancy", "decode_running", "decode_slots", "backlog",
                  "ready_depth", "admission_queue", "upstream_waiting", "admitted", "completed",
                  "ttft_mean_s", "in_flight", "submitted_total", "completed_total",
                  "rejected_total", "reason", "admit", "ticks")


def write_series_csv(path: Path, series: Series) -> None:
    """One row per record: a sample, or (`ticks` > 1) that many idle samples one period
    apart from `time_s` (docs/metrics.md)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        parts = sorted(series.latency_breakdown_s)  # "<part>_<p50|p90|p99>_s", per period
        w.writerow((*SERIES_COLUMNS, *parts))
        for i in range(series.records):
            row = [getattr(series, c)[i] if i < len(getattr(series, c)) else ""
                   for c in SERIES_COLUMNS]
            row += [series.latency_breakdown_s[c][i] if i < len(series.latency_breakdown_s[c])
                    else "" for c in parts]
            w.writerow(row)


def decision_logger(path: Path):
    """A structlog logger writing one JSON object per decision to `path`."""
    f = path.open("w")
    logger = structlog.wrap_logger(
        structlog.PrintLogger(file=f),
        processors=[structlog.processors.JSONRenderer(sort_keys=True)],
    )
    return logger, f
