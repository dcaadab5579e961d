"""Fault injection for live runs: what to break, in which worker process, and when; and a
record of what each fault did, for the test to check.

A `Fault` is a kind and a moment:

- kinds: `SIGKILL`; `STOP` (SIGSTOP, then SIGCONT once the process is declared lost for its
  silence); `PAUSE` (SIGSTOP for `hold_s` wall seconds, then SIGCONT: lost or not, as the
  heartbeats fall); `CLOSE` (the orchestrator's end of the process's connection is aborted);
  `CORRUPT_IN` (a frame that is not a message, fed into the orchestrator's reader of the
  connection, as if the line had garbled what the worker sent); `CORRUPT_OUT` (the same
  frame sent to the worker process);
- moments: `SPAWN` (the process's first start, at start-up: signals as it is spawned,
  before it can connect; connection faults as it connects), `STEP` (as the `nth` step of
  the run is about to be sent, optionally counting only the steps of workers whose name
  starts with `phase`: the step's worker holds the step's calls, and the process has not
  seen the step), `SHUTDOWN` (as the orchestrator begins to stop its processes).

A moment is an event of the run, never a wall-clock time: which fault lands where does not
depend on the machine's speed. `FaultInjector` is a run listener (the backend calls
`on_process_started`, `on_process_connected`, `on_step`, `on_process_lost` and
`on_stopping`). It records each fault as applied (the process, its pid, the step's worker
and calls) and, for a fault that loses its process, the loss: which of the step's calls the
ledger saw that loss move and which were final by then. `problems()` lists every fault not
applied, or whose claimed effect did not follow. `Watchdog` interrupts a run that goes on
past a wall-clock limit, so that a hang fails its test instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import signal
import struct
import time
from dataclasses import dataclass, field

import numpy as np

GARBAGE = struct.pack(">I", 7) + b"\xc1\xc1\xc1\xc1\xc1\xc1\xc1"  # 0xc1: never valid msgpack


class Kind(enum.Enum):
    SIGKILL = "sigkill"
    STOP = "stop"
    PAUSE = "pause"
    CLOSE = "close"
    CORRUPT_IN = "corrupt_in"
    CORRUPT_OUT = "corrupt_out"


class Moment(enum.Enum):
    SPAWN = "spawn"
    STEP = "step"
    SHUTDOWN = "shutdown"


SIGNALS = (Kind.SIGKILL, Kind.STOP, Kind.PAUSE)
# Kinds that lose their process wherever they land before the stop; a PAUSE may or may not
# (shorter than the heartbeat timeout, it is lost only if the machine delays heartbeats).
LOSING = frozenset(Kind) - {Kind.PAUSE}
# How the moments are drawn: mostly while calls are in flight, a share at start-up and at
# shutdown.
MOMENT_WEIGHTS = {Moment.STEP: 0.7, Moment.SPAWN: 0.15, Moment.SHUTDOWN: 0.15}


@dataclass
class Applied:
    process: int
    pid: int
    worker: str | None = None  # STEP: the step's worker and calls
    calls: tuple[int, ...] = ()
    decode: bool = False  # the step's worker is a decode worker
    moves_before: tuple[int, ...] = ()  # the ledger's count of moves of each call, then
    lost: bool = False  # the process was declared lost after the fault
    moved: tuple[int, ...] = ()  # the step's calls that loss moved (the ledger's count)
    final: tuple[int, ...] = ()  # the step's calls final by that loss


@dataclass
class Fault:
    kind: Kind
    moment: Moment
    process: int = 0  # SPAWN, SHUTDOWN (STEP: the process the nth step goes to)
    nth: int = 1  # STEP: counted from 1
    phase: str | None = None  # STEP: count only steps of workers named phase-*
    hold_s: float = 0.0  # PAUSE: wall seconds
    applied: Applied | None = None
    failed: str = ""  # why it could not be applied

    def describe(self) -> str:
        where = {Moment.STEP: f"step {self.nth}" + (f" of {self.phase}" if self.phase else ""),
                 Moment.SPAWN: f"spawn of process {self.process}",
                 Moment.SHUTDOWN: f"shutdown, process {self.process}"}[self.moment]
        hold = f" {self.hold_s:.2f} s" if self.kind is Kind.PAUSE else ""
        return f"{self.kind.value}{hold} at {where}"


def draw_faults(rng: np.random.Generator, processes: int, max_nth: int,
                most: int = 3) -> list[Fault]:
    """One to `most` faults. A STEP fault's step is drawn among the first `max_nth` steps of
    the run, which a run reaches whatever the faults (they only add steps)."""
    moments = list(MOMENT_WEIGHTS)
    weights = list(MOMENT_WEIGHTS.values())
    out = []
    for _ in range(int(rng.integers(1, most + 1))):
        out.append(Fault(kind=Kind(rng.choice([k.value for k in Kind])),
                         moment=moments[int(rng.choice(len(moments), p=weights))],
                         process=int(rng.integers(processes)),
                         nth=int(rng.integers(1, max_nth + 1)),
                         hold_s=float(rng.uniform(0.05, 0.3))))
    return out


@dataclass
class FaultInjector:
    faults: list[Fault]
    conns: dict = field(default_factory=dict)  # process -> its latest reader
    backend: object = None
    steps: dict = field(default_factory=dict)  # phase (or None) -> steps seen
    _timers: list = field(default_factory=list)
    _stopped: list = field(default_factory=list)  # pids sent SIGSTOP
    _hit: set = field(default_factory=set)  # pids a losing fault hit, not yet lost

    # -- moments -----------------------------------------------------------------------
    def on_process_started(self, backend, handle) -> None:
        self.backend = backend
        for f in self._due(Moment.SPAWN, handle.index):
            if f.kind in SIGNALS:
                self._apply(f, handle)

    def on_process_connected(self, backend, handle, reader, writer) -> None:
        self.conns[handle.index] = reader
        for f in self._due(Moment.SPAWN, handle.index):
            if f.kind not in SIGNALS:
                self._apply(f, handle)

    def on_step(self, backend, handle, worker, duration_s, call_ids) -> None:
        if handle.proc.pid in self._hit:
            return  # its process is on its way out already: the step does not count
        phase = worker.split("-")[0]
        for key in {None, phase}:
            self.steps[key] = self.steps.get(key, 0) + 1
        for f in self.faults:
            if (f.applied is None and not f.failed and f.moment is Moment.STEP
                    and f.phase in (None, phase) and self.steps[f.phase] == f.nth):
                ledger = backend.ledger.ledger
                self._apply(f, handle, worker=worker, calls=tuple(call_ids),
                            decode=worker in backend.failover.runtime.decode_workers,
                            moves_before=tuple(ledger.times_moved(c) for c in call_ids))

    def on_process_lost(self, backend, handle) -> None:
        ledger = backend.ledger.ledger
        pid = handle.proc.pid if handle.proc is not None else None
        self._hit.discard(pid)
        for f in self.faults:
            a = f.applied
            if a is None or a.lost or a.process != handle.index or a.pid != pid:
                continue
            a.lost = True
            a.moved = tuple(c for c, n in zip(a.calls, a.moves_before, strict=True)
                            if ledger.times_moved(c) > n)
            a.final = tuple(c for c in a.calls if ledger.is_final(c))
        if pid in self._stopped:  # STOP lasts until the loss (which killed it already)
            _signal(pid, signal.SIGCONT)

    def on_stopping(self, backend) -> None:
        for f in self.faults:
            if f.applied is None and not f.failed and f.moment is Moment.SHUTDOWN:
                handle = self._shutdown_target(backend, f)
                if handle is None:
                    f.failed = "no process alive at shutdown"
                else:
                    self._apply(f, handle)

    def _due(self, moment: Moment, process: int) -> list[Fault]:
        return [f for f in self.faults if f.applied is None and not f.failed
                and f.moment is moment and f.process == process]

    def _shutdown_target(self, backend, f: Fault):
        """The drawn process, or (it is between a loss and its restart) the first that
        can take the fault: a signal needs a process, the others a connection."""
        def fits(h):
            return (h.alive and h.proc is not None and h.proc.returncode is None
                    and h.proc.pid not in self._hit and (f.kind in SIGNALS or h.writer))
        ordered = sorted(backend.handles, key=lambda h: (h.index != f.process, h.index))
        return next((h for h in ordered if fits(h)), None)

    # -- faults --------------------------------------------------------------------------
    def _apply(self, f: Fault, handle, **step) -> None:
        proc = handle.proc
        if proc is None or proc.returncode is not None:
            f.failed = f"process {handle.index} is not running"
            return
        pid = proc.pid
        if f.kind in SIGNALS:
            sig = signal.SIGKILL if f.kind is Kind.SIGKILL else signal.SIGSTOP
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                f.failed = f"process {handle.index} (pid {pid}) is gone"
                return
            if sig == signal.SIGSTOP:
                self._stopped.append(pid)
            if f.kind is Kind.PAUSE:
                loop = asyncio.get_running_loop()
                # The loop runs scaled: hold_s wall seconds are hold_s x speed on its clock.
                self._timers.append(loop.call_later(f.hold_s * self.backend.speed, _signal,
                                                    pid, signal.SIGCONT))
        else:
            reader = self.conns.get(handle.index)
            if handle.writer is None or reader is None:
                f.failed = f"process {handle.index} has no connection"
                return
            if f.kind is Kind.CLOSE:
                handle.writer.transport.abort()
            elif f.kind is Kind.CORRUPT_IN:
                reader.feed_data(GARBAGE)
            else:
                handle.writer.write(GARBAGE)
        if f.kind in LOSING:
            self._hit.add(pid)
        f.applied = Applied(process=handle.index, pid=pid, **step)

    def problems(self) -> list[str]:
        """Each fault not applied, or applied without the effect it claims: a losing kind
        landed before the stop loses its process, and that loss moves each call of the
        step it landed on that was not final by then (a fill step's calls are never final
        there: all are moved)."""
        out = []
        for f in self.faults:
            a = f.applied
            if a is None:
                out.append(f"{f.describe()}: not applied ({f.failed or 'its moment never came'})")
                continue
            if f.kind not in LOSING or f.moment is Moment.SHUTDOWN:
                continue
            if not a.lost:
                out.append(f"{f.describe()}: process {a.process} never lost")
            elif set(a.calls) - set(a.moved) - set(a.final):
                out.append(f"{f.describe()}: the loss moved {a.moved} of the step's calls "
                           f"{a.calls} (final: {a.final})")
            elif not a.decode and a.moved != a.calls:
                out.append(f"{f.describe()}: fill calls {a.calls}, moved {a.moved}")
        return out

    def resume_all(self) -> None:
        """SIGCONT every process a fault stopped (a stopped process outliving the run is
        reaped by the backend's SIGKILL; this only tidies up)."""
        for timer in self._timers:
            timer.cancel()
        for pid in self._stopped:
            _signal(pid, signal.SIGCONT)


def _signal(pid: int | None, sig: signal.Signals) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class Watchdog:
    """Interrupts the run at the first sample past `wall_s` wall seconds from its start."""

    def __init__(self, wall_s: float) -> None:
        self.wall_s = wall_s
        self.start = time.monotonic()  # wall-clock ok: a watchdog on a test's wall time
        self.fired = False

    def on_sample(self, orch, obs, now_s) -> None:
        if not self.fired and time.monotonic() - self.start > self.wall_s:
            self.fired = True
            orch.interrupt()


def no_process_left(pids) -> list[int]:
    """The pids still alive (zombies count as gone: reaped by nobody, running nothing)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    continue
        except (FileNotFoundError, ProcessLookupError):
            continue
        alive.append(pid)
    return alive
