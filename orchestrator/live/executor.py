"""Steps sent to the worker process hosting their worker (the live `StepExecutor`)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from orchestrator.live.messages import Step
from orchestrator.live.supervise import ProcState
from orchestrator.live.transport import write_message
from workers.executor import LOST_RETRY_S, WorkerLost


class RemoteExecutor:
    """A StepExecutor that runs each step in the worker process hosting its worker."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self._ids = itertools.count(1)

    async def run(self, worker: str, duration_s: float, call_ids: Sequence[int]) -> None:
        handle = self.backend.host_of(worker)
        if handle is None or handle.state is not ProcState.CONNECTED or handle.writer is None:
            # No process to run it (a worker created while every process is restarting):
            # its worker tries again after a pause rather than at once, in a spin.
            await asyncio.sleep(LOST_RETRY_S)
            raise WorkerLost(worker)
        # Observers (fault injection) see the step before its process does: its worker
        # holds the step's calls, and a fault applied now lands before the step can run.
        self.backend.notify("on_step", handle, worker, duration_s, call_ids)
        step_id = next(self._ids)
        try:
            if handle.writer is None or handle.writer.is_closing():
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
