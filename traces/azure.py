"""Reader for the Azure LLM inference CSV: every request is a one-call session.

The trace has no sessions and no prefix information: each request gets fresh
block ids that nothing else shares, so a replay sees no prefix hits, and its
arrival is its timestamp in seconds after the file's first request.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import msgspec

from traces._blocks import LOCAL_BITS
from traces._io import iter_lines, msgspec_problem
from traces._schema import Tokens
from traces.errors import ProblemSink, TraceError, report
from traces.model import Call, RecordError, Session

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# Block granularity given to requests that carry no hashes (same as the agent traces).
BLOCK_SIZE = 64


class _Row(msgspec.Struct):
    TIMESTAMP: datetime
    ContextTokens: Tokens
    GeneratedTokens: Tokens


def read_azure(path: Path, namespace: int, sink: ProblemSink | None = None) -> Iterator[Session]:
    lines = iter_lines(path)
    lineno, first = next(lines)
    header = tuple(h.strip() for h in first.decode("utf-8", "replace").split(","))
    if header != HEADER:
        raise TraceError(path, lineno, "header", f"expected {','.join(HEADER)}, got "
                         f"{first[:80].decode('utf-8', 'replace').rstrip()!r}")
    stem = path.name.split(".")[0]
    next_id = itertools.count(namespace << LOCAL_BITS)
    origin: datetime | None = None
    prev_s = 0.0
    for lineno, line in lines:
        cells = line.decode("utf-8", "replace").strip().split(",")
        if len(cells) != len(HEADER):
            report(sink, TraceError(path, lineno, "row", f"expected 3 columns, got {len(cells)}"))
            continue
        try:
            row = msgspec.convert(dict(zip(HEADER, cells, strict=True)), _Row, strict=False)
        except msgspec.ValidationError as exc:
            report(sink, TraceError(path, lineno, *msgspec_problem(exc)))
            continue
        if row.TIMESTAMP.tzinfo is not None:  # a bare number or a zone: not this trace's clock
            report(
                sink,
                TraceError(
                    path, lineno, "TIMESTAMP", f"expected a local date and time, got {cells[0]!r}"
                ),
            )
            continue
        if origin is None:
            origin = row.TIMESTAMP
        arrival_s = (row.TIMESTAMP - origin).total_seconds()
        if arrival_s < prev_s:
            report(sink, TraceError(path, lineno, "TIMESTAMP", "goes back before the previous row"))
            continue
        prev_s = arrival_s
        session_id = f"{stem}-{lineno}"
        n_blocks = row.ContextTokens // BLOCK_SIZE
        try:
            call = Call(
                session_id=session_id,
                index=0,
                input_tokens=row.ContextTokens,
                cached_tokens=0,
                new_tokens=row.ContextTokens,
                output_tokens=row.GeneratedTokens,
                think_s=0.0,
                is_subagent=False,
                reset_before=False,
                block_size=BLOCK_SIZE,
                block_ids=tuple(itertools.islice(next_id, n_blocks)),
                arrival_s=arrival_s,
            )
        except RecordError as exc:
            report(sink, TraceError(path, lineno, exc.field, exc.problem))
            continue
        yield Session(session_id, str(path), arrival_s, (call,))
