"""A run's timeline as Chrome trace-event JSON (`--trace-events FILE`), for Perfetto.

`TraceRecorder` is a run listener (`Orchestrator(listeners=...)`): it sees each
call's arrival, rejection and completion from the orchestrator, and every worker
event through the workers' `EventLog`. Each event closes the call's current
phase and opens the next, so a call's slices run end to end from its arrival to
its completion. Only sampled calls are held (see `SessionSample`); without the
option no recorder exists and the run keeps nothing.

`render()` lays the slices out as the Trace Event Format expects (JSON object
format, timestamps in microseconds: https://docs.google.com/document/d/
1CvAClvFfyA5R-PhYUNEW-07tu4oKjGm-9T-ZfxvFL8/): one process per pool plus one
for the orchestrator, and per worker one thread per call it holds at once
("lanes"), because viewers require the slices of one thread to nest
(https://perfetto.dev/docs/faq) and a decode batch's calls overlap without
nesting. docs/trace-events.md describes the file.
"""

from __future__ import annotations

import heapq
import json
import os
import tempfile
from dataclasses import dataclass, field
from enum import StrEnum
from hashlib import blake2b
from pathlib import Path

from workers.request import Request

DEFAULT_MAX_CALLS = 20_000
ORCHESTRATOR = "orchestrator"


class Slice(StrEnum):
    """What a call is doing during one slice: the slice's name in the viewer."""

    ADMISSION_WAIT = "admission wait"  # arrived, held by admission control
    FILL_QUEUE = "fill queue"  # admitted, queued at its fill worker
    PREFILL = "prefill"  # also a mixed worker's fill, its chunks riding in decode steps
    MIDFILL = "midfill"
    READY_WAIT = "ready wait"  # KV written, waiting in the ready buffer for decode
    KV_LOAD = "KV load"  # a decode worker loads its KV, then waits for a step boundary
    DECODE = "decode"
    PREEMPTED = "preempted"  # retracted from its decode batch; waits to resume


# A track: (process, track name). Workers' tracks are (pool, worker name).
Track = tuple[str, str]
ADMISSION: Track = (ORCHESTRATOR, "admission queue")
READY: Track = (ORCHESTRATOR, "ready buffer")

# What a worker event starts for each call it names (None: the fill worker's own phase).
_STARTS: dict[str, Slice | None] = {"queued": Slice.FILL_QUEUE, "fill_start": None,
                                    "fill_done": Slice.READY_WAIT, "load": Slice.KV_LOAD,
                                    "join": Slice.DECODE, "preempt": Slice.PREEMPTED}
# Waits in the cluster's ready buffer sit on the orchestrator's track; a mixed worker's
# calls wait in its own buffer, so on its track.
_IN_READY_BUFFER = {Slice.READY_WAIT, Slice.PREEMPTED}


def _ns(t_s: float) -> int:
    return round(t_s * 1e9)


def _us(t_ns: int) -> float:
    return t_ns / 1000  # microseconds to the nanosecond: three decimals at most


class SessionSample:
    """Which sessions' calls are kept: every call of the sessions whose hash (of the seed
    and the session id) is lowest, as many as fit in `max_calls`. The threshold starts
    at 1 and falls as sessions are dropped to stay within the cap, so at any moment the
    kept sessions are exactly those seen with a hash under it: a deterministic sample
    whose memory never passes the cap, whatever the run's length. A single session
    longer than the cap keeps its first `max_calls` calls."""

    def __init__(self, max_calls: int, seed: int) -> None:
        if max_calls < 1:
            raise ValueError(f"max_calls: expected an integer >= 1, got {max_calls!r}")
        self.max_calls, self.seed = max_calls, seed
        self.threshold = 1.0
        self.calls: dict[str, list[int]] = {}  # kept session -> its kept call ids
        self.kept_calls = 0
        self.seen_calls = 0
        self.seen_sessions: set[str] = set()
        self.truncated: set[str] = set()
        self._heap: list[tuple[float, str]] = []  # (-hash, session) of kept sessions

    def hash(self, session_id: str) -> float:
        digest = blake2b(f"{self.seed}\0{session_id}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2.0 ** 64

    def offer(self, session_id: str, call_id: int) -> list[int]:
        """Count a call; keep it if its session is sampled. Returns the call ids dropped
        to stay within the cap (possibly this one)."""
        self.seen_calls += 1
        self.seen_sessions.add(session_id)
        kept = self.calls.get(session_id)
        if kept is None:
            u = self.hash(session_id)
            if u >= self.threshold:
                return []
            kept = self.calls[session_id] = []
            heapq.heappush(self._heap, (-u, session_id))
        elif len(self.calls) == 1 and self.kept_calls >= self.max_calls:
            self.truncated.add(session_id)
            return [call_id]
        kept.append(call_id)
        self.kept_calls += 1
        dropped: list[int] = []
        while self.kept_calls > self.max_calls and len(self.calls) > 1:
            neg_u, sid = heapq.heappop(self._heap)
            self.threshold = -neg_u
            gone = self.calls.pop(sid)
            self.kept_calls -= len(gone)
            dropped.extend(gone)
        return dropped


@dataclass(eq=False)
class _Call:
    req: Request
    open: tuple[Slice, Track, int] | None  # the phase in progress: name, track, start
    slices: list[tuple[Slice, Track, int, int]] = field(default_factory=list)
    instants: list[tuple[str, Track, int]] = field(default_factory=list)
    outcome: str = "in flight"


class TraceRecorder:
    """Collects the sampled calls' phases during a run; `render` makes the trace."""

    def __init__(self, max_calls: int = DEFAULT_MAX_CALLS, seed: int = 0) -> None:
        self.sample = SessionSample(max_calls, seed)
        self._calls: dict[int, _Call] = {}
        self._workers: dict[str, tuple[str, str]] = {}  # worker -> (pool, phase)
        self._pools: dict[str, str] = {}  # pool -> phase, in the cluster's order
        self._runtime = None

    # -- listener hooks (orchestrator.run.replay.Orchestrator.notify) ------------------------
    def on_submit(self, orch, req: Request, now_s: float) -> None:
        if self._runtime is None:
            self._attach(orch)
        dropped = self.sample.offer(req.session_id, req.call_id)
        if req.call_id not in dropped and req.session_id in self.sample.calls:
            self._calls[req.call_id] = _Call(req, (Slice.ADMISSION_WAIT, ADMISSION, _ns(now_s)))
        for call_id in dropped:
            self._calls.pop(call_id, None)

    def on_reject(self, orch, req: Request, now_s: float) -> None:
        if (call := self._calls.get(req.call_id)) is not None:
            call.instants.append(("rejected", ADMISSION, _ns(now_s)))
            self._end(call, _ns(now_s), "rejected")

    def on_done(self, orch, req: Request, now_s: float) -> None:
        if (call := self._calls.get(req.call_id)) is not None:
            self._end(call, _ns(now_s), "done")

    def _attach(self, orch) -> None:
        self._runtime = orch.runtime
        for pool in orch.cluster.spec.pools:
            self._pools[pool.name] = pool.phase.name.lower()
        self._runtime.log.subscribe(self.on_event)

    # -- worker events -------------------------------------------------------------------
    def on_event(self, now_s: float, worker: str, event: str, call_ids: tuple[int, ...]) -> None:
        calls = [c for c in map(self._calls.get, call_ids) if c is not None]
        if not calls:
            return
        t_ns = _ns(now_s)
        track = self._track(worker)
        for call in calls:
            if event == "done":
                self._end(call, t_ns, "done")
                continue
            if event not in _STARTS or event == "preempt":
                # Shown as a mark; an event this recorder does not know leaves the phase be.
                call.instants.append((event, track, t_ns))
            if event in _STARTS:
                name = _STARTS[event] or self._fill_slice(worker)
                mixed = self._workers[worker][1] == "mixed"
                where = READY if name in _IN_READY_BUFFER and not mixed else track
                self._move(call, name, where, t_ns)

    def _fill_slice(self, worker: str) -> Slice:
        return Slice.MIDFILL if self._workers[worker][1] == "midfill" else Slice.PREFILL

    def _track(self, worker: str) -> Track:
        known = self._workers.get(worker)
        if known is None:
            rt = self._runtime
            w = rt.fill_workers.get(worker) or rt.decode_workers.get(worker)
            pool = w.spec.pool if w is not None else "workers"
            phase = w.spec.phase.name.lower() if w is not None else "unknown"
            known = self._workers[worker] = (pool, phase)
            self._pools.setdefault(pool, phase)
        return (known[0], worker)

    @staticmethod
    def _close(call: _Call, t_ns: int) -> None:
        if call.open is not None:
            name, track, start_ns = call.open
            if t_ns > start_ns:  # an instant's phase (a fill's last token) leaves no slice
                call.slices.append((name, track, start_ns, t_ns))
            call.open = None

    def _move(self, call: _Call, name: Slice, track: Track, t_ns: int) -> None:
        if call.outcome == "in flight":  # a finished call's late event changes nothing
            self._close(call, t_ns)
            call.open = (name, track, t_ns)

    def _end(self, call: _Call, t_ns: int, outcome: str) -> None:
        if call.open is not None:
            self._close(call, t_ns)
            call.outcome = outcome

    # -- the trace -----------------------------------------------------------------------
    def render(self, end_s: float, run: str = "") -> dict:
        """The trace as a JSON-ready object; calls still in flight end at `end_s`."""
        end_ns = _ns(end_s)
        calls = []
        for call_id in sorted(self._calls):
            call = self._calls[call_id]
            slices = list(call.slices)
            if call.open is not None and end_ns > call.open[2]:
                slices.append((*call.open, end_ns))
            calls.append((call, slices))
        order = [ORCHESTRATOR, *self._pools]
        tracks = {ORCHESTRATOR: [ADMISSION[1], READY[1]]}
        for worker in sorted(self._workers, key=_natural):
            tracks.setdefault(self._workers[worker][0], []).append(worker)
        events = _layout(calls, order, tracks, end_ns, self._process_name)
        events.insert(0, _meta("process_labels", 1, 0, {"labels": self._label()}))
        return {"traceEvents": events, "otherData": self.metadata(end_s, run)}

    def _process_name(self, process: str) -> str:
        if process == ORCHESTRATOR:
            return ORCHESTRATOR
        phase = self._pools.get(process, "")
        return f"{process} pool" if phase == process else f"{process} pool ({phase})"

    def _label(self) -> str:
        s = self.sample
        return (f"traced {s.kept_calls:,} of {s.seen_calls:,} calls "
                f"({len(s.calls):,} of {len(s.seen_sessions):,} sessions)")

    def metadata(self, end_s: float, run: str = "") -> dict:
        s = self.sample
        return {
            "producer": "tokenfactory --trace-events", "run": run, "seed": s.seed,
            "time": "microseconds of simulated time from the run's start",
            "simulated_s": end_s, "max_calls": s.max_calls,
            "calls_submitted": s.seen_calls, "calls_traced": s.kept_calls,
            "sessions_submitted": len(s.seen_sessions), "sessions_traced": len(s.calls),
            "sampled": s.kept_calls < s.seen_calls,
            "sample": "every call of the sessions whose hash of (seed, session id) is "
                      f"below {s.threshold!r}; at most max_calls calls",
            "sessions_truncated": sorted(s.truncated),
        }

    def cut_note(self) -> str | None:
        """One line for stderr when calls were left out, else None."""
        s = self.sample
        if s.kept_calls == s.seen_calls:
            return None
        return (f"trace events: {self._label()}, every call of a hash sample of sessions "
                f"(--trace-events-max-calls {s.max_calls})")


def _natural(name: str) -> tuple:
    """decode-2 before decode-10."""
    stem, _, num = name.rpartition("-")
    return (stem, int(num), "") if num.isdigit() else (name, -1, name)


def _meta(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def _spans(calls) -> dict[Track, list[tuple[int, int, int, list]]]:
    """Per track, each call's runs of consecutive slices there: (start, end, call, slices)."""
    spans: dict[Track, list[tuple[int, int, int, list]]] = {}
    for call, slices in calls:
        runs: list[list] = []
        for piece in slices:
            if runs and runs[-1][-1][1] == piece[1]:
                runs[-1].append(piece)
            else:
                runs.append([piece])
        for run in runs:
            spans.setdefault(run[0][1], []).append((run[0][2], run[-1][3], call.req.call_id, run))
    return spans


def _lanes(spans: list[tuple[int, int, int, list]]) -> list[int]:
    """Lowest free lane for each span, in start order (interval partitioning): as few
    lanes as calls held at once, and the same layout for the same run."""
    busy: list[tuple[int, int]] = []  # (end, lane)
    free: list[int] = []
    lanes, count = [], 0
    for start, end, _, _ in spans:
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        lane = heapq.heappop(free) if free else count
        count = max(count, lane + 1)
        heapq.heappush(busy, (end, lane))
        lanes.append(lane)
    return lanes


def _layout(calls, order: list[str], tracks: dict[str, list[str]], end_ns: int,
            process_name) -> list[dict]:
    spans = _spans(calls)
    info = {call.req.call_id: call for call, _ in calls}
    meta: list[dict] = []
    timed: list[dict] = []
    where: dict[tuple[int, Track], list[tuple[int, int, int, int]]] = {}
    for pid, process in enumerate(order, start=1):
        meta += [_meta("process_name", pid, 0, {"name": process_name(process)}),
                 _meta("process_sort_index", pid, 0, {"sort_index": pid})]
        tid = 0
        for name in tracks.get(process, []):
            track = (process, name)
            here = sorted(spans.get(track, []), key=lambda s: (s[0], s[1], s[2]))
            lanes = _lanes(here)
            for lane in range(max(lanes, default=-1) + 1):
                meta += [_meta("thread_name", pid, tid + lane + 1, {"name": f"{name} #{lane}"}),
                         _meta("thread_sort_index", pid, tid + lane + 1,
                               {"sort_index": tid + lane + 1})]
            for (start, end, call_id, run), lane in zip(here, lanes, strict=True):
                where.setdefault((call_id, track), []).append((start, end, pid, tid + lane + 1))
                for name_, _, s_ns, e_ns in run:
                    timed.append(_slice(info[call_id], name_, pid, tid + lane + 1, s_ns, e_ns,
                                        e_ns == end_ns and info[call_id].open is not None))
            tid += max(lanes, default=-1) + 1
    for call, _ in calls:
        for name, track, t_ns in call.instants:
            places = where.get((call.req.call_id, track))
            if places:
                pid, tid = next(((p, t) for s, e, p, t in places if s <= t_ns <= e),
                                places[-1][2:])
                timed.append({"name": name, "cat": "call", "ph": "i", "s": "t",
                              "ts": _us(t_ns), "pid": pid, "tid": tid,
                              "args": _args(call)})
    timed.sort(key=lambda e: (e["ts"], e["pid"], e["tid"], e["ph"] != "X"))
    return meta + timed


def _args(call: _Call) -> dict:
    req = call.req
    return {"call": req.call_id, "session": req.session_id, "input_tokens": req.input_tokens,
            "cached_tokens": req.prefix_tokens, "output_tokens": req.output_tokens,
            "interactive": req.interactive, "outcome": call.outcome}


def _slice(call: _Call, name: str, pid: int, tid: int, start_ns: int, end_ns: int,
           unfinished: bool) -> dict:
    args = _args(call)
    if unfinished:
        args["unfinished"] = True
    return {"name": str(name), "cat": "call", "ph": "X", "ts": _us(start_ns),
            "dur": _us(end_ns - start_ns), "pid": pid, "tid": tid, "args": args}


def check_path(path: Path, option: str = "--trace-events") -> None:
    """Refuse, before the run, a file the trace could not be written to."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ValueError(f"{option} {path}: is a directory")
    if not parent.is_dir():
        raise ValueError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{option} {path}: directory {parent} is not writable")


def write(path: Path, trace: dict) -> None:
    """Write whole or not at all: a temporary file beside `path`, renamed into place."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write('{"traceEvents":[\n')
            events = trace["traceEvents"]
            for i, event in enumerate(events):
                f.write(json.dumps(event, separators=(",", ":"), allow_nan=False))
                f.write(",\n" if i + 1 < len(events) else "\n")
            f.write('],\n"otherData":')
            f.write(json.dumps(trace["otherData"], allow_nan=False))
            f.write("}\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
