"""Prefix blocks of one session: what it already computed, and global block ids.

Block ids in a source file are local to that file (the agent traces restart
at 1 in every file). A reader gives each file a namespace number and a
block's global id is `namespace << LOCAL_BITS | local id`, so sessions from
different files never share a block by accident, while calls of one file
(a Mooncake trace is one namespace) share exactly what the file says.
"""

from __future__ import annotations

from collections.abc import Sequence

LOCAL_BITS = 40
LOCAL_LIMIT = 1 << LOCAL_BITS
# The namespace of prefixes shared across sessions (traces.shared_prefix): above any file's
# (files are numbered from 1 in a read) and below the ids of repeated copies (2**60 up).
SHARED_NAMESPACE = (1 << 20) - 1
SHARED_FIRST_ID = SHARED_NAMESPACE << LOCAL_BITS
SHARED_END_ID = (SHARED_NAMESPACE + 1) << LOCAL_BITS
# A call's own output blocks, where no call of the trace names them, take negative ids
# (no reader hands one out). The first is the call's own, -(call id << OUTPUT_POSITION_BITS)
# - 1 - position, so a blob of them is the call's alone: the store keys a blob on the
# chain before it and its first block. The others are -1 - position, the same int objects
# for every call (`_OUTPUT_POSITIONS`): ~3 a call on agent traffic that would otherwise
# stay in the store as ints of their own. Contexts are well under 2**32 blocks, so the
# two ranges never meet.
OUTPUT_POSITION_BITS = 32
_OUTPUT_POSITIONS: tuple[int, ...] = ()  # -1 - p at index p, grown as calls need


def output_block_ids(call_id: int, start: int, end: int) -> tuple[int, ...]:
    """Ids for the blocks at positions `start` .. `end` - 1 (`start` < `end`) of call
    `call_id`'s (>= 1) context that hold its own output: never an id of a trace's block,
    and the first unique to the call and the position."""
    global _OUTPUT_POSITIONS
    if end > len(_OUTPUT_POSITIONS):
        _OUTPUT_POSITIONS = tuple(range(-1, -1 - max(end, 2 * len(_OUTPUT_POSITIONS)), -1))
    first = -(call_id << OUTPUT_POSITION_BITS) - 1 - start
    return (first, *_OUTPUT_POSITIONS[start + 1:end])


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest shared leading run of `a` and `b`."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class SessionBlocks:
    """Tracks the blocks one session has computed, call by call.

    `add` returns how many leading blocks of a call were computed before (by
    any call of the session, sub-agents included) and the call's global ids.
    The previous call of the same agent is compared first as whole slices
    (C speed), since a turn usually resends all of its predecessor; only the
    remainder is looked up block by block.
    """

    def __init__(self, namespace: int):
        self._offset = namespace << LOCAL_BITS
        self._seen: set[int] = set()
        self._last: dict[str, tuple[Sequence[int], tuple[int, ...]]] = {}

    def add(self, agent_id: str, local_ids: Sequence[int]) -> tuple[int, tuple[int, ...]]:
        """`local_ids` is kept for the next call: pass a sequence nobody mutates."""
        prev_local, prev_global = self._last.get(agent_id, ((), ()))
        shared = common_prefix_len(local_ids, prev_local)
        cached = shared
        seen = self._seen
        while cached < len(local_ids) and local_ids[cached] in seen:
            cached += 1
        seen.update(local_ids[cached:])
        offset = self._offset
        # Reusing the predecessor's tuple slice shares its int objects: a long
        # session costs memory for its new blocks only.
        global_ids = prev_global[:shared] + tuple(x + offset for x in local_ids[shared:])
        self._last[agent_id] = (local_ids, global_ids)
        return cached, global_ids
