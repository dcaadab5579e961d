"""A worker's roofline in Python floats: the cost core's terms for one configuration.

A worker prices one configuration at a time, or one run of decode steps: the
vectorised core (`costmodel.phase`) spends ~200 ufunc calls on it whatever the
length. Here the cost core's own term functions (`costmodel/terms.py`) are called
on Python floats (`FLOAT_OPS`), or over an array of contexts:

- what depends on the model, hardware, layout and efficiency only (`LayoutTerms`:
  bandwidths, peaks, layers per stage, bytes per element, fixed latencies, the
  all-to-all's reach) is taken once from the core's own `Shape` of one configuration;
- what depends on the batch (`Shape`: tokens per rank and per stage) is worked out
  per pass, and the attention group (`AttentionTerms`) as a function of context.

IEEE-754 addition, multiplication, division, min and max give the same double
whether numpy or Python performs them, so the result is bit-for-bit the core's
(`tests/property/test_pricing_fast_path.py` checks it). The one power, the
expected distinct experts a batch touches (`costmodel.terms.distinct`), is raised
as the core raises it: numpy's vectorised `power` (SVML on AVX-512) and libm's
`pow` differ in the last bit, so over configuration arrays (`Configs.make`) it is
numpy's on a one-element array (`ARRAY_POWER_OPS`).

A step's passes at any context, and runs of steps: `workers.step_tail`.
Heterogeneous batch steps: `workers.fast_batch`.
"""

from __future__ import annotations

import numpy as np

from costmodel.configs import Configs
from costmodel.draft import draft_configs, head_and_projection, mtp_module
from costmodel.efficiency import Efficiency, OverlapMode
from costmodel.hardware import HardwareTable
from costmodel.kernels import Shape as CoreShape
from costmodel.model import ModelSpec
from costmodel.mtp import expected_tokens_per_step
from costmodel.terms import (
    FLOAT_OPS,
    FloatWork,
    Ops,
    attention_compute_s,
    attention_memory_s,
    attention_s,
    attention_work,
    fixed_latency,
    gemm,
    network,
    overlap_stage,
    routed_experts,
)


def _f(x) -> float:
    return float(np.ravel(x)[0])


def _array_power(base: float, exponent: float) -> float:
    """`base ** exponent` as numpy raises a scalar to a one-element array."""
    return float(np.power(np.float64(base), np.array([exponent]))[0])


ARRAY_POWER_OPS = FLOAT_OPS._replace(power=_array_power)


class LayoutTerms:
    """The `lay` of the term functions (`costmodel/terms.py`) as floats: what the core's
    `Shape` of one configuration holds that depends on the model, hardware, layout and
    efficiency only, and the fixed latencies (no term of them depends on the batch)."""

    _NAMES = ("hbm_bw", "su_bw", "so_bw", "domain", "pp", "tp", "ep", "width", "attn_ranks",
              "n_full", "n_slide", "n_lin", "n_dense", "n_moe", "n_layers", "wb_dense",
              "wb_exp", "peak_dense", "peak_exp", "peak_attn", "kv_layer")
    _MOE_NAMES = ("disp", "split", "experts_per_rank", "remote_ranks", "remote_nodes",
                  "outside")

    def __init__(self, m: ModelSpec, table: HardwareTable, cfg: Configs, eff: Efficiency):
        v = CoreShape(m, table, cfg, eff)
        self.m, self.eff = m, eff
        for name in self._NAMES + (self._MOE_NAMES if m.moe is not None else ()):
            setattr(self, name, _f(getattr(v, name)))
        self.state_layer, self.window = float(v.state_layer), float(v.window)
        self.mtp = _f(cfg.mtp)
        self.latency_s = _f(fixed_latency(m, v, eff))
        # The core's tokens per stage are a numpy scalar when every configuration column is
        # 0-d (the pricer's own configurations): numpy then raises the power with libm's
        # pow, as Python does; over arrays (Configs.make) with its vectorised power.
        array_power = any(np.ndim(getattr(cfg, k)) > 0
                          for k in ("phase", "batch", "new_tokens", "mtp", "tp", "ep"))
        self.ops: Ops = ARRAY_POWER_OPS if array_power else FLOAT_OPS


class Shape:
    """The `b` of the term functions: a pass's batch quantities, as floats."""

    __slots__ = ("decode", "n_seq", "q_tok", "t_group", "t_rank")

    def __init__(self, lt: LayoutTerms, decode: bool, n_seq: float, new_tokens: float,
                 mtp: float, group_tokens: float | None = None):
        self.decode, self.n_seq = decode, n_seq
        self.q_tok = 1.0 + mtp if decode else new_tokens
        self.t_rank = n_seq * self.q_tok
        # Every rank's tokens, or the placed sequences' (`_Shape.t_group`).
        self.t_group = self.t_rank * lt.attn_ranks if group_tokens is None else group_tokens


def kernel_terms(lt: LayoutTerms, s: Shape) -> tuple[float, float, float, float]:
    """The dense FFN, router and shared experts, routed experts and LM head times, in the
    order the core adds them (`costmodel.kernels.Kernels`)."""
    m, ops = lt.m, lt.ops
    t_dense = gemm(s.t_rank, lt.n_dense * m.dense_ffn_params, lt.tp, lt.peak_dense,
                   lt.wb_dense, lt.hbm_bw, ops).time_s
    t_always = t_experts = 0.0
    if m.moe is not None:
        t_always = gemm(s.t_rank, lt.n_moe * m.moe_always_params, lt.tp, lt.peak_dense,
                        lt.wb_dense, lt.hbm_bw, ops).time_s
        t_experts = routed_experts(m, lt, s, lt.eff, ops).time_s
    t_head = gemm(s.t_rank if s.decode else s.n_seq, m.vocab_size * float(m.hidden_size),
                  lt.tp, lt.peak_dense, lt.wb_dense, lt.hbm_bw, ops).time_s
    return t_dense, t_always, t_experts, t_head


def network_s(lt: LayoutTerms, s: Shape) -> float:
    """The network time: TP all-reduces, the expert all-to-all and the PP hop."""
    return network(lt.m, lt, s, lt.ops)[2]


class AttentionTerms:
    """A stage's attention group for one pass (`costmodel.terms.attention_work`), its
    context left free, and whether its time is non-decreasing in context."""

    __slots__ = ("monotone", "named", "work", "work_arrays")

    def __init__(self, lt: LayoutTerms, s: Shape):
        self.named = w = attention_work(lt.m, lt, s, lt.eff, lt.ops)
        self.work = FloatWork(w)  # C doubles when compiled (costmodel/terms.pxd)
        self.work_arrays = None  # `work` as 0-d arrays, made at `time_array_s`'s first call
        # Every operation of the compute and memory sides is then an addition, a product
        # by a factor >= 0 or a division by a divisor > 0, each non-decreasing in its
        # operand under IEEE-754 rounding: both sides are non-decreasing in context.
        self.monotone = (w.a_ctx >= 0.0 and w.n_full >= 0.0 and w.n_slide >= 0.0
                         and w.kv_seq >= 0.0 and w.tp > 0.0 and w.peak_attn > 0.0
                         and w.hbm_bw > 0.0)

    def compute_s(self, context, mn=min):
        return attention_compute_s(self.work, context, mn)

    def memory_s(self, context, mn=min):
        return attention_memory_s(self.work, context, mn)

    def time_s(self, context, mx=max, mn=min):
        """The attention roofline at `context` (float, or array with np.maximum and
        np.minimum)."""
        return attention_s(self.work, context, mx, mn)

    def time_array_s(self, contexts: np.ndarray) -> np.ndarray:
        """`time_s(contexts, np.maximum, np.minimum)` over a run's contexts (ascending),
        the same doubles: both sides are non-decreasing in context (`monotone`), so when
        the last context's compute side is below the first one's memory side the memory
        side is the larger at every step and the compute side is not worked out (a decode
        run at a small batch)."""
        w = self.work
        first, last = float(contexts[0]), float(contexts[-1])
        if self.work_arrays is None:
            named = self.named
            self.work_arrays = named._replace(**{k: zero_dim(v) for k, v
                                                 in named._asdict().items()
                                                 if type(v) is float})
        wa = self.work_arrays
        if self.monotone and attention_compute_s(w, last) < attention_memory_s(w, first):
            return attention_memory_s(wa, contexts, np.minimum)
        return attention_s(wa, contexts, np.maximum, np.minimum)


def zero_dim(value: float) -> np.ndarray:
    """`value` as a 0-d float64 array: the same double, as an array operation's operand.
    numpy (2.x) takes a 0-d array beside an array in about half the time of a Python
    float, which it converts at every operation (~0.7 against ~1.4 us an operation on a
    few hundred values); the arithmetic is the same float64 operation on the same doubles."""
    return np.array(value, dtype=np.float64)


class PassTail:
    """One pass through a stage (the main pass, or one MTP draft pass): attention as
    a function of context, then the frozen kernel terms added in the core's order,
    network, fixed latencies and the overlap rule (`costmodel.terms.overlapped`, read
    once from the efficiency: `overlap_stage`)."""

    __slots__ = ("after", "arrays", "attn", "fraction", "latency_s", "network_s", "overlap")

    def __init__(self, attn: AttentionTerms, after: tuple[float, ...], network_s: float,
                 latency_s: float, eff: Efficiency):
        # The kernel terms that are exactly 0.0 (a dense model's experts) left out: each
        # would add +0.0 to a positive time, which leaves it as it is.
        self.attn, self.after = attn, tuple(term for term in after if term != 0.0)
        self.network_s, self.latency_s = network_s, latency_s
        self.overlap = eff.overlap == OverlapMode.OVERLAP
        self.fraction = eff.overlap_fraction
        self.arrays = None  # `after`, network and latency as 0-d arrays: `time_array_s`

    def time_s(self, context, mx=max, mn=min):
        t_cm = attention_s(self.attn.work, context, mx, mn)
        for term in self.after:
            t_cm = t_cm + term
        return overlap_stage(t_cm, self.network_s, self.latency_s, self.overlap,
                             self.fraction, mn)

    def time_array_s(self, contexts: np.ndarray) -> np.ndarray:
        """`time_s(contexts, np.maximum, np.minimum)` (`AttentionTerms.time_array_s`), the
        same doubles: the frozen terms added in place as 0-d arrays (`zero_dim`); and when
        the network time is below the first context's `t_cm`, which is non-decreasing in
        context (`AttentionTerms.monotone`), the overlap's `min(t_cm, network_s)` is
        `network_s` at every step: taken as that float (`_network`), not worked out."""
        arrays = self.arrays
        if arrays is None:
            arrays = self.arrays = tuple(zero_dim(v) for v in (*self.after, self.network_s,
                                                                self.latency_s))
        t_cm = self.attn.time_array_s(contexts)  # a new array: added to in place
        for term in arrays[:-2]:
            t_cm += term
        mn = np.minimum
        if self.overlap and self.attn.monotone and self.network_s < float(t_cm[0]):
            mn = _network
        return overlap_stage(t_cm, arrays[-2], arrays[-1], self.overlap, self.fraction, mn)


def _network(t_cm, network_s) -> float:
    """`min(t_cm, network_s)` where `network_s` is known to be the lesser at every step:
    its float."""
    return float(network_s)


class Pricing:
    """The roofline cost source of one worker: its layout terms, for its own model and
    for its MTP module (one colocated layer, pp=1: `costmodel.draft`), its mean tokens a
    decode step yields, and its passes."""

    def __init__(self, m: ModelSpec, table: HardwareTable, cfg: Configs, eff: Efficiency):
        self.eff = eff
        self.main = LayoutTerms(m, table, cfg, eff)
        self.accepted = _f(expected_tokens_per_step(cfg.mtp, eff.mtp_acceptance))
        self.block = None
        if self.main.mtp > 0:
            self.block = LayoutTerms(mtp_module(m), table, draft_configs(cfg), eff)

    def main_pass(self, decode: bool, n_seq: float, new_tokens: float,
                  group_sequences: float | None = None) -> PassTail:
        """`group_sequences`: over all the attention ranks (`Configs.group_sequences`)."""
        lt = self.main
        q_tok = 1.0 + lt.mtp if decode else new_tokens
        s = Shape(lt, decode, n_seq, new_tokens, lt.mtp,
                  None if group_sequences is None else group_sequences * q_tok)
        return PassTail(AttentionTerms(lt, s), kernel_terms(lt, s), network_s(lt, s),
                        lt.latency_s, self.eff)

    def draft_pass(self, n_seq: float, q_tok: float,
                   group_sequences: float | None = None) -> PassTail:
        """`costmodel.draft._one_pass`: `q_tok` tokens per sequence through the module."""
        lt = self.block
        s = Shape(lt, True, n_seq, 0.0, q_tok - 1.0,
                  None if group_sequences is None else group_sequences * (1.0 + (q_tok - 1.0)))
        t_dense, t_always, t_experts, _ = kernel_terms(lt, s)
        head, proj = head_and_projection(lt.m, lt, s, lt.ops)
        return PassTail(AttentionTerms(lt, s),
                        (t_dense, t_always, t_experts, head.time_s, proj.time_s),
                        network_s(lt, s), lt.latency_s, self.eff)
