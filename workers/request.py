"""A model call as the workers see it, and its states."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class RequestState(IntEnum):
    """Ordered, so "finished" is one comparison."""

    QUEUED = 0  # waiting for a fill worker
    FILLING = 1  # prefill or midfill running
    READY = 2  # KV written; waiting in the ready buffer for decode
    LOADING = 3  # a decode worker is loading its KV
    DECODING = 4
    DONE = 5


@dataclass(eq=False)
class Request:
    """One call. Identity is the object; `call_id` is unique within a run.

    `block_ids` are the input's full blocks (`block_tokens` each);
    `writeback_block_ids`, when known, the blocks of input plus output that the
    next call of the session will start from, so decode can write them back.
    """

    call_id: int
    session_id: str
    input_tokens: int
    output_tokens: int
    block_ids: tuple[int, ...] = ()
    writeback_block_ids: tuple[int, ...] = ()
    interactive: bool = True
    arrival_s: float = 0.0
    state: RequestState = RequestState.QUEUED
    # Filled in as the request moves.
    prefix_tokens: int = 0  # cached prefix the store found
    computed_tokens: int = 0  # tokens the fill computed (new + recomputed)
    fill_start_s: float | None = None
    fill_end_s: float | None = None
    decode_start_s: float | None = None
    first_token_s: float | None = None
    done_s: float | None = None
    generated: int = 0
    fill_worker: str | None = None
    decode_worker: str | None = None
    kv_chain: tuple = field(default=(), repr=False)

    @property
    def context_tokens(self) -> int:
        """KV length held while decoding: the input plus what is generated so far."""
        return self.input_tokens + self.generated

    @property
    def remaining(self) -> int:
        return self.output_tokens - self.generated

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.done_s is None or self.first_token_s is None or self.output_tokens < 2:
            return None
        return (self.done_s - self.first_token_s) / (self.output_tokens - 1)
