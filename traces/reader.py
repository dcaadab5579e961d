"""`read_sessions`: every supported trace, streamed as sessions."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from os import PathLike
from pathlib import Path

from traces.errors import ProblemSink
from traces.formats import READERS, Format, detect, parse_format, single_kind, trace_files
from traces.model import Session


def read_sessions(
    paths: str | PathLike | Iterable[str | PathLike],
    format: str | Format = "auto",
    *,
    sink: ProblemSink | None = None,
    one_kind: bool = False,
) -> Iterator[Session]:
    """Sessions of every file in `paths`, in file order, one at a time.

    A directory stands for its trace files, sorted by name. Each file gets
    its own block-id namespace (its position in this read, from 1). With a
    `sink`, problems are collected there and bad sessions skipped instead
    of raising `TraceError` at the first one. With `one_kind` (what a replay
    asks for), files of different detected formats are a `TraceError` naming
    them, raised before any session is read.
    """
    if isinstance(paths, str | PathLike):
        paths = [paths]
    paths = [Path(p) for p in paths]
    fmt = format if isinstance(format, Format) else parse_format(format)
    if one_kind and fmt is Format.AUTO:
        fmt = single_kind(paths)
    for namespace, path in enumerate(trace_files(paths), start=1):
        kind = detect(path) if fmt is Format.AUTO else fmt
        yield from READERS[kind](path, namespace, sink)
