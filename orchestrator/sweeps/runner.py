"""Run a sweep: validate everything, claim --out, run the points that are not done
on the chosen executor, journal each as it finishes, then write the table, the
frontiers and report.html (orchestrator.sweeps.report)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchestrator.executors import make_executor
from orchestrator.sweeps.frontier import write_frontiers
from orchestrator.sweeps.grid import Grid, GridError
from orchestrator.sweeps.point import build_tasks, run_point
from orchestrator.sweeps.report import write_report
from orchestrator.sweeps.store import REPORT, TABLE, SweepDir, check_out, manifest_for

TABLE_REWRITE_S = 2.0  # rewrite table.csv at most this often while points finish


@dataclass(frozen=True)
class SweepOptions:
    out: Path
    executor: str = "local"
    workers: int | None = None
    ray_address: str | None = None
    resume: bool = False
    force: bool = False
    plots: bool = True
    progress: bool | None = None  # None: a bar when stderr is a terminal


@dataclass(frozen=True)
class SweepReport:
    points: int
    ran: int
    skipped: int
    failed: int
    wall_s: float
    files: tuple[str, ...]
    rows: tuple[dict, ...] = ()  # table.csv's rows, in the grid's order
    varying: tuple[str, ...] = ()  # the grid's keys with more than one value


def read_sessions_or_fail(paths: Sequence[str | Path], trace_format: str):
    from traces import read_sessions

    sessions = tuple(read_sessions(list(paths), trace_format, one_kind=True))
    if not sessions:
        raise GridError(f"no sessions in {', '.join(str(p) for p in paths)}")
    return sessions


@contextmanager
def _progress(total: int, label: str, enabled: bool | None):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    show = sys.stderr.isatty() if enabled is None else enabled
    if not show or total == 0:
        yield lambda: None
        return
    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), "points", TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.advance(task)


def run_sweep_replay(grid: Grid, trace_paths: Sequence[str | Path], trace_format: str,
                     options: SweepOptions) -> SweepReport:
    started = time.perf_counter()  # wall-clock ok
    sessions = read_sessions_or_fail(trace_paths, trace_format)
    tasks = build_tasks(grid, sessions)  # every point checked before anything runs
    manifest = manifest_for(grid, [str(Path(p).resolve()) for p in trace_paths], trace_format)
    check_out(options.out, manifest, options.resume, options.force)
    executor = make_executor(options.executor, options.workers, options.ray_address)
    ran = failed = 0
    with executor:  # connects to Ray (bounded) before --out is touched
        store = SweepDir(options.out, manifest, options.resume, options.force)
        try:
            done = store.done()
            todo = [t for t in tasks if t.point_id not in done]
            label = f"sweep ({executor.name}, {executor.workers or 'all'} workers)"
            last_write = time.monotonic()  # wall-clock ok
            with _progress(len(todo), label, options.progress) as advance:
                for index, outcome in executor.run(run_point, sessions, todo):
                    task = todo[index]
                    record = outcome.value if outcome.error is None else {
                        "point_id": task.point_id, "values": dict(task.values),
                        "summary": None, "error": outcome.error, "warnings": ""}
                    store.add(record)
                    ran += 1
                    failed += record["error"] is not None
                    advance()
                    if time.monotonic() - last_write > TABLE_REWRITE_S:  # wall-clock ok
                        store.write_table(grid)
                        last_write = time.monotonic()  # wall-clock ok
        finally:
            columns, rows = store.write_table(grid)  # also after an interruption
            store.close()
    varying = [k for k, values in grid.axes if len(values) > 1]
    files = (TABLE, *write_frontiers(options.out, columns, rows, varying, options.plots))
    write_report(options.out / REPORT, rows, varying, _grid_text(grid),
                 [options.out / f for f in files if f.endswith(".png")],
                 f"tokenfactory sweep-replay: {len(tasks)} points")
    return SweepReport(points=len(tasks), ran=ran, skipped=len(tasks) - len(todo),
                       failed=failed, wall_s=time.perf_counter() - started,  # wall-clock ok
                       files=(*files, REPORT), rows=tuple(rows), varying=tuple(varying))


def _grid_text(grid: Grid) -> str:
    """The grid as its file would say it: one `key = [values]` line per axis."""
    import json

    return "\n".join(f"{key} = {json.dumps(list(values), default=str)}"
                     for key, values in grid.axes)
