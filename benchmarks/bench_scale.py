"""The essay's scale (issue 36, item 3): replay cost against cluster size, and the full run.

Plans a GB200 cluster of 1, 2, 4, 8 and 16 NVL72 racks (72 to 1,152 GPUs) with
`tokenfactory plan --model kimi-k3-like --hardware gb200 --gpus N --trace <dev traces>`,
prints each plan's racks (each with its rack cache), nodes, workers and links (the
scale-out network between racks: every worker's and node's NICs), then replays the same
load on each: the development agent sessions at their real think times, repeated x50
and started at 10,000 sessions an hour, the first `--sessions` of them (default 200).
The load is the same, so a call's cost should not depend on the cluster: the table gives
calls, wall s, calls per wall s, calls per CPU s, events per call and peak RSS per
cluster (each replay in its own process, benchmarks/replay_runner.py), and the growth
exponent of CPU time per call against the number of workers (0 = flat in cluster size;
CPU rather than wall, which a shared machine's other work moves more).

`--full` then runs the essay's load on the 16-rack plan, in this process with a progress
line on stderr every 600 simulated seconds: `tokenfactory replay <dev traces>
--cluster big.toml --repeat 89 --sessions-per-hour 10000 --duration 3600` (10,000
sessions started over the hour: the issue's command repeats its 200 sessions x50; the
113 development sessions need x89, 10,057, ~600,000 calls; x50 would start only 5,650),
against the targets: under 15 minutes of wall time, nothing lost, peak RSS under 4 GB.

    python benchmarks/bench_scale.py [--racks 1,2,4,8,16] [--sessions 200] [--full]
                                     [--only-full] [--every S] [--until S] [--json]

`--until S` stops the full run at S simulated seconds (`--every` sets its progress
lines' period): the CPU per simulated span, to compare two trees in one sitting.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_scaling import slope
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

GPUS_PER_RACK = 72  # one NVL72 rack: one scale-up domain (costmodel/plan_toml.py)
SESSIONS_PER_HOUR = 10_000.0  # the essay's 10,000 sessions (docs/network.md)
REPEAT = 50  # 113 development sessions x50: 5,650 distinct sessions to start from
FULL_SESSIONS = 10_000  # the essay's: the full run repeats the traces until it has them
DURATION_S = 3_600.0  # sessions start over an hour
FULL_WALL_TARGET_S = 15 * 60.0
FULL_RSS_TARGET_MB = 4 * 1024.0


def plan(racks: int, folder: Path) -> tuple[Path, float]:
    """The planned cluster of `racks` NVL72 racks, written to `folder`; and the planner's
    wall time (its own process, as a user runs it)."""
    out = folder / f"gb200-{racks}-racks.toml"
    cmd = [sys.executable, "-m", "orchestrator.cli", "plan", "--model", "kimi-k3-like",
           "--hardware", "gb200", "--gpus", str(GPUS_PER_RACK * racks), "--trace",
           str(DEV_TRACES), "--out", str(out)]
    wall0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return out, time.perf_counter() - wall0


def shape(path: Path) -> dict:
    """What a planned cluster holds: racks (and rack caches), nodes, workers by pool,
    links."""
    from costmodel.model import load_model
    from workers.cluster_toml import load_cluster
    from workers.network import fabric_links

    bound = load_cluster(str(path)).bind(load_model("kimi-k3-like"))
    pools: dict[str, int] = {}
    for w in bound.workers:
        pools[w.pool] = pools.get(w.pool, 0) + 1
    spec_ = bound.spec
    return {"racks": len(spec_.racks), "rack_caches": sum(bool(r.cache_bytes) for r in spec_.racks),
            "nodes": len(spec_.nodes), "gpus": sum(n.gpus for n in spec_.nodes),
            "workers": len(bound.workers), "pools": pools, "links": len(fabric_links(bound)),
            "nic_links": sum(1 for link in fabric_links(bound) if "nic-" in link.name)}


def load(cluster: Path, sessions: int | None) -> dict:
    extra = {"max_sessions": sessions} if sessions else {}
    return spec([DEV_TRACES], "weka", cluster=cluster, sessions_per_hour=SESSIONS_PER_HOUR,
                repeat=REPEAT, duration_s=DURATION_S, **extra)


class Stopped(Exception):
    """The full run reached `--until`."""


class Progress:
    """A line on stderr every `every_s` simulated seconds: wall and CPU s, calls done and
    in flight, resident set (a run of many minutes says where it is); the run stops at
    the first look at or after `until_s` (`Stopped`)."""

    def __init__(self, every_s: float, until_s: float = math.inf) -> None:
        self.every_s, self.next_s, self.done = every_s, 0.0, 0
        self.until_s = until_s
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def on_done(self, orch, req, now_s: float) -> None:
        self.done += 1

    def on_sample(self, orch, obs, now_s: float) -> None:
        if now_s < self.next_s and now_s < self.until_s:
            return
        self.next_s = now_s + self.every_s
        wall_s = time.perf_counter() - self.wall0
        with open("/proc/self/statm") as statm:  # resident pages now (Linux)
            rss_mb = int(statm.read().split()[1]) * resource.getpagesize() / 2**20
        print(f"  simulated {now_s:>8,.0f} s  wall {wall_s:>6,.0f} s  cpu "
              f"{time.process_time() - self.cpu0:>6,.0f} s  done {self.done:>8,}  in flight "
              f"{orch.in_flight():>6,}  {self.done / max(wall_s, 1e-9):>5,.0f} calls/s  "
              f"RSS {rss_mb:>6,.0f} MB", file=sys.stderr, flush=True)
        if now_s >= self.until_s:
            raise Stopped


def full_run(cluster: Path, every_s: float = 600.0, until_s: float = math.inf) -> dict | None:
    """The essay's whole load in this process, as `tokenfactory replay` runs it, with a
    progress line every `every_s` simulated seconds; its figures as replay_runner gives
    them. Stopped at `until_s` simulated seconds (a span's CPU, from its progress
    lines), it returns None."""
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from traces.replay import LoadOptions

    sessions = len(list(Path(DEV_TRACES).glob("trace_*.json.gz")))  # one session a file
    settings = RunSettings(cluster=str(cluster), seed=0, load=LoadOptions(  # the CLI's seed
        sessions_per_hour=SESSIONS_PER_HOUR, repeat=math.ceil(FULL_SESSIONS / sessions),
        duration_s=DURATION_S))
    prepared = prepare([DEV_TRACES], "weka", settings)
    progress = Progress(every_s, until_s)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        result, summary = run_replay(prepared, settings, listeners=[progress])
    except Stopped:
        return None
    requests = summary["requests"]
    return {"calls": requests["completed"], "submitted": requests["submitted"],
            "lost": requests["lost"], "sessions": requests["sessions"],
            "simulated_s": result.simulated_s, "events": result.events,
            "replay_s": time.perf_counter() - wall0, "replay_cpu_s": time.process_time() - cpu0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--racks", default="1,2,4,8,16", help="cluster sizes, in NVL72 racks")
    ap.add_argument("--sessions", type=int, default=200,
                    help="sessions replayed on every cluster (the same load on each)")
    ap.add_argument("--full", action="store_true",
                    help="then the essay's whole load (10,000 sessions) on 16 racks")
    ap.add_argument("--only-full", action="store_true", help="the essay's whole load only")
    ap.add_argument("--every", type=float, default=600.0,
                    help="the full run's progress line every this many simulated seconds")
    ap.add_argument("--until", type=float, default=math.inf,
                    help="stop the full run at this simulated second (its progress lines "
                         "give each span's CPU)")
    ap.add_argument("--json", action="store_true", help="the rows as JSON at the end")
    args = ap.parse_args()
    racks = positive_ints("--racks", args.racks)
    missing = shared_missing(DEV_TRACES)
    if missing:
        print(missing)
        return 0
    print(core_line())
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        plans = {}
        sizes = set() if args.only_full else set(racks)
        for n in sorted(sizes | ({16} if args.full or args.only_full else set())):
            path, plan_s = plan(n, Path(folder))
            plans[n] = path
            s = shape(path)
            print(f"plan {n:>2} rack(s): {s['gpus']:,} GPUs in {s['racks']} racks "
                  f"({s['rack_caches']} with a rack cache), {s['nodes']} nodes, "
                  f"{s['workers']} workers ({', '.join(f'{k} {v}' for k, v in s['pools'].items())}), "
                  f"{s['links']} links ({s['nic_links']} NIC links); planned in {plan_s:.1f} s",
                  flush=True)
            rows.append({"kind": "plan", "racks_asked": n, "plan_s": plan_s, **s})
        if not args.only_full:
            print(f"same load on each: {args.sessions} dev sessions x{REPEAT}, "
                  f"{SESSIONS_PER_HOUR:,.0f}/h, real think times")
            print(f"{'racks':>5} {'workers':>7} {'calls':>8} {'wall s':>7} {'calls/s':>8} "
                  f"{'calls/CPU s':>11} {'events/call':>11} {'peak RSS MB':>11}")
            series = []
            for n in racks:
                fig = run_isolated(load(plans[n], args.sessions))
                rate = per_wall(fig)
                workers = next(r["workers"] for r in rows if r.get("racks_asked") == n)
                series.append((workers, fig))
                rows.append({"kind": "replay", "racks": n, "workers": workers, **fig})
                print(f"{n:>5} {workers:>7} {fig['calls']:>8,} {fig['replay_s']:>7.1f} "
                      f"{rate['calls_per_s']:>8,.0f} {rate['calls_per_cpu_s']:>11,.0f} "
                      f"{rate['events_per_call']:>11.1f} {fig['peak_rss_mb']:>11,.0f}", flush=True)
            xs = [w for w, _ in series]
            per_call = [f["replay_cpu_s"] / max(f["calls"], 1) for _, f in series]
            print(f"CPU s per call ~ workers^{slope(xs, per_call):.2f} "
                  f"(0: flat in cluster size), largest / smallest cluster: "
                  f"{per_call[-1] / per_call[0]:.2f}x")
        if args.full or args.only_full:
            fig = full_run(plans[16], args.every, args.until)
            if fig is None:
                print(f"essay load on 16 racks: stopped at {args.until:,.0f} simulated s "
                      f"(--until): the progress lines above")
                return 0
            rows.append({"kind": "full", **fig})
            calls, wall_s = fig["calls"], fig["replay_s"]
            print(f"essay load on 16 racks: {calls:,} calls of {fig['submitted']:,} "
                  f"submitted, {fig['sessions']:,} sessions, {fig['simulated_s']:,.0f} "
                  f"simulated s; wall {wall_s:,.0f} s (target < {FULL_WALL_TARGET_S:,.0f}: "
                  f"{verdict(wall_s < FULL_WALL_TARGET_S)}), CPU {fig['replay_cpu_s']:,.0f} s, "
                  f"{calls / wall_s:,.0f} calls/s "
                  f"({calls / fig['replay_cpu_s']:,.0f} per CPU s), "
                  f"{fig['events'] / max(calls, 1):.1f} events/call, lost {fig['lost']} "
                  f"({verdict(fig['lost'] == 0)}), peak RSS {fig['peak_rss_mb']:,.0f} MB "
                  f"(target < {FULL_RSS_TARGET_MB:,.0f}: "
                  f"{verdict(fig['peak_rss_mb'] < FULL_RSS_TARGET_MB)})")
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
