"""A sweep's directory: manifest, journal of finished points, and the table.

- `sweep.json`, the manifest, names what the directory holds: the normalised
  grid, the traces and a hash of both. Results of another grid are refused.
- `points.jsonl`, the journal: one JSON record per finished point, appended
  and flushed as each point finishes. `--resume` reads it back; a line cut
  short by an interruption is dropped and its point runs again.
- `table.csv`: the grid's keys, `point_id`, the summary flattened with dotted
  names, then `error`; one row per finished point in the grid's order. It is
  rewritten whole (temporary file, then rename) from the journal, so a reader
  never sees half a table.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.sweeps.grid import Grid, GridError

MANIFEST = "sweep.json"
JOURNAL = "points.jsonl"
TABLE = "table.csv"
REPORT = "report.html"
LOCK = ".sweep.lock"
KIND = "tokenfactory sweep-replay"
# Files a sweep writes; --force removes only these (`--overwrite`, also spelt --force).
OURS = (MANIFEST, JOURNAL, TABLE, "frontiers.csv", "frontier_ttft_p99.png",
        "frontier_tpot_p99.png", "frontier_energy_per_call.png", REPORT)


def manifest_for(grid: Grid, traces: list[str], trace_format: str) -> dict[str, Any]:
    body = {"grid": grid.normalised(), "traces": traces, "format": trace_format}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return {"kind": KIND, "identity": digest, **body, "points": len(grid)}


def flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'ttft_s': {'p99': x}} -> {'ttft_s.p99': x}."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if isinstance(value, dict):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # shortest form that reads back to the same float
    if isinstance(value, list | tuple):
        return json.dumps(value)
    return str(value)


def write_atomic(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            write(fh)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def table_rows(grid: Grid, records: dict[str, dict]) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and rows, in the grid's order, for the points that have a record."""
    from orchestrator.sweeps.grid import point_id

    rows, summary_cols = [], {}
    for values in grid.points():
        rec = records.get(point_id(values))
        if rec is None:
            continue
        flat = flatten(rec["summary"]) if rec.get("summary") else {}
        # A summary field named like a grid key (`controller`) keeps both columns.
        flat = {(f"summary.{k}" if k in values or k in ("point_id", "error") else k): v
                for k, v in flat.items()}
        summary_cols |= dict.fromkeys(flat)
        rows.append({**values, "point_id": rec["point_id"], **flat, "error": rec.get("error")})
    return [*grid.keys, "point_id", *summary_cols, "error"], rows


def write_table(path: Path, columns: list[str], rows: Iterable[dict[str, Any]]) -> None:
    def write(fh) -> None:
        w = csv.writer(fh)
        w.writerow(columns)
        for row in rows:
            w.writerow([_cell(row.get(c)) for c in columns])
    write_atomic(path, write)


def _old_manifest(out: Path) -> dict | None:
    path = out / MANIFEST
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise GridError(f"--out {out}: {MANIFEST} is not a sweep manifest")
    return data


def check_out(out: Path, manifest: dict[str, Any], resume: bool, force: bool) -> str:
    """What a sweep may do with `out`, decided before anything runs or is written:
    "fresh", "resume" or "replace" (--force over earlier results); else GridError."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise GridError(f"--out {out}: exists and is not a directory")
    if not out.exists():
        parent = out.resolve().parent
        if not parent.is_dir():
            raise GridError(f"--out {out}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise GridError(f"--out {out}: directory {parent} is not writable")
        return "fresh"
    if not os.access(out, os.W_OK):
        raise GridError(f"--out {out}: not writable")
    old = _old_manifest(out)
    if old is None:
        if any(p.name != LOCK for p in out.iterdir()):
            raise GridError(f"--out {out}: not empty and holds no sweep; choose another "
                            "directory")
        return "fresh"
    if old.get("identity") != manifest["identity"]:
        if not force:
            raise GridError(f"--out {out}: holds results of a different grid or traces "
                            f"({old.get('points', '?')} points); --overwrite to replace them")
        return "replace"
    if force:
        return "replace"
    if not resume:
        raise GridError(f"--out {out}: already holds results of this grid; --resume to run "
                        "only what is missing, --overwrite to start over")
    return "resume"


class SweepDir:
    """An --out directory claimed for one sweep (an exclusive lock while it runs)."""

    def __init__(self, out: Path, manifest: dict[str, Any], resume: bool, force: bool):
        self.out = Path(out)
        self.manifest = manifest
        self._check_and_claim(resume, force)
        self.records = self._read_journal() if self.resuming else {}
        self._rewrite_journal()
        self._journal = (self.out / JOURNAL).open("a")

    def _check_and_claim(self, resume: bool, force: bool) -> None:
        out = self.out
        verdict = check_out(out, self.manifest, resume, force)
        if not out.exists():
            try:
                out.mkdir()
            except OSError as exc:
                raise GridError(f"--out {out}: cannot create: {exc.strerror}") from None
        self._lock = (out / LOCK).open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise GridError(f"--out {out}: another sweep is writing there") from None
        if verdict == "replace":
            for name in OURS:
                (out / name).unlink(missing_ok=True)
        self.resuming = verdict == "resume"
        write_atomic(out / MANIFEST, lambda fh: fh.write(json.dumps(self.manifest, indent=2)
                                                         + "\n"))

    def _read_journal(self) -> dict[str, dict]:
        records: dict[str, dict] = {}
        path = self.out / JOURNAL
        if not path.exists():
            return records
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # cut short by an interruption: that point runs again
            if isinstance(rec, dict) and "point_id" in rec:
                records[rec["point_id"]] = rec
        return records

    def _rewrite_journal(self) -> None:
        recs = list(self.records.values())
        write_atomic(self.out / JOURNAL,
                     lambda fh: fh.writelines(json.dumps(r) + "\n" for r in recs))

    def done(self) -> set[str]:
        """Points with a summary; failed points run again on --resume."""
        return {pid for pid, rec in self.records.items() if rec.get("error") is None}

    def add(self, record: dict[str, Any]) -> None:
        self._journal.write(json.dumps(record, allow_nan=True) + "\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())
        self.records[record["point_id"]] = record

    def write_table(self, grid: Grid) -> tuple[list[str], list[dict[str, Any]]]:
        columns, rows = table_rows(grid, self.records)
        write_table(self.out / TABLE, columns, rows)
        return columns, rows

    def close(self) -> None:
        self._journal.close()
        self._lock.close()
