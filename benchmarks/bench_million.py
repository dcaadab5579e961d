"""One million calls of synthetic agent sessions: the run completes in bounded memory.

Synthesises a base set of agent sessions once with `tokenfactory trace synth` (kept in
the system's temporary directory for later runs of the same generator), then replays it with `--repeat K`
copies, enough for the calls asked for, at the development benchmark's load (real think
times, 240 sessions an hour, the default model and cluster) in its own subprocess.
Prints calls, wall s, calls per wall s, simulated s per wall s, events per call and peak
RSS (target < 2 GB).

--out writes the outputs as `tokenfactory replay --out DIR` does (summary.json,
series.csv, decisions.jsonl, metrics.om.gz at the default `--metrics` level) into a
temporary folder removed afterwards, and prints the folder's size: the 2 GB target
holds with the outputs written (issue 36, item 4).

    python benchmarks/bench_million.py [--calls 1000000] [--base-sessions 200]
                                       [--sessions-per-hour 240] [--controller buffered]
                                       [--out] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import (
    ROOT,
    core_line,
    per_wall,
    positive_ints,
    run_isolated,
    spec,
    verdict,
)

PEAK_RSS_TARGET_MB = 2048.0
SEED = 1
MAX_REPEAT = 1000  # traces.replay.MAX_REPEAT


def generator_digest() -> str:
    """A short digest of the generator's sources: a kept base trace is used only by the
    generator that wrote it (a change to `trace synth` writes a new one)."""
    digest = hashlib.sha256()
    for name in ("synth.py", "_calibration.py", "_blocks.py"):
        digest.update((ROOT / "traces" / name).read_bytes())
    return digest.hexdigest()[:12]


def base_trace(sessions: int) -> tuple[Path, int]:
    """The synthesised base trace (written once per generator) and its number of calls."""
    path = (Path(tempfile.gettempdir()) / "tokenfactory-bench"
            / f"synth-{sessions}-seed{SEED}-{generator_digest()}.jsonl.gz")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.gz")
        subprocess.run([str(Path(sys.executable).with_name("tokenfactory")), "trace", "synth",
                        "--sessions", str(sessions), "--seed", str(SEED), "--out",
                        str(partial)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        partial.replace(path)
    with gzip.open(path, "rt") as lines:
        calls = sum(1 for line in lines if line.startswith('{"session"'))
    return path, calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", default="1000000", help="calls to replay, at least")
    ap.add_argument("--base-sessions", default="200",
                    help="sessions synthesised once and repeated")
    ap.add_argument("--sessions-per-hour", type=float, default=240.0)
    ap.add_argument("--controller", default="buffered")
    ap.add_argument("--out", action="store_true",
                    help="write the outputs as --out does (a temporary folder; its size printed)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout at the end")
    args = ap.parse_args()
    args.calls = positive_ints("--calls", args.calls)[0]
    args.base_sessions = positive_ints("--base-sessions", args.base_sessions)[0]
    path, base_calls = base_trace(args.base_sessions)
    repeat = math.ceil(args.calls / base_calls)
    if repeat > MAX_REPEAT:
        print(f"--calls: {args.calls:,} needs {repeat} copies of {base_calls:,} calls, more than "
              f"{MAX_REPEAT}; raise --base-sessions", file=sys.stderr)
        return 2
    print(core_line())
    print(f"synthetic agent sessions: {args.base_sessions} x{repeat} ({base_calls:,} calls each "
          f"copy), real think times, {args.sessions_per_hour:g} sessions/h, gb200-nvl72x2, "
          f"controller {args.controller}" + (", outputs written (--out)" if args.out else ""),
          flush=True)
    fig = run_isolated(spec([path], "native", controller=args.controller, repeat=repeat,
                            sessions_per_hour=args.sessions_per_hour, out=args.out))
    rates = per_wall(fig)
    print(f"{fig['calls']:,} calls of {fig['submitted']:,} submitted ({fig['lost']} lost), "
          f"{fig['sessions']:,} sessions, wall {fig['replay_s']:,.1f} s (+{fig['prepare_s']:.1f} s "
          f"reading), {rates['calls_per_s']:,.0f} calls/s ({rates['calls_per_cpu_s']:,.0f} per CPU "
          f"s), {rates['sim_per_wall']:,.0f} "
          f"simulated s/wall s ({fig['simulated_s'] / 86400:,.1f} simulated days), "
          f"{rates['events_per_call']:.1f} events/call, peak RSS {fig['peak_rss_mb']:,.0f} MB "
          f"[{verdict(fig['peak_rss_mb'] < PEAK_RSS_TARGET_MB)} < 2 GB]")
    if args.out:
        files = ", ".join(f"{name} {size / 1e6:,.1f}" for name, size in fig["out_files"].items()
                          if not name.startswith("."))
        print(f"outputs: folder {fig['out_bytes'] / 1e6:,.1f} MB ({files}), "
              f"{fig['out_bytes'] / 1e6 * 10_000 / max(fig['calls'], 1):.1f} MB per 10,000 calls")
    if args.json:
        print(json.dumps(fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
