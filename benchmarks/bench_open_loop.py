"""Open-loop replay cost: Azure conversation requests on Llama-3.1-70B, one HGX H100.

The first 4,000 and 10,000 requests of the Azure LLM inference trace 2023
(conversation), each a one-call session arriving at its own timestamp, replayed on
examples/clusters/hgx-h100-llama70b.toml (two aggregated TP-4 workers; the file's header
says why aggregated) with the default controller, each run in its own subprocess. Prints
per size: calls, wall s of the replay and of the whole process (interpreter start and
trace reading included: what a user waits for, and what the Vidur comparison sets
against Vidur's own process), calls per wall s (target >= 5,000 at 10,000 requests),
simulated s per wall s, events per call and peak RSS.

    python benchmarks/bench_open_loop.py [--sizes 4000,10000] [--controller buffered] [--json]

Reads the Azure conversation trace bundled in traces/data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import (
    AZURE_CONV,
    H100_LLAMA_CLUSTER,
    core_line,
    per_wall,
    positive_ints,
    run_isolated,
    shared_missing,
    spec,
    verdict,
)

CALLS_PER_S_TARGET = 5_000.0
TARGET_SIZE = 10_000


def open_loop_run(requests: int, controller: str) -> dict:
    return spec([AZURE_CONV], "azure", model="llama-3.1-70b", cluster=H100_LLAMA_CLUSTER,
                controller=controller, max_sessions=requests)


def line(fig: dict) -> str:
    rates = per_wall(fig)
    target = ""
    if fig["submitted"] == TARGET_SIZE:
        target = f" [{verdict(rates['calls_per_s'] >= CALLS_PER_S_TARGET)} >= 5,000]"
    return (f"{fig['submitted']:>7,} requests: {fig['calls']:,} completed, replay "
            f"{fig['replay_s']:6.2f} s, process {fig['process_s']:6.2f} s, "
            f"{rates['calls_per_s']:7,.0f} calls/s{target} ({rates['calls_per_cpu_s']:,.0f} per "
            f"CPU s), {rates['sim_per_wall']:6,.0f} "
            f"simulated s/wall s, {rates['events_per_call']:5.1f} events/call, peak RSS "
            f"{fig['peak_rss_mb']:5.0f} MB, TTFT p50 {fig['ttft_p50_s']:.3f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4000,10000", help="request counts, comma-separated")
    ap.add_argument("--controller", default="buffered")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout at the end")
    args = ap.parse_args()
    sizes = positive_ints("--sizes", args.sizes)
    missing = shared_missing(AZURE_CONV)
    if missing:
        print(missing)
        return 0
    print(core_line())
    print(f"Azure conversation trace, open loop, llama-3.1-70b on {H100_LLAMA_CLUSTER.name}, "
          f"controller {args.controller}")
    out = {}
    for size in sizes:
        fig = run_isolated(open_loop_run(size, args.controller))
        out[str(size)] = fig
        print(line(fig), flush=True)
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
