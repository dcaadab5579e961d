"""Where a worker's step runs: on the run's clock here, or on another process.

A step is "wait this long, on this worker's hardware". `FillWorker` and
`DecodeWorker` wait on the run's clock in-process (virtual mode and the
single-process live mode): nothing here touches them, so their results stay
bit-identical. `ExecutedFillWorker` and `ExecutedDecodeWorker` hand each step
to a `StepExecutor` instead; a remote executor (`orchestrator.live`) runs it
in the worker process hosting that worker and raises `WorkerLost` when that
process dies.

What survives a lost worker is what lives in the shared blob store: a fill
batch restarts from scratch elsewhere (its new KV was never written); a
decode keeps the tokens of its completed jumps and resumes elsewhere from the
blobs of its input (the generated tokens' KV is rebuilt with the load, as a
real system re-prefills the streamed tokens; that small cost is not priced).
`evacuate()` hands back those requests, with their pins released, for the
orchestrator to re-dispatch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from workers.decode import DecodeWorker
from workers.fill import FillWorker
from workers.kv_io import release_fetch
from workers.request import Request, RequestState

# Simulated seconds before a worker whose process is gone tries its step again.
LOST_RETRY_S = 0.1


class WorkerLost(RuntimeError):
    """The process executing this worker's steps died or went silent."""

    def __init__(self, worker: str) -> None:
        super().__init__(f"worker {worker} lost")
        self.worker = worker


@runtime_checkable
class StepExecutor(Protocol):
    async def run(self, worker: str, duration_s: float, call_ids: Sequence[int]) -> None:
        """Return when the step has run; raise WorkerLost if its process died."""
        ...


class LocalExecutor:
    """Steps wait on the run's own clock."""

    async def run(self, worker: str, duration_s: float, call_ids: Sequence[int]) -> None:
        await asyncio.sleep(duration_s)


class ExecutedFillWorker(FillWorker):
    """A fill worker whose batches run on an executor; a lost batch is handed back."""

    def __init__(self, *args, executor: StepExecutor, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.executor = executor
        self._steps: dict[asyncio.Task, list[Request]] = {}

    def _start_step(self, batch: list[Request], end_s: float) -> None:
        duration_s = end_s - asyncio.get_running_loop().time()
        task = asyncio.create_task(self._step(batch, duration_s))
        self._steps[task] = batch
        task.add_done_callback(lambda t: self._steps.pop(t, None))

    async def _step(self, batch: list[Request], duration_s: float) -> None:
        try:
            await self.executor.run(self.name, duration_s, [r.call_id for r in batch])
        except WorkerLost:
            # Unless `evacuate` took the batch already, it waits at the queue's front, for
            # this worker's next process or for `evacuate`.
            if self._steps.pop(asyncio.current_task(), None) is not None:
                self._in_flight -= len(batch)
                self.queue.extendleft(reversed(self._reset(batch)))
                if self._wake is not None:
                    self._wake.set()
            return
        # Out of the steps in flight before its calls go on: the task's done callback runs
        # loop turns later, and a loss in between (`evacuate`) would hand back calls already
        # filled, to be filled again and reach the ready buffer twice.
        self._steps.pop(asyncio.current_task(), None)
        self._complete(batch)

    def evacuate(self) -> list[Request]:
        """Stop taking work; return the batches in flight and the queue, oldest first,
        reset to be queued again elsewhere (a prefill restarts)."""
        self.accepting = False
        out: list[Request] = []
        for task, batch in list(self._steps.items()):
            task.cancel()
            out.extend(batch)
        self._steps.clear()
        out.extend(self.loading_step)  # a step still waiting for its prefixes
        self.loading_step = ()
        out.extend(self.queue)
        self.queue.clear()
        self._in_flight = 0
        return self._reset(out)

    def _reset(self, reqs: list[Request]) -> list[Request]:
        """Queued again, from scratch: nothing of their fill stays here (the prefix
        fetched, the tokens planned, when the prefix is in HBM)."""
        planned, loaded_at = self.fills.planned, self.fills.loaded_at
        for req in reqs:
            result = self._fetched.pop(req.call_id, None)
            if result is not None:
                release_fetch(self.store, self.hbm, result)
            planned.pop(req.call_id, None)
            loaded_at.pop(req.call_id, None)
            req.state = RequestState.QUEUED
            req.fill_worker = None
            req.prefix_tokens = req.computed_tokens = 0
            req.fill_start_s = None
        return reqs


class ExecutedDecodeWorker(DecodeWorker):
    """A decode worker whose jumps run on an executor. A jump still ends early when the
    batch must change; the executor's step is then abandoned."""

    def __init__(self, *args, executor: StepExecutor, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.executor = executor

    async def run(self) -> None:
        while True:
            try:
                await super().run()
            except WorkerLost:
                # Unless `evacuate` takes them, the running requests keep the tokens of their
                # completed jumps and try again (a restarting process).
                await asyncio.sleep(LOST_RETRY_S)

    async def _run_steps(self, ends) -> int:
        loop = asyncio.get_running_loop()
        ids = [r.call_id for r in self.running]
        remote = asyncio.ensure_future(self.executor.run(self.name, float(ends[-1]) - loop.time(),
                                                         ids))
        local = asyncio.ensure_future(super()._run_steps(ends))
        # A step abandoned by this worker may still fail later: its error is seen, not lost.
        remote.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.wait({remote, local}, return_when=asyncio.FIRST_COMPLETED)
            if remote.done() and remote.exception() is not None:
                local.cancel()
                raise remote.exception()
            done = await local
            if done == len(ends) and not remote.done():
                await remote  # the whole jump ran: its end is the remote step's end
            return done
        finally:
            for fut in (remote, local):
                if not fut.done():
                    fut.cancel()

    def _on_loaded(self, call_id: int) -> None:
        if call_id in self._loading:  # not evacuated while its KV was on its way
            super()._on_loaded(call_id)

    def evacuate(self) -> list[Request]:
        """Stop taking work; return the running, loaded and loading requests with the
        tokens of their completed jumps, ready to be loaded by another decode worker."""
        self.accepting = False
        out = [*self.running, *self._loaded, *self._loading.values()]
        if self.token_gaps is not None and self._loop is not None:
            # Their next token's gap spans the move (workers.token_gaps).
            now_s = self._loop.time()
            for req in self.running:
                self.token_gaps.stalled[req.call_id] = self._resumed.pop(req.call_id, now_s)
        self.running, self._loaded = [], []
        self._batch_changed()
        self._loading.clear()
        for req in out:
            result = self._fetches.pop(req.call_id, None)
            if result is not None:
                release_fetch(self.store, self.hbm, result)
            req.decode_worker = None
            req.state = RequestState.READY
        return out
