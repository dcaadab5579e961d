"""The records every reader produces: `Call`s grouped into `Session`s.

A record that exists is valid: construction checks every field and raises
`RecordError` (a `ValueError` naming the field) otherwise. Readers turn that
into a `TraceError` that also names the file and line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

# More than this in one call is a corrupt record, not a long context: no
# production model takes 10M tokens of input or output in one call.
MAX_TOKENS = 10_000_000
MAIN_AGENT = "main"


class RecordError(ValueError):
    """A record field out of its domain; `field` names it."""

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


def check_tokens(field: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(field, f"expected an integer, got {value!r}")
    if value < 0:
        raise RecordError(field, f"expected >= 0, got {value}")
    if value > MAX_TOKENS:
        raise RecordError(field, f"{value} is absurd (more than {MAX_TOKENS:,} tokens)")


def check_seconds(field: str, value: float | None, *, optional: bool) -> None:
    if value is None:
        if not optional:
            raise RecordError(field, "expected seconds, got null")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(field, f"expected seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise RecordError(field, f"expected finite seconds >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class Call:
    """One model call of a session, as the replay issues it.

    `cached_tokens` is the leading run of the input's blocks that this session
    already computed (any earlier call, sub-agents included); `new_tokens` is
    the rest of the input. `think_s` is the think/tool gap between the previous
    call's answer and this call (0 for a session's first call). `block_ids`
    holds one id per full `block_size`-token block of the input, namespaced so
    that ids from different source files never collide.
    """

    session_id: str
    index: int
    input_tokens: int
    cached_tokens: int
    new_tokens: int
    output_tokens: int
    think_s: float
    is_subagent: bool
    reset_before: bool
    block_size: int
    block_ids: tuple[int, ...]
    arrival_s: float | None = None
    agent_id: str = MAIN_AGENT
    # Time the original service took to answer (issue to last token), if recorded.
    service_s: float | None = None

    def __post_init__(self) -> None:
        if not self.session_id:
            raise RecordError("session_id", "expected a non-empty string")
        if self.index < 0:
            raise RecordError("index", f"expected >= 0, got {self.index}")
        for name in ("input_tokens", "cached_tokens", "new_tokens", "output_tokens"):
            check_tokens(name, getattr(self, name))
        if self.cached_tokens > self.input_tokens:
            raise RecordError(
                "cached_tokens",
                f"{self.cached_tokens} exceeds input_tokens {self.input_tokens}",
            )
        if self.new_tokens != self.input_tokens - self.cached_tokens:
            raise RecordError("new_tokens", "must equal input_tokens - cached_tokens")
        check_seconds("think_s", self.think_s, optional=False)
        check_seconds("arrival_s", self.arrival_s, optional=True)
        check_seconds("service_s", self.service_s, optional=True)
        if self.block_size <= 0:
            raise RecordError("block_size", f"expected > 0, got {self.block_size}")
        if len(self.block_ids) != self.input_tokens // self.block_size:
            raise RecordError(
                "block_ids",
                f"expected {self.input_tokens // self.block_size} ids (one per full "
                f"{self.block_size}-token block of {self.input_tokens} input tokens), "
                f"got {len(self.block_ids)}",
            )
        if self.is_subagent == (self.agent_id == MAIN_AGENT):
            raise RecordError("agent_id", f"{self.agent_id!r} contradicts is_subagent")


@dataclass(frozen=True, slots=True)
class Session:
    """A closed-loop conversation: calls in issue order, sub-agent calls inline.

    `start_s` is the trace's own start time for open-loop traces (Mooncake,
    Azure, native files with arrivals) and None for agent sessions, whose
    start the replay chooses.
    """

    session_id: str
    source: str
    start_s: float | None
    calls: tuple[Call, ...]
    # Leading tokens of this session's prompts that other sessions' prompts may share, as
    # the format says (weka: its tool definitions, sent first in every request); None:
    # the format does not say (traces.shared_prefix).
    shared_prefix_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.calls:
            raise RecordError("calls", f"session {self.session_id!r} has no calls")
        check_seconds("start_s", self.start_s, optional=True)
        for i, call in enumerate(self.calls):
            if call.session_id != self.session_id or call.index != i:
                raise RecordError("calls", f"call {i} is out of place in {self.session_id!r}")

    @property
    def subagent_calls(self) -> int:
        return sum(1 for c in self.calls if c.is_subagent)

    @property
    def resets(self) -> int:
        return sum(1 for c in self.calls if c.reset_before)


class CallsAsRead(Sequence[Call]):
    """A session's calls made from another session's calls (`base`) as they are read
    (`make(call)`), the last two kept: a session reads each call twice, as the next call,
    then as its own. A session in flight then holds its base calls and the one or two at
    hand, not a copy of every call (a copy of a repeated trace; a session given a shared
    prefix, whose block ids, tuples of thousands, the garbage collector would otherwise
    traverse for as long as the session lasts)."""

    __slots__ = ("_base", "_kept", "_make")

    def __init__(self, base: Sequence[Call], make: Callable[[Call], Call]) -> None:
        self._base, self._make = base, make
        self._kept: dict[int, Call] = {}

    def __len__(self) -> int:
        return len(self._base)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self._base))))
        if i < 0:
            i += len(self._base)
        call = self._kept.get(i)
        if call is None:
            call = self._make(self._base[i])  # IndexError past the end, as a tuple's
            if len(self._kept) >= 2:
                del self._kept[min(self._kept)]
            self._kept[i] = call
        return call

    def __iter__(self) -> Iterator[Call]:
        return (self[i] for i in range(len(self._base)))


def session_with_calls(session: Session, calls: Sequence[Call],
                       session_id: str | None = None) -> Session:
    """`session` with `calls` (and `session_id`, when given), built without Session's
    check of every call's place: `calls`, made call by call from the session's own
    (`CallsAsRead`), keep their order and indices, and the check would make every one of
    them up front, which is what making them as they are read must not do."""
    copy = object.__new__(Session)
    for name, value in (("session_id", session.session_id if session_id is None
                         else session_id),
                        ("source", session.source), ("start_s", session.start_s),
                        ("calls", calls),
                        ("shared_prefix_tokens", session.shared_prefix_tokens)):
        object.__setattr__(copy, name, value)
    return copy
