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


class StateMemo:
    """A worker's last state, handed out again while the figures it was built from
    repeat (`last`), else the one built from them (`keep`). Not for speed alone: the fast
    loop tells a worker whose figures did not change since its last look by the identity
    of its state (orchestrator.run.sampler)."""

    __slots__ = ("_key", "_state")

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._state: WorkerState | None = None

    def last(self, key: tuple) -> WorkerState | None:
        """The state kept for `key`, None if the figures changed."""
        return self._state if key == self._key else None

    def keep(self, key: tuple, state: WorkerState) -> WorkerState:
        self._key, self._state = key, state
        return state
