"""Worker processes under supervision: each is started, awaited, and started again.

One supervisor task a process runs its whole life: start it, wait for its
Hello (or its exit, or `startup_timeout_s` of silence), serve until it is lost,
wait `restart_delay_s`, start it again, at most `max_restarts` times. A process
lost before it ever connected (killed at spawn, crashed on import, out of
memory) goes through the same loop as one lost later. One task a process means
one restart at a time: a second loss while a restart is under way is the same
restart's concern, never a second restart racing the first.

When a process is given up (its restarts are spent, or `--no-restart`), its
workers stay lost. The run stops only if it could no longer finish: no fill or
no decode worker left, none coming back.
"""

from __future__ import annotations

import asyncio
import enum
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.live.options import LiveError
from orchestrator.live.worker_proc import TOKEN_ENV

_ROOT = Path(__file__).resolve().parents[2]


class ProcState(enum.Enum):
    STARTING = "starting"  # spawned, no Hello yet
    CONNECTED = "connected"
    LOST = "lost"  # waiting to be started again
    GIVEN_UP = "given_up"  # restarts spent, or restarts off


@dataclass(eq=False)
class ProcessHandle:
    index: int
    workers: list[str]
    proc: asyncio.subprocess.Process | None = None
    writer: asyncio.StreamWriter | None = None
    state: ProcState = ProcState.LOST
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    last_seen_s: float = 0.0  # monotonic wall seconds
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    rss_bytes: int = 0
    steps_done: int = 0
    starts: int = 0
    connects: int = 0
    last_loss: str = ""

    @property
    def alive(self) -> bool:
        """Started and not lost: connected, or on its way to connecting."""
        return self.state in (ProcState.STARTING, ProcState.CONNECTED)


class ProcessSupervisor:
    """The process half of LiveBackend (mixed in): spawn, await, restart, give up."""

    def _spawn_env(self) -> dict[str, str]:
        return {**os.environ, TOKEN_ENV: self._token,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT),
                                                            os.environ.get("PYTHONPATH")]))}

    async def _start_process(self, handle: ProcessHandle) -> None:
        handle.starts += 1
        handle.connected = asyncio.Event()
        handle.lost = asyncio.Event()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "orchestrator.live.worker_proc",
                "--connect", self.address, "--process", str(handle.index),
                "--speed", repr(self.speed), "--heartbeat-s", repr(self.options.heartbeat_s),
                env=self._spawn_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True)  # a terminal's Ctrl-C is the orchestrator's to handle
        except OSError as exc:
            raise LiveError(f"cannot start worker process {handle.index + 1} of "
                            f"{len(self.handles)}: {exc.strerror or exc}") from None
        self.spawned.append(proc)  # every process ever started, reaped at stop
        handle.proc = proc
        handle.state = ProcState.STARTING
        handle.last_seen_s = time.monotonic()  # wall-clock ok: heartbeats are wall time
        self._spawn_task(self._watch_exit(handle, proc))
        self.notify("on_process_started", handle)

    async def _until_connected(self, handle: ProcessHandle) -> str | None:
        """None once the process has said Hello; else why it never did."""
        waits = {asyncio.ensure_future(handle.connected.wait()),
                 asyncio.ensure_future(handle.lost.wait())}
        try:
            await asyncio.wait(waits, timeout=self._sim(
                self.options.startup_timeout_s), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if handle.state is ProcState.CONNECTED:
            return None
        if handle.lost.is_set():
            return handle.last_loss
        return f"no hello within {self.options.startup_timeout_s:g} s"

    async def _supervise(self, handle: ProcessHandle) -> None:
        first = True
        while not self._stopping:
            if first:
                first = False  # start() spawned it, so that a spawn error is one line
            else:
                try:
                    await self._start_process(handle)
                except LiveError as exc:
                    handle.last_loss = str(exc)
                    handle.state = ProcState.LOST
                    self._event("worker_process_start_failed", process=handle.index,
                                reason=str(exc))
                    if not self._may_restart(handle):
                        return self._give_up(handle)
                    await asyncio.sleep(self._sim(self.options.restart_delay_s))
                    continue
            reason = await self._until_connected(handle)
            if reason is None:
                if handle.starts > 1:  # a process started again, lost before or after Hello
                    self.restarts_total += 1
                    self.failover.restore(handle.workers)
                    self._event("worker_process_restarted", level="info",
                                process=handle.index, pid=handle.proc.pid)
                await handle.lost.wait()
            else:
                self.lose(handle, reason)  # a no-op if it was lost already
            if self._stopping:
                return
            if not self._may_restart(handle):
                return self._give_up(handle)
            await asyncio.sleep(self._sim(self.options.restart_delay_s))
            await handle.proc.wait()  # killed by `lose`: reaped before its successor starts

    def _may_restart(self, handle: ProcessHandle) -> bool:
        return self.options.restart and handle.starts <= self.options.max_restarts

    def _give_up(self, handle: ProcessHandle) -> None:
        handle.state = ProcState.GIVEN_UP
        self._event("worker_process_given_up", level="error", process=handle.index,
                    starts=handle.starts, reason=handle.last_loss)
        if self._running:
            self._check_progress(handle)
        elif not self._started.done():  # during start-up: start() reports it
            self._started.set_exception(self.start_failure(handle))

    def start_failure(self, handle: ProcessHandle) -> LiveError:
        return LiveError(f"worker process {handle.index + 1} of {len(self.handles)} could not "
                         f"be started ({handle.starts} starts): {handle.last_loss}")

    def _check_progress(self, handle: ProcessHandle) -> None:
        """Stop the run if no fill or no decode worker is left and none is coming back."""
        if self.failover.can_finish(self._coming_back()):
            return
        self.stop_reason = (f"worker process {handle.index + 1} given up after "
                            f"{handle.starts} starts ({handle.last_loss}): no fill or no "
                            f"decode worker left")
        self._event("no_workers_left", level="error", process=handle.index,
                    reason=self.stop_reason)
        self.failover.orch.interrupt()

    def _coming_back(self) -> list[str]:
        """Workers of processes that are lost but will be started again."""
        return [w for h in self.handles if h.state is not ProcState.GIVEN_UP
                and h.state is not ProcState.CONNECTED for w in h.workers]
