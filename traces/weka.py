"""Reader for agent sessions in the `weka-cc-dev` format (one session per file).

Each request's `think_time` is the gap since the previous call's answer in
the same agent; sub-agent requests are flattened in place, in order, into
the parent session, so a replay issues them between the parent's calls.
A context reset (compaction or a cleared conversation) is recognised when a
call's input falls below `RESET_FRACTION` of the same agent's previous input:
on the 113-session collection this rule finds exactly the 40 resets its
MANIFEST counts, file by file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec

from traces._blocks import SessionBlocks
from traces._io import line_of_offset, msgspec_problem, read_bytes
from traces._schema import BlockSize, LocalBlockId, NonEmpty, Seconds, Tokens
from traces.errors import ProblemSink, TraceError, report
from traces.model import MAIN_AGENT, Call, RecordError, Session

RESET_FRACTION = 0.7


class _Request(msgspec.Struct, tag_field="type"):
    t: Seconds
    in_: Tokens = msgspec.field(name="in")
    out: Tokens = 0
    hash_ids: list[LocalBlockId] = []
    think_time: Seconds | None = None
    api_time: Seconds | None = None


class _Normal(_Request, tag="n"):
    pass


class _Streamed(_Request, tag="s"):
    pass


class _SubAgent(msgspec.Struct, tag="subagent", tag_field="type"):
    t: Seconds
    agent_id: NonEmpty
    requests: list[msgspec.Raw]


class _Document(msgspec.Struct):
    block_size: BlockSize
    requests: list[msgspec.Raw]
    id: NonEmpty | None = None
    tool_tokens: Tokens | None = None


_DOCUMENT = msgspec.json.Decoder(_Document)
_ENTRY = msgspec.json.Decoder(_Normal | _Streamed | _SubAgent)


class _Builder:
    """Turns one document's request tree into the flat call list of its session."""

    def __init__(self, path: Path, session_id: str, block_size: int, namespace: int, sink):
        self.path = path
        self.session_id = session_id
        self.block_size = block_size
        self.blocks = SessionBlocks(namespace)
        self.sink: ProblemSink | None = sink
        self.calls: list[Call] = []
        self.prev_input: dict[str, int] = {}
        self.ok = True

    def problem(self, where: str, field: str, what: str) -> None:
        self.ok = False
        report(self.sink, TraceError(self.path, where, field, what))

    def walk(self, raws: list[msgspec.Raw], where: str, agent_id: str) -> None:
        prev_t: float | None = None
        prev_end: float | None = None  # t + api_time of the previous call in this list
        for i, raw in enumerate(raws):
            at = f"{where}[{i}]"
            try:
                entry = _ENTRY.decode(raw)
            except msgspec.ValidationError as exc:
                self.problem(at, *msgspec_problem(exc))
                continue
            if prev_t is not None and entry.t < prev_t:
                self.problem(at, "t", f"{entry.t} s goes back before the previous {prev_t} s")
            prev_t = entry.t
            if isinstance(entry, _SubAgent):
                if entry.agent_id == MAIN_AGENT:
                    self.problem(at, "agent_id", f"{MAIN_AGENT!r} is reserved for the parent")
                else:
                    self.walk(entry.requests, f"{at}.requests", entry.agent_id)
                continue
            if entry.think_time is not None:
                think_s = entry.think_time
            elif prev_end is not None:
                think_s = max(0.0, entry.t - prev_end)
            else:
                think_s = 0.0
            prev_end = entry.t + (entry.api_time or 0.0)
            self.add_call(at, agent_id, entry, think_s)

    def add_call(self, at: str, agent_id: str, req: _Request, think_s: float) -> None:
        if len(req.hash_ids) != req.in_ // self.block_size:
            self.problem(
                at,
                "hash_ids",
                f"expected {req.in_ // self.block_size} ids for {req.in_} input tokens "
                f"in {self.block_size}-token blocks, got {len(req.hash_ids)}",
            )
        if not self.ok:
            return  # keep validating, stop building
        cached_blocks, block_ids = self.blocks.add(agent_id, req.hash_ids)
        cached = cached_blocks * self.block_size
        prev = self.prev_input.get(agent_id)
        self.prev_input[agent_id] = req.in_
        try:
            self.calls.append(
                Call(
                    session_id=self.session_id,
                    index=len(self.calls),
                    input_tokens=req.in_,
                    cached_tokens=cached,
                    new_tokens=req.in_ - cached,
                    output_tokens=req.out,
                    think_s=float(think_s) if self.calls else 0.0,
                    is_subagent=agent_id != MAIN_AGENT,
                    reset_before=prev is not None and req.in_ < RESET_FRACTION * prev,
                    block_size=self.block_size,
                    block_ids=block_ids,
                    agent_id=agent_id,
                    service_s=req.api_time,
                )
            )
        except RecordError as exc:
            self.problem(at, exc.field, exc.problem)


def read_weka(path: Path, namespace: int, sink: ProblemSink | None = None) -> Iterator[Session]:
    """The one session of a `weka-cc-dev` file (nothing if `sink` collected problems)."""
    data = read_bytes(path)
    try:
        doc = _DOCUMENT.decode(data)
    except msgspec.ValidationError as exc:
        report(sink, TraceError(path, None, *msgspec_problem(exc)))
        return
    except msgspec.DecodeError as exc:
        report(sink, TraceError(path, line_of_offset(data, str(exc)), "json", str(exc)))
        return
    name = path.name.removesuffix(".gz").removesuffix(".json")
    builder = _Builder(path, doc.id or name, doc.block_size, namespace, sink)
    builder.walk(doc.requests, "requests", MAIN_AGENT)
    if not builder.calls and builder.ok:
        report(sink, TraceError(path, None, "requests", "no model calls"))
        return
    if builder.ok:
        yield Session(
            session_id=builder.session_id,
            source=str(path),
            start_s=None,
            calls=tuple(builder.calls),
            shared_prefix_tokens=doc.tool_tokens,
        )
