"""Per-call pricing cost: the vectorised cost core against the workers' scalar fast path.

For each case the same calls (same contexts, same batches) are priced both ways in
this run, and the microseconds per call and the ratio are printed; the results are
checked equal on the way. Cases: a decode run of 1, 8 and 200 steps (what a decode
worker prices per event), an MTP decode run of 8 steps, a fill of one prompt (new
length and cached prefix every call: what a fetch's recompute price asks), and a chunked-prefill or
mixed batch step of 4 and 32 requests (uncached: every call has new contexts; the
fast path's token-count terms are memoised on their exact key, as in a replay).

    python benchmarks/bench_pricing.py [--model kimi-k3-like] [--hardware gb200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costmodel.hardware import load_hardware  # noqa: E402
from costmodel.layout import Layout  # noqa: E402
from costmodel.model import load_model  # noqa: E402
from costmodel.phase import Phase  # noqa: E402
from workers.pricing import StepPricer  # noqa: E402

CALLS = 2000


def _per_call_us(fn, args: list) -> tuple[float, list]:
    out = [fn(*a) for a in args[:50]]  # warm caches and code paths
    t0 = time.perf_counter()
    out = [fn(*a) for a in args]
    return (time.perf_counter() - t0) / len(args) * 1e6, out


def _decode_case(pricer: StepPricer, rng, steps: int, mtp: bool):
    seqs = rng.integers(1, 64, CALLS)
    ctx = rng.uniform(1_000, 120_000, CALLS)
    if mtp:
        args = [(int(s), c + 2.3 * np.arange(steps)) for s, c in zip(seqs, ctx, strict=True)]
        return pricer.decode_step_times_core_s, pricer.decode_step_times_s, args
    args = [(int(s), float(c), steps) for s, c in zip(seqs, ctx, strict=True)]
    return pricer.decode_steps_core_s, pricer.decode_steps_s, args


def _fill_case(pricer: StepPricer, rng):
    # A single prefill of a new prompt length over a new cached prefix (uncached).
    args = [(Phase.MIDFILL, 1, int(n), int(c)) for n, c in zip(
        rng.integers(100, 20_000, CALLS), rng.integers(0, 150_000, CALLS), strict=True)]
    return pricer.fill_core_s, pricer._fill_uncached, args


def _batch_case(pricer: StepPricer, rng, requests: int):
    args = []
    for _ in range(CALLS):
        # A token budget of 8,192 shared out: the token counts recur, the contexts do not.
        new = tuple(int(x) for x in np.full(requests, 8192 // requests))
        cached = tuple(int(x) for x in rng.integers(0, 150_000, requests))
        decoding = tuple(bool(d) for d in rng.random(requests) < 0.5)
        args.append((new, cached, decoding))
    return pricer.batch_core_s, pricer._batch_uncached, args


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="kimi-k3-like")
    ap.add_argument("--hardware", default="gb200")
    args = ap.parse_args()
    model, hw = load_model(args.model), load_hardware(args.hardware)
    plain = StepPricer(model, hw, Layout(tp=1, ep=36))
    drafting = StepPricer(model, hw, Layout(tp=1, ep=36, mtp=1))
    rng = np.random.default_rng(0)
    cases = [
        ("decode run, 1 step", _decode_case(plain, rng, 1, False)),
        ("decode run, 8 steps", _decode_case(plain, rng, 8, False)),
        ("decode run, 200 steps", _decode_case(plain, rng, 200, False)),
        ("MTP decode run, 8 steps", _decode_case(drafting, rng, 8, True)),
        ("fill of one prompt", _fill_case(plain, rng)),
        ("batch step, 4 requests", _batch_case(plain, rng, 4)),
        ("batch step, 32 requests", _batch_case(drafting, rng, 32)),
    ]
    print(f"{args.model} on {args.hardware}, {CALLS:,} calls a case (microseconds per call)")
    print(f"{'case':<26}{'core':>10}{'fast':>10}{'ratio':>8}")
    for name, (core, fast, calls) in cases:
        core_us, expected = _per_call_us(core, calls)
        fast_us, got = _per_call_us(fast, calls)
        same = all(np.array_equal(a, b) for a, b in zip(expected, got, strict=True))
        if not same:
            raise SystemExit(f"{name}: the fast path differs from the core")
        print(f"{name:<26}{core_us:>10.1f}{fast_us:>10.1f}{core_us / fast_us:>7.1f}x")


if __name__ == "__main__":
    main()
