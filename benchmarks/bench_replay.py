"""Replay agent sessions on a cluster in virtual time; print wall time and rates.

    python benchmarks/bench_replay.py                 # bundled sample x 4, demo load
    python benchmarks/bench_replay.py --dev           # all 113 development sessions

Target: all 113 development sessions at the demo's load on a two-rack cluster
in under 30 s of wall time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costmodel.model import load_model  # noqa: E402
from orchestrator.config import ControlConfig  # noqa: E402
from orchestrator.policies import make_policy  # noqa: E402
from orchestrator.replay import Orchestrator  # noqa: E402
from traces import read_sessions, sample_path  # noqa: E402
from traces.replay import LoadOptions  # noqa: E402
from workers.clock import VirtualClock  # noqa: E402
from workers.cluster import load_cluster  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", action="store_true", help="all weka-cc-dev sessions")
    ap.add_argument("--controller", default="buffered")
    ap.add_argument("--cluster", default="gb200-nvl72x2")
    ap.add_argument("--think-scale", type=float, default=0.05)
    ap.add_argument("--sessions-per-hour", type=float, default=200)
    ap.add_argument("--repeat", type=int, default=4)
    args = ap.parse_args()
    path = ROOT.parent / "shared" / "traces" / "weka-cc-dev" if args.dev else sample_path()
    sessions = list(read_sessions([path]))
    cluster = load_cluster(args.cluster).bind(load_model("kimi-k3-like"))
    cfg = ControlConfig()
    load = LoadOptions(sessions_per_hour=args.sessions_per_hour, think_scale=args.think_scale,
                       repeat=1 if args.dev else args.repeat)
    orch = Orchestrator(cluster, sessions, make_policy(args.controller, cfg, 2), cfg, load,
                        seed=1)
    wall0 = time.perf_counter()
    result = VirtualClock().run(orch.run())
    wall_s = time.perf_counter() - wall0
    calls = result.counters["completed"]
    print(f"sessions {result.sessions}, calls completed {calls:,}, lost "
          f"{result.counters['submitted'] - calls - result.counters['rejected']}")
    print(f"wall time              {wall_s:.2f} s   (target for --dev: < 30 s)")
    print(f"simulated time         {result.simulated_s:,.0f} s")
    print(f"simulated s per wall s {result.simulated_s / wall_s:,.0f}")
    print(f"calls per wall s       {calls / wall_s:,.0f}")


if __name__ == "__main__":
    main()
