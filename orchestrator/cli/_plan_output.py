"""What `tokenfactory plan` prints: the plan as text (why each pool got its layout) and
as one JSON object (docs/plan.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

GB = 1e9

if TYPE_CHECKING:
    from costmodel.plan_search import Search
    from costmodel.plan_values import Plan, PoolPlan


def _r(x: float, digits: int = 4) -> float | None:
    return None if not math.isfinite(x) else round(float(x), digits)


def pool_dict(p: PoolPlan, plan: Plan) -> dict[str, object]:
    from costmodel.phase import Phase

    c, decode = p.choice, p.choice.phase is Phase.DECODE
    hbm = plan.hardware.hbm_bytes
    out = {
        "name": p.name, "phase": "mixed" if c.mixed else c.phase.name.lower(),
        "workers": p.workers, "gpus_per_worker": c.gpus, "gpus": p.gpus,
        "pp": c.pp, "tp": c.tp, "ep": c.ep, "attention_ranks": c.ranks,
        "batch_per_rank": c.batch, "slots_per_worker": c.slots, "slots": c.slots * p.workers,
        "precision": c.precision.name.lower(), "kv_precision": c.kv_precision.name.lower(),
        "mtp": c.mtp,
        "tokens_per_s_per_gpu": _r(c.tokens_per_s_per_gpu, 1),
        "tpot_s" if decode else "ttft_s": _r(c.latency_s),
        "checked_at": {"new_tokens": _r(p.shape.typical_new_tokens, 0),
                       "context_tokens": _r(p.shape.typical_context, 0),
                       "kv_fit_context_tokens": _r(p.shape.check_context, 0)},
        # What a worker allocates per GPU: weights, and the KV of its slots at the check
        # context with activations and buffers (total); its share of HBM.
        "hbm_gb_per_gpu": {"weights": _r(c.weight_bytes_per_gpu / GB, 2),
                           "kv": _r(c.kv_bytes_per_gpu / GB, 2),
                           "total": _r(c.hbm_bytes_per_gpu / GB, 2)},
        "hbm_fraction": _r(c.hbm_bytes_per_gpu / hbm, 3),
        "kv_capacity_tokens_per_worker": c.kv_capacity_tokens,
        # The KV a worker can use: its slots, each at most the model's context window.
        "kv_tokens_per_worker": kv_tokens(c, plan),
        "calls": p.calls,
        "gpu_s_per_call": _r(c.gpu_s_per_call, 5),
        "calls_per_s": _r(p.calls_per_s, 3),
    }
    if c.mixed and p.fill_shape is not None:
        out.update(ttft_s=_r(c.ttft_s), step_s=_r(c.step_s), chunk_tokens=c.chunk_tokens,
                   fill_checked_at={"new_tokens": _r(p.fill_shape.typical_new_tokens, 0),
                                    "context_tokens": _r(p.fill_shape.typical_context, 0)})
    elif not decode:
        out["step_s"] = _r(c.step_s)
    return out


def _fill_new(p: PoolPlan) -> float:
    return (p.fill_shape or p.shape).typical_new_tokens


def kv_tokens(c, plan: Plan) -> int:
    """Tokens of KV a worker holds and can use: its capacity, at most its slots each
    filled to the model's context window."""
    window = plan.context_window_tokens
    return c.kv_capacity_tokens if window is None else min(c.kv_capacity_tokens,
                                                           c.slots * window)


def plan_dict(plan: Plan, out: str | None, search: Search | None = None,
              option: str | None = None) -> dict[str, object]:
    w = plan.workload
    found = None if search is None else {
        "option": option, "calls_per_s_needed": _r(search.calls_per_s_needed, 3),
        "decode_slots_needed": search.slots_needed, "gpus": plan.gpus,
        "tried": [{"gpus": n, "calls_per_s": None if r is None else _r(r, 3)}
                  for n, r in search.tried]}
    return {
        "search": found,
        "model": plan.model, "hardware": plan.hardware.name, "gpus": plan.gpus,
        "gpus_used": plan.used_gpus, "nodes": plan.nodes.count,
        "gpus_per_node": plan.nodes.gpus_each,
        "targets": {"ttft_s": plan.targets.ttft_s, "tpot_s": plan.targets.tpot_s},
        "trace": {"sessions": w.sessions, "calls": w.calls,
                  "calls_per_session_hour": _r(w.calls_per_session_s * 3600, 2),
                  "arrivals_per_s": None if w.arrivals_per_s is None
                  else _r(w.arrivals_per_s, 3)},
        "arrangement": plan.arrangement,
        "arrangements": {a: _r(rate, 3) for a, rate in plan.alternatives},
        "memory_fraction": plan.memory_fraction,
        "context_window_tokens": plan.context_window_tokens,
        "pools": [pool_dict(p, plan) for p in plan.pools],
        "decode_slots": plan.decode_slots,
        "calls_per_s": _r(plan.calls_per_s, 3),
        "sessions_per_hour": _r(plan.sessions_per_hour, 1),
        "concurrent_sessions": _r(plan.concurrent_sessions, 1),
        "out": out,
    }


def _session_pace(w) -> str:
    """The trace's calls per active session-hour; a trace whose sessions spend no time
    between calls (one call each, or no think gaps: Azure, Mooncake) has no such pace."""
    rate = w.calls_per_session_s
    if not math.isfinite(rate):
        what = ("one call per session" if w.calls == w.sessions
                else "no time recorded between a session's calls")
        return f"{what}, so no calls per active session-hour (the arrivals set the pace)"
    return f"{rate * 3600:.1f} calls per active session-hour"


def print_plan(plan: Plan, out: Path | None, search: Search | None = None,
               option: str | None = None) -> None:
    from costmodel.phase import Phase

    w = plan.workload
    if search is not None:
        print(f"{option}: {search.calls_per_s_needed:.2f} calls/s"
              + (f" and {search.slots_needed:,} decode slots" if search.slots_needed else "")
              + f" need {plan.gpus:,} {plan.hardware.name} GPUs (the fewest of "
              f"{len(search.tried)} counts tried)\n")
    print(f"{plan.model} on {plan.gpus} {plan.hardware.name} GPUs ({plan.nodes.count} node(s) "
          f"of up to {plan.nodes.gpus_each}); trace: {w.sessions} sessions, {w.calls:,} calls, "
          f"{_session_pace(w)}")
    print(f"targets: TTFT of a queued prompt <= {plan.targets.ttft_s:g} s, decode TPOT <= "
          f"{plan.targets.tpot_s * 1e3:g} ms; a worker allocates at most "
          + ("all" if plan.memory_fraction is None else f"{plan.memory_fraction:g}")
          + " of HBM")
    if plan.alternatives:
        rates = ", ".join(f"{a} {r:.2f}" for a, r in plan.alternatives)
        print(f"arrangement: {plan.arrangement} (calls/s each sustains: {rates})")
    for p in plan.pools:
        c = p.choice
        decode = c.phase is Phase.DECODE
        # The cost core's KV is at the step's end: a fill's prefix plus its new tokens.
        kv_at = (p.shape.check_context if decode
                 else p.shape.typical_context + p.shape.typical_new_tokens)
        if c.mixed:
            lat = (f"TPOT {c.latency_s * 1e3:.1f} ms at {p.shape.check_context:,.0f} tokens "
                   f"with a {c.chunk_tokens:,}-token prefill chunk a step; TTFT "
                   f"{c.ttft_s:.2f} s for a queued {_fill_new(p):,.0f}-token prompt")
        elif decode:
            lat = f"TPOT {c.latency_s * 1e3:.1f} ms at {p.shape.check_context:,.0f} tokens"
        else:
            lat = (f"step {c.step_s:.2f} s for {c.slots} x {p.shape.typical_new_tokens:,.0f} "
                   f"new on {p.shape.typical_context:,.0f} cached; TTFT {c.latency_s:.2f} s "
                   f"queued")
        print(f"\n{p.name}: {p.workers} worker(s) x {c.gpus} GPUs = {p.gpus}  "
              f"[pp {c.pp} tp {c.tp} ep {c.ep}: {c.ranks} attention rank(s)"
              + (f"; MTP {c.mtp}]" if c.mtp else "]"))
        print(f"  batch {c.batch} per rank, {c.slots} slots a worker, "
              f"{c.slots * p.workers} in all; {lat}")
        print(f"  {c.tokens_per_s_per_gpu:,.0f} tokens/s per GPU; HBM per GPU "
              f"{c.hbm_bytes_per_gpu / GB:.0f} of {plan.hardware.hbm_bytes / GB:.0f} GB "
              f"(weights {c.weight_bytes_per_gpu / GB:.0f}, KV {c.kv_bytes_per_gpu / GB:.0f} at "
              f"{kv_at:,.0f} tokens); KV for {kv_tokens(c, plan):,} tokens a worker")
        print(f"  {p.calls:,} calls of the trace, {c.gpu_s_per_call:.3f} GPU-s per call "
              f"of the mix: sustains {p.calls_per_s:.2f} calls/s")
    spare = plan.gpus - plan.used_gpus
    pace = (f", ~{plan.concurrent_sessions:,.0f} concurrent sessions at the trace's pace"
            if math.isfinite(plan.concurrent_sessions) else "")
    print(f"\nsized for {plan.calls_per_s:.2f} calls/s (~{plan.sessions_per_hour:,.0f} sessions "
          f"per hour{pace}); {plan.decode_slots} decode slots"
          + (f"; {spare} GPU(s) spare" if spare else ""))
    if w.arrivals_per_s is not None:
        print(f"the trace's own arrivals: {w.arrivals_per_s:.2f} calls/s "
              f"({plan.calls_per_s / w.arrivals_per_s:.1f}x headroom)")
    if out is not None:
        print(f"wrote {out}")
