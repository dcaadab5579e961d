"""A worker process: `python -m orchestrator.live.worker_proc --connect ADDR --process I`.

It connects to the orchestrator, says Hello with the run's token (from the
environment, so it is not on the command line), then runs each Step it is sent
on its own uvloop clock (real time scaled by --speed) and answers StepDone; a
Heartbeat goes out every --heartbeat-s wall seconds. It exits on Shutdown, on
SIGTERM, or when the connection ends (its orchestrator is gone: no orphans).
It ignores SIGINT: a Ctrl-C reaches the orchestrator, which stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import sys

from orchestrator.live.messages import Heartbeat, Hello, Shutdown, Step, StepDone
from orchestrator.live.transport import BadFrame, read_message, write_message
from workers.clock import LiveClock

TOKEN_ENV = "TOKENFACTORY_LIVE_TOKEN"


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the peak is what there is
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def open_address(address: str):
    kind, _, rest = address.partition(":")
    if kind == "unix":
        return await asyncio.open_unix_connection(rest)
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        return await asyncio.open_connection(host, int(port))
    raise ValueError(f"address must be unix:PATH or tcp:HOST:PORT, got {address!r}")


class WorkerProcess:
    def __init__(self, process: int, speed: float, heartbeat_s: float) -> None:
        self.process, self.speed, self.heartbeat_s = process, speed, heartbeat_s
        self.steps_done = 0
        self._tasks: set[asyncio.Task] = set()

    async def _step(self, writer: asyncio.StreamWriter, step: Step) -> None:
        await asyncio.sleep(max(step.duration_s, 0.0))  # simulated seconds on a scaled loop
        self.steps_done += 1
        write_message(writer, StepDone(step.id))

    async def _heartbeats(self, writer: asyncio.StreamWriter) -> None:
        seq = 0
        while True:
            seq += 1
            write_message(writer, Heartbeat(self.process, seq, self.steps_done, rss_bytes()))
            await writer.drain()
            await asyncio.sleep(self.heartbeat_s * self.speed)  # wall seconds, scaled

    async def main(self, address: str, token: str) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        reader, writer = await open_address(address)
        write_message(writer, Hello(token, self.process, os.getpid()))
        await writer.drain()
        beats = asyncio.create_task(self._heartbeats(writer))
        stopped = asyncio.create_task(stop.wait())
        try:
            while True:
                nxt = asyncio.create_task(read_message(reader))
                await asyncio.wait({nxt, stopped, beats}, return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():
                    nxt.cancel()
                    return 0
                msg = nxt.result()
                if msg is None or isinstance(msg, Shutdown):
                    return 0
                if isinstance(msg, Step):
                    task = asyncio.create_task(self._step(writer, msg))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        except (BadFrame, ConnectionError):
            return 0
        finally:
            beats.cancel()
            stopped.cancel()
            for task in self._tasks:
                task.cancel()
            writer.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tokenfactory-worker")
    p.add_argument("--connect", required=True)
    p.add_argument("--process", type=int, required=True)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--heartbeat-s", type=float, default=0.1)
    args = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    token = os.environ.pop(TOKEN_ENV, "")
    worker = WorkerProcess(args.process, args.speed, args.heartbeat_s)
    try:
        return LiveClock(args.speed).run(worker.main(args.connect, token))
    except (ConnectionError, FileNotFoundError):
        return 0


if __name__ == "__main__":
    sys.exit(main())
