"""Running one or more replays for the CLI: errors turned into one line, outputs written."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from orchestrator.cli._common import UserError
from orchestrator.cli._metrics_run import OM_NAME, metrics_hub
from orchestrator.control.policies import UnknownPolicyError
from orchestrator.run.output import (
    OutputError,
    SeriesWriter,
    check_out_dir,
    decision_logger,
    write_json,
)
from orchestrator.run.plugin_checks import PolicyError
from orchestrator.run.settings import Prepared, RunSettings, prepare, run_replay


def prepare_or_fail(paths, trace_format: str, settings: RunSettings) -> Prepared:
    try:
        prepared = prepare(paths, trace_format, settings)
    except UnknownPolicyError as exc:
        raise UserError(str(exc)) from None
    except ValueError as exc:
        if "no sessions" in str(exc):
            raise UserError(str(exc)) from None
        raise
    mtp = getattr(settings, "mtp", None)  # --mtp (CliRunSettings): every decode pool
    if mtp is not None:
        from dataclasses import replace

        from workers.cluster_toml import with_decode_mtp

        prepared = replace(prepared, cluster=with_decode_mtp(prepared.cluster, mtp))
    engine, probs = getattr(settings, "engine", None), getattr(settings, "mtp_acceptance", None)
    source = getattr(settings, "cost_source", None)
    if engine is not None or probs is not None or source is not None:
        # --engine, --mtp-acceptance, --cost-source
        from dataclasses import replace

        from workers.cluster_toml import with_service

        prepared = replace(prepared, cluster=with_service(prepared.cluster, engine, probs,
                                                          source))
    return prepared


def exit_status(summary: dict, signal_ends_run: bool = False) -> int:
    """A replay's exit status: 1 when a live run stopped for want of workers (it did not
    finish; its summary printed); 128 + the signal's number when SIGINT or SIGTERM
    stopped a live run (130 for Ctrl-C, as a virtual run stopped by it exits), unless
    a signal is how the command ends (`serve`); else 0."""
    import signal

    live = summary.get("live") or {}
    if live.get("stop_reason"):
        return 1
    if live.get("signal") and not signal_ends_run:
        return 128 + int(signal.Signals[live["signal"]])
    return 0


def warn_if_trace_runs_out(prepared: Prepared, settings: RunSettings) -> None:
    """One stderr line when the trace has fewer sessions than the load options ask for
    (`orchestrator.run.load_window`): the figures, and the --repeat that has enough."""
    from orchestrator.run.load_window import shortfall

    short = shortfall(settings.load, len(prepared.sessions))
    if short is not None:
        sys.stderr.write(short.note(settings.load) + "\n")


def series_format_or_fail(args: argparse.Namespace) -> None:
    if getattr(args, "series_format", "csv") == "parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise UserError("--series-format parquet: needs pyarrow "
                            "(pip install 'tokenfactory[parquet]')") from None


def out_dir_or_fail(out: str | None, overwrite: bool = False) -> Path | None:
    """--out checked before anything runs: refused when it holds anything, unless it
    is an earlier run and `overwrite` (`orchestrator.run.output.check_out_dir`)."""
    if out is None:
        return None
    try:
        check_out_dir(Path(out), overwrite)
    except OutputError as exc:
        raise UserError(str(exc)) from None
    return Path(out)


# What `--out DIR` holds after a replay, for `--help` (docs/metrics.md has the columns).
OUT_HELP = ("write the run into DIR, whole or not at all: summary.json (the --json "
            "figures), series.csv (one row per fast-loop period or idle span), "
            "decisions.jsonl (admission and reallocation decisions), metrics.om.gz "
            "(Prometheus metrics with timestamps, for `metrics backfill`; --metrics says "
            "which, none for no file); a DIR that exists is refused unless it is empty, or "
            "an earlier run and --overwrite is given")


def run_label(settings: RunSettings, prefix: str = "", name: str | None = None) -> str:
    """The run's `run` label (metrics, summary, trace events): `--run-name` when given,
    else `<controller>-seed<seed>`; a compare run is told from its neighbours by its
    files' prefix: after the name (`NAME-retire`), or, when named other than by its
    controller (`--clusters`, `--kv-policies`), in front of the default label."""
    label = prefix.removesuffix("-")
    if name:
        return f"{name}-{label}" if label else name
    run = f"{settings.controller}-seed{settings.seed}"
    return run if label in ("", settings.controller) else f"{label}-{run}"


def replay_into(prepared: Prepared, settings: RunSettings, directory: Path | None,
                args: argparse.Namespace, prefix: str = ""):
    """Run one replay; with a directory, write its summary, series, decision log and
    metrics.om; with --metrics-port, serve its metrics while it runs."""
    logger, log_file = (decision_logger(directory / f"{prefix}decisions.jsonl")
                        if directory is not None else (None, None))
    label = f"replay ({settings.controller})"
    hub = metrics_hub(args)
    run = run_label(settings, prefix, getattr(args, "run_name", None))
    listeners, recorder = hub.listeners(run, settings.controller,
                                        recording=directory is not None,
                                        spill_dir=directory)
    tracer = trace_recorder(args, settings)
    if tracer is not None:
        listeners = [*listeners, tracer]
    series_writer = None
    if directory is not None:
        fmt = getattr(args, "series_format", "csv")
        series_writer = SeriesWriter(directory / f"{prefix}series.{fmt}", fmt)
        listeners = [*listeners, series_writer]
    try:
        with (hub.serving(),
              replay_progress(label, enabled=False if args.no_progress else None) as progress):
            on_progress = None
            if progress is not None:
                listeners, on_progress = [*listeners, progress], progress.on_sessions
            try:
                result, summary = run_replay(prepared, settings, on_progress, logger=logger,
                                             listeners=listeners)
            except PolicyError as exc:
                raise UserError(str(exc)) from None
    finally:
        if log_file is not None:
            log_file.close()
    summary["run"] = run
    context_note(summary, settings.model)
    if directory is not None:
        write_json(directory / f"{prefix}summary.json", summary)
        series_writer.close(result.series)
        hub.write(recorder, directory / f"{prefix}{OM_NAME}", result.simulated_s)
    if tracer is not None:
        write_trace_events(tracer, Path(args.trace_events), prefix, run, result.simulated_s)
    return result, summary


def context_note(summary: dict, model: str) -> None:
    """One line on stderr when calls did not fit the model's context window."""
    requests = summary["requests"]
    refused, cut = requests["context_rejected"], requests["context_truncated"]
    if refused or cut:
        sys.stderr.write(f"note: {refused:,} calls refused (prompt beyond {model}'s context window) "
                         f"and {cut:,} with their output cut to fit it "
                         "(requests.context_rejected, requests.context_truncated)\n")


class ReplayProgress:
    """A replay's progress line: sessions finished of those started, calls completed, calls
    per wall second and simulated seconds per wall second, both since the run began.

    A run listener (it reads `orch.counters` and the simulated time its events carry) and
    the orchestrator's session callback (`on_sessions`); it redraws at most every
    `REDRAW_S` of wall time, so a call costs it one clock read.
    """

    REDRAW_S = 0.1

    def __init__(self, show, wall_clock=time.perf_counter) -> None:
        self.show = show  # show(done_sessions, total_sessions, text)
        self.wall_clock = wall_clock  # wall-clock ok: progress display only
        self.start_wall_s = wall_clock()
        self.sessions = (0, None)
        self.calls = 0
        self.simulated_s = 0.0
        self._drawn_s = -self.REDRAW_S

    def text(self) -> str:
        wall_s = max(self.wall_clock() - self.start_wall_s, 1e-9)
        return (f"{self.calls:,} calls, {self.calls / wall_s:,.0f} calls/s, "
                f"{self.simulated_s / wall_s:,.0f} sim s/wall s")

    def _tick(self, now_s: float, orch) -> None:
        self.simulated_s = now_s
        self.calls = orch.counters["completed"]
        if self.wall_clock() - self._drawn_s >= self.REDRAW_S:
            self.draw()

    def draw(self) -> None:
        self._drawn_s = self.wall_clock()
        self.show(*self.sessions, self.text())

    def on_sessions(self, done: int, total: int) -> None:
        self.sessions = (done, total)
        self.draw()

    def on_done(self, orch, _req, now_s: float) -> None:
        self._tick(now_s, orch)

    def on_sample(self, orch, _obs, now_s: float) -> None:
        self._tick(now_s, orch)

    def on_skip(self, orch, _first_s: float, last_s: float, _ticks: int) -> None:
        self._tick(last_s, orch)


@contextmanager
def replay_progress(label: str, enabled: bool | None = None, console=None):
    """A `ReplayProgress` drawing a rich bar on stderr (or `console`), None when hidden:
    hidden when stderr is not a terminal unless `enabled` forces it."""
    show = sys.stderr.isatty() if enabled is None else enabled
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(bar_width=12),
                  MofNCompleteColumn(), "sessions", TextColumn("{task.fields[rates]}"),
                  TimeElapsedColumn(), console=console or Console(stderr=True),
                  transient=True) as bar:
        task = bar.add_task(label, total=None, rates="")

        def show_line(done: int, total: int | None, text: str) -> None:
            bar.update(task, completed=done, total=total, rates=text)

        progress = ReplayProgress(show_line)
        yield progress
        progress.draw()  # the run's last figures, whatever the redraw cadence skipped


def trace_recorder(args: argparse.Namespace, settings: RunSettings):
    """A TraceRecorder when --trace-events is given, else None (the run keeps nothing)."""
    if getattr(args, "trace_events", None) is None:
        return None
    from orchestrator.run.trace_events import TraceRecorder

    return TraceRecorder(args.trace_events_max_calls, settings.seed)


def write_trace_events(tracer, path: Path, prefix: str, run: str,
                       simulated_s: float) -> None:
    """Write one run's trace (compare: `CONTROLLER-FILE` beside FILE); note a cut."""
    import sys

    from orchestrator.run.trace_events import write

    path = path.with_name(f"{prefix}{path.name}")
    try:
        write(path, tracer.render(simulated_s, run=run))
    except OSError as exc:
        raise UserError(f"--trace-events {path}: cannot write: {exc.strerror}") from None
    note = tracer.cut_note()
    if note is not None:
        sys.stderr.write(f"{note}: {path}\n")
