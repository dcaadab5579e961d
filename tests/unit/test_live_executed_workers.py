"""Workers whose steps run on an executor (live mode), with the interleavings driven by
hand: a worker process lost in the loop turn right after a fill step's result arrived; a
worker started again after a loss that fails."""

import asyncio
from types import SimpleNamespace

from costmodel.model import load_model
from orchestrator.live.failover import Failover
from tests.factories import small_cluster
from workers.clock import VirtualClock
from workers.executor import ExecutedDecodeWorker
from workers.request import Request, RequestState
from workers.runtime import ClusterRuntime

LLAMA = load_model("llama-3.1-70b")


class FirstFillGated:
    """A StepExecutor: the first fill step waits until the test ends it (as its StepDone
    would); every other step takes its duration on the loop's clock."""

    def __init__(self) -> None:
        self.first: asyncio.Future | None = None
        self.sent = asyncio.Event()
        self.steps: list[tuple[str, list[int]]] = []

    async def run(self, worker, duration_s, call_ids):
        self.steps.append((worker, list(call_ids)))
        if self.first is not None or not worker.startswith("prefill"):
            await asyncio.sleep(duration_s)
            return
        self.first = asyncio.get_running_loop().create_future()
        self.sent.set()
        await self.first


def test_a_fill_step_done_just_before_its_process_is_lost_is_not_filled_again():
    """The step's result arrives, its task completes the step (the call goes on to the
    ready buffer and a decode worker loads it), and the process is lost in the next
    callback, before the task's done callbacks have run. The call is not handed back as
    fill work: that second fill put it in the ready buffer again, the decode worker
    admitted it twice, and its second retirement found no fetch (KeyError in
    DecodeWorker._retire, its task dead)."""

    async def main():
        gate = FirstFillGated()
        failed = []
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: failed.append(ctx.get("exception")))
        rt = ClusterRuntime(small_cluster().bind(LLAMA), block_tokens=64, executor=gate)
        rt.start()
        orch = SimpleNamespace(runtime=rt, counters={"redispatched": 0})
        failover = Failover(orch, lambda *a, **k: None)
        req = Request(1, "s1", input_tokens=640, output_tokens=20,
                      block_ids=tuple(range(1, 11)))
        req.arrival_s = loop.time()
        rt.submit_fill("prefill-0", req, loop.time())
        await gate.sent.wait()
        moved: list[int] = []
        gate.first.set_result(None)  # the StepDone: the step's task resumes next
        loop.call_soon(lambda: moved.append(failover.evacuate(["prefill-0"])))
        while not rt.done and loop.time() < 100.0:
            await asyncio.sleep(0.05)
        await asyncio.sleep(5.0)  # room for a second completion, were there one
        await rt.stop()
        return moved, rt, orch, gate, failed

    moved, rt, orch, gate, failed = VirtualClock().run(main())
    assert failed == []  # no worker task died
    assert moved == [0] and orch.counters["redispatched"] == 0
    assert [s for s in gate.steps if s[0] != "decode-0"] == [("prefill-0", [1])]  # one fill
    assert [r.call_id for r in rt.done] == [1]
    assert rt.done[0].state is RequestState.DONE and rt.done[0].generated == 20


class Immediate:
    async def run(self, worker, duration_s, call_ids):
        await asyncio.sleep(duration_s)


def test_a_worker_started_during_the_run_that_fails_reaches_the_loops_exception_handler(
        monkeypatch):
    """A worker restored after its process was lost (or moved) runs as a task started
    during the run: if it fails, the run's exception handler hears of it (the orchestrator
    stops the run) instead of the worker dying silently with its calls, the run hanging."""

    async def main():
        seen = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: seen.append(ctx))
        rt = ClusterRuntime(small_cluster().bind(LLAMA), block_tokens=64, executor=Immediate())
        rt.start()
        spec = rt.decode_workers["decode-0"].spec
        rt.remove_worker("decode-0")  # its process lost

        async def broken(self):
            raise RuntimeError(f"{self.name} broke")

        monkeypatch.setattr(ExecutedDecodeWorker, "run", broken)
        task = rt.add_worker(spec)  # its process back
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)  # done callbacks run after the task ends
        await rt.stop()
        return seen

    seen = asyncio.run(main())
    assert [str(c["exception"]) for c in seen] == ["decode-0 broke"]
    assert seen[0]["message"] == "worker decode-0 failed"


def test_a_fill_worker_evacuated_mid_step_keeps_nothing_of_its_calls():
    """Its calls go to other workers: none of its fill bookkeeping (the prefix fetched,
    the tokens planned, when the prefix is in HBM) stays behind for them."""

    async def main():
        gate = FirstFillGated()
        rt = ClusterRuntime(small_cluster().bind(LLAMA), block_tokens=64, executor=gate)
        rt.start()
        loop = asyncio.get_running_loop()
        req = Request(1, "s1", input_tokens=640, output_tokens=20,
                      block_ids=tuple(range(1, 11)))
        req.arrival_s = loop.time()
        rt.submit_fill("prefill-0", req, loop.time())
        await gate.sent.wait()
        worker = rt.fill_workers["prefill-0"]
        planned_before = dict(worker.fills.planned)
        out = worker.evacuate()
        fills = worker.fills
        kept = (dict(fills.planned), dict(fills.loaded_at), dict(fills.fetched))
        await rt.stop()  # (the step in flight was cancelled with its task)
        return planned_before, out, kept

    planned_before, out, kept = VirtualClock().run(main())
    assert planned_before == {1: 640}  # the step in flight had planned the call
    assert [r.call_id for r in out] == [1] and out[0].state is RequestState.QUEUED
    assert kept == ({}, {}, {})
