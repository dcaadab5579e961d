"""Where a replay's time goes: cProfile of the development traces at real think times.

Replays the first N weka-cc-dev sessions (default 30) at their real think times, 240
sessions an hour, default model and cluster, under cProfile, and prints the wall time,
calls, fast-loop ticks (one per fast-loop period of simulated time), wall time per call
and per tick, and the functions with the most time of their own and the most time
under them.

    python benchmarks/profile_replay.py [--sessions 30] [--controller buffered] [--top 25]
                                        [--out FILE.prof]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import DEV_TRACES, shared_missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--controller", default="buffered")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", type=Path, default=None, help="write the raw profile here")
    args = ap.parse_args()
    missing = shared_missing(DEV_TRACES)
    if missing:
        print(missing)
        return 0
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from traces.replay import LoadOptions

    settings = RunSettings(controller=args.controller, seed=1,
                           load=LoadOptions(sessions_per_hour=240.0,
                                            max_sessions=args.sessions))
    prepared = prepare([DEV_TRACES], "weka", settings)
    profile = cProfile.Profile()
    wall0 = time.perf_counter()
    profile.enable()
    result, summary = run_replay(prepared, settings)
    profile.disable()
    wall_s = time.perf_counter() - wall0
    calls = summary["requests"]["completed"]
    ticks = round(result.simulated_s / settings.control.fast_period_s)
    print(f"{args.sessions} sessions, {calls:,} calls, {result.simulated_s:,.0f} simulated s, "
          f"~{ticks:,} fast-loop periods; wall {wall_s:.1f} s under cProfile: "
          f"{wall_s / max(calls, 1) * 1e3:.2f} ms per call, "
          f"{wall_s / max(ticks, 1) * 1e6:.0f} us per period")
    if args.out:
        profile.dump_stats(args.out)
    for key in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(key).print_stats(args.top)
        body = text.getvalue()
        print(f"--- by {key} ---")
        print(body[body.index("   ncalls"):].rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
