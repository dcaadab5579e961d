"""A cluster's workers, store and ready buffer, wired together on the running loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from costmodel.efficiency import Efficiency
from costmodel.phase import Phase
from costmodel.precision import BYTES_PER_ELEMENT
from storage.store import BlobStore
from storage.tiers import Location, Tier
from workers.cluster import BoundCluster, ClusterError, WorkerSpec
from workers.cluster_toml import MIXED
from workers.cost_source import CostSource
from workers.cost_sources import Pricers
from workers.decode import DecodeWorker
from workers.events import EventLog
from workers.fill import FillWorker
from workers.kv_links import KvLinks
from workers.kv_policy import DEFAULT_KV_POLICY, KVPolicy, resident_bytes
from workers.mixed import MixedWorker
from workers.ready import ReadyBuffer
from workers.request import Request
from workers.state import WorkerState
from workers.token_gaps import TokenGaps

# Pools whose workers decode: the control plane steers their batch (decode_workers).
DECODING = (Phase.DECODE, MIXED)


class ClusterRuntime:
    """Builds one worker per model instance of each pool. `start()` runs them as tasks on
    the current loop; `submit_fill` hands a request to a named fill or mixed worker.

    Mixed workers (aggregated pools) fill and decode: they are in `decode_workers`, where
    the control plane steers decode batches, and take calls like fill workers
    (`intake_workers`)."""

    def __init__(self, cluster: BoundCluster, block_tokens: int,
                 eff: Efficiency | None = None,
                 on_done: Callable[[Request, float], None] | None = None,
                 keep_events: bool = False, jump: bool = True, executor=None, seed: int = 0,
                 kv_policy: KVPolicy = DEFAULT_KV_POLICY, keep_token_gaps: bool = False):
        self.cluster = cluster
        from costmodel.engines import DEFAULT_ENGINE, serving_efficiency

        if eff is None:  # the cluster's engine and MTP acceptance (costmodel.engines)
            eff = serving_efficiency(cluster.model, cluster.spec.engine,
                                     cluster.spec.mtp_acceptance)
        # What the run records of them (`ReplayResult.service`).
        self.service = {"engine": cluster.spec.engine or DEFAULT_ENGINE,
                        "step_overhead_s": eff.step_overhead_s,
                        "draft_overhead_s": eff.draft_overhead_s,
                        "mtp_acceptance": list(eff.mtp_acceptance)}
        # The gaps before every token streamed, recorded by the decoding workers
        # (workers.token_gaps); `keep_token_gaps` keeps each record (a benchmark's window).
        self.token_gaps = TokenGaps(keep=keep_token_gaps)
        self.kv_policy = kv_policy  # where a call's KV goes when it ends (workers.kv_policy)
        self.seed = seed  # decode workers draw multi-token-prediction acceptance from it
        # None: steps wait on this loop's clock; a StepExecutor (workers.executor): steps run
        # where it says (live mode: worker processes).
        self.executor, self.jump = executor, jump
        self.log = EventLog(keep=keep_events)
        decode_kv = next((w.layout.kv for w in cluster.workers if w.phase in DECODING),
                         cluster.workers[0].layout.kv)
        kv_per_token = cluster.model.kv_bytes_per_token(BYTES_PER_ELEMENT[decode_kv])
        self.store = BlobStore(cluster.store_layout, block_tokens, round(kv_per_token))
        self.ready = ReadyBuffer()
        # The cluster's links: every copy the store's plans make runs on them once the
        # runtime starts (`start` attaches them to the store on the running loop).
        self.links = KvLinks(cluster)
        if kv_policy is KVPolicy.RETAIN:
            self.ready.prefer = self._decode_affinity
        # Completed calls, kept here only when no on_done takes them (the orchestrator keeps
        # its own, compactly).
        self.done: list[Request] = []
        self._on_done = on_done
        # Each pool's prices: the roofline, or the measured tables where the cluster's
        # cost source asks for them and they cover the pool (workers.cost_sources).
        self.cost_sources = Pricers(cluster.model, eff, self.service["engine"],
                                    cluster.spec.cost_source)
        pricers: dict[str, CostSource] = {}
        self.fill_workers: dict[str, FillWorker] = {}
        self.decode_workers: dict[str, DecodeWorker] = {}
        for w in cluster.workers:
            if w.pool not in pricers:
                pricers[w.pool] = self.cost_sources.pricer(w.pool, w.hardware, w.layout)
            worker = self._make_worker(w, pricers[w.pool])
            workers = self.decode_workers if w.phase in DECODING else self.fill_workers
            workers[w.name] = worker
        self.cost_sources.warn()
        if cluster.spec.cost_source is not None:  # the default records nothing new
            self.service["cost_source"] = self.cost_sources.record()
        self.pricers = pricers
        self.eff, self.jump = eff, jump
        self._tasks: list[asyncio.Task] = []
        self._task_of: dict[str, asyncio.Task] = {}

    def _make_worker(self, spec: WorkerSpec, pricer: CostSource) -> FillWorker | DecodeWorker:
        worker = self._new_worker(spec, pricer)
        worker.kv_policy = self.kv_policy
        if isinstance(worker, DecodeWorker):  # mixed workers too
            worker.token_gaps = self.token_gaps
        fills = getattr(worker, "fills", None)
        if fills is not None:  # fill and mixed workers promote hot prefixes they fetch
            fills.rack = self.links.rack_cache(spec)
            fills.promote_min_sessions = self.links.promote_min_sessions
        if isinstance(worker, FillWorker):
            worker.direct_handoff = self.links.handoff == "direct"
        return worker

    def _new_worker(self, spec: WorkerSpec, pricer: CostSource) -> FillWorker | DecodeWorker:
        args = (spec, pricer, self.store, self.ready, self.log, self._finished)
        if spec.phase is MIXED:
            if self.executor is not None:
                raise ClusterError(f"pool {spec.pool}: mixed pools run in virtual time or "
                                   f"in-process only, not on worker processes")
            return MixedWorker(*args, jump=self.jump)
        if self.executor is not None:
            from workers.executor import ExecutedDecodeWorker, ExecutedFillWorker

            if spec.phase is Phase.DECODE:
                return ExecutedDecodeWorker(*args, jump=self.jump, executor=self.executor,
                                            seed=self.seed)
            return ExecutedFillWorker(*args, executor=self.executor)
        if spec.phase is Phase.DECODE:
            return DecodeWorker(*args, jump=self.jump, seed=self.seed)
        return FillWorker(*args)

    def _decode_affinity(self, req: Request):
        """The wake-up of the decode worker whose HBM holds most of a filled call's KV,
        or None: it is offered the call first, the others if it has no room."""
        resident = resident_bytes(self.store, req.kv_chain)
        best, most = None, 0
        for w in self.decode_workers.values():
            n = resident.get(w.hbm.holder, 0)
            if n > most and w.ready is self.ready:  # a mixed worker's buffer is its own
                best, most = w, n
        return None if best is None else best._on_ready

    def resident_tokens(self, blob_ids: tuple) -> dict[str, int]:
        """Tokens of these blobs resident in each intake worker's HBM, by worker name:
        what a router learns from the workers' KV events."""
        resident = resident_bytes(self.store, blob_ids)
        per_token = self.store.index.kv_bytes_per_token
        return {w.name: resident[w.hbm.holder] // per_token for w in self.intake_workers()
                if w.hbm.holder in resident}

    def _finished(self, req: Request, now_s: float) -> None:
        if self._on_done is None:
            self.done.append(req)
        else:
            self._on_done(req, now_s)

    def start(self) -> list[asyncio.Task]:
        self.store.on_apply = self.links.applied
        workers = [*self.fill_workers.values(), *self.decode_workers.values()]
        self._tasks = [self._start_task(w) for w in workers]
        self._task_of = {w.name: t for w, t in zip(workers, self._tasks, strict=True)}
        return self._tasks

    @staticmethod
    def _start_task(worker: FillWorker | DecodeWorker) -> asyncio.Task:
        """Run `worker` as a task whose failure reaches the loop's exception handler (the
        orchestrator's stops the run), whether it started with the run or later (a worker
        restored after its process was lost, or moved): a dead worker must not hold its
        calls silently."""
        task = asyncio.create_task(worker.run(), name=worker.name)
        task.add_done_callback(_report_failure)
        return task

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def add_worker(self, spec: WorkerSpec, hbm_holder: str | None = None) -> asyncio.Task:
        """Start a worker for `spec` on the running loop. `hbm_holder` names the store
        location of its HBM when its GPUs served under another name before."""
        pricer = self.pricers.get(spec.pool) or self.cost_sources.pricer(
            spec.pool, spec.hardware, spec.layout)
        self.pricers.setdefault(spec.pool, pricer)
        self.links.add_worker(spec, hbm_holder)
        worker = self._make_worker(spec, pricer)
        if spec.phase in DECODING:
            self.decode_workers[spec.name] = worker
        else:
            self.fill_workers[spec.name] = worker
        if hbm_holder is not None:
            worker.hbm = Location(Tier.HBM, hbm_holder)
        task = self._start_task(worker)
        self._tasks.append(task)
        self._task_of[spec.name] = task
        return task

    def remove_worker(self, name: str) -> None:
        """Stop a drained worker (it holds no request)."""
        worker = self.fill_workers.pop(name, None) or self.decode_workers.pop(name)
        if isinstance(worker, FillWorker):  # its HBM is resized next: nothing pinned there
            worker.release_handoffs(asyncio.get_running_loop().time())
        if isinstance(worker, DecodeWorker):
            worker.ready.unsubscribe(worker._on_ready)  # a mixed worker's is its own
        self._task_of.pop(name).cancel()

    def fill_workers_of(self, phase: Phase) -> list[FillWorker]:
        return [w for w in self.fill_workers.values() if w.spec.phase is phase]

    def intake_workers(self) -> list[FillWorker | MixedWorker]:
        """The workers a call can be routed to: fill workers and mixed workers."""
        return [*self.fill_workers.values(),
                *(w for w in self.decode_workers.values() if isinstance(w, MixedWorker))]

    def submit_fill(self, worker: str, req: Request, now_s: float) -> None:
        target = self.fill_workers.get(worker)
        if target is None:
            target = self.decode_workers[worker]
            if not isinstance(target, MixedWorker):
                raise KeyError(f"{worker} is a decode worker: it takes no calls")
        target.submit(req, now_s)

    def states(self) -> list[WorkerState]:
        return [w.state() for w in (*self.fill_workers.values(), *self.decode_workers.values())]


def _report_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        task.get_loop().call_exception_handler(
            {"message": f"worker {task.get_name()} failed", "exception": task.exception(),
             "task": task})
