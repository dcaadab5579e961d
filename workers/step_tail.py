"""A worker's steps at one phase, batch and new tokens, for any context.

`StepTail` holds the passes of one step (`workers.fast_pricing`: the main pass and,
with multi-token prediction, the draft passes) and gives the cost core's
`(step_time_s, tpot_s)` (`costmodel.phase.step_times`) at a context: one step
(`step_s`), a short decode run in Python floats (`tpots_s`), a long one as arrays
(`tpots_array_s`), the same doubles each way (`tests/property/test_pricing_fast_path.py`).
"""

from __future__ import annotations

import numpy as np

from costmodel.configs import Phase
from workers.fast_pricing import Pricing


class StepTail:
    """(step_time_s, tpot_s) of one worker's steps at a given phase, batch and new
    tokens, as `costmodel.phase.step_times` gives them, for any context."""

    __slots__ = ("accepted", "decode", "draft_overhead_s", "drafts", "first", "later", "main",
                 "overhead_s", "pp")

    def __init__(self, pricing: Pricing, phase: Phase, n_seq: float, new_tokens: float,
                 group_sequences: float | None = None):
        # `n_seq` on the slowest attention rank; `group_sequences` over all of them (None:
        # `n_seq` on every rank).
        self.decode = decode = phase == Phase.DECODE
        self.main = pricing.main_pass(decode, n_seq, new_tokens, group_sequences)
        self.pp = pricing.main.pp
        self.overhead_s = pricing.eff.step_overhead_s
        self.draft_overhead_s = pricing.eff.draft_overhead_s
        self.accepted = pricing.accepted
        self.drafts = pricing.main.mtp if decode else 0.0
        self.first = self.later = None
        if self.drafts > 0:
            self.first = pricing.draft_pass(n_seq, self.accepted, group_sequences)
            self.later = pricing.draft_pass(n_seq, 1.0, group_sequences)

    def draft_s(self, context, mx=max, mn=min):
        if self.first is None:
            return 0.0
        rest = max(self.drafts - 1.0, 0.0)
        # Each draft pass's host gap (`costmodel.draft.draft_passes`).
        return (self.first.time_s(context, mx, mn) + rest * self.later.time_s(context, mx, mn)
                ) + self.drafts * self.draft_overhead_s

    def step_s(self, context, mx=max, mn=min):
        """`costmodel.phase.step_parts`: pp stages, the draft passes, the host gap."""
        stage_s = self.main.time_s(context, mx, mn)
        if self.first is None:  # no draft pass: + 0.0 would leave the sum as it is
            return self.pp * stage_s + self.overhead_s
        return self.pp * stage_s + self.draft_s(context, mx, mn) + self.overhead_s

    def tpot_s(self, step_s):
        return step_s / self.accepted if self.decode else step_s

    def tpots_s(self, first: float, steps: int, start: float | None = None) -> list[float]:
        """`[tpot_s(step_s(first + float(i))) for i in range(steps)]`: a short decode run's
        steps (compiled: on C doubles, `workers/step_tail.pxd`). With `start`, the steps'
        ends instead: `start` plus each running sum of the steps (numpy's cumsum adds in
        order, the first step being the first sum)."""
        out = []
        has_start = start is not None
        st = start if has_start else 0.0
        total = 0.0
        for i in range(steps):
            tpot = self.tpot_s(self.step_s(first + float(i)))
            if not has_start:
                out.append(tpot)
                continue
            total = tpot if i == 0 else total + tpot
            out.append(st + total)
        return out

    def tpots_array_s(self, first: float, steps: int) -> np.ndarray:
        """`tpot_s(step_s(first + np.arange(steps), np.maximum, np.minimum))`: a long
        decode run's steps as arrays, the attention's compute side left out where the
        memory side is the larger at every step (`AttentionTerms.time_array_s`)."""
        contexts = np.arange(steps, dtype=np.float64) + first
        if self.first is not None:  # draft passes
            return self.tpot_s(self.step_s(contexts, np.maximum, np.minimum))
        stage = self.main.time_array_s(contexts)
        if self.pp != 1.0:  # x * 1.0 is x
            stage = self.pp * stage
        stage += self.overhead_s
        return stage / self.accepted if self.decode and self.accepted != 1.0 else stage
