"""The native trace format (JSON lines, version 1): reader and writer.

The format is documented, completely, in `docs/trace-format.md`; that page
is the contract and this module follows it. In short: a header line
`{"format": "tokenfactory-trace", "version": 1, "block_size": 64}`, then one
line per model call; a session's calls are contiguous and in issue order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np

from traces._blocks import LOCAL_BITS, SessionBlocks
from traces._io import iter_lines, msgspec_problem
from traces._schema import BlockSize, LocalBlockId, NonEmpty, Seconds, Tokens
from traces.errors import ProblemSink, TraceError, report
from traces.model import MAIN_AGENT, Call, RecordError, Session

FORMAT_NAME = "tokenfactory-trace"
VERSION = 1


class Header(msgspec.Struct, forbid_unknown_fields=True):
    format: Literal["tokenfactory-trace"]
    version: Literal[1]
    block_size: BlockSize
    source: str | None = None


class CallRecord(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    session: NonEmpty
    input_tokens: Tokens
    output_tokens: Tokens
    think_s: Seconds = 0.0
    arrival_s: Seconds | None = None
    block_ids: list[LocalBlockId] | None = None
    agent: NonEmpty = MAIN_AGENT
    reset_before: bool = False
    service_s: Seconds | None = None


_HEADER = msgspec.json.Decoder(Header)
_CALL = msgspec.json.Decoder(CallRecord)


class _Open:
    def __init__(self, session_id: str, namespace: int):
        self.session_id = session_id
        self.blocks = SessionBlocks(namespace)
        self.calls: list[Call] = []
        self.ok = True
        self.last_line = 0


def read_native(path: Path, namespace: int, sink: ProblemSink | None = None) -> Iterator[Session]:
    lines = iter_lines(path)
    lineno, first = next(lines)
    try:
        header = _HEADER.decode(first)
    except msgspec.ValidationError as exc:
        raise TraceError(path, lineno, *msgspec_problem(exc)) from None
    except msgspec.DecodeError as exc:
        raise TraceError(path, lineno, "json", str(exc)) from None
    # Calls without block ids get fresh ones from the top of the namespace,
    # far above any id a file is likely to use.
    fresh = itertools.count((namespace << LOCAL_BITS) + (1 << (LOCAL_BITS - 1)))
    current: _Open | None = None
    ended: dict[str, int] = {}  # session id -> the line of its last call
    for lineno, line in lines:
        try:
            rec = _CALL.decode(line)
        except msgspec.ValidationError as exc:
            report(sink, TraceError(path, lineno, *msgspec_problem(exc)))
            continue
        except msgspec.DecodeError as exc:
            report(sink, TraceError(path, lineno, "json", str(exc)))
            continue
        if current is None or rec.session != current.session_id:
            if current is not None:
                ended[current.session_id] = current.last_line
                if current.ok and current.calls:
                    yield _session(current, path)
            current = _Open(rec.session, namespace)
            if rec.session in ended:
                current.ok = False
                report(sink, TraceError(path, lineno, "session", f"{rec.session!r} again after "
                                        f"other sessions; its lines must be contiguous (it "
                                        f"ended at line {ended[rec.session]})"))
                continue
        current.last_line = lineno
        try:
            _add(current, rec, header.block_size, fresh)
        except RecordError as exc:
            current.ok = False
            report(sink, TraceError(path, lineno, exc.field, exc.problem))
    if current is not None and current.ok and current.calls:
        yield _session(current, path)


def _add(session: _Open, rec: CallRecord, block_size: int, fresh: Iterator[int]) -> None:
    prev = session.calls[-1] if session.calls else None
    if prev is not None and (prev.arrival_s is None) != (rec.arrival_s is None):
        raise RecordError("arrival_s", "give it on every call of a session or on none")
    if prev is not None and rec.arrival_s is not None and rec.arrival_s < prev.arrival_s:
        raise RecordError("arrival_s", f"{rec.arrival_s} goes back before {prev.arrival_s}")
    n_blocks = rec.input_tokens // block_size
    if rec.block_ids is None:
        local = None
    elif len(rec.block_ids) != n_blocks:
        raise RecordError(
            "block_ids",
            f"expected {n_blocks} ids (one per full {block_size}-token block of "
            f"{rec.input_tokens} input tokens), got {len(rec.block_ids)}",
        )
    else:
        local = rec.block_ids
    if local is None:
        block_ids = tuple(itertools.islice(fresh, n_blocks))
        cached = 0
    else:
        cached_blocks, block_ids = session.blocks.add(rec.agent, local)
        cached = cached_blocks * block_size
    session.calls.append(
        Call(
            session_id=session.session_id,
            index=len(session.calls),
            input_tokens=rec.input_tokens,
            cached_tokens=cached,
            new_tokens=rec.input_tokens - cached,
            output_tokens=rec.output_tokens,
            think_s=rec.think_s if prev is not None else 0.0,
            is_subagent=rec.agent != MAIN_AGENT,
            reset_before=rec.reset_before,
            block_size=block_size,
            block_ids=block_ids,
            arrival_s=rec.arrival_s,
            agent_id=rec.agent,
            service_s=rec.service_s,
        )
    )


def _session(session: _Open, path: Path) -> Session:
    start = session.calls[0].arrival_s
    return Session(session.session_id, str(path), start, tuple(session.calls))


class _IdMap:
    """Maps global ids back to file-local ids for writing.

    Ids of the first source namespace are written as their local part; each
    further namespace gets its own 2**32-wide band, so merging sessions from
    several files into one native file keeps them apart.
    """

    def __init__(self) -> None:
        self._bands: dict[int, int] = {}

    def local(self, ids: tuple[int, ...]) -> list[int]:
        if not ids:
            return []
        arr = np.asarray(ids, dtype=np.uint64)
        spaces = arr >> np.uint64(LOCAL_BITS)
        low = arr & np.uint64((1 << LOCAL_BITS) - 1)
        bands = np.empty_like(arr)
        for space in np.unique(spaces).tolist():
            bands[spaces == space] = self._bands.setdefault(space, len(self._bands))
        banded = bands > 0
        if banded.any():
            if (low[banded] >= np.uint64(1 << 32)).any():
                raise TraceError("<output>", None, "block_ids", "too many distinct ids to merge")
            low[banded] |= bands[banded] << np.uint64(32)
        return low.tolist()


def encode_session(session: Session, ids: _IdMap) -> Iterator[bytes]:
    for call in session.calls:
        rec = CallRecord(
            session=session.session_id,
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            think_s=call.think_s,
            arrival_s=call.arrival_s,
            block_ids=ids.local(call.block_ids),
            agent=call.agent_id,
            reset_before=call.reset_before,
            service_s=call.service_s,
        )
        yield msgspec.json.encode(rec) + b"\n"


def write_native(sessions: Iterable[Session], out, *, source: str | None = None) -> int:
    """Write sessions to the binary stream `out`; returns the number of calls.

    The block size comes from the first call; every session must share it.
    """
    ids = _IdMap()
    block_size: int | None = None
    n_calls = 0
    for session in sessions:
        if block_size is None:
            block_size = session.calls[0].block_size
            header = Header(FORMAT_NAME, VERSION, block_size, source)
            out.write(msgspec.json.encode(header) + b"\n")
        if any(c.block_size != block_size for c in session.calls):
            raise TraceError(
                session.source,
                None,
                "block_size",
                f"differs from {block_size}: one native file has one block size",
            )
        for line in encode_session(session, ids):
            out.write(line)
        n_calls += len(session.calls)
    if block_size is None:
        raise TraceError(source or "<input>", None, "sessions", "nothing to write")
    return n_calls


def write_native_file(
    sessions: Iterable[Session], path: Path, *, gzip_out: bool = False, source: str | None = None
) -> int:
    """Write a native trace file (gzip-compressed if asked); returns the number of calls.
    The gzip header carries no file name and no time (gzip.open's would hold the file's,
    often a temporary one, and the clock's), so the same sessions give the same bytes."""
    import gzip

    with open(path, "wb") as raw:
        if not gzip_out:
            return write_native(sessions, raw, source=source)
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
            return write_native(sessions, out, source=source)
