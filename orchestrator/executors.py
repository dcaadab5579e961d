"""Where independent tasks run: a local process pool, or Ray tasks on a cluster.

Both run `fn(shared, item)` for every item and yield `(index, Outcome)` as tasks
finish. `shared` is sent once per worker (the pool's initializer, Ray's object
store), not once per task: replay points share their trace's sessions, which
pickle to megabytes. Tasks must be top-level functions (importable by name in
the worker) and pure, so where they ran never changes what they return.

Ray is an optional extra and is imported only when asked for. Connecting to
a Ray address is bounded: the address is probed first (a refused or
unreachable port fails at once) and `ray.init` runs under a deadline, because
it otherwise retries for minutes against an address that is not a Ray head.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

EXECUTORS = ("local", "ray")
# Probe, then ray.init, then the hard exit's grace: 5 + 18 + 4 s, under 30 s in all.
PROBE_TIMEOUT_S = 5.0
RAY_CONNECT_TIMEOUT_S = 18.0
# Starting a local instance (no address) launches Ray's own processes, which take far
# longer on a busy machine (more than 18 s was seen under load 15); the bound only
# turns a hang into an error, so it is generous.
RAY_START_TIMEOUT_S = 180.0
HARD_EXIT_GRACE_S = 4.0


class ExecutorError(Exception):
    """An executor that cannot start: Ray missing, an address that does not answer."""


@dataclass(frozen=True)
class Outcome:
    """A task's value, or the one-line reason it produced none."""

    value: Any = None
    error: str | None = None


# The pool's worker processes keep the shared payload here, set once by the
# initializer; it lives as long as the worker process and no longer.
_WORKER_SHARED: Any = None


def _init_local(shared: Any) -> None:
    global _WORKER_SHARED
    _WORKER_SHARED = shared


def _call_local(fn: Callable[[Any, Any], Any], item: Any) -> Any:
    return fn(_WORKER_SHARED, item)


def _call_ray(fn: Callable[[Any, Any], Any], shared: Any, item: Any) -> Any:
    return fn(shared, item)


class InlineExecutor:
    """Every task in this process, one after another: for tests and debugging (a
    debugger, a profiler or a monkeypatch sees the task run)."""

    name = "inline"
    workers = 1

    def __enter__(self) -> InlineExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, fn: Callable[[Any, Any], Any], shared: Any,
            items: Sequence[Any]) -> Iterator[tuple[int, Outcome]]:
        for index, item in enumerate(items):
            try:
                yield index, Outcome(fn(shared, item))
            except Exception as exc:  # a task's failure is its outcome
                yield index, Outcome(error=f"{type(exc).__name__}: {exc}")


class LocalExecutor:
    """A process pool over `workers` processes (default: every core)."""

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = workers or os.cpu_count() or 1

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, fn: Callable[[Any, Any], Any], shared: Any,
            items: Sequence[Any]) -> Iterator[tuple[int, Outcome]]:
        if not items:
            return
        import multiprocessing

        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() \
            else "spawn"
        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(items)),
                                   mp_context=multiprocessing.get_context(method),
                                   initializer=_init_local, initargs=(shared,))
        try:
            pending = {pool.submit(_call_local, fn, item): i for i, item in enumerate(items)}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=pending.__getitem__):
                    index = pending.pop(future)
                    exc = future.exception()
                    yield index, (Outcome(future.result()) if exc is None
                                  else Outcome(error=f"{type(exc).__name__}: {exc}"))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ExecutorError("--executor ray needs Ray: pip install 'tokenfactory[cluster]'") from None
    return ray


def _probe(address: str) -> None:
    """Fail at once on a host:port nobody listens on (ray.init would retry for minutes)."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ExecutorError(f"--ray-address {address!r}: expected HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ExecutorError(f"--ray-address {address}: cannot reach a Ray head there "
                            f"({reason}); start one with `ray start --head` or fix the "
                            "address") from None


class _ConnectTimeout(Exception):
    pass


def _hard_exit(message: str, stderr_fd: int) -> None:
    # Last resort when ray.init is stuck in native code the alarm cannot interrupt.
    os.write(stderr_fd, f"tokenfactory: error: {message}\n".encode())
    os._exit(2)


def _init_bounded(ray, kwargs: dict[str, Any], timeout_s: float, where: str) -> None:
    """ray.init, or ExecutorError within `timeout_s` (plus a few seconds at worst).

    ray.init must run on the main thread (run elsewhere, the driver dies on its
    first call), so the deadline is a SIGALRM that interrupts it, backed by a
    timer thread that ends the process if native code never returns."""
    message = f"could not connect to {where} within {timeout_s:g} s"
    main = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")

    def on_alarm(signum, frame) -> None:
        raise _ConnectTimeout

    with _stderr_to_scratch() as (saved_fd, scratch):
        old = signal.signal(signal.SIGALRM, on_alarm) if main else None
        if main:
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
        hard = threading.Timer(timeout_s + HARD_EXIT_GRACE_S,
                               lambda: _hard_exit(message + _ray_said(scratch), saved_fd))
        hard.daemon = True
        hard.start()
        try:
            ray.init(**kwargs)
        except _ConnectTimeout:
            raise ExecutorError(message + _ray_said(scratch)) from None
        except Exception as exc:  # whatever Ray raises, the user gets one line
            text = str(exc).strip()
            first = text.splitlines()[0] if text else ""
            raise ExecutorError(f"could not connect to {where}: {type(exc).__name__}"
                                f"{': ' + first if first else ''}") from None
        finally:
            hard.cancel()
            if main:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)


@contextmanager
def _stderr_to_scratch() -> Iterator[tuple[int, Any]]:
    """Ray's native client logs every failed attempt on file descriptor 2; while it
    connects that goes to a scratch file, so a failure reads as our one line.
    Yields a descriptor of the real stderr and the scratch file."""
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 2)
        try:
            yield saved_fd, scratch
        finally:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)


def _ray_said(scratch) -> str:
    """The last reason Ray's native client logged (say, a refused auth token), if any."""
    try:
        text = os.pread(scratch.fileno(), 1 << 16, 0).decode(errors="replace")
    except OSError:
        return ""
    reasons = [line.split("] ", 1)[-1].strip() for line in text.splitlines()
               if "error" in line.lower() or "failed" in line.lower()]
    return f"; Ray said: {reasons[-1][:200]}" if reasons else ""


class RayExecutor:
    """Ray tasks on the cluster at `address`, or on a local Ray instance without one."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None,
                 connect_timeout_s: float | None = None):
        self.address = address
        self.workers = workers
        if connect_timeout_s is None:
            connect_timeout_s = RAY_CONNECT_TIMEOUT_S if address else RAY_START_TIMEOUT_S
        self.connect_timeout_s = connect_timeout_s
        self._ray = None

    def __enter__(self) -> RayExecutor:
        ray = _import_ray()
        if self.address and self.address != "auto":
            _probe(self.address)
        kwargs: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        if self.address:
            kwargs["address"] = self.address
        else:
            kwargs |= {"num_cpus": self.workers or os.cpu_count(), "include_dashboard": False}
        where = f"Ray at {self.address}" if self.address else "a local Ray instance"
        _init_bounded(ray, kwargs, self.connect_timeout_s, where)
        self._ray = ray
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ray is not None:
            self._ray.shutdown()
            self._ray = None

    def run(self, fn: Callable[[Any, Any], Any], shared: Any,
            items: Sequence[Any]) -> Iterator[tuple[int, Outcome]]:
        ray = self._ray
        if ray is None:
            raise RuntimeError("RayExecutor.run outside its `with` block")
        if not items:
            return
        # max_retries=0: a task is pure, so a retry would only repeat a failure.
        remote = ray.remote(max_retries=0)(_call_ray)
        shared_ref = ray.put(shared)
        pending = {remote.remote(fn, shared_ref, item): i for i, item in enumerate(items)}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    index = pending.pop(ref)
                    try:
                        yield index, Outcome(ray.get(ref))
                    except Exception as exc:
                        first = (str(exc).strip().splitlines() or [""])[0]
                        yield index, Outcome(error=f"{type(exc).__name__}: {first}")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)


def make_executor(name: str, workers: int | None = None, ray_address: str | None = None):
    if name == "local":
        if ray_address:
            raise ExecutorError("--ray-address needs --executor ray")
        return LocalExecutor(workers)
    if name == "ray":
        return RayExecutor(ray_address, workers)
    if name == "inline":
        return InlineExecutor()
    raise ExecutorError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")


def map_ordered(executor, fn: Callable[[Any, Any], Any], shared: Any,
                items: Sequence[Any]) -> list[Any]:
    """Every task's value in the order of `items`; the first failure raises."""
    results: list[Any] = [None] * len(items)
    for index, outcome in executor.run(fn, shared, items):
        if outcome.error is not None:
            raise RuntimeError(f"task {index} failed: {outcome.error}")
        results[index] = outcome.value
    return results
