"""The replay summary: the figures of `--json`, and the definitions they rest on.

Definitions (docs/metrics.md states them for users; keep the two in step):
- measurement (load) window: the samples (one per fast-loop period) taken while
  sessions are being started, after the first 10% of that span
  (`orchestrator.run.load_window`, which also defines `load.*` and the window's
  throughput and goodput);
- oscillation index: the relative RMS of the fast fluctuations of decode occupancy
  (sequences decoding / decode slots) over the window: the standard deviation of
  occupancy minus its moving average over one slow-loop period, divided by the
  mean occupancy. Ringing of the admission loop (periods of a few observation lags
  and fill times) counts in full; load that drifts over minutes (sessions
  arriving, ending) does not. On a decode almost idle (mean occupancy in the window
  below IDLE_OCCUPANCY) it and the measured period are null, with the reason in
  `control.oscillation_null_reason`: there they measure a handful of sequences
  coming and going, not a loop;
- decode starvation fraction: the share of window samples in which decode runs
  below half its slots while work it could run waits upstream: calls the sample's
  admission decision left queued, or filled calls in the ready buffer (calls that
  arrived in the last period and were admitted at once are not held back);
- admission bound fraction: the share of window samples whose admission decision
  left calls queued: the periods in which admission, not arrivals, set what entered
  the service (the admission loop is closed only then);
- goodput: output tokens per simulated second of calls that met both their TTFT
  target and their time-per-output-token target (`tpot_target_s`, `--tpot-target`: the
  call's client TPOT, first token to last over the tokens after the first): over the
  load window (`goodput.window`), and over the whole run, drain included
  (`goodput.output_tokens_per_s`);
- latency per token: `itl_s` is over tokens, each token's gap since its sequence's
  previous one as the client receives them (`workers.token_gaps`); `tpot_s` is over
  calls, each call's mean gap (`Request.tpot_s`);
- latency parts: each call's time from arrival to done split into admission_wait,
  fill, decode_wait, transfer and decode (`workers.request.LatencyPart`); per call they
  sum to its end-to-end latency.
"""

from __future__ import annotations

import numpy as np

from orchestrator.run.completed import CompletedCalls
from orchestrator.run.load_window import WARMUP, load_figures, window_bounds_s, window_rates
from orchestrator.run.replay import ReplayResult
from storage.tiers import Tier
from traces.replay import LoadOptions
from workers.request import LatencyPart

__all__ = ["WARMUP", "summarize", "window_bounds_s", "window_throughput"]

# Below this mean decode occupancy in the window decode is almost idle: the oscillation
# index and the measured period are null (docs/metrics.md). 5% of the slots: the
# operating points docs/control.md reports run at 0.2 and above, while the bundled
# sample on the default cluster runs at 0.002 (1.7 sequences of 864 slots).
IDLE_OCCUPANCY = 0.05


def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    arr = np.asarray(values, dtype=np.float64)
    return {f"p{q}": float(np.percentile(arr, q)) for q in (50, 90, 99)}


def window_mask(result: ReplayResult) -> np.ndarray:
    """Which of the series' samples lie in the load window (`orchestrator.run.load_window`)."""
    t = result.series.array("time_s")
    if len(t) == 0:
        return np.zeros(0, dtype=bool)
    lo, hi = window_bounds_s(result)
    return (t >= lo) & (t <= hi)


def window_throughput(result: ReplayResult) -> dict[str, float | None]:
    """Output tokens per second of the calls that completed inside the load window
    (`orchestrator.run.load_window`)."""
    return window_rates(result, [True] * len(result.requests.column("done_s")))[0]


def _cv(values: np.ndarray) -> float:
    if len(values) < 2 or values.mean() == 0:
        return 0.0
    return float(values.std() / values.mean())


def _fast_part(values: np.ndarray, n: int) -> np.ndarray:
    """`values` minus their centred moving average over `n` samples (edges: shorter)."""
    n = min(n, len(values))  # np.convolve(mode="same") returns the longer operand's length
    if n <= 1:
        return values - values.mean() if len(values) else values
    kernel = np.ones(n)
    total = np.convolve(values, kernel, mode="same")
    count = np.convolve(np.ones_like(values), kernel, mode="same")
    return values - total / count


def oscillation(result: ReplayResult) -> dict[str, float | None]:
    w = window_mask(result)
    full = result.series.array("decode_occupancy")
    # Detrend over the whole run, then keep the window, so edges see their neighbours.
    n = max(1, round(result.control.slow_period_s / result.control.fast_period_s))
    fast = _fast_part(full, n)[w]
    occ = full[w]
    index = float(fast.std() / occ.mean()) if len(occ) > 1 and occ.mean() > 0 else 0.0
    out: dict[str, float | None] = {"oscillation_index": index, "oscillation_period_s": None}
    if len(occ) >= 16 and occ.std() > 0:
        out["oscillation_period_s"] = dominant_period_s(occ, result.control.fast_period_s)
    return out


def dominant_period_s(values: np.ndarray, sample_period_s: float) -> float:
    """The period of the largest peak, the zero frequency aside, of the Welch spectrum
    of `values` sampled every `sample_period_s` (scipy.signal.welch's defaults: Hann
    segments of up to 256 samples overlapping by half, each segment's mean removed).
    SciPy's signal package is imported at the first call, not with the summary."""
    from scipy.signal import welch

    freqs, power = welch(values - values.mean(), fs=1.0 / sample_period_s,
                         nperseg=min(256, len(values)))
    k = int(np.argmax(power[1:])) + 1
    return float(1.0 / freqs[k])


def oscillation_null_reason(occupancy: np.ndarray) -> str | None:
    """Why the window's oscillation index and measured period are not figures (null in
    the summary), or None when they are: a window of fewer than two samples, or a decode
    almost idle (mean occupancy below IDLE_OCCUPANCY), where they would measure a few
    sequences coming and going rather than the admission loop."""
    if len(occupancy) < 2:
        return f"the load window holds {len(occupancy)} sample(s): nothing to measure"
    mean = float(occupancy.mean())
    if mean < IDLE_OCCUPANCY:
        return (f"decode almost idle: mean occupancy {mean:.3f} in the load window, below "
                f"{IDLE_OCCUPANCY:g}; the index would measure a few sequences coming and "
                "going, not the admission loop")
    return None


def pipeline_s(result: ReplayResult) -> float:
    """Mean time from a fill's start to the call's KV loaded in decode (fill plus transfer)
    over the completed calls: the delay an admission takes to reach decode, measured."""
    calls = result.requests
    done_s = calls.column("done_s")
    done = sum(1 for t in done_s if t == t)  # NaN: not done
    if not done:
        return 0.0
    return sum(fill + transfer for fill, transfer, t in
               zip(calls.part(LatencyPart.FILL), calls.part(LatencyPart.TRANSFER), done_s,
                   strict=True) if t == t) / done


def loop_model(result: ReplayResult) -> dict[str, float | None]:
    """The linearised admission loop at this run's observation lag and measured pipeline
    delay: its phase margin and predicted ringing period (model-derived figures, beside the
    measured `oscillation_period_s`). None for a controller that declares no linear
    model (`result.loop_model`, the policy's own: orchestrator.control.policies.base)."""
    from orchestrator.control.stability import phase_margin_deg, ringing_period_s

    delay = pipeline_s(result)
    out: dict[str, float | None] = {"lag_s": result.control.observation_lag_s,
                                    "pipeline_s": delay, "phase_margin_deg": None,
                                    "predicted_ringing_period_s": None}
    model = result.loop_model
    if model is not None:
        out["phase_margin_deg"] = phase_margin_deg(model, delay)
        out["predicted_ringing_period_s"] = ringing_period_s(model, delay)
    return out


def starvation(result: ReplayResult) -> float:
    s, w = result.series, window_mask(result)
    if not w.any():
        return 0.0
    running, slots = s.array("decode_running")[w], s.array("decode_slots")[w]
    waiting = s.array("upstream_waiting")[w]  # left queued by the decision, plus ready
    return float(np.mean((running < 0.5 * slots) & (waiting > 0)))


def admission_bound(result: ReplayResult) -> float:
    """The share of window samples whose admission decision left calls queued."""
    w = window_mask(result)
    if not w.any():
        return 0.0
    return float(np.mean(result.series.array("held")[w] > 0))


def latency_breakdown(calls: CompletedCalls) -> dict[str, dict[str, float | None]]:
    """p50/p90/p99 of each latency part over the calls given."""
    return {p.key: _pct(calls.part(p)) for p in LatencyPart}


def _ttft_tpot(calls: CompletedCalls) -> tuple[list[float], list[float | None]]:
    """Every call's TTFT where it had a first token, and every call's client TPOT (None
    where `Request.tpot_s` is None), as `Request`'s properties compute them."""
    ttft = [first - arrival for first, arrival in
            zip(calls.column("first_token_s"), calls.column("arrival_s"), strict=True)
            if first == first]  # NaN: no first token
    tpot = [None if done != done or out < 2 or first != first else (done - first) / (out - 1)
            for done, first, out in zip(calls.column("done_s"), calls.column("first_token_s"),
                                        calls.column("output_tokens"), strict=True)]
    return ttft, tpot


def itl_percentiles(result: ReplayResult) -> dict[str, float | None]:
    """p50/p90/p99 over every token streamed after a call's first of the gap before it
    (`workers.token_gaps`: from the steps that produced them, stalls included)."""
    if result.token_gaps is None:
        return _pct([])
    return result.token_gaps.histogram().percentiles()


def tier_hits(result: ReplayResult) -> dict:
    """Prefix tokens each fetch found, by the tier that served them (the destination's
    own HBM, or the tiers that sent a load's bytes, in proportion to them: see
    `storage.counters.served_hits`), those recomputed rather than loaded,
    those the fetching worker's HBM held already (nothing moved), and the shares of
    the last two kinds. A call's fill and its decode each fetch."""
    snap = result.store_counters
    hits = {tier.name.lower(): int(snap.hit_tokens.get(tier, 0)) for tier in Tier}
    found = sum(hits.values())
    local = int(snap.local_hit_tokens)
    return {"hit_tokens": hits, "recomputed_tokens": int(snap.recomputed_tokens),
            "local_hit_tokens": local,
            "hbm_hit_share": hits["hbm"] / found if found else None,
            "local_hit_share": local / found if found else None}


def kv_traffic(result: ReplayResult, input_tokens: int) -> dict:
    """KV bytes copied between tiers by kind of path (`docs/metrics.md`), and per input
    token of the completed calls, in bytes and in KV copies of the token."""
    moved = {key: 0 for key in ("hbm_dram", "dram_hbm", "gpu_gpu", "dram_dram", "rack",
                                "pfs")}
    for (src, dst), n in result.store_counters.moved_bytes.items():
        if Tier.RACK in (src, dst):
            key = "rack"
        elif Tier.PFS in (src, dst):
            key = "pfs"
        else:
            key = f"{src.name.lower()}_{dst.name.lower()}".replace("hbm_hbm", "gpu_gpu")
        moved[key] += int(n)
    total = sum(moved.values())
    per_token = total / input_tokens if input_tokens else None
    copies = (per_token / result.kv_bytes_per_token
              if per_token is not None and result.kv_bytes_per_token else None)
    return {"policy": result.kv_policy, "bytes_moved": {**moved, "total": total},
            "bytes_moved_per_input_token": per_token, "copies_per_input_token": copies,
            # On the links (docs/network.md): bytes per kind of copy, and per link that
            # carried KV its utilisation, mean over the run and p99 over 1 s windows.
            "path_bytes": dict(result.path_bytes),
            "link_utilisation": dict(result.link_utilisation)}


def request_counts(result: ReplayResult) -> dict:
    """The summary's `requests`: calls by outcome, the call ledger's account, preemptions."""
    calls, c = result.requests, result.counters
    preemptions = calls.column("preemptions")
    # Lost and in flight from the call ledger when the run kept one: calls issued against
    # calls final and calls found held at the end (orchestrator.run.ledger). Live mode
    # fills them from its backend's ledger (orchestrator.run.settings).
    ledger = result.ledger
    return {
        "sessions": result.sessions,
        "submitted": c["submitted"], "completed": c["completed"],
        "rejected": c["rejected"], "in_flight": ledger.in_flight if ledger is not None else None,
        # calls beyond the model's context window: prompt refused (counted in
        # rejected too), or output cut to fit
        "context_rejected": c.get("context_rejected", 0),
        "context_truncated": c.get("context_truncated", 0),
        "lost": ledger.lost if ledger is not None else None,
        "ledger": ledger.as_dict() if ledger is not None else None,
        # calls handed to another worker after theirs was lost (live mode)
        "redispatched": c.get("redispatched", 0),
        # completed calls a decode worker preempted at least once, and times in all
        "preempted": sum(1 for n in preemptions if n),
        "preemptions": sum(preemptions),
    }


def cache_figures(result: ReplayResult) -> dict:
    """The summary's `cache`: prefix tokens found cached, by whom and where."""
    calls = result.requests
    prefix = calls.column("prefix_tokens")
    return {
        # Input tokens found cached, and of them those beyond what the call's own
        # session had computed: KV another session wrote (a shared prefix).
        "prefix_hit_tokens": sum(prefix),
        "cross_session_hit_tokens": sum(max(0, hit - own) for hit, own in
                                        zip(prefix, calls.column("own_cached_tokens"),
                                            strict=True)),
        "shared_prefix": dict(result.shared_prefix),
        **tier_hits(result),
    }


def control_figures(result: ReplayResult, duration_s: float) -> dict:
    """The summary's `control`: the loops' behaviour over the measurement window, the
    linearised loop's model-derived figures, and the reconfigurations."""
    s, w = result.series, window_mask(result)
    occ = s.array("decode_occupancy")[w]
    admitted = s.array("admitted")[w]
    reconf = len(result.reconfigurations)
    osc: dict = oscillation(result)
    why_null = oscillation_null_reason(occ)
    if why_null is not None:
        osc = {"oscillation_index": None, "oscillation_period_s": None}
    model = loop_model(result)
    return {
        **osc,
        "oscillation_null_reason": why_null,
        "decode_starvation_fraction": starvation(result),
        "admission_bound_fraction": admission_bound(result),
        "decode_occupancy_mean": float(occ.mean()) if len(occ) else 0.0,
        "decode_occupancy_peak_to_trough": (float(np.percentile(occ, 95)
                                                  - np.percentile(occ, 5))
                                            if len(occ) else 0.0),
        "admission_rate_variation": _cv(admitted),
        # Model-derived (the linearised loop at the run's lag and measured pipeline),
        # beside the measured oscillation period: docs/metrics.md.
        "phase_margin_deg": model["phase_margin_deg"],
        "ringing_period_s": {"predicted": model["predicted_ringing_period_s"],
                             "measured": osc["oscillation_period_s"]},
        "loop_model": {"lag_s": model["lag_s"], "pipeline_s": model["pipeline_s"]},
        "model_derived": ["phase_margin_deg", "ringing_period_s.predicted"],
        "reconfigurations": reconf,
        "reconfigurations_per_hour": reconf / duration_s * 3600.0,
    }


def summarize(result: ReplayResult, ttft_target_s: float, tpot_target_s: float,
              run: str = "", controller: str = "", load: LoadOptions | None = None,
              trace_sessions: int | None = None) -> dict:
    """The run's summary: the figures of `--json`, by section (module docstring). `load`
    and `trace_sessions` (the sessions the trace has, before --repeat) say what load
    was asked for (`load.*`); without them only what the run got is reported."""
    calls, c = result.requests, result.counters
    duration = max(result.simulated_s, 1e-9)
    ttft, tpot_or_none = _ttft_tpot(calls)
    tpot = [v for v in tpot_or_none if v is not None]
    outputs = calls.column("output_tokens")
    out_tokens = sum(outputs)
    met = [first == first and first - arrival <= ttft_target_s  # NaN: no first token
           and (call_tpot is None or call_tpot <= tpot_target_s)
           for first, arrival, call_tpot in zip(calls.column("first_token_s"),
                                               calls.column("arrival_s"), tpot_or_none,
                                               strict=True)]
    good = sum(out for out, ok in zip(outputs, met, strict=True) if ok)
    window_all, window_good = window_rates(result, met)
    input_tokens = sum(calls.column("input_tokens"))
    return {
        "run": run,
        "controller": controller or result.policy,
        "load": load_figures(result, load, trace_sessions),
        "requests": request_counts(result),
        "tokens": {"recomputed": sum(calls.column("recomputed_tokens"))},
        "cache": cache_figures(result),
        "kv": kv_traffic(result, input_tokens),
        "ttft_s": _pct(ttft),
        "itl_s": itl_percentiles(result),  # over tokens (docs/metrics.md)
        "tpot_s": _pct(tpot),  # over calls
        "latency_breakdown_s": latency_breakdown(calls),
        "throughput": {
            "output_tokens_per_s": out_tokens / duration,
            "output_tokens_per_s_per_gpu": out_tokens / duration / result.gpus,
            "input_tokens_per_s": input_tokens / duration,
            "window": window_all,
        },
        "goodput": {
            "output_tokens_per_s": good / duration,  # the whole run, drain included
            "output_tokens_per_s_per_gpu": good / duration / result.gpus,
            "window": window_good,  # the load window (docs/metrics.md)
            "ttft_target_s": ttft_target_s, "tpot_target_s": tpot_target_s,
        },
        "control": control_figures(result, duration),
        "service": result.service,
        "resources": {
            "gpus": result.gpus,
            "decode_slots": result.decode_slots,
            "peak_hbm_bytes_per_gpu": result.peak_hbm_bytes_per_gpu,
            "kv_bytes_moved": result.kv_bytes_moved,
        },
        "energy": {
            "joules": result.energy_j,
            "joules_per_call": result.energy_j / c["completed"] if c["completed"] else None,
        },
        "sim": {"simulated_s": result.simulated_s, "wall_s": result.wall_s,
                "events": result.events},
    }
