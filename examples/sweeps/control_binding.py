"""Which resource binds at each point of a control grid (docs/control.md, "Admission on
the resource that binds"): the grid's points replayed as `tokenfactory sweep-replay`
replays them (the same settings, load and seed: the same runs), each with a listener
that reads every fast-loop sample the run takes (the cluster as it is, not lagged) and
keeps, over the load window:

- `decode`: decode occupancy (running over the accepting workers' slots);
- `fill`: the busiest fill pool's busy share over the last 10 s (its workers in steps,
  their prefixes' loads included; from their busy seconds, a counter), and each pool's
  mean;
- `link`: the busiest KV link's bytes over the period, over its bandwidth;

each as its mean and the share of samples at or above SATURATED, the fill backlog in
thousands of tokens, the calls loading into decode, the ready buffer's depth and the resource
saturated in most samples (`binds`: none when none is in at least a tenth of them).
One CSV row a point: those, then the summary's figures as sweep-replay's table.csv
has them. Run from a checkout, with the package's Python:

    nice -n 10 python examples/sweeps/control_binding.py examples/sweeps/control-binding-preset.toml \
        --trace traces/data/weka-cc-dev --workers 2 --out binding-preset.csv
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import subprocess
import sys
from pathlib import Path

import numpy as np

SATURATED = 0.9  # a resource at or above this share of its capacity in a sample binds there
RESOURCES = ("decode", "fill", "link")
BUSY_SPAN_S = 10.0  # the fill workers' busy share is read over this span


class BindingProbe:
    """The run's samples' figures (a listener: `on_sample` is told every sample taken)."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, ...]] = []
        self.pools: dict[str, int] = {}  # fill pools by name: their column in `busy`
        self.busy: list[list[float]] = []  # each fill pool's busy seconds a worker

    def on_sample(self, orch, obs, now_s: float) -> None:
        fills = [p for p in obs.pools if p.phase != "decode"]
        for p in fills:
            self.pools.setdefault(p.name, len(self.pools))
        busy = [0.0] * len(self.pools)
        for p in fills:
            busy[self.pools[p.name]] = p.busy_s_total / max(p.workers, 1)
        self.rows.append((now_s, obs.decode_occupancy, obs.kv_link_utilisation,
                          obs.fill_backlog_tokens / 1000, obs.decode_loading,
                          obs.ready_depth))
        self.busy.append(busy)

    def figures(self, start_s: float, end_s: float) -> dict[str, object]:
        rows = np.array(self.rows, dtype=float).reshape(-1, 6)
        width = len(self.pools)
        busy = np.array([b + [0.0] * (width - len(b)) for b in self.busy]).reshape(-1, width)
        # Each fill pool's busy share over the last BUSY_SPAN_S (a step's time counts when
        # it starts: per period, a long step would read 1 then 0s); the busiest pool's.
        t = rows[:, 0]
        before = np.searchsorted(t, t - BUSY_SPAN_S)
        span = t - t[before]
        share = (busy - busy[before]) / np.maximum(span, 1e-9)[:, None]
        share = np.where(span[:, None] > 0, np.clip(share, 0.0, 1.0), 0.0)
        top = share.max(axis=1) if width else np.zeros(len(t))
        rows = np.column_stack([t, rows[:, 1], top, rows[:, 2:]])
        kept = (t >= start_s) & (t <= end_s)
        rows, share = rows[kept], share[kept]
        names = sorted(self.pools, key=self.pools.get)
        out: dict[str, object] = {"binding.samples": len(rows)}
        if not len(rows):
            return out | {"binding.binds": "none"}
        shares = {}
        for i, name in enumerate(RESOURCES, start=1):
            out[f"binding.{name}.mean"] = float(rows[:, i].mean())
            shares[name] = float((rows[:, i] >= SATURATED).mean())
            out[f"binding.{name}.saturated"] = shares[name]
        for name, column in zip(names, share.T, strict=True):
            out[f"binding.fill.{name}.mean"] = float(column.mean())
        out["binding.fill_backlog_ktokens.mean"] = float(rows[:, 4].mean())
        out["binding.decode_loading.mean"] = float(rows[:, 5].mean())
        out["binding.ready_depth.mean"] = float(rows[:, 6].mean())
        top = max(RESOURCES, key=lambda r: shares[r])
        out["binding.binds"] = top if shares[top] >= 0.1 else "none"
        return out


def run_task(args: tuple) -> dict[str, object]:
    sessions, task = args
    from orchestrator.run.settings import Prepared, run_replay
    from orchestrator.sweeps.store import flatten

    probe = BindingProbe()
    _, summary = run_replay(Prepared(task.model, task.cluster, sessions), task.settings,
                            listeners=[probe])
    window = summary["goodput"]["window"]
    return {"point_id": task.point_id, **dict(task.values),
            **probe.figures(window["start_s"], window["end_s"]), **flatten(summary)}


def main(argv: list[str] | None = None) -> int:
    from orchestrator.sweeps.grid import load_grid
    from orchestrator.sweeps.point import build_tasks
    from orchestrator.sweeps.runner import read_sessions_or_fail

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("grid")
    ap.add_argument("--trace", action="append", default=[])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", required=True, help="CSV file to write")
    a = ap.parse_args(argv)
    grid = load_grid(a.grid)
    sessions = read_sessions_or_fail(a.trace or ["traces/sample"], "auto")
    tasks = build_tasks(grid, sessions)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    rows = []
    with multiprocessing.get_context("fork").Pool(a.workers) as pool:
        for row in pool.imap(run_task, [(sessions, t) for t in tasks]):
            rows.append({"commit": commit, **row})
            print(f"{row['point_id']}: binds {row['binding.binds']}", file=sys.stderr,
                  flush=True)
            _write(Path(a.out), rows)
    return 0


def _write(path: Path, rows: list[dict]) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
