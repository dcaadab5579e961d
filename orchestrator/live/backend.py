"""The orchestrator's side of live mode: worker processes, their connections, failures.

`LiveBackend.start(orch)` listens on a private Unix socket (or TCP on
127.0.0.1 with a port), starts ceil(workers / K) worker processes and waits
for each one's Hello. `executor` sends each step to the process hosting its
worker. A process is lost when its connection ends, its process exits or it
is silent for longer than the heartbeat timeout; its workers' calls are then
re-dispatched (`failover`) and, after a delay, a new process takes its
workers. Bad peers (garbage, oversized frames, unknown messages, a wrong
token) lose their connection with a logged reason; nothing they send reaches
the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from orchestrator.live.failover import Failover
from orchestrator.live.messages import Heartbeat, Hello, Shutdown, Step, StepDone
from orchestrator.live.options import LiveError, LiveOptions
from orchestrator.live.transport import BadFrame, read_message, write_message
from orchestrator.live.worker_proc import TOKEN_ENV
from workers.executor import WorkerLost

_ROOT = Path(__file__).resolve().parents[2]


def stderr_logger():
    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=[structlog.processors.add_log_level,
                    structlog.processors.KeyValueRenderer(key_order=["event"])])


@dataclass(eq=False)
class ProcessHandle:
    index: int
    workers: list[str]
    proc: asyncio.subprocess.Process | None = None
    writer: asyncio.StreamWriter | None = None
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    alive: bool = True
    last_seen_s: float = 0.0  # monotonic wall seconds
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    rss_bytes: int = 0
    steps_done: int = 0
    starts: int = 0


class RemoteExecutor:
    """A StepExecutor that runs each step in the worker process hosting its worker."""

    def __init__(self, backend: LiveBackend) -> None:
        self.backend = backend
        self._ids = itertools.count(1)

    async def run(self, worker: str, duration_s: float, call_ids: Sequence[int]) -> None:
        handle = self.backend.host_of(worker)
        if handle is None or not handle.alive or handle.writer is None:
            raise WorkerLost(worker)
        step_id = next(self._ids)
        try:
            if handle.writer.is_closing():
                raise ConnectionResetError("connection closing")
            write_message(handle.writer, Step(step_id, worker, max(duration_s, 0.0),
                                              len(call_ids)))
        except (ConnectionError, RuntimeError) as exc:
            self.backend.lose(handle, f"cannot send a step: {exc}")
            raise WorkerLost(worker) from None
        # Registered after the write: no StepDone can arrive before the next await.
        future = asyncio.get_running_loop().create_future()
        handle.pending[step_id] = future
        try:
            await future
        finally:
            handle.pending.pop(step_id, None)


class LiveBackend:
    def __init__(self, options: LiveOptions, speed: float) -> None:
        self.options, self.speed = options, speed
        self.executor = RemoteExecutor(self)
        self.log = stderr_logger()
        self.events: list[tuple[str, dict]] = []  # (event, fields), for the summary and tests
        self.handles: list[ProcessHandle] = []
        self.lost_total = 0
        self.restarts_total = 0
        self.bad_peers_total = 0
        self.address = ""
        self._host: dict[str, ProcessHandle] = {}
        self._token = secrets.token_hex(16)
        self._server: asyncio.Server | None = None
        self._tmpdir: str | None = None
        self._tasks: set[asyncio.Task] = set()
        self._conn_tasks: set[asyncio.Task] = set()
        self._stopping = False
        self._planned = 0
        self.failover: Failover | None = None

    # -- helpers -----------------------------------------------------------------------
    def _sim(self, wall_s: float) -> float:
        """Wall seconds as the (scaled) loop's seconds."""
        return wall_s * self.speed

    def _event(self, event: str, level: str = "warning", **fields) -> None:
        self.events.append((event, fields))
        getattr(self.log, level)(event, **fields)

    def _spawn_task(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def host_of(self, worker: str) -> ProcessHandle | None:
        handle = self._host.get(worker)
        if handle is None:  # a worker the slow loop created: the least loaded live process
            live = [h for h in self.handles if h.alive]
            if not live:
                return None
            handle = min(live, key=lambda h: (len(h.workers), h.index))
            handle.workers.append(worker)
            self._host[worker] = handle
        return handle

    @property
    def pids(self) -> list[int]:
        return [h.proc.pid for h in self.handles if h.proc is not None]

    # -- start -------------------------------------------------------------------------
    async def start(self, orch) -> None:
        names = [w.name for w in orch.cluster.workers]
        k = self.options.workers_per_process
        groups = [names[i:i + k] for i in range(0, len(names), k)]
        self.options.check_processes(len(groups), len(names))
        self.failover = Failover(orch, self._event)
        self._planned = len(groups)
        await self._listen()
        try:
            for i, group in enumerate(groups):
                handle = ProcessHandle(i, list(group))
                self.handles.append(handle)
                for name in group:
                    self._host[name] = handle
                await self._start_process(handle)
            await self._await_hellos(self.handles)
        except BaseException:
            await self.stop()
            raise
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, orch, sig)
        self._spawn_task(self._monitor())
        self._event("live_started", level="info", processes=len(self.handles),
                    address=self.address)

    def _on_signal(self, orch, sig: signal.Signals) -> None:
        self._event("signal", signal=signal.Signals(sig).name)
        orch.interrupt()

    async def _listen(self) -> None:
        o = self.options
        try:
            if o.port is None:
                self._tmpdir = tempfile.mkdtemp(prefix="tokenfactory-live-")
                path = os.path.join(self._tmpdir, "orchestrator.sock")
                self._server = await asyncio.start_unix_server(self._serve, path)
                os.chmod(path, 0o600)
                self.address = f"unix:{path}"
            else:
                self._server = await asyncio.start_server(self._serve, o.host, o.port)
                self.address = f"tcp:{o.host}:{o.port}"
        except OSError as exc:
            if self._tmpdir:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
            if exc.errno == errno.EADDRINUSE:
                raise LiveError(f"--live-port {o.port}: address already in use") from None
            raise LiveError(f"--live-host {o.host} --live-port {o.port}: "
                            f"{exc.strerror or exc}") from None

    async def _start_process(self, handle: ProcessHandle) -> None:
        env = {**os.environ, TOKEN_ENV: self._token,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT),
                                                           os.environ.get("PYTHONPATH")]))}
        try:
            handle.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "orchestrator.live.worker_proc",
                "--connect", self.address, "--process", str(handle.index),
                "--speed", repr(self.speed), "--heartbeat-s", repr(self.options.heartbeat_s),
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True)  # a terminal's Ctrl-C is the orchestrator's to handle
        except OSError as exc:
            raise LiveError(f"cannot start worker process {handle.index + 1} of "
                            f"{self._planned}: {exc.strerror or exc}") from None
        handle.starts += 1
        handle.alive = True
        handle.connected = asyncio.Event()
        handle.last_seen_s = time.monotonic()  # wall-clock ok: heartbeats are wall time
        self._spawn_task(self._watch_exit(handle, handle.proc))

    async def _await_hellos(self, handles: list[ProcessHandle]) -> None:
        waits = [h.connected.wait() for h in handles]
        try:
            await asyncio.wait_for(asyncio.gather(*waits),
                                   timeout=self._sim(self.options.startup_timeout_s))
        except TimeoutError:
            missing = [h.index for h in handles if not h.connected.is_set()]
            raise LiveError(f"worker processes {missing} did not connect within "
                            f"{self.options.startup_timeout_s:g} s") from None

    # -- connections -------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handle: ProcessHandle | None = None
        reason = "connection closed"
        # Python 3.11's streams keep no reference to this task: a pending task that is
        # collected would reach the run's exception handler and stop the run.
        task = asyncio.current_task()
        self._conn_tasks.add(task)
        try:
            first = await asyncio.wait_for(read_message(reader, self.options.max_frame_bytes),
                                           timeout=self._sim(self.options.hello_timeout_s))
            handle = self._accept(first, writer)
            if handle is None:
                return
            while True:
                msg = await read_message(reader, self.options.max_frame_bytes)
                if msg is None:
                    break
                handle.last_seen_s = time.monotonic()  # wall-clock ok: heartbeat timeout
                if isinstance(msg, StepDone):
                    future = handle.pending.get(msg.id)
                    if future is not None and not future.done():
                        future.set_result(None)
                elif isinstance(msg, Heartbeat):
                    handle.rss_bytes, handle.steps_done = msg.rss_bytes, msg.steps_done
                else:
                    raise BadFrame(f"a worker does not send {type(msg).__name__}")
        except BadFrame as exc:
            reason = str(exc)
            self._bad_peer(handle, reason)
        except TimeoutError:
            reason = "no hello in time"
            self._bad_peer(handle, reason)
        except (ConnectionError, OSError) as exc:
            reason = f"connection error: {exc}"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a peer must never crash the orchestrator
            reason = f"{type(exc).__name__}: {exc}"
            self._bad_peer(handle, reason)
        finally:
            self._conn_tasks.discard(task)
            writer.close()
            if handle is not None and handle.writer is writer:
                self.lose(handle, reason)

    def _bad_peer(self, handle: ProcessHandle | None, reason: str) -> None:
        self.bad_peers_total += 1
        self._event("connection_closed", reason=reason,
                    process=None if handle is None else handle.index)

    def _accept(self, msg, writer: asyncio.StreamWriter) -> ProcessHandle | None:
        if msg is None:
            return None
        if not isinstance(msg, Hello):
            raise BadFrame(f"expected hello, got {type(msg).__name__}")
        if not secrets.compare_digest(msg.token, self._token):
            raise BadFrame("hello with a wrong token")
        handle = next((h for h in self.handles if h.index == msg.process), None)
        if handle is None or handle.connected.is_set() or not handle.alive or (
                handle.proc is None or handle.proc.pid != msg.pid):
            raise BadFrame(f"hello from an unexpected process {msg.process} (pid {msg.pid})")
        handle.writer = writer
        handle.last_seen_s = time.monotonic()  # wall-clock ok
        handle.connected.set()
        return handle

    # -- failures ----------------------------------------------------------------------
    async def _watch_exit(self, handle: ProcessHandle, proc) -> None:
        status = await proc.wait()
        if handle.proc is proc:
            self.lose(handle, f"process exited with status {status}")

    async def _monitor(self) -> None:
        timeout_s = self.options.heartbeat_timeout_s
        while True:
            await asyncio.sleep(self._sim(self.options.heartbeat_s))
            now = time.monotonic()  # wall-clock ok: heartbeats are wall time
            for h in self.handles:
                if h.alive and h.connected.is_set() and now - h.last_seen_s > timeout_s:
                    self.lose(h, f"silent for {now - h.last_seen_s:.2f} s")

    def lose(self, handle: ProcessHandle, reason: str) -> None:
        """Mark the process lost, hand its calls to other workers, restart it later."""
        if self._stopping or not handle.alive:
            return
        handle.alive = False
        self.lost_total += 1
        if handle.proc is not None and handle.proc.returncode is None:
            handle.proc.kill()  # a silent process must not come back with stale steps
        if handle.writer is not None:
            handle.writer.close()
            handle.writer = None
        moved = self.failover.evacuate(handle.workers)
        self._event("worker_process_lost", process=handle.index, reason=reason,
                    workers=",".join(handle.workers), redispatched=moved)
        for future in handle.pending.values():
            if not future.done():
                future.set_exception(WorkerLost(f"process {handle.index}"))
                future.exception()  # its awaiting step gets it; never "unretrieved"
        handle.pending.clear()
        if self.options.restart and handle.starts <= self.options.max_restarts:
            self._spawn_task(self._restart(handle))
            return
        rt = self.failover.runtime
        if not any(w.accepting for w in rt.fill_workers.values()) or not any(
                w.accepting for w in rt.decode_workers.values()):
            # No fill or no decode worker left and none coming back: the run cannot end.
            self._event("no_workers_left", level="error", process=handle.index)
            self.failover.orch.interrupt()

    async def _restart(self, handle: ProcessHandle) -> None:
        await asyncio.sleep(self._sim(self.options.restart_delay_s))
        if self._stopping:
            return
        if handle.proc is not None:
            await handle.proc.wait()
        try:
            await self._start_process(handle)
            await self._await_hellos([handle])
        except LiveError as exc:
            self._event("worker_process_restart_failed", process=handle.index, reason=str(exc))
            handle.alive = False
            if handle.proc is not None and handle.proc.returncode is None:
                handle.proc.kill()
            return
        self.restarts_total += 1
        self.failover.restore(handle.workers)
        self._event("worker_process_restarted", level="info", process=handle.index,
                    pid=handle.proc.pid)

    # -- stop --------------------------------------------------------------------------
    async def stop(self) -> None:
        """Shut every worker process down (Shutdown, then SIGKILL after a grace period),
        reap them all and close the listener."""
        self._stopping = True
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for h in self.handles:
            if h.writer is not None:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    write_message(h.writer, Shutdown())
        procs = [h.proc for h in self.handles if h.proc is not None]
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)),
                                   timeout=self._sim(self.options.shutdown_grace_s))
        except TimeoutError:
            for p in procs:
                if p.returncode is None:
                    p.kill()
            await asyncio.gather(*(p.wait() for p in procs))
        for h in self.handles:
            if h.writer is not None:
                h.writer.close()
                h.writer = None
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def summary(self) -> dict:
        return {"worker_processes": len(self.handles), "processes_lost": self.lost_total,
                "processes_restarted": self.restarts_total,
                "bad_connections": self.bad_peers_total}
