"""Scenario sweep throughput: points per minute with 1 and 2 local workers (and their
ratio), and on a local Ray instance.

Each point replays one bundled session (think gaps x0.01) on the b200x8 preset, about
a second of work; the grid is 3 controllers x 4 seeds. Wall time includes starting the
workers (and Ray), as a user would see it.

    python benchmarks/bench_sweep_replay.py [--seeds 4] [--no-ray]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.sweeps import SweepOptions, parse_grid, run_sweep_replay  # noqa: E402
from traces import sample_path  # noqa: E402


def points_per_min(grid, executor: str, workers: int | None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        report = run_sweep_replay(grid, [sample_path()], "auto", SweepOptions(
            out=Path(tmp) / "out", executor=executor, workers=workers, progress=False,
            plots=False))
    if report.failed:
        raise SystemExit(f"{report.failed} points failed")
    return report.points / report.wall_s * 60, report.wall_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    grid = parse_grid(
        'cluster = ["b200x8"]\ncontroller = ["retire", "buffered", "predictive"]\n'
        f"max_sessions = [1]\nthink_scale = [0.01]\nseed = {list(range(args.seeds))}\n",
        "bench", ROOT)
    print(f"{len(grid)} points (one bundled session each, b200x8), {os.cpu_count()} cores")
    one, wall1 = points_per_min(grid, "local", 1)
    print(f"local, 1 worker : {one:6.1f} points/min ({wall1:.1f} s)")
    two, wall2 = points_per_min(grid, "local", 2)
    print(f"local, 2 workers: {two:6.1f} points/min ({wall2:.1f} s); scaling 2/1 = "
          f"{two / one:.2f}x (ideal 2.00x)")
    if args.no_ray:
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        print("ray: not installed (pip install 'tokenfactory[cluster]')")
        return
    r, wallr = points_per_min(grid, "ray", None)
    print(f"ray, local instance ({os.cpu_count()} CPUs): {r:6.1f} points/min ({wallr:.1f} s, "
          f"Ray start-up included); {r / one:.2f}x one local worker")


if __name__ == "__main__":
    main()
