"""The replay summary: the figures of `--json`, and the definitions they rest on.

Definitions (docs/metrics.md states them for users; keep the two in step):
- measurement window: samples taken every fast-loop period between 10% and 90%
  of the simulated run, leaving out the ramp-up and the drain;
- oscillation index: the coefficient of variation (standard deviation over
  mean) of decode occupancy (sequences decoding / decode slots) over the window;
- decode starvation fraction: the share of window samples in which decode runs
  below half its slots while work waits upstream (admission queue, fill
  queues or ready buffer non-empty);
- goodput: output tokens per simulated second of calls that met both their TTFT
  and their TPOT targets.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import signal

from orchestrator.replay import ReplayResult

WINDOW = (0.10, 0.90)


def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    arr = np.asarray(values, dtype=np.float64)
    return {f"p{q}": float(np.percentile(arr, q)) for q in (50, 90, 99)}


def _window(result: ReplayResult) -> np.ndarray:
    t = result.series.array("time_s")
    if len(t) == 0:
        return np.zeros(0, dtype=bool)
    lo, hi = WINDOW[0] * result.simulated_s, WINDOW[1] * result.simulated_s
    return (t >= lo) & (t <= hi)


def _cv(values: np.ndarray) -> float:
    if len(values) < 2 or values.mean() == 0:
        return 0.0
    return float(values.std() / values.mean())


def oscillation(result: ReplayResult) -> dict[str, float | None]:
    w = _window(result)
    occ = result.series.array("decode_occupancy")[w]
    out: dict[str, float | None] = {"oscillation_index": _cv(occ), "oscillation_period_s": None}
    if len(occ) >= 16 and occ.std() > 0:
        fs = 1.0 / result.control.fast_period_s
        freqs, power = signal.welch(occ - occ.mean(), fs=fs, nperseg=min(256, len(occ)))
        k = int(np.argmax(power[1:])) + 1
        out["oscillation_period_s"] = float(1.0 / freqs[k])
    return out


def starvation(result: ReplayResult) -> float:
    s, w = result.series, _window(result)
    if not w.any():
        return 0.0
    running, slots = s.array("decode_running")[w], s.array("decode_slots")[w]
    waiting = s.array("upstream_waiting")[w]
    return float(np.mean((running < 0.5 * slots) & (waiting > 0)))


def summarize(result: ReplayResult, ttft_target_s: float, tpot_target_s: float,
              run: str = "", controller: str = "") -> dict:
    reqs, c = result.requests, result.counters
    duration = max(result.simulated_s, 1e-9)
    ttft = [r.ttft_s for r in reqs if r.ttft_s is not None]
    tpot = [r.tpot_s for r in reqs if r.tpot_s is not None]
    out_tokens = sum(r.output_tokens for r in reqs)
    good = sum(r.output_tokens for r in reqs
               if r.ttft_s is not None and r.ttft_s <= ttft_target_s
               and (r.tpot_s is None or r.tpot_s <= tpot_target_s))
    in_flight = c["submitted"] - c["completed"] - c["rejected"]
    s, w = result.series, _window(result)
    occ = s.array("decode_occupancy")[w]
    admitted = s.array("admitted")[w]
    reconf = len(result.reconfigurations)
    osc = oscillation(result)
    return {
        "run": run,
        "controller": controller or result.policy,
        "requests": {
            "sessions": result.sessions,
            "submitted": c["submitted"], "completed": c["completed"],
            "rejected": c["rejected"], "in_flight": in_flight,
            "lost": c["submitted"] - c["completed"] - c["rejected"] - in_flight,
        },
        "ttft_s": _pct(ttft),
        "tpot_s": _pct(tpot),
        "throughput": {
            "output_tokens_per_s": out_tokens / duration,
            "output_tokens_per_s_per_gpu": out_tokens / duration / result.gpus,
            "input_tokens_per_s": sum(r.input_tokens for r in reqs) / duration,
        },
        "goodput": {
            "output_tokens_per_s": good / duration,
            "ttft_target_s": ttft_target_s, "tpot_target_s": tpot_target_s,
        },
        "control": {
            **osc,
            "decode_starvation_fraction": starvation(result),
            "decode_occupancy_mean": float(occ.mean()) if len(occ) else 0.0,
            "decode_occupancy_peak_to_trough": (float(np.percentile(occ, 95)
                                                      - np.percentile(occ, 5))
                                                if len(occ) else 0.0),
            "admission_rate_variation": _cv(admitted),
            "reconfigurations": reconf,
            "reconfigurations_per_hour": reconf / duration * 3600.0,
        },
        "resources": {
            "gpus": result.gpus,
            "peak_hbm_bytes_per_gpu": result.peak_hbm_bytes_per_gpu,
            "kv_bytes_moved": result.kv_bytes_moved,
        },
        "energy": {
            "joules": result.energy_j,
            "joules_per_call": result.energy_j / c["completed"] if c["completed"] else math.nan,
        },
        "sim": {"simulated_s": result.simulated_s, "wall_s": result.wall_s,
                "events": result.events},
    }
