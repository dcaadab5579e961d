"""Moving a worker between pools, at its real cost: drain, then load the new slice's weights.

A worker chosen to move stops taking work and finishes what it holds; then
its GPUs read the new pool's weight slice from the parallel file system at
the slower of their network link and their share of the file system's read
bandwidth; then it serves in the new pool. Its GPUs keep their HBM location
in the store under the new name, sized to the KV room the new weights leave.

Pools may differ in worker size. A worker moves as it is when the new pool's workers
have its GPU count and hardware; otherwise it takes the new pool's layout reshaped to
its own GPUs (`workers.cluster.reshaped_worker`) when those weights fit and the KV room
left holds the pool's decode batch on every attention rank (a decode pool) or one
sequence (a fill pool) at `RESHAPE_CONTEXT_TOKENS`; a move that cannot be reshaped so is
refused.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from costmodel.memory import weight_bytes_per_gpu
from costmodel.phase import Phase
from orchestrator.control.realloc import Move
from workers.cluster import BoundCluster, WorkerSpec, reshaped_worker
from workers.runtime import ClusterRuntime

DRAIN_POLL_S = 0.1
# The context at which a reshaped worker must hold its batch: a modest 32k tokens, so a
# reshape that leaves room only for short calls is refused rather than admitted to thrash.
RESHAPE_CONTEXT_TOKENS = 32_768


class Reconfigurer:
    def __init__(self, runtime: ClusterRuntime, cluster: BoundCluster,
                 weights_per_gpu: dict[str, float]) -> None:
        self.runtime, self.cluster, self.weights_per_gpu = runtime, cluster, weights_per_gpu
        self.log: list[tuple[float, str, str, str]] = []  # (time, worker, from pool, to pool)
        self.started_s: dict[str, float] = {}  # workers created by a move, and when
        self.retired_energy_j = 0.0
        self._serial: dict[str, int] = {}
        self._tasks: list[asyncio.Task] = []
        self._templates = {w.pool: w for w in cluster.workers}

    def _workers(self):
        return {**self.runtime.fill_workers, **self.runtime.decode_workers}

    def load_time_s(self, spec: WorkerSpec) -> float:
        gpus = spec.layout.instance_gpus
        pfs = self.cluster.spec.pfs.read_bytes_per_s
        per_gpu = min(spec.hardware.scale_out_bytes_per_s, pfs / gpus)
        weights = self.weights_per_gpu[spec.pool]
        if spec.layout != self._templates[spec.pool].layout:  # a reshaped slice
            weights = float(weight_bytes_per_gpu(self.cluster.model, spec.layout))
        return weights / per_gpu

    def reshaped(self, target: WorkerSpec, donor: WorkerSpec) -> WorkerSpec | None:
        """`target`'s pool at the donor's size, or None when it cannot serve there."""
        spec = reshaped_worker(self.cluster, target, donor.layout.instance_gpus, donor.hardware)
        if spec is None:
            return None
        need = 1
        if spec.phase is Phase.DECODE:
            need = spec.batch.target_batch * spec.kv.ranks * spec.layout.pp
        return spec if spec.kv.sequences_at(RESHAPE_CONTEXT_TOKENS) >= need else None

    def busy(self) -> bool:
        """A worker is draining or loading weights."""
        return any(not t.done() for t in self._tasks)

    def start(self, move: Move, now_s: float) -> bool:
        """Begin moving one worker of `move.from_pool`; False when none can move."""
        target = self._templates.get(move.to_pool)
        donors = [w for w in self._workers().values()
                  if w.spec.pool == move.from_pool and w.accepting]
        if target is None or len(donors) <= 1:
            return False
        plans = {w.name: target for w in donors
                 if w.spec.layout.instance_gpus == target.layout.instance_gpus
                 and w.spec.hardware == target.hardware}
        if not plans:
            for w in donors:
                spec = self.reshaped(target, w.spec)
                if spec is not None:
                    plans[w.name] = spec
        if not plans:
            return False
        worker = min((w for w in donors if w.name in plans),
                     key=lambda w: (w.state().queue_depth + w.state().running, w.name))
        worker.accepting = False
        task = asyncio.create_task(self._move(worker, plans[worker.name], now_s))
        task.add_done_callback(_report_failure)
        self._tasks.append(task)
        return True

    async def _move(self, worker, target: WorkerSpec, start_s: float) -> None:
        loop = asyncio.get_running_loop()
        while worker.state().queue_depth or worker.state().running:
            await asyncio.sleep(DRAIN_POLL_S)
        n = self._serial.get(target.pool, sum(1 for w in self.cluster.workers
                                              if w.pool == target.pool))
        self._serial[target.pool] = n + 1
        spec = replace(target, name=f"{target.pool}-{n}", node=worker.spec.node,
                       rack=worker.spec.rack)
        old = worker.spec
        power = old.layout.instance_gpus * old.hardware.tdp_w
        idle = self.runtime.eff.idle_power_fraction
        began = self.started_s.pop(old.name, 0.0)
        now_s = loop.time()
        self.retired_energy_j += power * (idle * (now_s - began)
                                          + (1 - idle) * worker.state().busy_s)
        self.runtime.remove_worker(old.name)
        # The new weights leave another KV room: the HBM tier takes its size (blobs that no
        # longer fit are demoted now, while the weights load).
        self.runtime.store.resize(worker.hbm, spec.kv_capacity_bytes, now_s)
        self.log.append((start_s, old.name, old.pool, target.pool))
        await asyncio.sleep(self.load_time_s(spec))
        # Idle GPUs while the weights load are counted with the new worker's idle time.
        self.started_s[spec.name] = now_s
        self.start_worker(spec, worker.hbm.holder)

    def start_worker(self, spec: WorkerSpec, hbm_holder: str) -> None:
        """Start `spec` with its KV at `hbm_holder`'s HBM (a move, or a worker restored
        after its process was lost); a reshaped worker is priced at its own layout, not its pool's
        (the runtime keeps one pricer a pool, which stays the pool's template's)."""
        pricers = self.runtime.pricers
        if spec.layout == self._templates[spec.pool].layout:
            self.runtime.add_worker(spec, hbm_holder=hbm_holder)
            return
        pool_pricer = pricers.pop(spec.pool, None)
        try:
            self.runtime.add_worker(spec, hbm_holder=hbm_holder)
        finally:
            if pool_pricer is not None:
                pricers[spec.pool] = pool_pricer

    def idle_energy_j(self, end_s: float, idle: float) -> float:
        """Energy of workers no longer running, and the correction for those that started
        late (the caller counts every current worker's idle power from time 0)."""
        correction = 0.0
        for name, began in self.started_s.items():
            w = self._workers().get(name)
            if w is not None:
                correction -= w.spec.layout.instance_gpus * w.spec.hardware.tdp_w * idle * began
        return self.retired_energy_j + correction

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _report_failure(task: asyncio.Task) -> None:
    """A move that fails must stop the run (through the loop's exception handler, which
    the orchestrator sets), not leave its worker removed and never added, silently."""
    if not task.cancelled() and task.exception() is not None:
        task.get_loop().call_exception_handler(
            {"message": "a worker move failed", "exception": task.exception(), "task": task})
