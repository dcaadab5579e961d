"""Where a replay's time goes: cProfile of the development traces at real think times.

Replays the first N weka-cc-dev sessions (default 30) at their real think times, 240
sessions an hour (`--rate`), default model and cluster (`--cluster`), under cProfile, and prints the wall time,
calls, fast-loop samples taken (by the loop awake, looking at the workers or restamping
an unchanged cluster, or as the lead of an idle span) and skipped over idle spans,
event-loop iterations, wall time per call and per sample taken, and the functions with
the most time of their own and the most time under them. It runs the compiled core as
Python (TOKENFACTORY_PURE=1, unless the environment sets it): cProfile sees no function
inside a compiled module, whose time it would give to the caller.

    python benchmarks/profile_replay.py [--sessions 30] [--controller buffered] [--top 25]
                                        [--out FILE.prof] [--cluster C] [--rate R]
                                        [--repeat K]

`--cluster`, `--rate` (sessions an hour) and `--repeat` profile another load, e.g. the
essay's scale on a planned 16-rack cluster (benchmarks/bench_scale.py plans it):
`--cluster big.toml --rate 10000 --repeat 50 --sessions 400`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TOKENFACTORY_PURE", "1")  # before any of the project's imports

from benchmarks.replay_runner import DEV_TRACES, shared_missing


class TickCounter:
    """Counts the fast-loop samples taken, and those skipped over idle spans where the
    replay skips them (the on_skip hook; code without it never calls it)."""

    def __init__(self) -> None:
        self.taken = 0
        self.skipped = 0

    def on_sample(self, orch, obs, now_s: float) -> None:
        self.taken += 1

    def on_skip(self, orch, first_s: float, last_s: float, ticks: int) -> None:
        self.skipped += ticks


def _ncalls(profile: cProfile.Profile, file_suffix: str, function: str) -> int:
    """How many times the profile saw `function` of a file ending in `file_suffix` called."""
    stats = pstats.Stats(profile).stats
    return sum(v[1] for (f, _, name), v in stats.items()
               if name == function and f.endswith(file_suffix))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--controller", default="buffered")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", type=Path, default=None, help="write the raw profile here")
    ap.add_argument("--cluster", default="gb200-nvl72x2", help="cluster preset or TOML file")
    ap.add_argument("--rate", type=float, default=240.0, help="sessions started an hour")
    ap.add_argument("--repeat", type=int, default=1, help="the traces this many times over")
    args = ap.parse_args()
    missing = shared_missing(DEV_TRACES)
    if missing:
        print(missing)
        return 0
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from traces.replay import LoadOptions

    settings = RunSettings(controller=args.controller, seed=1, cluster=args.cluster,
                           load=LoadOptions(sessions_per_hour=args.rate, repeat=args.repeat,
                                            max_sessions=args.sessions))
    prepared = prepare([DEV_TRACES], "weka", settings)
    ticks = TickCounter()
    profile = cProfile.Profile()
    wall0 = time.perf_counter()
    profile.enable()
    result, summary = run_replay(prepared, settings, listeners=[ticks])
    profile.disable()
    wall_s = time.perf_counter() - wall0
    calls = summary["requests"]["completed"]
    awake = _ncalls(profile, "fast_loop.py", "sample")
    looked = _ncalls(profile, "sampler.py", "look")
    turns = _ncalls(profile, "virtual_loop.py", "_run_once")
    print(f"{args.sessions} sessions, {calls:,} calls, {result.simulated_s:,.0f} simulated s, "
          f"{ticks.taken:,} fast-loop samples taken ({awake:,} by the loop awake, of which "
          f"{looked:,} looked at the workers and the rest restamped an unchanged cluster; "
          f"{ticks.taken - awake:,} as the lead of an idle span), {ticks.skipped:,} skipped as "
          f"idle; {turns:,} event-loop iterations ({turns / max(calls, 1):.1f} per call); wall "
          f"{wall_s:.1f} s under cProfile: {wall_s / max(calls, 1) * 1e3:.2f} ms per call, "
          f"{wall_s / max(ticks.taken, 1) * 1e6:.0f} us per sample taken")
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
