"""`tokenfactory bench` as a user runs it: a layout search at ten concurrencies, timed.

DeepSeek-V3 on one GB200 NVL72 (72 GPUs), ISL/OSL 1,024 (range ratio 0.8), concurrencies
1 to 512 (doubling), the layouts the search finds (aggregated and disaggregated, MTP off
and on), written with --out to a temporary directory, in a child process as the command
line runs it (its own interpreter start and imports included). Prints the layouts and
points run, the wall time against the target (2 minutes on the 2-core development
machine), met or NOT met, and the load average around the run (a shared machine's other
work moves wall times by tens of percent).

    python benchmarks/bench_bench.py [--gpus 72] [--hardware gb200] [--model deepseek-v3]
                                     [--concurrency 1,2,...] [--workers N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_S = 120.0
CONCURRENCIES = "1,2,4,8,16,32,64,128,256,512"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v3")
    ap.add_argument("--hardware", default="gb200")
    ap.add_argument("--gpus", default="72")
    ap.add_argument("--isl", default="1024")
    ap.add_argument("--osl", default="1024")
    ap.add_argument("--range-ratio", default="0.8")
    ap.add_argument("--concurrency", default=CONCURRENCIES)
    ap.add_argument("--workers", help="bench's --workers (default: its own, every core)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout at the end")
    args = ap.parse_args()
    from benchmarks.replay_runner import core_line, verdict

    print(core_line())
    command = [sys.executable, "-m", "orchestrator.cli", "bench", "--model", args.model,
               "--hardware", args.hardware, "--gpus", args.gpus, "--isl", args.isl,
               "--osl", args.osl, "--range-ratio", args.range_ratio,
               "--concurrency", args.concurrency, "--no-progress"]
    if args.workers:
        command += ["--workers", args.workers]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench-out"
        load_before = os.getloadavg()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall0 = time.perf_counter()
        proc = subprocess.run([*command, "--out", str(out)], cwd=ROOT, capture_output=True,
                              text=True)
        wall_s = time.perf_counter() - wall0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        # The command's processes and the workers they reaped: what other work on the
        # machine changes least.
        cpu_s = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        load_after = os.getloadavg()
        if proc.returncode != 0:
            print(f"bench exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
            return 1
        result = json.loads((out / "bench.json").read_text())
    points = result["points"]
    layouts = len({p["layout"] for p in points})
    concs = len({p["concurrency"] for p in points})
    print(f"{args.model} on {args.gpus} x {args.hardware}, ISL/OSL {args.isl}/{args.osl} "
          f"(ratio {args.range_ratio}): {layouts} layouts x {concs} concurrencies = "
          f"{len(points)} points, {len(result['frontier'])} on the frontier")
    print(f"wall {wall_s:.1f} s (the whole command, --out written) "
          f"[{verdict(wall_s <= TARGET_S)} <= {TARGET_S:.0f} s]; CPU {cpu_s:.1f} s; load "
          f"average {load_before[0]:.1f} before, {load_after[0]:.1f} after, on "
          f"{os.cpu_count()} cores")
    if args.json:
        print(json.dumps({"wall_s": wall_s, "cpu_s": cpu_s, "target_s": TARGET_S,
                          "layouts": layouts,
                          "concurrencies": concs, "points": len(points),
                          "load_average": [load_before[0], load_after[0]]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
