"""The orchestrator's side of live mode: worker processes, their connections, failures.

`LiveBackend.start(orch)` listens on a private Unix socket (or TCP on
127.0.0.1 with a port), starts ceil(workers / K) worker processes, each under a
supervisor (`supervise`), and waits until each has said Hello; a process lost
before it connects is started again like any other. `executor` sends each step
to the process hosting its worker. A process is lost when its connection ends,
its process exits or it is silent for longer than the heartbeat timeout; its
workers' calls are then re-dispatched (`failover`) and, after a delay, a new
process takes its workers. Bad peers (garbage, oversized frames, unknown
messages, a wrong token) lose their connection with a logged reason; nothing
they send reaches the run. Messages still arriving on the connection of a
process already declared lost are dropped and counted (`late_results_dropped`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time

import structlog

from orchestrator.live.executor import RemoteExecutor
from orchestrator.live.failover import Failover
from orchestrator.live.messages import Heartbeat, Hello, Shutdown, StepDone
from orchestrator.live.options import LiveError, LiveOptions
from orchestrator.live.supervise import ProcessHandle, ProcessSupervisor, ProcState
from orchestrator.live.transport import BadFrame, read_message, write_message
from orchestrator.run.ledger import LedgerListener, calls_on, held_call_ids
from workers.executor import WorkerLost

__all__ = ["LiveBackend", "ProcState", "ProcessHandle", "RemoteExecutor"]


def stderr_logger():
    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=[structlog.processors.add_log_level,
                    structlog.processors.KeyValueRenderer(key_order=["event"])])


class LiveBackend(ProcessSupervisor):
    def __init__(self, options: LiveOptions, speed: float) -> None:
        self.options, self.speed = options, speed
        self.executor = RemoteExecutor(self)
        self.log = stderr_logger()
        self.events: list[tuple[str, dict]] = []  # (event, fields), for the summary and tests
        self.handles: list[ProcessHandle] = []
        self.spawned: list[asyncio.subprocess.Process] = []
        self.lost_total = 0
        self.restarts_total = 0
        self.bad_peers_total = 0
        self.late_results_dropped = 0
        self.stop_reason: str | None = None
        self.signal: signal.Signals | None = None  # the first SIGINT/SIGTERM that stopped the run
        self.address = ""
        self.ledger = LedgerListener()
        self.ledger_report = None
        self._host: dict[str, ProcessHandle] = {}
        self._token = secrets.token_hex(16)
        self._server: asyncio.Server | None = None
        self._tmpdir: str | None = None
        self._tasks: set[asyncio.Task] = set()
        self._conn_tasks: set[asyncio.Task] = set()
        self._stopping = False
        self._running = False  # the runtime's workers run: losses are evacuated
        self._started: asyncio.Future | None = None
        self._orch = None
        self._hooks: dict[str, list] = {}  # event -> its observers' methods (`notify`)
        self._hooks_of = 0
        self.failover: Failover | None = None

    # -- helpers -----------------------------------------------------------------------
    def _sim(self, wall_s: float) -> float:
        """Wall seconds as the (scaled) loop's seconds."""
        return wall_s * self.speed

    def _event(self, event: str, level: str = "warning", **fields) -> None:
        self.events.append((event, fields))
        getattr(self.log, level)(event, **fields)

    def notify(self, event: str, *args) -> None:
        """Observers among the run's listeners (fault injection in tests) may define
        on_process_started(backend, handle), on_process_connected(backend, handle, reader,
        writer), on_step(backend, handle, worker, duration_s, call_ids) (a step about to be
        sent), on_process_lost(backend, handle) and on_stopping(backend)."""
        listeners = getattr(self._orch, "listeners", ())
        if len(listeners) != self._hooks_of:  # listeners added: look hooks up again
            self._hooks.clear()
            self._hooks_of = len(listeners)
        methods = self._hooks.get(event)
        if methods is None:
            methods = self._hooks[event] = [m for m in (getattr(x, event, None)
                                                        for x in listeners) if m is not None]
        for method in methods:
            method(self, *args)

    def _spawn_task(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def host_of(self, worker: str) -> ProcessHandle | None:
        handle = self._host.get(worker)
        if handle is None:  # a worker the slow loop created: the least loaded connected one
            live = [h for h in self.handles if h.state is ProcState.CONNECTED]
            if not live:
                return None
            handle = min(live, key=lambda h: (len(h.workers), h.index))
            handle.workers.append(worker)
            self._host[worker] = handle
        return handle

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.spawned]

    # -- start -------------------------------------------------------------------------
    async def start(self, orch) -> None:
        names = [w.name for w in orch.cluster.workers]
        k = self.options.workers_per_process
        groups = [names[i:i + k] for i in range(0, len(names), k)]
        self.options.check_processes(len(groups), len(names))
        self._orch = orch
        orch.listeners.append(self.ledger)
        self.failover = Failover(orch, self._event)
        self._started = asyncio.get_running_loop().create_future()
        self.handles = [ProcessHandle(i, list(group)) for i, group in enumerate(groups)]
        self._host = {name: h for h in self.handles for name in h.workers}
        await self._listen()
        try:
            for handle in self.handles:
                await self._start_process(handle)
                self._spawn_task(self._supervise(handle))
            # Every process connected at once: one lost after its Hello, while others were
            # still starting, holds its workers (none has calls yet) until it is back.
            while True:
                await self._started
                if all(h.state is ProcState.CONNECTED for h in self.handles):
                    break
                given_up = [h for h in self.handles if h.state is ProcState.GIVEN_UP]
                if given_up:
                    raise self.start_failure(given_up[0])
                self._started = asyncio.get_running_loop().create_future()
        except BaseException:
            await self.stop()
            raise
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, orch, sig)
        self._spawn_task(self._monitor())
        self._running = True
        self._event("live_started", level="info", processes=len(self.handles),
                    address=self.address)

    def _on_signal(self, orch, sig: signal.Signals) -> None:
        self._event("signal", signal=signal.Signals(sig).name)
        if self.signal is None:
            self.signal = signal.Signals(sig)  # the first: what the command's exit says
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
            self.notify("on_process_connected", handle, reader, writer)
            while True:
                msg = await read_message(reader, self.options.max_frame_bytes)
                if msg is None:
                    break
                self._receive(handle, writer, msg)
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

    def _receive(self, handle: ProcessHandle, writer: asyncio.StreamWriter, msg) -> None:
        if handle.writer is not writer:
            # The process was declared lost (silent, or its connection failed) and this
            # arrived since: its steps were re-dispatched, so a result now is stale.
            if isinstance(msg, StepDone):
                self.late_results_dropped += 1
                self._event("late_result_dropped", process=handle.index, step=msg.id)
            return
        handle.last_seen_s = time.monotonic()  # wall-clock ok: heartbeat timeout
        if isinstance(msg, StepDone):
            future = handle.pending.get(msg.id)
            if future is not None and not future.done():
                future.set_result(None)
        elif isinstance(msg, Heartbeat):
            handle.rss_bytes, handle.steps_done = msg.rss_bytes, msg.steps_done
        else:
            raise BadFrame(f"a worker does not send {type(msg).__name__}")

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
        if handle is None or handle.state is not ProcState.STARTING or (
                handle.proc is None or handle.proc.pid != msg.pid):
            raise BadFrame(f"hello from an unexpected process {msg.process} (pid {msg.pid})")
        handle.writer = writer
        handle.state = ProcState.CONNECTED
        handle.connects += 1
        handle.last_seen_s = time.monotonic()  # wall-clock ok
        handle.connected.set()
        if not self._started.done() and all(h.state is ProcState.CONNECTED
                                            for h in self.handles):
            self._started.set_result(None)
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
                if h.state is ProcState.CONNECTED and now - h.last_seen_s > timeout_s:
                    self.lose(h, f"silent for {now - h.last_seen_s:.2f} s")
            self.failover.release_held()  # a fill worker may have joined by a move

    def lose(self, handle: ProcessHandle, reason: str) -> None:
        """Mark the process lost and hand its calls to other workers; its supervisor
        starts it again."""
        if self._stopping or not handle.alive:
            return
        connected = handle.state is ProcState.CONNECTED
        handle.state = ProcState.LOST
        handle.last_loss = reason
        self.lost_total += 1
        if handle.proc is not None and handle.proc.returncode is None:
            handle.proc.kill()  # a silent process must not come back with stale steps
        if handle.writer is not None:
            handle.writer.close()
            handle.writer = None
        moved = 0
        if self._running:
            self._ledger_moves(handle.workers)
            moved = self.failover.evacuate(handle.workers)
        self._event("worker_process_lost", process=handle.index, reason=reason,
                    workers=",".join(handle.workers), redispatched=moved,
                    connected=connected)
        self.notify("on_process_lost", handle)
        for future in handle.pending.values():
            if not future.done():
                future.set_exception(WorkerLost(f"process {handle.index}"))
                future.exception()  # its awaiting step gets it; never "unretrieved"
        handle.pending.clear()
        handle.lost.set()

    def _ledger_moves(self, workers: list[str]) -> None:
        """The ledger's own count of the calls a loss moves, taken before the failover moves
        them: the calls its walk finds on the lost workers, against those held elsewhere."""
        skip = frozenset(workers)
        self.ledger.ledger.move(calls_on(self._orch, workers),
                                held_call_ids(self._orch, self.failover.held, skip=skip))

    # -- stop --------------------------------------------------------------------------
    async def stop(self) -> None:
        """Shut every worker process down (Shutdown, then SIGKILL after a grace period),
        reap every process ever started and close the listener."""
        held = None
        if self._orch is not None and self._running:
            held = held_call_ids(self._orch, self.failover.held)
            self.ledger_report = self.ledger.ledger.reconcile(held)
        self._stopping = True
        self.notify("on_stopping")
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
        await self._reap()
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
        if held is not None:
            # While the processes shut down, calls held at the stop may have completed (final
            # now) and their sessions issued new ones (held now): the report taken again
            # agrees with the run's final counters.
            self.ledger_report = self.ledger.ledger.reconcile(
                held | held_call_ids(self._orch, self.failover.held))

    async def _reap(self) -> None:
        procs = [p for p in self.spawned if p.returncode is None]
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)),
                                   timeout=self._sim(self.options.shutdown_grace_s))
        except TimeoutError:
            for p in procs:
                if p.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()  # stopped (SIGSTOP) or deaf: SIGKILL reaches it all the same
            await asyncio.gather(*(p.wait() for p in procs))

    def summary(self) -> dict:
        out = {"worker_processes": len(self.handles), "processes_lost": self.lost_total,
               "processes_restarted": self.restarts_total,
               "bad_connections": self.bad_peers_total,
               "late_results_dropped": self.late_results_dropped,
               "stop_reason": self.stop_reason,
               "signal": None if self.signal is None else self.signal.name}
        if self.ledger_report is not None:
            out["ledger"] = self.ledger_report.as_dict()
            # The ledger's own count of the calls losses moved (its walk of the lost
            # workers), beside the failover's `requests.redispatched`.
            out["ledger_moved"] = self.ledger_report.moved
            out["ledger_bad_moves"] = self.ledger_report.bad_moves
        return out
