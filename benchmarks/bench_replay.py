"""Replay all 113 development sessions at the demo's load on the two-rack preset.

Prints, per controller, wall time, simulated seconds per wall second and calls
per wall second. Target: under 30 s of wall time per replay on this machine.

    python benchmarks/bench_replay.py [--cluster NAME] [--controllers retire,buffered]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.run.demo import DEMO_LOAD  # noqa: E402
from orchestrator.run.settings import RunSettings, prepare, run_replay  # noqa: E402
from traces.replay import LoadOptions  # noqa: E402

DEV = ROOT.parent / "shared" / "traces" / "weka-cc-dev"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", default="gb200-nvl72x2")
    ap.add_argument("--controllers", default="retire,buffered")
    args = ap.parse_args()
    # The demo's load (start rate, think scale) on the development traces, all of them.
    load = LoadOptions(sessions_per_hour=DEMO_LOAD.sessions_per_hour,
                       think_scale=DEMO_LOAD.think_scale)
    prepared = prepare([DEV], "weka", RunSettings(cluster=args.cluster, load=load))
    print(f"{len(prepared.sessions)} sessions, {sum(len(s.calls) for s in prepared.sessions):,} "
          f"calls, cluster {args.cluster}, {load.sessions_per_hour:g} sessions/h, think "
          f"x{load.think_scale:g}")
    for name in args.controllers.split(","):
        settings = RunSettings(cluster=args.cluster, load=load, controller=name, seed=1)
        wall0 = time.perf_counter()
        result, summary = run_replay(prepared, settings)
        wall_s = time.perf_counter() - wall0
        calls = summary["requests"]["completed"]
        print(f"{name:>10}: wall {wall_s:6.2f} s (target < 30 s), simulated "
              f"{result.simulated_s:,.0f} s, {result.simulated_s / wall_s:,.0f} simulated s "
              f"per wall s, {calls / wall_s:,.0f} calls per wall s, lost "
              f"{summary['requests']['lost']}")


if __name__ == "__main__":
    main()
