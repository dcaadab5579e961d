"""Fault injection for live runs: what to break, in which worker process, and when.

A `Fault` is drawn (or written) as a kind, a process index and a moment:

- kinds: `sigkill`; `sigstop` for `hold_s` wall seconds, then SIGCONT; `close` (the
  orchestrator's end of the process's connection is aborted); `corrupt` (a frame that is
  not a message: sent to the worker process, or fed into the orchestrator's reader of its
  connection, as if the line had garbled what the worker sent);
- moments: `spawn` (right after the process is started, before it can connect; for
  `close` and `corrupt`, which need a connection, the moment it connects), `run` (the
  first fast-loop sample at or after `at_s` simulated seconds), `shutdown` (as the
  orchestrator stops its processes).

`FaultInjector` is a run listener: the backend calls `on_process_started`,
`on_process_connected` and `on_stopping`, the orchestrator `on_sample`. `Watchdog`
interrupts a run that goes on past a wall-clock limit, so that a hang fails its test
instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import struct
import time
from dataclasses import dataclass, field

import numpy as np

KINDS = ("sigkill", "sigstop", "close", "corrupt")
MOMENTS = ("spawn", "run", "shutdown")
GARBAGE = struct.pack(">I", 7) + b"\xc1\xc1\xc1\xc1\xc1\xc1\xc1"  # 0xc1: never valid msgpack


@dataclass
class Fault:
    kind: str
    process: int
    moment: str
    at_s: float = 0.0  # simulated seconds, for moment "run"
    hold_s: float = 0.0  # wall seconds a SIGSTOP lasts
    inward: bool = True  # corrupt: into the orchestrator's reader (else sent to the worker)
    done: bool = False


def draw_faults(rng: np.random.Generator, processes: int, span_s: float,
                most: int = 3) -> list[Fault]:
    out = []
    for _ in range(int(rng.integers(1, most + 1))):
        out.append(Fault(kind=str(rng.choice(KINDS)), process=int(rng.integers(processes)),
                         moment=str(rng.choice(MOMENTS)), at_s=float(rng.uniform(0, span_s)),
                         hold_s=float(rng.uniform(0.1, 2.5)), inward=bool(rng.integers(2))))
    return out


@dataclass
class FaultInjector:
    faults: list[Fault]
    log: list[tuple] = field(default_factory=list)  # (kind, process, moment, pid)
    conns: dict = field(default_factory=dict)  # process -> (reader, writer), latest
    backend: object = None
    _timers: list = field(default_factory=list)

    # -- moments -----------------------------------------------------------------------
    def on_process_started(self, backend, handle) -> None:
        self.backend = backend
        for f in self._due("spawn", handle.index):
            if f.kind in ("sigkill", "sigstop"):
                self._apply(f, handle)

    def on_process_connected(self, backend, handle, reader, writer) -> None:
        self.conns[handle.index] = (reader, writer)
        for f in self._due("spawn", handle.index):
            if f.kind in ("close", "corrupt"):
                self._apply(f, handle)

    def on_sample(self, orch, obs, now_s) -> None:
        self.backend = orch.backend
        for f in self.faults:
            if not f.done and f.moment == "run" and now_s >= f.at_s:
                self._apply(f, self.backend.handles[f.process])

    def on_stopping(self, backend) -> None:
        for f in self.faults:
            if not f.done and f.moment == "shutdown":
                self._apply(f, backend.handles[f.process])

    def _due(self, moment: str, process: int) -> list[Fault]:
        return [f for f in self.faults if not f.done and f.moment == moment
                and f.process == process]

    # -- faults --------------------------------------------------------------------------
    def _apply(self, f: Fault, handle) -> None:
        f.done = True
        proc = handle.proc
        pid = proc.pid if proc is not None and proc.returncode is None else None  # not reaped
        if f.kind == "sigkill":
            _signal(pid, signal.SIGKILL)
        elif f.kind == "sigstop":
            _signal(pid, signal.SIGSTOP)
            loop = asyncio.get_running_loop()
            # The loop runs scaled: hold_s wall seconds are hold_s x speed on its clock.
            self._timers.append(loop.call_later(f.hold_s * self.backend.speed, _signal, pid,
                                                signal.SIGCONT))
        elif f.kind == "close":
            if handle.writer is not None:
                handle.writer.transport.abort()
        elif f.kind == "corrupt":
            self._corrupt(f, handle)
        self.log.append((f.kind, f.process, f.moment, pid))

    def _corrupt(self, f: Fault, handle) -> None:
        if handle.writer is None:
            return
        reader, writer = self.conns.get(handle.index, (None, None))
        if f.inward and writer is handle.writer and not reader.at_eof():
            reader.feed_data(GARBAGE)
        else:
            handle.writer.write(GARBAGE)

    def resume_all(self) -> None:
        """SIGCONT every process a fault stopped (a stopped process outliving the run is
        reaped by the backend's SIGKILL; this only tidies up)."""
        for timer in self._timers:
            timer.cancel()
        for kind, _, _, pid in self.log:
            if kind == "sigstop":
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


def moved_by_losses(backend) -> int:
    return sum(f["redispatched"] for e, f in backend.events if e == "worker_process_lost")
