"""The load the public serving benchmarks run, as sessions a replay feeds.

SGLang's and vLLM's `bench_serving` (`--dataset-name random --max-concurrency C`) and the
sweeps built on them (InferenceMAX: `--num-prompts` = 10 x C) keep C requests in flight:
each user sends its next request as soon as the previous answer is complete, no think
time. Input and output lengths are drawn uniformly in [R x nominal, nominal]
(`--random-range-ratio R`; `bench_serving` draws `randint(max(int(I * R), 1), I + 1)`),
prompts share no prefix, and the output runs to its drawn length (`--ignore-eos`).

Here that is C sessions of `warmup_calls + calls_per_user` calls each, all starting at
0, think time 0, each call's lengths drawn as above from a generator seeded by (seed,
C): the same concurrency gives every layout the same calls. Each user's first
`warmup_calls` calls are the warm-up (at 0 every user sends a prompt at once, a burst
no steady state has); the figures are taken once every user is past them
(`orchestrator.bench.measure`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traces._blocks import LOCAL_BITS
from traces.model import MAIN_AGENT, Call, Session

# Calls' KV blocks: the size the store and the KV transfers count in (vLLM's default page
# is 16 tokens, SGLang's 1; a prompt's last partial block is not stored, so a block much
# smaller than the prompt keeps the transfer what it is).
BLOCK_TOKENS = 64
# Block ids in a namespace of their own (a trace file's are numbered from 1).
_NAMESPACE = 1
WARMUP_CALLS = 1
DEFAULT_CALLS_PER_USER = 5


class LoadError(ValueError):
    """A load that cannot be: names the field and the value."""


@dataclass(frozen=True)
class BenchLoad:
    """Lengths, calls per user and seed of a benchmark's load. One that exists is valid."""

    isl: int  # nominal input tokens
    osl: int  # nominal output tokens
    range_ratio: float = 1.0  # lengths uniform in [range_ratio x nominal, nominal]
    calls_per_user: int = DEFAULT_CALLS_PER_USER  # measured calls per user
    warmup_calls: int = WARMUP_CALLS  # each user's first calls, left out of the figures
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("isl", "osl", "calls_per_user"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LoadError(f"{name}: expected an integer >= 1, got {value!r}")
        if (isinstance(self.warmup_calls, bool) or not isinstance(self.warmup_calls, int)
                or self.warmup_calls < 0):
            raise LoadError(f"warmup_calls: expected an integer >= 0, got {self.warmup_calls!r}")
        r = self.range_ratio
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 < r <= 1.0:
            raise LoadError(f"range_ratio: expected a number in (0, 1], got {r!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise LoadError(f"seed: expected an integer >= 0, got {self.seed!r}")

    @property
    def calls(self) -> int:
        """Calls each user sends: the warm-up's, then the measured ones."""
        return self.warmup_calls + self.calls_per_user

    def lengths(self, users: int) -> tuple[np.ndarray, np.ndarray]:
        """(input, output) tokens of every call, shape (users, calls): uniform integers in
        [max(int(nominal x R), 1), nominal], from a generator seeded by (seed, users)."""
        rng = np.random.default_rng([self.seed, users])
        shape = (users, self.calls)

        def draw(nominal: int) -> np.ndarray:
            return rng.integers(max(int(nominal * self.range_ratio), 1), nominal + 1, size=shape)

        inputs = draw(self.isl)
        return inputs, draw(self.osl)

    def sessions(self, users: int) -> tuple[Session, ...]:
        """`users` sessions of `calls` calls each, all starting at 0, no think time; no
        two calls share a KV block."""
        if isinstance(users, bool) or not isinstance(users, int) or users < 1:
            raise LoadError(f"concurrency: expected an integer >= 1, got {users!r}")
        inputs, outputs = self.lengths(users)
        base = _NAMESPACE << LOCAL_BITS
        # A call's blocks: a first id of its own, then ids every call shares; the store
        # keys a block on the chain before it, so a different first block keeps a call's
        # KV its own (traces.replay.REPEAT_SHIFT) while the tail ids stay one tuple.
        tail = tuple(range(base + 1, base + 1 + self.isl // BLOCK_TOKENS))
        first = base + len(tail) + 1
        out = []
        for u in range(users):
            sid = f"user-{u}"
            calls = []
            for k in range(self.calls):
                n_in, n_out = int(inputs[u, k]), int(outputs[u, k])
                blocks = n_in // BLOCK_TOKENS
                ids = (first, *tail[:blocks - 1]) if blocks else ()
                first += 1
                calls.append(Call(session_id=sid, index=k, input_tokens=n_in, cached_tokens=0,
                                  new_tokens=n_in, output_tokens=n_out, think_s=0.0,
                                  is_subagent=False, reset_before=False,
                                  block_size=BLOCK_TOKENS, block_ids=ids, agent_id=MAIN_AGENT))
            out.append(Session(sid, "bench", 0.0, tuple(calls)))
        return tuple(out)
