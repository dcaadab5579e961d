"""Live mode's wall-clock figures, which no test asserts (they measure the machine).

Under load (the default): the two-rack preset's workers on several worker processes,
1,000 concurrent agent sessions, 60 wall seconds.

Prints the fast loop's period jitter (wall interval between ticks minus the
nominal period / speed: p50, p99, max), the orchestrator's and the worker
processes' resident memory over the run (and its growth over the second
half), and control events per wall second: worker events (queue, fill, load,
join, done), steps sent to and answered by worker processes, and controller
decisions. Targets: jitter p99 under 5 ms, memory flat.

    python benchmarks/bench_live.py [--wall-s 60] [--sessions 1000] [--speed 10]
                                    [--workers-per-process 2]

Against virtual time (`--against-virtual`): the bundled sample's first sessions (2 by
default, 406 calls) replayed in virtual time and live (speed 100, 3 workers a process),
the same calls completing in both; prints each TTFT percentile and the median TPOT live
against virtual, and the machine's load average. Live time is wall time x speed, so each
wall millisecond a call waits on the machine (a timer's 1 ms tick, the orchestrator's own
work ahead of it, a step's round trip, a busy scheduler) adds `speed` ms that virtual
time does not have: the differences grow with speed and with the machine's load.

    python benchmarks/bench_live.py --against-virtual [--sessions 2] [--speed 100]
                                    [--workers-per-process 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from orchestrator.control.config import ControlConfig, TimeScales  # noqa: E402
from orchestrator.live.options import LiveOptions  # noqa: E402
from orchestrator.live.worker_proc import rss_bytes  # noqa: E402
from orchestrator.run.settings import Prepared, RunSettings, prepare, run_replay  # noqa: E402
from traces import sample_path  # noqa: E402
from traces.replay import LoadOptions  # noqa: E402
from traces.synth import generate  # noqa: E402

CALLS_PER_SESSION = 12


class Probe:
    """A run listener: wall time of every fast-loop tick, memory every few seconds, and
    a stop after `wall_s` (it interrupts the run, as SIGTERM would)."""

    def __init__(self, wall_s: float, memory_every_s: float = 2.0) -> None:
        self.wall_s, self.memory_every_s = wall_s, memory_every_s
        self.ticks: list[float] = []
        self.memory: list[tuple[float, int, int]] = []  # (wall s, orchestrator, workers)
        self.sessions_live: list[int] = []
        self.decisions = 0
        self.steps = 0
        self._t0: float | None = None

    def on_sample(self, orch, obs, now_s: float) -> None:
        t = time.perf_counter()  # wall-clock ok: what the benchmark measures
        if self._t0 is None:
            self._t0 = t
        self.ticks.append(t)
        self.steps = sum(h.steps_done for h in orch.backend.handles)
        if not self.memory or t - self._t0 - self.memory[-1][0] >= self.memory_every_s:
            workers = sum(h.rss_bytes for h in orch.backend.handles if h.alive)
            self.memory.append((t - self._t0, rss_bytes(), workers))
        if t - self._t0 >= self.wall_s and not orch.interrupted:
            orch.interrupt()

    def on_decision(self, orch, decision, now_s: float) -> None:
        self.decisions += 1


def run_load(wall_s: float = 60.0, sessions: int = 1000, speed: float = 10.0,
             workers_per_process: int = 2, fast_period_s: float = 0.1) -> dict:
    sample = prepare([sample_path()], "auto", RunSettings())
    # Look-alike agent sessions (traces.synth), cut to their first calls: a minute of
    # wall time at speed 10 reaches only the first few calls of each, and the whole
    # sessions' block lists would cost gigabytes to hold.
    synth = [dataclasses.replace(s, calls=s.calls[:CALLS_PER_SESSION])
             for s in generate(sessions, np.random.default_rng(0))]
    sample = Prepared(sample.model, sample.cluster, tuple(synth))
    # Every session starts within the first second and keeps thinking and calling:
    # 1,000 sessions live at once for the whole run.
    load = LoadOptions(sessions_per_hour=3600.0 * sessions, max_sessions=sessions)
    control = ControlConfig(scales=TimeScales(admission_s=fast_period_s))
    settings = RunSettings(load=load, control=control, clock="live", speed=speed,
                           live=LiveOptions(workers_per_process=workers_per_process))
    probe = Probe(wall_s)
    wall0 = time.perf_counter()  # wall-clock ok
    result, summary = run_replay(sample, settings, listeners=[probe])
    wall = time.perf_counter() - wall0  # wall-clock ok
    nominal_s = fast_period_s / speed
    intervals = np.diff(np.asarray(probe.ticks))[1:]
    jitter_ms = np.abs(intervals - nominal_s) * 1e3
    mem = np.asarray(probe.memory, dtype=float)
    half = mem[mem[:, 0] >= mem[-1, 0] / 2]
    events = result.events + 2 * probe.steps + probe.decisions
    return {
        "wall_s": wall, "sessions": summary["requests"]["sessions"],
        "processes": summary["live"]["worker_processes"],
        "calls_completed": summary["requests"]["completed"],
        "calls_in_flight": summary["requests"]["in_flight"],
        "lost": summary["requests"]["lost"],
        "ticks": len(probe.ticks),
        "jitter_ms": {"p50": float(np.percentile(jitter_ms, 50)),
                      "p99": float(np.percentile(jitter_ms, 99)),
                      "max": float(jitter_ms.max())},
        "orchestrator_rss_mb": [round(float(m) / 2**20, 1) for m in mem[:, 1]],
        "workers_rss_mb": [round(float(m) / 2**20, 1) for m in mem[:, 2]],
        "orchestrator_rss_growth_second_half_mb": float((half[-1, 1] - half[0, 1]) / 2**20),
        "control_events_per_s": events / probe.wall_s,
        "worker_events": result.events, "steps": probe.steps, "decisions": probe.decisions,
    }


def against_virtual(sessions: int = 2, speed: float = 100.0,
                    workers_per_process: int = 3) -> dict:
    """TTFT and TPOT of a live run against the virtual run of the same sessions."""
    load = LoadOptions(max_sessions=sessions, think_scale=0.01)
    out = {}
    for clock in ("virtual", "live"):
        live = LiveOptions(workers_per_process=workers_per_process) if clock == "live" else None
        settings = RunSettings(load=load, clock=clock, speed=speed, live=live)
        wall0 = time.perf_counter()  # wall-clock ok
        _, summary = run_replay(prepare([sample_path()], "auto", settings), settings)
        out[clock] = {"ttft_s": summary["ttft_s"], "tpot_s": summary["tpot_s"],
                      "completed": summary["requests"]["completed"],
                      "wall_s": time.perf_counter() - wall0}  # wall-clock ok
    out["load_average"] = os.getloadavg()
    return out


def print_against_virtual(args) -> None:
    out = against_virtual(args.sessions, args.speed, args.workers_per_process)
    v, lv = out["virtual"], out["live"]
    fast_s = RunSettings().control.fast_period_s
    print(f"{args.sessions} sessions of the bundled sample, live at speed {args.speed:g} "
          f"({args.workers_per_process} workers a process) against virtual; load average "
          f"{', '.join(f'{x:.2f}' for x in out['load_average'])} on {os.cpu_count()} CPUs")
    print(f"calls completed: virtual {v['completed']}, live {lv['completed']}; live run "
          f"{lv['wall_s']:.1f} wall s")
    for q in ("p50", "p90", "p99"):
        d = lv["ttft_s"][q] - v["ttft_s"][q]
        print(f"TTFT {q}: live {lv['ttft_s'][q]:.3f} s, virtual {v['ttft_s'][q]:.3f} s, "
              f"{d:+.3f} s ({d / fast_s:+.2f} fast periods, {d / args.speed * 1e3:+.2f} wall ms)")
    lt, vt = lv["tpot_s"]["p50"], v["tpot_s"]["p50"]
    print(f"TPOT p50: live {lt * 1e3:.2f} ms, virtual {vt * 1e3:.2f} ms, "
          f"{(lt / vt - 1):+.1%}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against-virtual", action="store_true",
                    help="TTFT and TPOT live against virtual on the bundled sample")
    ap.add_argument("--wall-s", type=float, default=60.0)
    ap.add_argument("--sessions", type=int)
    ap.add_argument("--speed", type=float)
    ap.add_argument("--workers-per-process", type=int)
    args = ap.parse_args()
    defaults = ((2, 100.0, 3) if args.against_virtual else (1000, 10.0, 2))
    for name, value in zip(("sessions", "speed", "workers_per_process"), defaults,
                           strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.against_virtual:
        print_against_virtual(args)
        return
    out = run_load(args.wall_s, args.sessions, args.speed, args.workers_per_process)
    print(f"{out['sessions']} sessions on {out['processes']} worker processes "
          f"(gb200-nvl72x2), {out['wall_s']:.1f} s wall at speed {args.speed:g}, "
          f"{os.cpu_count()} CPUs")
    j = out["jitter_ms"]
    print(f"fast-loop period jitter over {out['ticks']} ticks: p50 {j['p50']:.2f} ms, "
          f"p99 {j['p99']:.2f} ms, max {j['max']:.2f} ms (target p99 < 5 ms: "
          f"{'met' if j['p99'] < 5.0 else 'NOT met'})")
    print(f"orchestrator RSS (MB, every 2 s): {out['orchestrator_rss_mb']}")
    print(f"worker processes RSS total (MB): {out['workers_rss_mb']}")
    print(f"orchestrator RSS growth over the second half: "
          f"{out['orchestrator_rss_growth_second_half_mb']:+.1f} MB")
    print(f"control events: {out['control_events_per_s']:,.0f}/s ({out['worker_events']:,} "
          f"worker events, {out['steps']:,} steps sent and answered, {out['decisions']:,} "
          f"decisions); calls completed {out['calls_completed']:,}, in flight "
          f"{out['calls_in_flight']:,}, lost {out['lost']}")


if __name__ == "__main__":
    threading.current_thread().name = "bench-live"
    main()
