"""Failover on small fakes: a lost worker is removed and comes back on the same GPUs (its
HBM under the store name it had, a worker that came by a move included); held fill work
goes to a fill worker as soon as one accepts; whether the run can still finish."""

import asyncio
from types import SimpleNamespace

from costmodel.phase import Phase
from orchestrator.live.failover import Failover


class Worker:
    def __init__(self, name, phase, hbm_holder=None, calls=()):
        self.name, self.accepting = name, True
        self.spec = SimpleNamespace(name=name, phase=phase)
        self.hbm = SimpleNamespace(holder=hbm_holder or name)
        self.queue = list(calls)

    def evacuate(self):
        self.accepting = False
        out, self.queue = self.queue, []
        return out

    def submit(self, req, now_s):
        self.queue.append(req)


class Queue(list):
    def appendleft(self, x):
        self.insert(0, x)


class Runtime:
    def __init__(self, workers):
        self.fill_workers = {w.name: w for w in workers if w.spec.phase is not Phase.DECODE}
        self.decode_workers = {w.name: w for w in workers if w.spec.phase is Phase.DECODE}
        self.ready = SimpleNamespace(items=[], put=lambda r: self.ready.items.append(r))
        for w in self.fill_workers.values():
            w.queue = Queue(w.queue)

    def remove_worker(self, name):
        self.fill_workers.pop(name, None) or self.decode_workers.pop(name)

    def intake_workers(self):
        return list(self.fill_workers.values())


class Reconfigurer:
    def __init__(self, runtime):
        self.runtime, self.added = runtime, []

    def busy(self):
        return False

    def start_worker(self, spec, hbm_holder):
        self.added.append((spec.name, hbm_holder))
        w = Worker(spec.name, spec.phase, hbm_holder)
        target = self.runtime.decode_workers if spec.phase is Phase.DECODE else \
            self.runtime.fill_workers
        target[spec.name] = w


def make(workers):
    rt = Runtime(workers)
    orch = SimpleNamespace(runtime=rt, reconfigurer=Reconfigurer(rt),
                           counters={"redispatched": 0})
    return Failover(orch, lambda *a, **k: None), rt, orch


def test_a_worker_that_came_by_a_move_comes_back_on_its_gpus_hbm():
    async def go():
        moved = Worker("decode-2", Phase.DECODE, hbm_holder="midfill-2")
        failover, rt, orch = make([moved, Worker("prefill-0", Phase.PREFILL)])
        assert failover.evacuate(["decode-2"]) == 0
        assert "decode-2" not in rt.decode_workers
        failover.restore(["decode-2"])
        assert orch.reconfigurer.added == [("decode-2", "midfill-2")]
        assert rt.decode_workers["decode-2"].hbm.holder == "midfill-2"

    asyncio.run(go())


def test_fill_work_with_no_fill_worker_waits_then_goes_to_the_first_that_accepts():
    async def go():
        reqs = [SimpleNamespace(call_id=i) for i in (1, 2)]
        failover, rt, orch = make([Worker("prefill-0", Phase.PREFILL, calls=reqs),
                                   Worker("decode-0", Phase.DECODE)])
        assert failover.evacuate(["prefill-0"]) == 2
        assert failover.held == reqs and orch.counters["redispatched"] == 2
        failover.release_held()
        assert failover.held == reqs  # nowhere to go yet
        rt.fill_workers["midfill-0"] = Worker("midfill-0", Phase.MIDFILL)
        rt.fill_workers["midfill-0"].queue = Queue()
        failover.release_held()
        assert failover.held == [] and list(rt.fill_workers["midfill-0"].queue) == reqs

    asyncio.run(go())


def test_the_run_can_finish_while_a_lost_phase_is_coming_back_and_not_after():
    async def go():
        failover, _, _ = make([Worker("prefill-0", Phase.PREFILL),
                                Worker("decode-0", Phase.DECODE)])
        failover.evacuate(["decode-0"])
        assert failover.can_finish(coming_back=["decode-0"])
        assert not failover.can_finish(coming_back=[])

    asyncio.run(go())
