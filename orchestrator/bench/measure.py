"""One benchmark point's figures from its replay, as the public harnesses define them.

The steady window: from the moment the last user's warm-up calls are done (every user
then sends measured calls) to the moment the first user sends its last answer's
successor no more (its last call done): in it exactly C calls are in flight, no burst of
simultaneous first prompts and no drain. Over it:

- throughput per GPU: the tokens produced in the window over its length and every GPU
  of the layout; output tokens when they reach the client (each call's first token,
  then every token of a decode step: `workers.token_gaps`), input tokens when their
  prefill ends. `total` counts both, `output` the output alone (InferenceMAX's
  `tput_per_gpu` and `output_tput_per_gpu`, there over the whole benchmark's duration);
- latency, over the measured calls (each user's calls after its warm-up) sent before
  the window's end: TTFT (arrival to the first token reaching the client), TPOT per call
  ((last - first token) / (output - 1), `bench_serving`'s), end-to-end latency; ITL over
  the tokens streamed in the window, each token's gap since its call's previous one;
- interactivity: output tokens per second per user, 1 / mean TPOT (InferenceMAX's
  `mean_intvty` = 1000 / `mean_tpot_ms`).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from orchestrator.run.completed import CompletedCalls

QUANTILES = (50, 90, 99)
CLOCK_SLACK_S = 1e-6


def _pct(values) -> dict[str, float | None]:
    arr = np.asarray(values, dtype=np.float64)
    if not arr.size:
        return {f"p{q}": None for q in QUANTILES}
    return {f"p{q}": float(np.percentile(arr, q)) for q in QUANTILES}


def call_order(calls: CompletedCalls) -> np.ndarray:
    """Each completed call's place in its session (0 for a user's first call): a user's
    calls arrive one after another, each at its predecessor's end."""
    arrival = calls.column("arrival_s")
    by_session: dict[str, list[int]] = defaultdict(list)
    for i in range(len(calls)):
        by_session[calls.value("session_id", i)].append(i)
    order = np.zeros(len(calls), dtype=np.int64)
    for rows in by_session.values():
        rows.sort(key=lambda i: (arrival[i], i))
        order[rows] = np.arange(len(rows))
    return order


def steady_window(calls: CompletedCalls, order: np.ndarray, warmup: int) -> tuple[float, float]:
    """(start, end) of the steady window (module doc). End <= start when it is empty (too
    few calls per user for the users' spread)."""
    done = np.asarray(calls.column("done_s"))
    sessions = [calls.value("session_id", i) for i in range(len(calls))]
    warm_end: dict[str, float] = {}
    last_end: dict[str, float] = {}
    for i, sid in enumerate(sessions):
        if order[i] == warmup - 1:
            warm_end[sid] = done[i]
        last_end[sid] = max(last_end.get(sid, -np.inf), done[i])
    start = max(warm_end.values()) if warm_end else 0.0
    return float(start), float(min(last_end.values()))


def measure(calls: CompletedCalls, token_gaps, gpus: int, warmup: int) -> dict:
    """The point's figures (module doc); `token_gaps` a kept `workers.token_gaps.TokenGaps`."""
    order = call_order(calls)
    lo, hi = steady_window(calls, order, warmup)
    steady = hi > lo
    if not steady:  # too short to hold C in flight past the warm-up: to the last answer
        hi = float(np.max(calls.column("done_s")))
    arrival = np.asarray(calls.column("arrival_s"))
    first = np.asarray(calls.column("first_token_s"))
    done = np.asarray(calls.column("done_s"))
    fill_end = np.asarray(calls.column("fill_end_s"))
    inputs = np.asarray(calls.column("input_tokens"), dtype=np.float64)
    outputs = np.asarray(calls.column("output_tokens"), dtype=np.float64)
    span = max(hi - lo, 1e-12)
    # The window is (lo, hi]: a token streamed as the window opens is its warm-up call's
    # last. A call's end is the clock's, rounded to the nanosecond, its steps' ends are
    # not: the bounds move by CLOCK_SLACK_S, far below any step.
    a, b = lo + CLOCK_SLACK_S, hi + CLOCK_SLACK_S
    first_in = (first >= a) & (first <= b)
    output_tokens = float(first_in.sum()) + token_gaps.tokens(a, b)
    input_tokens = float(inputs[(fill_end >= a) & (fill_end <= b)].sum())
    measured = (order >= warmup) & (arrival <= hi)
    decoded = measured & (outputs >= 2)
    tpot = (done[decoded] - first[decoded]) / (outputs[decoded] - 1)
    mean_tpot = float(tpot.mean()) if tpot.size else None
    gaps = token_gaps.histogram(a, b)
    return {
        "interactivity": 1.0 / mean_tpot if mean_tpot else None,
        "total_tokens_per_s_per_gpu": (input_tokens + output_tokens) / span / gpus,
        "output_tokens_per_s_per_gpu": output_tokens / span / gpus,
        "ttft_s": _pct(first[measured] - arrival[measured]),
        "itl_s": gaps.percentiles(),
        "tpot_s": {"mean": mean_tpot, **_pct(tpot)},
        "e2e_s": {"mean": float((done[measured] - arrival[measured]).mean())
                  if measured.any() else None, **_pct(done[measured] - arrival[measured])},
        "calls_measured": int(measured.sum()),
        "window_s": [lo, hi],
        "steady_window": bool(steady),
    }
