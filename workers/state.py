"""What a controller can see of a worker, without awaiting anything."""

from __future__ import annotations

from dataclasses import dataclass, fields


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


_FIELDS = frozenset(f.name for f in fields(WorkerState))


def new_state(name: str, pool: str, phase: str, queue_depth: int, running: int,
              kv_resident_bytes: float, kv_capacity_bytes: float, tokens_done: int,
              busy_s: float, target_batch: int, accepting: bool) -> WorkerState:
    """`WorkerState(...)`, every field given in order, without the frozen dataclass's
    per-field `object.__setattr__` (a worker's figures change at each of its steps;
    tests/unit/test_worker_state.py checks it against the class)."""
    new = object.__new__(WorkerState)
    new.__dict__.update({
        "name": name, "pool": pool, "phase": phase, "queue_depth": queue_depth,
        "running": running, "kv_resident_bytes": kv_resident_bytes,
        "kv_capacity_bytes": kv_capacity_bytes, "tokens_done": tokens_done, "busy_s": busy_s,
        "target_batch": target_batch, "accepting": accepting})
    return new


def replaced(state: WorkerState, **changes) -> WorkerState:
    """`dataclasses.replace(state, **changes)` without its per-field cost."""
    if not changes.keys() <= _FIELDS:
        raise TypeError(f"replaced: unknown fields {sorted(changes.keys() - _FIELDS)}")
    new = object.__new__(WorkerState)
    new.__dict__.update(state.__dict__)
    new.__dict__.update(changes)
    return new
