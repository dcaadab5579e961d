"""What a controller can see of a worker, without awaiting anything."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerState:
    name: str
    pool: str
    phase: str
    queue_depth: int  # requests waiting at this worker
    running: int  # requests in the current batch (fills: in flight)
    kv_resident_bytes: float  # KV of the running batch
    kv_capacity_bytes: float
    tokens_done: int  # tokens computed (fills) or generated (decode) so far
    busy_s: float  # time spent running steps
    target_batch: int  # sequences the worker aims to run together
    accepting: bool  # False while draining or loading weights

    def busy_fraction(self, elapsed_s: float) -> float:
        return self.busy_s / elapsed_s if elapsed_s > 0 else 0.0
