"""`tokenfactory bench` as a user runs it: layout searches at ten concurrencies, timed.

Two searches, each the whole command in a child process (its interpreter start, imports
and process pool included), its outputs written with --out to a temporary directory:

- `8`: DeepSeek-V3 on 8 B200, ISL/OSL 8,192/1,024 (the issue's one-command example);
- `72`: DeepSeek-V3 on one GB200 NVL72 (72 GPUs), ISL/OSL 1,024/1,024;

both at range ratio 0.8 and concurrencies 1 to 512 (doubling), on the layouts the search
finds (aggregated and disaggregated, MTP off and on). For each it prints the layouts and
points run, the wall time against the target (2 minutes on the 2-core development
machine), met or NOT met, points per second of wall time, a digest of the points
(bench.json's sha256: a change for speed leaves it as it was), the CPU seconds of every
process of the command (the pool's workers included) and the load average around the
run: a shared machine's other work moves wall times by tens of percent, CPU times much
less. CPU / cores is the wall time the command would take at best on an idle machine of
this many cores.

    python benchmarks/bench_bench.py [--case 8|72 ...] [--concurrency 1,2,...]
                                     [--workers N] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_S = 120.0
CONCURRENCIES = "1,2,4,8,16,32,64,128,256,512"
CASES = {
    "8": {"model": "deepseek-v3", "hardware": "b200", "gpus": "8", "isl": "8192",
          "osl": "1024"},
    "72": {"model": "deepseek-v3", "hardware": "gb200", "gpus": "72", "isl": "1024",
           "osl": "1024"},
}
RANGE_RATIO = "0.8"
POLL_S = 0.5
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _process_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user + system CPU seconds) of every process /proc shows."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:  # gone since listed
            continue
        fields = text[text.rindex(")") + 2:].split()  # after the command's name
        # proc(5): state ppid ... utime (14th field of the line) stime (15th)
        table[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) * _TICK_S)
    return table


def _descendants_cpu(root: int, seen: dict[int, float]) -> None:
    """Record in `seen` the CPU seconds of every descendant of `root` alive now."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        seen[pid] = table[pid][1]
        stack += children.get(pid, ())


def run_case(name: str, concurrency: str, workers: str | None) -> dict:
    case = CASES[name]
    command = [sys.executable, "-m", "orchestrator.cli", "bench", "--model", case["model"],
               "--hardware", case["hardware"], "--gpus", case["gpus"], "--isl", case["isl"],
               "--osl", case["osl"], "--range-ratio", RANGE_RATIO,
               "--concurrency", concurrency, "--no-progress"]
    if workers:
        command += ["--workers", workers]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench-out"
        load_before = os.getloadavg()
        wall0 = time.perf_counter()
        with open(Path(tmp) / "stdout", "w") as so, open(Path(tmp) / "stderr", "w+") as se:
            proc = subprocess.Popen([*command, "--out", str(out)], cwd=ROOT, stdout=so,
                                    stderr=se)
            # The command's CPU and that of the processes it reaped come from wait4. Its
            # pool's workers are children of the forkserver, which Python 3.11 does not
            # reap: their CPU is sampled from /proc while they run (a process that ends
            # between two samples loses at most POLL_S).
            seen: dict[int, float] = {}
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                _descendants_cpu(proc.pid, seen)
                time.sleep(POLL_S)
            wall_s = time.perf_counter() - wall0
            proc.returncode = os.waitstatus_to_exitcode(status)
            load_after = os.getloadavg()
            if proc.returncode != 0:
                se.seek(0)
                raise RuntimeError(f"bench exited {proc.returncode}: {se.read().strip()[-400:]}")
        text = (out / "bench.json").read_text()
        result = json.loads(text)
        written = sorted(p.name for p in out.iterdir())
    cpu_s = usage.ru_utime + usage.ru_stime + sum(seen.values())
    return {"case": name, **case, "range_ratio": float(RANGE_RATIO), "wall_s": wall_s,
            "points": result["points"], "frontier": result["frontier"],
            "cpu_s": cpu_s, "written": written,
            "digest": hashlib.sha256(text.encode()).hexdigest()[:16],
            "load_average": [load_before[0], load_after[0]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs="+", choices=sorted(CASES), default=["8", "72"],
                    help="which searches (default: both)")
    ap.add_argument("--concurrency", default=CONCURRENCIES)
    ap.add_argument("--workers", help="bench's --workers (default: its own, every core)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout at the end")
    args = ap.parse_args()
    from benchmarks.replay_runner import core_line, verdict

    print(core_line())
    cores = os.cpu_count() or 1
    summary = []
    for name in args.case:
        r = run_case(name, args.concurrency, args.workers)
        points = r["points"]
        layouts = len({p["layout"] for p in points})
        concs = len({p["concurrency"] for p in points})
        print(f"{r['model']} on {r['gpus']} x {r['hardware']}, ISL/OSL {r['isl']}/{r['osl']} "
              f"(ratio {RANGE_RATIO}): {layouts} layouts x {concs} concurrencies = "
              f"{len(points)} points, {len(r['frontier'])} on the frontier; --out wrote "
              f"{', '.join(r['written'])}; bench.json sha256 {r['digest']}")
        print(f"  wall {r['wall_s']:.1f} s [{verdict(r['wall_s'] <= TARGET_S)} <= "
              f"{TARGET_S:.0f} s], {len(points) / r['wall_s']:.2f} points/s; CPU {r['cpu_s']:.1f} s "
              f"(the command and its pool; / {cores} cores: {r['cpu_s'] / cores:.1f} s); "
              f"load average "
              f"{r['load_average'][0]:.1f} before, {r['load_average'][1]:.1f} after")
        summary.append({"case": name, "wall_s": r["wall_s"], "target_s": TARGET_S,
                        "met": r["wall_s"] <= TARGET_S, "layouts": layouts,
                        "concurrencies": concs, "points": len(points),
                        "points_per_s": len(points) / r["wall_s"],
                        "cpu_s": r["cpu_s"], "cores": cores, "digest": r["digest"],
                        "load_average": r["load_average"]})
    if args.json:
        print(json.dumps({"cases": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
