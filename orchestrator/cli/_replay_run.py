"""Running one or more replays for the CLI: errors turned into one line, outputs written."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli._common import UserError
from orchestrator.cli._metrics_run import OM_NAME, metrics_hub
from orchestrator.control.policies import UnknownPolicyError
from orchestrator.run.output import (
    OutputError,
    check_out_dir,
    decision_logger,
    write_json,
    write_series_csv,
)
from orchestrator.run.replay import PolicyError
from orchestrator.run.settings import Prepared, RunSettings, prepare, progress_bar, run_replay


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
    return prepared


def out_dir_or_fail(out: str | None) -> Path | None:
    if out is None:
        return None
    try:
        check_out_dir(Path(out))
    except OutputError as exc:
        raise UserError(str(exc)) from None
    return Path(out)


def replay_into(prepared: Prepared, settings: RunSettings, directory: Path | None,
                args: argparse.Namespace, prefix: str = ""):
    """Run one replay; with a directory, write its summary, series, decision log and
    metrics.om; with --metrics-port, serve its metrics while it runs."""
    logger, log_file = (decision_logger(directory / f"{prefix}decisions.jsonl")
                        if directory is not None else (None, None))
    label = f"replay ({settings.controller})"
    hub = metrics_hub(args)
    listeners, recorder = hub.listeners(f"{settings.controller}-seed{settings.seed}",
                                        settings.controller, recording=directory is not None)
    tracer = trace_recorder(args, settings)
    if tracer is not None:
        listeners = [*listeners, tracer]
    try:
        with (hub.serving(),
              progress_bar(label, enabled=False if args.no_progress else None) as on_progress):
            try:
                result, summary = run_replay(prepared, settings, on_progress, logger=logger,
                                             listeners=listeners)
            except PolicyError as exc:
                raise UserError(str(exc)) from None
    finally:
        if log_file is not None:
            log_file.close()
    if directory is not None:
        write_json(directory / f"{prefix}summary.json", summary)
        write_series_csv(directory / f"{prefix}series.csv", result.series)
        hub.write(recorder, directory / f"{prefix}{OM_NAME}", result.simulated_s)
    if tracer is not None:
        write_trace_events(tracer, Path(args.trace_events), prefix, settings, result.simulated_s)
    return result, summary


def trace_recorder(args: argparse.Namespace, settings: RunSettings):
    """A TraceRecorder when --trace-events is given, else None (the run keeps nothing)."""
    if getattr(args, "trace_events", None) is None:
        return None
    from orchestrator.run.trace_events import TraceRecorder

    return TraceRecorder(args.trace_events_max_calls, settings.seed)


def write_trace_events(tracer, path: Path, prefix: str, settings: RunSettings,
                       simulated_s: float) -> None:
    """Write one run's trace (compare: `CONTROLLER-FILE` beside FILE); note a cut."""
    import sys

    from orchestrator.run.trace_events import write

    path = path.with_name(f"{prefix}{path.name}")
    try:
        write(path, tracer.render(simulated_s, run=f"{settings.controller}-seed{settings.seed}"))
    except OSError as exc:
        raise UserError(f"--trace-events {path}: cannot write: {exc.strerror}") from None
    note = tracer.cut_note()
    if note is not None:
        sys.stderr.write(f"{note}: {path}\n")
