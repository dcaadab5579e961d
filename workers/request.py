"""A model call as the workers see it, and its states."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class LatencyPart(IntEnum):
    """Where a call's time goes, arrival to done; each instant belongs to exactly one part
    (docs/metrics.md defines them), so the parts sum to the end-to-end latency."""

    ADMISSION_WAIT = 0  # arrival to fill start: admission queue and fill-worker queue
    FILL = 1  # fill start to fill end (its prefix fetch included)
    DECODE_WAIT = 2  # in the ready buffer, or loaded and waiting for a step boundary
    TRANSFER = 3  # KV load into a decode worker's HBM (and any recompute after preemption)
    DECODE = 4  # in a decode batch

    @property
    def key(self) -> str:
        return self.name.lower()


_PARTS = len(LatencyPart)  # read per call made (an enum's len is a Python call)


class RequestState(IntEnum):
    """Ordered, so "finished" is one comparison."""

    QUEUED = 0  # waiting for a fill worker
    FILLING = 1  # prefill or midfill running
    READY = 2  # KV written; waiting in the ready buffer for decode
    LOADING = 3  # a decode worker is loading its KV
    DECODING = 4
    DONE = 5


# The members as module constants, read on the per-call paths (a member read off its
# class is a Python-level lookup on Python 3.11, several times a global's).
ADMISSION_WAIT, FILL, DECODE_WAIT, TRANSFER, DECODE = LatencyPart
QUEUED, FILLING, READY, LOADING, DECODING, DONE = RequestState


@dataclass(eq=False)
class Request:
    """One call. Identity is the object; `call_id` is unique within a run.

    `block_ids` are the input's full blocks (`block_tokens` each);
    `writeback_block_ids`, when known, the full blocks of input plus output that
    decode writes when the call retires (`orchestrator.run.sessions.writeback_blocks`
    names them).
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
    # Of the input, tokens this call's own session computed before (the trace says): a
    # prefix found beyond them came from another session's KV.
    own_cached_tokens: int = 0
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
    # KV its fill worker keeps pinned for its decode worker to copy (workers.kv_io.Handoff)
    handoff: object = field(default=None, repr=False)
    preemptions: int = 0  # times a decode worker retracted it to free KV
    recomputed_tokens: int = 0  # generated tokens whose KV was recomputed on a resume
    parts_s: list[float] = field(default_factory=lambda: [0.0] * _PARTS, repr=False)
    _part: LatencyPart | None = field(default=None, repr=False)
    _since_s: float = field(default=0.0, repr=False)

    def enter(self, part: LatencyPart, now_s: float) -> None:
        """The call's time from now on counts as `part`; the part it was in is closed. The
        first call closes the admission wait, which runs from `arrival_s`."""
        if self._part is None:
            self._part, self._since_s = ADMISSION_WAIT, self.arrival_s
        self.parts_s[self._part] += now_s - self._since_s
        self._part, self._since_s = part, now_s

    def finish(self, now_s: float) -> None:
        """Done at `now_s`: close the part the call was in."""
        self.enter(self._part if self._part is not None else ADMISSION_WAIT, now_s)
        self.done_s = now_s
        self.state = DONE

    def compact(self) -> None:
        """Drop what only a call in flight needs (its block ids and KV chain: thousands of
        ids for an agent call) once it is done; what the summary, the listeners and the
        outputs read of a completed call (times, tokens, parts, workers) stays. A replay
        keeps its completed calls as rows of columns (orchestrator.run.completed); the
        request itself may be held a while longer (the period's completed calls until
        the next sample, listeners), then without its ids."""
        if self.state is not DONE:
            raise RuntimeError(f"call {self.call_id} compacted in state {self.state.name}")
        self.block_ids = self.writeback_block_ids = self.kv_chain = ()

    @property
    def latency_breakdown_s(self) -> dict[str, float]:
        return {p.key: self.parts_s[p] for p in LatencyPart}

    @property
    def context_tokens(self) -> int:
        """KV length held while decoding: the input plus what is generated so far."""
        return self.input_tokens + self.generated

    @property
    def remaining(self) -> int:
        return self.output_tokens - self.generated

    @property
    def ttft_s(self) -> float | None:
        """Arrival to the first token reaching the client: the decode worker streams the
        output, so that is when the call joins a decode batch (the fill's end for a call
        that needs no decode step)."""
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Time per output token as the client sees it: first token to last over the
        tokens after the first, (done - first token) / (output tokens - 1), the figure
        SGLang's and vLLM's `bench_serving` report as TPOT. Its stalls (a preemption's
        wait, reload and recompute) are in it; None for a call with fewer than two output
        tokens or not done."""
        if self.done_s is None or self.output_tokens < 2 or self.first_token_s is None:
            return None
        return (self.done_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def decode_s_per_token(self) -> float | None:
        """Time in decode batches over the tokens decode produced (all but the fill's
        first): the service's own per-token time, without the waits for decode, loads and
        preemptions (what the controllers' predictor learns from); with multi-token
        prediction a step's time is shared by the tokens it yields."""
        if self.done_s is None or self.output_tokens < 2:
            return None
        return self.parts_s[DECODE] / (self.output_tokens - 1)
