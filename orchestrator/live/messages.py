"""The messages between the orchestrator and its worker processes.

Tagged msgspec structs encoded as MessagePack: a frame whose tag is unknown or
whose fields have the wrong types fails to decode, and its connection is closed.
"""

from __future__ import annotations

import msgspec


class Hello(msgspec.Struct, tag="hello", frozen=True):
    """A worker process's first message: the run's token proves it was started by us."""

    token: str
    process: int  # the index the orchestrator gave it
    pid: int


class Step(msgspec.Struct, tag="step", frozen=True):
    """Run one step of `worker` lasting `duration_s` simulated seconds."""

    id: int
    worker: str
    duration_s: float
    calls: int  # how many calls the step carries (for the process's own counters)


class StepDone(msgspec.Struct, tag="step_done", frozen=True):
    id: int


class Heartbeat(msgspec.Struct, tag="heartbeat", frozen=True):
    process: int
    seq: int
    steps_done: int
    rss_bytes: int


class Shutdown(msgspec.Struct, tag="shutdown", frozen=True):
    """Stop now: steps still running are abandoned."""


Message = Hello | Step | StepDone | Heartbeat | Shutdown
