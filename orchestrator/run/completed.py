"""Completed calls kept for the summary and the outputs, as columns.

A replay keeps every completed call to the end (the summary's percentiles, the outputs,
the checks). As `Request` objects that costs ~700 bytes a call (the object, its float
times, its latency parts' list); here a call is one row of typed arrays (~190 bytes), so a
million-call run keeps its calls in ~190 MB. Reading a row gives a `DoneCall`, a read-only
view with the attributes and properties a completed `Request` has (its block ids and KV
chain empty, as `Request.compact` leaves them), the values exactly as the request held
them: ints and floats round-trip through the arrays unchanged, a time not reached
(None) is kept as NaN, which no reached time is.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Sequence
from operator import attrgetter

from workers.request import DONE, LatencyPart, Request, RequestState

_INTS = ("call_id", "input_tokens", "output_tokens", "prefix_tokens", "own_cached_tokens",
         "computed_tokens", "generated", "preemptions", "recomputed_tokens")
_TIMES = ("arrival_s", "fill_start_s", "fill_end_s", "decode_start_s", "first_token_s",
          "done_s")
_WORKERS = ("fill_worker", "decode_worker")
_PARTS = len(LatencyPart)
_get_ints, _get_times, _get_workers = (attrgetter(*names) for names in (_INTS, _TIMES, _WORKERS))
_INT_AT, _TIME_AT, _WORKER_AT = ({name: i for i, name in enumerate(names)}
                                 for names in (_INTS, _TIMES, _WORKERS))
_NAN = math.nan


class CompletedCalls(Sequence):
    """Completed calls in order of completion, one row each (`append`); a row reads as a
    `DoneCall`."""

    def __init__(self) -> None:
        # Row-major: a call's ints, times and workers are one `extend` of each array.
        self._ints = array("q")  # len(_INTS) a call, in _INTS order
        self._times = array("d")  # len(_TIMES) a call, NaN for None
        self._workers = array("i")  # len(_WORKERS) a call: index in _names, -1: None
        self._names: list[str] = []
        self._name_index: dict[str | None, int] = {None: -1}
        self._session_ids: list[str] = []  # the calls' own (shared) session id strings
        self._interactive = array("b")
        self._parts = array("d")  # _PARTS values a call, in LatencyPart order

    def append(self, req: Request) -> None:
        """Keep a completed call's row (its block ids and KV chain are not kept)."""
        if req.state is not DONE:
            raise RuntimeError(f"call {req.call_id} kept in state {req.state.name}")
        self._ints.extend(_get_ints(req))
        times = _get_times(req)
        if None in times:
            times = [_NAN if value is None else value for value in times]
        self._times.extend(times)
        fill, decode = _get_workers(req)
        index = self._name_index
        self._workers.extend((index[fill] if fill in index else self._worker_index(fill),
                              index[decode] if decode in index else self._worker_index(decode)))
        self._session_ids.append(req.session_id)
        self._interactive.append(req.interactive)
        self._parts.extend(req.parts_s)

    def _worker_index(self, name: str) -> int:
        index = self._name_index[name] = len(self._names)
        self._names.append(name)
        return index

    def __len__(self) -> int:
        return len(self._session_ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [DoneCall(self, i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("completed call index out of range")
        return DoneCall(self, index)

    def __iter__(self) -> Iterator[DoneCall]:
        for i in range(len(self)):
            yield DoneCall(self, i)

    def column(self, name: str) -> array:
        """A number field of every call in order: ints, or times with NaN where the
        request held None (a copy)."""
        i = _INT_AT.get(name)
        if i is not None:
            return self._ints[i::len(_INTS)]
        return self._times[_TIME_AT[name]::len(_TIMES)]

    def part(self, part: LatencyPart) -> array:
        """`parts_s[part]` of every call, in order."""
        return self._parts[part::_PARTS]

    def value(self, name: str, index: int):
        """A field of the call in row `index`, as the request held it."""
        i = _INT_AT.get(name)
        if i is not None:
            return self._ints[index * len(_INTS) + i]
        i = _TIME_AT.get(name)
        if i is not None:
            value = self._times[index * len(_TIMES) + i]
            return None if value != value else value  # NaN: not reached
        i = _WORKER_AT.get(name)
        if i is not None:
            worker = self._workers[index * len(_WORKERS) + i]
            return None if worker < 0 else self._names[worker]
        if name == "session_id":
            return self._session_ids[index]
        if name == "interactive":
            return bool(self._interactive[index])
        if name == "parts_s":
            return self._parts[index * _PARTS:(index + 1) * _PARTS].tolist()
        if name in ("block_ids", "writeback_block_ids", "kv_chain"):
            return ()
        if name == "state":
            return RequestState.DONE
        raise AttributeError(name)


class DoneCall:
    """One completed call's row, read as a completed `Request` reads (same attributes and
    derived properties, computed by `Request`'s own code)."""

    __slots__ = ("_calls", "_index")

    def __init__(self, calls: CompletedCalls, index: int) -> None:
        self._calls, self._index = calls, index

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._calls.value(name, self._index)

    def __repr__(self) -> str:
        return f"DoneCall(call_id={self.call_id}, session_id={self.session_id!r})"

    latency_breakdown_s = Request.latency_breakdown_s
    context_tokens = Request.context_tokens
    remaining = Request.remaining
    ttft_s = Request.ttft_s
    tpot_s = Request.tpot_s
    decode_s_per_token = Request.decode_s_per_token
