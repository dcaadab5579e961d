"""Live mode's settings: a LiveOptions that exists is valid."""

from __future__ import annotations

import math
import os
import resource
from dataclasses import dataclass

from orchestrator.cli._common import UserError
from orchestrator.live.transport import MAX_FRAME_BYTES

LOOPBACK = ("127.0.0.1", "::1", "localhost")
DEFAULT_MAX_WORKER_PROCS = 64


class LiveError(UserError):
    """Live mode cannot start as asked (a port in use, too many processes): one line."""


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class LiveOptions:
    workers_per_process: int = 1
    max_worker_procs: int = DEFAULT_MAX_WORKER_PROCS
    heartbeat_s: float = 0.1  # wall seconds between a worker process's heartbeats
    heartbeat_timeout_s: float = 1.0  # wall seconds of silence before a process is lost
    restart: bool = True  # start a new process for a lost one's workers
    restart_delay_s: float = 0.5  # wall seconds
    max_restarts: int = 20  # per worker process; then its workers stay lost
    host: str = "127.0.0.1"
    port: int | None = None  # None: a Unix socket in a private directory
    allow_remote: bool = False  # listen beyond loopback only when asked
    max_frame_bytes: int = MAX_FRAME_BYTES
    startup_timeout_s: float = 30.0
    hello_timeout_s: float = 5.0
    shutdown_grace_s: float = 3.0

    def __post_init__(self) -> None:
        for name in ("workers_per_process", "max_worker_procs", "max_frame_bytes",
                     "max_restarts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        for name in ("heartbeat_s", "heartbeat_timeout_s", "restart_delay_s",
                     "startup_timeout_s", "hello_timeout_s", "shutdown_grace_s"):
            _positive(name, getattr(self, name))
        if self.heartbeat_timeout_s <= 2 * self.heartbeat_s:
            raise ValueError(f"heartbeat_timeout_s: expected more than two heartbeats "
                             f"({2 * self.heartbeat_s:g} s), got {self.heartbeat_timeout_s!r}")
        if self.host not in LOOPBACK and not self.allow_remote:
            raise ValueError(f"live host {self.host!r} is not loopback: pass --live-allow-remote "
                             f"to listen beyond this machine")

    def check_processes(self, processes: int, workers: int) -> None:
        """Refuse more worker processes than allowed or than this user may start."""
        if processes > self.max_worker_procs:
            raise LiveError(
                f"--workers-per-process {self.workers_per_process}: {workers} workers need "
                f"{processes} worker processes, more than --max-worker-procs "
                f"{self.max_worker_procs} (this machine has {os.cpu_count()} CPUs)")
        soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if soft != resource.RLIM_INFINITY and processes >= soft:
            raise LiveError(f"{processes} worker processes exceed this user's process limit "
                            f"({soft}, ulimit -u)")
