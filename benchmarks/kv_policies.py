"""The two KV placement policies on the development traces, at a moderate load and at
overload: what each costs in latency, HBM and network traffic (docs/storage.md, "The
trade-off, measured").

    python benchmarks/kv_policies.py [--loads 0.5,1.5] [--policies offload,retain]

Each run is `tokenfactory replay traces/data/weka-cc-dev --cluster gb200-nvl72x1
--think-scale 0.1 --duration 1800` with session starts at L times the rate that issues
calls at the cluster's planned capacity (32.90 calls/s of the traces' mix: the preset's
header, `docs/plan.md`), `--repeat` enough copies of the 113 sessions for the window. One
replay at a time, each in its own process; the CPU seconds are that process's.

Prints one markdown row per run: TTFT p50 / p99, goodput, peak HBM per GPU, KV bytes
moved per input token and in KV copies of the token, the share of prefix tokens served
by HBM (any worker's: its share of the striped loads) and found in the fetching worker's
own HBM.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "traces" / "data" / "weka-cc-dev"
CLUSTER = "gb200-nvl72x1"
CAPACITY_CALLS_PER_S = 32.90  # the preset's planned capacity on these traces
SESSIONS, CALLS = 113, 6817  # the traces' sessions and top-level calls
THINK_SCALE = 0.1
DURATION_S = 1800.0


def sessions_per_hour(load: float) -> float:
    """Session starts an hour that, in steady state, issue calls at `load` x capacity."""
    return load * CAPACITY_CALLS_PER_S * 3600.0 * SESSIONS / CALLS


def replay(load: float, policy: str) -> tuple[dict, float]:
    rate = sessions_per_hour(load)
    repeat = math.ceil(rate * DURATION_S / 3600.0 / SESSIONS)
    argv = [sys.executable, "-m", "orchestrator.cli", "replay", str(TRACES), "--cluster",
            CLUSTER, "--kv-policy", policy, "--think-scale", str(THINK_SCALE), "--duration",
            str(DURATION_S), "--sessions-per-hour", f"{rate:.1f}", "--repeat", str(repeat),
            "--json", "--no-progress"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"replay failed: {proc.stderr.strip().splitlines()[-1:]}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(proc.stdout), cpu_s


def row(load: float, policy: str, s: dict, cpu_s: float) -> str:
    ttft, cache, kv = s["ttft_s"], s["cache"], s["kv"]
    return (f"| {load:g} | {policy} | {s['requests']['completed']:,} | "
            f"{ttft['p50']:.2f} / {ttft['p99']:.2f} | "
            f"{s['goodput']['output_tokens_per_s']:,.0f} | "
            f"{s['resources']['peak_hbm_bytes_per_gpu'] / 1e9:.1f} | "
            f"{kv['bytes_moved_per_input_token'] / 1e3:,.1f} | "
            f"{kv['copies_per_input_token']:.2f} | {cache['hbm_hit_share']:.1%} | "
            f"{cache['local_hit_share']:.1%} | {cpu_s:.0f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loads", default="0.5,1.5",
                   help="loads, as multiples of the planned capacity (default 0.5,1.5)")
    p.add_argument("--policies", default="offload,retain")
    args = p.parse_args(argv)
    try:
        loads = [float(x) for x in args.loads.split(",")]
    except ValueError:
        p.error(f"--loads: expected numbers, got {args.loads!r}")
    policies = [x.strip() for x in args.policies.split(",")]
    print("| load | policy | calls | TTFT p50 / p99 (s) | goodput (tok/s) | peak HBM/GPU (GB) "
          "| KB moved / input token | KV copies / input token | prefix from HBM "
          "| from own HBM | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for load in loads:
        for policy in policies:
            summary, cpu_s = replay(load, policy)
            print(row(load, policy, summary, cpu_s), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
