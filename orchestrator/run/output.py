"""A run's output directory, written whole or not at all.

Files go into a temporary directory beside `--out`, which is renamed into
place when the run succeeds; on any error it is removed, so a failed or
interrupted run leaves nothing half-written. An existing `--out` is written
only if it is empty, or, with `--overwrite`, if it holds an earlier run of
ours (marked by `RUN_MARKER`), which is then replaced whole; a directory of
anything else is never replaced.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.run.series import Series

RUN_MARKER = ".tokenfactory-run"


class OutputError(ValueError):
    """An --out the run may not write: names the path and why."""


def check_out_dir(out: Path, overwrite: bool = False) -> None:
    """Refuse, before anything runs, an --out the run may not write (module docstring)."""
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not (out / RUN_MARKER).exists():
            raise OutputError(f"--out {out}: exists, is not empty and is not an earlier run; "
                              "choose another directory")
        if not overwrite:
            raise OutputError(f"--out {out}: holds an earlier run; --overwrite replaces it, "
                              "or choose another directory")
    if not parent.is_dir():
        raise OutputError(f"--out {out}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"--out {out}: parent directory {parent} is not writable")


@contextmanager
def run_dir(out: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory; move it to `out` only if the block succeeds (an
    earlier run there is replaced only with `overwrite`: `check_out_dir`)."""
    out = Path(out)
    check_out_dir(out, overwrite)
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
        os.chmod(out, 0o777 & ~current_umask())
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def current_umask() -> int:
    """The process's file-mode creation mask (read by setting it and setting it back:
    mkstemp and mkdtemp make private files, which a finished output should not stay)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, allow_nan=False) + "\n")


SERIES_COLUMNS = ("time_s", "decode_occupancy", "decode_running", "decode_slots", "backlog",
                  "ready_depth", "admission_queue", "held", "upstream_waiting", "admitted", "completed",
                  "ttft_mean_s", "in_flight", "submitted_total", "completed_total",
                  "rejected_total", "reason", "admit", "ticks")


SERIES_FORMATS = ("csv", "parquet")


class SeriesWriter:
    """The series written as the run goes: a run listener that appends the records taken
    since its last write every `FLUSH_RECORDS` records (a skipped idle span is one),
    and the rest at `close`. CSV (one row per record, `ticks` samples each) or Parquet
    (a row group per write; needs pyarrow). Same records, same file, however it was cut.
    """

    FLUSH_RECORDS = 4096

    def __init__(self, path: Path, fmt: str = "csv") -> None:
        if fmt not in SERIES_FORMATS:
            raise ValueError(f"series format must be one of {SERIES_FORMATS}, got {fmt!r}")
        self.path, self.fmt = Path(path), fmt
        self.written = 0  # records on disk
        self._columns: tuple[str, ...] | None = None
        self._file = self._csv = self._parquet = None

    def on_sample(self, orch, _obs, _now_s: float) -> None:
        # The newest record waits for the decision taken on it.
        if orch.series.records - 1 - self.written >= self.FLUSH_RECORDS:
            self.write(orch.series, orch.series.records - 1)

    def on_skip(self, orch, *_args) -> None:
        self.on_sample(orch, None, 0.0)

    def write(self, series: Series, stop: int | None = None) -> None:
        """Append the records not yet written, up to `stop` (default: all)."""
        stop = series.records if stop is None else stop
        if self._columns is None:
            self._open(series)
        # The last sample (taken as the run ends) has no decision: its reason and admit
        # are empty (None in Parquet).
        cols = [_padded(getattr(series, c) if c in SERIES_COLUMNS
                        else series.latency_breakdown_s[c], self.written, stop)
                for c in self._columns]
        if self.fmt == "csv":
            self._csv.writerows(zip(*cols, strict=True))
        else:
            import pyarrow as pa

            self._parquet.write_table(pa.table(
                {name: [None if v == "" else v for v in c]
                 for name, c in zip(self._columns, cols, strict=True)},
                schema=self._schema))
        self.written = stop

    def close(self, series: Series) -> None:
        self.write(series)
        if self._file is not None:
            self._file.close()
        if self._parquet is not None:
            self._parquet.close()

    def _open(self, series: Series) -> None:
        self._columns = (*SERIES_COLUMNS, *sorted(series.latency_breakdown_s))
        if self.fmt == "csv":
            self._file = self.path.open("w", newline="")
            self._csv = csv.writer(self._file)
            self._csv.writerow(self._columns)
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {c: pa.string() if c == "reason" else
                 pa.int64() if isinstance(getattr(series, c, None), array) and
                 getattr(series, c).typecode == "q" else pa.float64() for c in self._columns}
        self._schema = pa.schema(list(types.items()))
        self._parquet = pq.ParquetWriter(self.path, self._schema)


def _padded(column, start: int, stop: int) -> list:
    values = list(column[start:stop])
    return values + [""] * (stop - start - len(values))


def write_series_csv(path: Path, series: Series) -> None:
    """One row per record: a sample, or (`ticks` > 1) that many idle samples one period
    apart from `time_s` (docs/metrics.md)."""
    writer = SeriesWriter(path)
    writer.close(series)


class DecisionFile:
    """Decisions as JSON lines: per decision its fields and `event`, keys sorted, one
    object a line: the lines structlog's `JSONRenderer(sort_keys=True)` and `PrintLogger`
    wrote, without a logger bound and a processor chain run per call (a replay logs a
    decision every few samples). Buffered, not flushed per line (a system call each): the
    file sits in the run's temporary directory until the run ends (`run_dir`)."""

    def __init__(self, file) -> None:
        self._file = file
        self._encode = json.JSONEncoder(sort_keys=True, default=repr).encode

    def info(self, event: str, **fields: object) -> None:
        fields["event"] = event
        self._file.write(self._encode(fields) + "\n")


def decision_logger(path: Path):
    """A logger writing one JSON object per decision to `path`, and the file."""
    f = path.open("w")
    return DecisionFile(f), f
