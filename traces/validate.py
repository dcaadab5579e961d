"""`trace validate`: read everything, collect every problem instead of stopping."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

from traces.errors import ProblemSink, TraceError
from traces.formats import trace_files
from traces.reader import read_sessions


@dataclass(frozen=True)
class ValidationResult:
    files: int
    sessions: int
    calls: int
    problems: tuple[TraceError, ...]  # the first few
    problem_count: int  # all of them

    @property
    def ok(self) -> bool:
        return self.problem_count == 0


def validate(
    paths: Iterable[str | PathLike], format: str = "auto", keep: int = 20
) -> ValidationResult:
    sink = ProblemSink(keep)
    files = sessions = calls = 0
    try:
        listed = list(trace_files([Path(p) for p in paths]))
    except TraceError as exc:
        sink.add(exc)
        listed = []
    for path in listed:
        files += 1
        try:
            for session in read_sessions([path], format, sink=sink):
                sessions += 1
                calls += len(session.calls)
        except TraceError as exc:  # a problem that ends the file (damaged gzip, bad header)
            sink.add(exc)
    if listed and not sessions and not sink.count:  # (headers only: replay refuses them)
        sink.add(TraceError(", ".join(map(str, listed)), None, "sessions",
                            "none: the trace holds no call to replay"))
    return ValidationResult(files, sessions, calls, tuple(sink.problems), sink.count)
