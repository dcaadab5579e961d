"""A worker's steps at one phase, batch and new tokens, for any context.

`StepTail` holds the passes of one step (`workers.fast_pricing`: the main pass and,
with multi-token prediction, the draft passes) and gives the cost core's
`(step_time_s, tpot_s)` (`costmodel.phase.step_times`) at a context: one step
(`step_s`), a short decode run in Python floats (`tpots_s`), a long one as arrays
(`tpots_array_s`), the same doubles each way (`tests/property/test_pricing_fast_path.py`).
"""

from __future__ import annotations

import types
from itertools import accumulate

import numpy as np

from costmodel.configs import Phase
from workers.fast_pricing import Pricing, zero_dim


class StepTail:
    """(step_time_s, tpot_s) of one worker's steps at a given phase, batch and new
    tokens, as `costmodel.phase.step_times` gives them, for any context."""

    __slots__ = ("_arrays", "_plain", "accepted", "decode", "drafts", "first", "later", "main",
                 "overhead_s", "pp")

    def __init__(self, pricing: Pricing, phase: Phase, n_seq: float, new_tokens: float):
        self.decode = decode = phase == Phase.DECODE
        self.main = pricing.main_pass(decode, n_seq, new_tokens)
        self.pp = pricing.main.pp
        self.overhead_s = pricing.eff.step_overhead_s
        self.accepted = pricing.accepted
        self.drafts = pricing.main.mtp if decode else 0.0
        self.first = self.later = None
        self._arrays: tuple | None = None  # `tpots_array_s`'s operands, made at its first call
        if self.drafts > 0:
            self.first = pricing.draft_pass(n_seq, self.accepted)
            self.later = pricing.draft_pass(n_seq, 1.0)
        # A plain decode tail (a dense model's, one stage, one token a step, no sliding
        # layer, no per-sequence state, an overlap): `tpots_s`'s steps' ends leave out
        # the operations that leave a value as it is (+ 0.0, x 1.0, / 1.0).
        attn, after = self.main.attn, self.main.after
        self._plain = (decode and self.first is None and self.accepted == 1.0
                       and self.pp == 1.0 and not attn.n_slide and attn.state == 0.0
                       and self.main.overlap is not None and after[1] == 0.0
                       and after[2] == 0.0)

    def draft_s(self, context, mx=max, mn=min):
        if self.first is None:
            return 0.0
        rest = max(self.drafts - 1.0, 0.0)
        return self.first.time_s(context, mx, mn) + rest * self.later.time_s(context, mx, mn)

    def step_s(self, context, mx=max, mn=min):
        stage_s = self.main.time_s(context, mx, mn)
        return self.pp * stage_s + self.draft_s(context, mx, mn) + self.overhead_s

    def tpot_s(self, step_s):
        return step_s / self.accepted if self.decode else step_s

    def tpots_s(self, first: float, steps: int, start: float | None = None) -> list[float]:
        """`[tpot_s(step_s(first + float(i))) for i in range(steps)]`, the same doubles: a
        short decode run's steps, the passes' terms read once and their operations (those
        of `AttentionTerms.time_s`, `PassTail.time_s` and `step_s`) inline. The compute
        side is left out where the memory side is the larger at every step, as in
        `tpots_array_s`; `max` and `min` are comparisons that pick the operand the
        builtins pick. With `start`, the steps' ends instead: `start` plus each running
        sum of the steps (`itertools.accumulate`'s, the same additions in order)."""
        if self.first is not None:  # draft passes: priced as steps
            out = [self.tpot_s(self.step_s(first + float(i))) for i in range(steps)]
            return out if start is None else [start + t for t in accumulate(out)]
        main, a = self.main, self.main.attn
        half, q_tok, a_ctx, tp = a.half, a.q_tok, a.a_ctx, a.tp
        n_full, n_slide, window, lin_flops = a.n_full, a.n_slide, a.window, a.lin_flops
        kv_seq, state, w_bytes, act_bytes = a.kv_seq, a.state, a.w_bytes, a.act_bytes
        proj_s, peak_attn, hbm_bw = a.proj_s, a.peak_attn, a.hbm_bw
        after, network, latency = main.after, main.network_s, main.latency_s
        pp, overhead = self.pp, self.overhead_s
        # The overlap (None: none) and the tokens a step yields (decode only) as a flag
        # and a float each (typed locals when compiled: workers/step_tail.pxd).
        has_overlap = main.overlap is not None
        ov = main.overlap if has_overlap else 0.0
        has_accepted = self.decode
        acc = self.accepted
        has_start = start is not None
        st = start if has_start else 0.0
        # Two steps or more: the check costs about what the compute side of two steps does.
        compute = steps < 2 or not (
            a.monotone and a.compute_s(first + float(steps - 1)) < a.memory_s(first))
        # The main pass's four kernel terms (dense FFN, shared experts, routed experts, LM
        # head), added one by one as the core adds them.
        t_dense, t_always, t_experts, t_head = after
        out = []
        append = out.append
        total = 0.0  # the running sum, with `start` (0.0 + the first step is that step)
        if self._plain and not compute and has_start:
            # The loop below for a plain tail (`__init__`) whose memory side is the larger
            # at every step: each value the same double (every term it leaves out adds
            # +0.0 to a positive value, or multiplies or divides by 1.0).
            for i in range(steps):
                t_cm = (w_bytes + kv_seq * (n_full * (first + float(i) + q_tok))
                        + act_bytes) / hbm_bw + t_dense + t_head
                total += (t_cm + network + latency
                          - ov * (network if network < t_cm else t_cm)) + overhead
                append(st + total)
            return out
        for i in range(steps):
            context = first + float(i)
            ctx_end = context + q_tok
            if n_slide:
                kv_read = kv_seq * (n_full * ctx_end + n_slide * min(ctx_end, window))
            else:
                kv_read = kv_seq * (n_full * ctx_end)
            kv_read = kv_read + state
            attn_bytes = w_bytes + kv_read
            attn_bytes = attn_bytes + act_bytes
            t_cm = attn_bytes / hbm_bw
            if compute:
                ctx_mean = context + half
                if n_slide:
                    flops = a_ctx * (n_full * ctx_mean + n_slide * min(ctx_mean, window)) / tp
                else:
                    flops = a_ctx * (n_full * ctx_mean) / tp
                flops = flops + lin_flops
                flops = proj_s + flops / peak_attn
                if not t_cm > flops:  # max(flops, t_cm)
                    t_cm = flops
            t_cm = t_cm + t_dense + t_always + t_experts + t_head
            stage_s = t_cm + network + latency
            if has_overlap:  # min(t_cm, network)
                stage_s = stage_s - ov * (network if network < t_cm else t_cm)
            step_s = pp * stage_s + overhead  # no draft pass: draft_s is 0.0
            if has_accepted:
                step_s = step_s / acc
            if not has_start:
                append(step_s)
            else:
                total += step_s
                append(st + total)
        return out

    def tpots_array_s(self, first: float, steps: int) -> np.ndarray:
        """`tpot_s(step_s(first + np.arange(steps), np.maximum, np.minimum))`, the same
        doubles: a long decode run's steps as arrays, each operation done in place, the
        attention roofline's as `AttentionTerms.time_array_s` does them, and the terms
        that are exactly 0.0 for this tail left out (a zero kernel term, no draft pass):
        each would add +0.0 to a positive value, which leaves it as it is; so are
        products and divisions by exactly 1.0 (pp, one token a step). The overlap's
        `min(t_cm, network_s)` is `network_s` at every step when it is below the first
        step's `t_cm` (`t_cm` is non-decreasing in context: `AttentionTerms.monotone`)."""
        if self.first is not None:  # draft passes: the general path
            return self.tpot_s(self.step_s(first + np.arange(steps, dtype=np.float64),
                                           np.maximum, np.minimum))
        main = self.main
        arrays = self._arrays
        if arrays is None:
            # The operands as 0-d arrays (`workers.fast_pricing.zero_dim`); the overlap's
            # product with network_s as the Python float it is in the scalar path.
            overlap = 0.0 if main.overlap is None else main.overlap
            arrays = self._arrays = (
                zero_dim(*(term for term in main.after if term)),
                *zero_dim(main.network_s, main.latency_s, overlap, overlap * main.network_s,
                          self.pp, self.overhead_s, self.accepted))
        after, network, latency, overlap, overlap_network, pp, overhead, accepted = arrays
        t_cm = main.attn.time_array_s(first, steps)  # + the frozen terms
        for term in after:  # those that are not 0.0
            t_cm += term
        if main.overlap is not None and main.attn.monotone and main.network_s < t_cm[0]:
            # stage = t_cm + network + latency - overlap * network, in place.
            stage = t_cm
            stage += network
            stage += latency
            stage -= overlap_network
        else:
            stage = t_cm + network
            stage += latency
            if main.overlap is not None:
                less = np.minimum(t_cm, network, out=t_cm)
                less *= overlap
                stage -= less
        if self.pp != 1.0:  # x * 1.0 is x
            stage *= pp
        stage += overhead
        if self.decode and self.accepted != 1.0:
            stage /= accepted
        return stage


# Whether this module runs compiled (workers/step_tail.pxd: a cdef class's method is no
# Python function). Compiled, `tpots_s`'s loop costs ~0.02 us a step: a decode run's ends
# are cheaper from it than from the array path (~5 us whatever the length) up to a few
# hundred steps (`workers.pricing.SCALAR_RUN_STEPS`).
COMPILED = not isinstance(StepTail.__dict__["tpots_s"], types.FunctionType)
