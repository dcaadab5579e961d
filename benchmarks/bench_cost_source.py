"""Replay speed with the measured tables' cost source against the roofline's, same runs.

Each run replays once with `cost_source = "roofline"` and once with `"measured"` (the
cluster file's own, engine TensorRT-LLM), each in its own subprocess. The measured
source's start-up (reading the tables and evaluating each pool's terms on its grids,
memoised per process) is timed apart, before the replay's clock starts, and printed
beside it: the replay's own speed is what the target is about. Prints per run and
source: calls, replay wall s, calls per wall s, calls per CPU s, the measured / roofline
ratio of calls per CPU s (target: >= 0.95, "within 5%"), and how TTFT p50 moved.

Runs (their layouts the tables cover):
- azure: the Azure conversation trace open loop (first N calls, default 10,000) on one
  HGX H100, Llama-3.1-70B bf16, two mixed TP4 workers (examples/clusters/
  hgx-h100-llama70b.toml, as benchmarks/check_identical.py's azure runs);
- dev: the 113 weka-cc-dev sessions at 240 an hour on 16 H200, DeepSeek-V3 fp8,
  a TP8 EP8 prefill worker and a DP8 EP8 decode worker (MTP off: the tables have no
  draft module, so with MTP the drafts would still be the roofline's).

    python benchmarks/bench_cost_source.py [--runs azure,dev] [--calls N] [--repeat K]

Needs the `measured` extra.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import AZURE_CONV, DEV_TRACES, H100_LLAMA_CLUSTER, ROOT

RATIO_TARGET = 0.95

DSV3_H200 = '''name = "h200x2-dsv3"
description = "16 x H200, DeepSeek-V3 fp8: prefill TP8 EP8, decode DP8 EP8"
[pfs]
capacity_gb = 100_000
read_gb_per_s = 50
write_gb_per_s = 25
[[racks]]
name = "r0"
cache_gb = 0
[[nodes]]
name = "n0"
rack = "r0"
hardware = "h200"
gpus = 8
dram_gb = 2_048
dram_gb_per_s = 614
[[nodes]]
name = "n1"
rack = "r0"
hardware = "h200"
gpus = 8
dram_gb = 2_048
dram_gb_per_s = 614
[[pools]]
name = "prefill"
phase = "prefill"
nodes = ["n0"]
gpus = 8
tp = 8
ep = 8
precision = "fp8"
kv_precision = "fp8"
max_batch_tokens = 16384
[[pools]]
name = "decode"
phase = "decode"
nodes = ["n1"]
gpus = 8
tp = 1
ep = 8
mtp = 0
precision = "fp8"
kv_precision = "fp8"
target_batch = 256
max_batch_sequences = 256
'''


def cluster_file(folder: Path, run: str, source: str) -> Path:
    text = H100_LLAMA_CLUSTER.read_text() if run == "azure" else DSV3_H200
    # Top-level keys go before the first table.
    head = f'engine = "trtllm"\ncost_source = "{source}"\n'
    path = folder / f"{run}-{source}.toml"
    path.write_text(head + text)
    return path


def child(run: dict) -> dict:
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from traces.replay import LoadOptions
    from workers.cost_sources import Pricers

    settings = RunSettings(model=run["model"], cluster=run["cluster"], controller="retire",
                           seed=1, load=LoadOptions(**run["load"]))
    prepared = prepare(run["paths"], run["format"], settings)
    # The cost sources' start-up, timed apart: the tables read and each pool's grids built
    # (memoised per process, so the replay's own runtime finds them ready).
    from costmodel.engines import serving_efficiency

    cluster = prepared.cluster.bind(prepared.model)
    start0 = time.perf_counter()
    eff = serving_efficiency(cluster.model, cluster.spec.engine, cluster.spec.mtp_acceptance)
    pricers = Pricers(cluster.model, eff, cluster.spec.engine, cluster.spec.cost_source)
    for w in cluster.workers:
        pricers.pricer(w.pool, w.hardware, w.layout)
    startup_s = time.perf_counter() - start0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    _, summary = run_replay(prepared, settings)
    wall1, cpu1 = time.perf_counter(), time.process_time()
    return {"calls": summary["requests"]["completed"], "replay_s": wall1 - wall0,
            "replay_cpu_s": cpu1 - cpu0, "startup_s": startup_s,
            "ttft_p50_s": summary["ttft_s"]["p50"],
            "sources": summary["service"].get("cost_source")}


def run_isolated(run: dict) -> dict:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                           json.dumps(run)], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"replay exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="azure,dev")
    p.add_argument("--calls", type=int, default=10_000, help="azure: calls (default 10,000)")
    p.add_argument("--repeat", type=int, default=2, help="replays per source (best kept)")
    args = p.parse_args()
    runs = [r for r in args.runs.split(",") if r]
    with tempfile.TemporaryDirectory(prefix="bench-cost-source-") as tmp:
        for run in runs:
            if run not in ("azure", "dev"):
                print(f"--runs: unknown run {run!r} (azure, dev)", file=sys.stderr)
                return 2
            figures = {}
            for source in ("roofline", "measured"):
                spec = {"cluster": str(cluster_file(Path(tmp), run, source)),
                        "model": "llama-3.1-70b" if run == "azure" else "deepseek-v3",
                        "paths": [str(AZURE_CONV if run == "azure" else DEV_TRACES)],
                        "format": "azure" if run == "azure" else "weka",
                        "load": ({"max_sessions": args.calls} if run == "azure"
                                 else {"sessions_per_hour": 240.0})}
                tries = [run_isolated(spec) for _ in range(args.repeat)]
                figures[source] = max(tries, key=lambda f: f["calls"] / f["replay_cpu_s"])
                f = figures[source]
                print(f"{run:>6} {source:>9}: {f['calls']:>7,} calls, replay {f['replay_s']:6.2f} s "
                      f"wall ({f['replay_cpu_s']:6.2f} CPU s), {f['calls'] / f['replay_s']:8,.0f} "
                      f"calls/s, {f['calls'] / f['replay_cpu_s']:8,.0f} calls/CPU s; start-up "
                      f"{f['startup_s']:5.2f} s; TTFT p50 {f['ttft_p50_s'] * 1e3:8.1f} ms; "
                      f"pools: {json.dumps((f['sources'] or {}).get('pools'))[:160]}")
            r, m = figures["roofline"], figures["measured"]
            ratio = (m["calls"] / m["replay_cpu_s"]) / (r["calls"] / r["replay_cpu_s"])
            wall = (m["calls"] / m["replay_s"]) / (r["calls"] / r["replay_s"])
            verdict = "met" if ratio >= RATIO_TARGET else "NOT met"
            print(f"{run:>6}: measured / roofline calls per CPU s {ratio:.3f}, per wall s "
                  f"{wall:.3f} [{verdict}: >= {RATIO_TARGET}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
