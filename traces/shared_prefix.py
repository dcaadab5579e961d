"""Prefixes shared across sessions: every agent product sends the same tool definitions
(and often the same system prompt) at the start of every request.

Formats whose block ids are global (Mooncake) share such prefixes already. Formats with
ids local to each file (the weka agent traces) cannot say which blocks of two sessions
hold the same text, so sharing is an assumption the user makes or the format hints at:
`share_prefixes(sessions, tokens)` makes the first `tokens` tokens of every session one
chain of blocks common to all of them (`tokens=None`: each session's own hint, the
weka files' `tool_tokens`, sessions with the same hint sharing one chain; 0: nothing
shared). The blocks that the session's first call starts with, up to that length, are
renamed to ids of the shared namespace (traces._blocks) wherever a call of the session
starts with them, so a session's own reuse is unchanged and a call after a context reset,
which starts again from those blocks, shares them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import fields
from itertools import takewhile
from operator import attrgetter

from traces._blocks import LOCAL_LIMIT, SHARED_END_ID, SHARED_FIRST_ID
from traces.model import Call, CallsAsRead, Session, session_with_calls


class SharedChains:
    """One chain of shared ids per prefix length, numbered as lengths first appear."""

    def __init__(self) -> None:
        self._chains: dict[int, int] = {}
        self.sessions = 0  # sessions started with a shared prefix
        self.tokens = 0  # their shared prefix tokens, summed

    def started(self, session: Session) -> None:
        """Count a session as it starts (copies of a repeated trace included)."""
        call = session.calls[0]
        n = shared_blocks(call.block_ids)
        if n:
            self.sessions += 1
            self.tokens += n * call.block_size

    @property
    def count(self) -> int:
        return len(self._chains)

    def base(self, tokens: int) -> int:
        chain = self._chains.setdefault(tokens, len(self._chains))
        return SHARED_FIRST_ID + chain * (LOCAL_LIMIT >> 20)


def shared_blocks(block_ids) -> int:
    """How many leading ids are of a shared prefix."""
    i = 0
    while i < len(block_ids) and SHARED_FIRST_ID <= block_ids[i] < SHARED_END_ID:
        i += 1
    return i


class _Renaming:
    """A session's leading ids mapped to the shared chain's (`mapping`, in the order of
    the session's first call: `keys` -> `ids`)."""

    __slots__ = ("ids", "keys", "mapping")

    def __init__(self, keys: tuple[int, ...], base: int) -> None:
        self.keys = keys
        self.ids = tuple(range(base, base + len(keys)))
        self.mapping = dict(zip(keys, self.ids, strict=True))

    def renamed(self, call: Call) -> Call:
        """`call` with its leading ids that are in the mapping renamed. Nearly every call
        of a session starts with the whole prefix, in its order and not followed by one of
        its ids: then the renamed ids are those of the chain, one concatenation (C
        compares and copies); else the leading ids are found one by one."""
        ids, keys, mapping = call.block_ids, self.keys, self.mapping
        k = len(keys)
        if ids[:k] == keys and (len(ids) == k or ids[k] not in mapping):
            new = self.ids + ids[k:]
        else:
            head = list(takewhile(mapping.__contains__, ids))  # the leading ids it renames
            if not head:
                return call
            new = tuple(map(mapping.__getitem__, head)) + ids[len(head):]
        return _with_block_ids(call, new)


# Call's fields, for a copy with other block ids of the same count: every check Call makes
# at construction holds for the copy as for the call (its length is all they read of the
# ids), so the copy is built without them: its slots read in one C call and set through
# their descriptors (what the frozen class's `object.__setattr__` reaches by name).
_CALL_FIELDS = tuple(f.name for f in fields(Call))
_CALL_VALUES = attrgetter(*_CALL_FIELDS)
_CALL_SETTERS = tuple(getattr(Call, name).__set__ for name in _CALL_FIELDS)
_SET_BLOCK_IDS = _CALL_SETTERS[_CALL_FIELDS.index("block_ids")]


def _with_block_ids(call: Call, block_ids: tuple[int, ...]) -> Call:
    new = object.__new__(Call)
    for set_field, value in zip(_CALL_SETTERS, _CALL_VALUES(call), strict=True):
        set_field(new, value)
    _SET_BLOCK_IDS(new, block_ids)
    return new


def share_prefix(session: Session, tokens: int | None, chains: SharedChains) -> Session:
    n = session.shared_prefix_tokens if tokens is None else tokens
    if not n:
        return session
    first = session.calls[0]
    k = min(n // first.block_size, len(first.block_ids))
    if k == 0:
        return session
    base = chains.base(n)  # one chain per prefix as the trace states it
    keys = first.block_ids[:k]
    if len(set(keys)) != k:  # a block repeated inside the prefix: keep the first run only
        k = next(i for i, x in enumerate(keys) if first.block_ids.index(x) != i)
        keys = keys[:k]
    # Each call renamed as it is read: a session in flight holds the trace's calls and
    # the one or two at hand, not a renamed copy of every call.
    return session_with_calls(session, CallsAsRead(session.calls, _Renaming(keys, base).renamed))


def share_prefixes(sessions: Iterable[Session], tokens: int | None,
                   chains: SharedChains | None = None) -> Iterator[Session]:
    chains = chains if chains is not None else SharedChains()
    for session in sessions:
        yield share_prefix(session, tokens, chains)
