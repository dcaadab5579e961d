"""The development traces at their real think times: replay cost against issues 13 and 36.

The 113 weka-cc-dev sessions, think and tool gaps as recorded (no --think-scale), 240
sessions an hour, the default model and cluster, once per controller, each run in its
own subprocess (benchmarks/replay_runner.py) so its peak RSS is its own, without and
then with the outputs `--out` writes. Prints per controller and way: calls, wall s,
calls per wall s (target >= 2,000; stretch 10,000), simulated s per wall s, events per
call, peak RSS (target < 500 MB), and met / NOT met; with `--out`, the folder's size per
10,000 calls (target < 50 MB) and the replay CPU it adds (target <= 15%).

    python benchmarks/bench_replay.py [--controllers retire,buffered] [--max-sessions N]
                                      [--repeat N] [--no-out] [--alternate N] [--demo]
                                      [--json]

--repeat N replays each session N times (traces.replay's --repeat: ~6,800 calls of the
113 sessions x2 give ~13,600 calls over about a simulated day and a half).

--alternate N runs each controller without and with `--out` N times, alternated (a
machine shared with other work moves the CPU time of runs far apart; a pair run back to
back shares its load), and prints each pair's ratio and their median, and the load average
before and after.

--demo also replays the demo's compressed load (the bundled sample x12, think x0.05,
7,200 sessions an hour, on gb200-nvl72x1) with each controller. Reads the development traces bundled in traces/data.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import (
    DEV_TRACES,
    ROOT,
    core_line,
    per_wall,
    positive_ints,
    run_isolated,
    shared_missing,
    spec,
    verdict,
)

CALLS_PER_S_TARGET = 2_000.0
CALLS_PER_S_STRETCH = 10_000.0
PEAK_RSS_TARGET_MB = 500.0
OUT_MB_PER_10K_TARGET = 50.0
OUT_CPU_EXTRA_TARGET = 0.15
SESSIONS_PER_HOUR = 240.0


def dev_run(controller: str, max_sessions: int | None, repeat: int = 1,
            out: bool = False) -> dict:
    load = {"sessions_per_hour": SESSIONS_PER_HOUR}
    if max_sessions:
        load["max_sessions"] = max_sessions
    if repeat > 1:
        load["repeat"] = repeat
    return spec([DEV_TRACES], "weka", controller=controller, out=out, **load)


def demo_run(controller: str) -> dict:
    from orchestrator.run.demo import DEMO_CLUSTER, DEMO_LOAD, DEMO_MODEL, DEMO_SEED

    return spec([ROOT / "traces" / "sample"], "weka", model=DEMO_MODEL, cluster=DEMO_CLUSTER,
                controller=controller, seed=DEMO_SEED,
                sessions_per_hour=DEMO_LOAD.sessions_per_hour,
                think_scale=DEMO_LOAD.think_scale, repeat=DEMO_LOAD.repeat,
                duration_s=DEMO_LOAD.duration_s)


def line(label: str, fig: dict) -> str:
    rates = per_wall(fig)
    return (f"{label:>18}: {fig['calls']:>7,} calls ({fig['lost']} lost), wall "
            f"{fig['replay_s']:7.1f} s (+{fig['prepare_s']:.1f} s reading), "
            f"{rates['calls_per_s']:7,.0f} calls/s ({rates['calls_per_cpu_s']:,.0f} per CPU s) "
            f"[{verdict(rates['calls_per_s'] >= CALLS_PER_S_TARGET)} >= 2,000; stretch 10,000 "
            f"{verdict(rates['calls_per_s'] >= CALLS_PER_S_STRETCH)}], "
            f"{rates['sim_per_wall']:8,.0f} simulated s/wall s, "
            f"{rates['events_per_call']:6.1f} events/call, peak RSS {fig['peak_rss_mb']:5.0f} MB "
            f"[{verdict(fig['peak_rss_mb'] < PEAK_RSS_TARGET_MB)} < 500 MB]")


def out_line(label: str, bare: dict, out: dict) -> str:
    """What --out adds: the folder per 10,000 calls, and replay CPU and wall over the run
    without it (CPU moves less than wall on a shared machine)."""
    per_10k_mb = out["out_bytes"] / 1e6 * 10_000 / max(out["calls"], 1)
    cpu_extra = out["replay_cpu_s"] / max(bare["replay_cpu_s"], 1e-9) - 1
    wall_extra = out["replay_s"] / max(bare["replay_s"], 1e-9) - 1
    files = ", ".join(f"{name} {size / 1e6:.1f}" for name, size in out["out_files"].items()
                      if not name.startswith("."))
    return (f"{label:>18}: folder {out['out_bytes'] / 1e6:.1f} MB ({files}), "
            f"{per_10k_mb:.1f} MB per 10,000 calls "
            f"[{verdict(per_10k_mb < OUT_MB_PER_10K_TARGET)} < 50 MB]; replay CPU "
            f"{bare['replay_cpu_s']:.1f} -> {out['replay_cpu_s']:.1f} s ({cpu_extra:+.0%}) "
            f"[{verdict(cpu_extra <= OUT_CPU_EXTRA_TARGET)} <= +15%], wall {wall_extra:+.0%}")


def load_line() -> str:
    """The machine's load average: the figures above move with it."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f}, {five:.1f}, {fifteen:.1f} (1, 5, 15 min; {os.cpu_count()} CPUs)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--controllers", default="retire,buffered")
    ap.add_argument("--max-sessions", default=None,
                    help="replay only the first N sessions (a quick look, not the target)")
    ap.add_argument("--repeat", default="1", help="replay each session N times (more calls)")
    ap.add_argument("--no-out", action="store_true", help="only without --out")
    ap.add_argument("--alternate", default="1",
                    help="without and with --out, alternated, N times per controller")
    ap.add_argument("--demo", action="store_true", help="also the demo's compressed load")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout at the end")
    args = ap.parse_args()
    if args.max_sessions is not None:
        args.max_sessions = positive_ints("--max-sessions", args.max_sessions)[0]
    args.repeat = positive_ints("--repeat", args.repeat)[0]
    args.alternate = positive_ints("--alternate", args.alternate)[0]
    missing = shared_missing(DEV_TRACES)
    if missing:
        print(missing)
        return 0
    print(core_line())
    out: dict[str, dict] = {}
    print(f"weka-cc-dev at real think times, {SESSIONS_PER_HOUR:g} sessions/h, cluster "
          f"gb200-nvl72x2, model kimi-k3-like"
          + (f", first {args.max_sessions} sessions" if args.max_sessions else "")
          + (f", each x{args.repeat}" if args.repeat > 1 else ""))
    print(load_line())
    for name in args.controllers.split(","):
        extras = []
        for k in range(args.alternate):
            tag = f" #{k + 1}" if args.alternate > 1 else ""
            fig = run_isolated(dev_run(name, args.max_sessions, args.repeat))
            out[f"dev/{name}{tag}"] = fig
            print(line(f"dev {name}{tag}", fig), flush=True)
            if not args.no_out:
                written = run_isolated(dev_run(name, args.max_sessions, args.repeat, out=True))
                out[f"dev/{name}/out{tag}"] = written
                print(line(f"dev {name} --out{tag}", written), flush=True)
                print(out_line(f"dev {name} --out{tag}", fig, written), flush=True)
                extras.append(written["replay_cpu_s"] / max(fig["replay_cpu_s"], 1e-9) - 1)
        if len(extras) > 1:
            median = statistics.median(extras)
            print(f"{'dev ' + name + ' --out':>18}: replay CPU --out adds "
                  f"{', '.join(f'{e:+.0%}' for e in extras)} over {len(extras)} alternations, "
                  f"median {median:+.0%} [{verdict(median <= OUT_CPU_EXTRA_TARGET)} <= +15%]",
                  flush=True)
    print(load_line())
    if args.demo:
        print("the demo's load: bundled sample x12, think x0.05, 7,200 sessions/h, "
              "gb200-nvl72x1")
        for name in args.controllers.split(","):
            fig = run_isolated(demo_run(name))
            out[f"demo/{name}"] = fig
            print(line(f"demo {name}", fig), flush=True)
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
