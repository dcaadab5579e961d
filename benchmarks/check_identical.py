"""Replay results bit for bit: record a reference, then check a later tree against it.

A change meant only to make the replay cheaper must leave every result as it was. This
records, per run, the summary (every figure but the wall time), the series (every column,
every record), the fast loop's and the slow loop's decisions, the reconfigurations, the
rejected arrivals, the event count, the store's counters and each completed call's
times, tokens, latency parts and workers, and compares a later run against them value
for value (floats by their exact repr). The runs: the demo's load and the development
traces (first 30 and all 113 sessions, real think times, 240 sessions an hour) under
`retire` and `buffered`, and the Azure conversation requests open loop (4,000 and 10,000)
under both; and the essay's scale: 100 development sessions x50 at 10,000 sessions an
hour on the planned 16 NVL72 racks (`buffered`; the plan is written into DIR the first
time); each in its own subprocess, one at a time.

    python benchmarks/check_identical.py record [--dir DIR] [--only NAME,...]
    python benchmarks/check_identical.py compare [--dir DIR] [--only NAME,...]

`compare` prints one line per run (identical, or the first fields that differ) and exits
1 if any run differs. Reference files go to DIR (default: the system's temporary
directory, `tokenfactory-identical/`).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import (
    AZURE_CONV,
    DEV_TRACES,
    H100_LLAMA_CLUSTER,
    ROOT,
    spec,
)

CALL_FIELDS = ("call_id", "session_id", "input_tokens", "output_tokens", "interactive",
               "arrival_s", "prefix_tokens", "own_cached_tokens", "computed_tokens",
               "fill_start_s", "fill_end_s", "decode_start_s", "first_token_s", "done_s",
               "generated", "fill_worker", "decode_worker", "preemptions", "recomputed_tokens")


def runs(folder: Path) -> dict[str, dict]:
    from orchestrator.run.demo import DEMO_CLUSTER, DEMO_LOAD, DEMO_MODEL, DEMO_SEED

    out = {}
    for controller in ("retire", "buffered"):
        out[f"demo-{controller}"] = spec(
            [ROOT / "traces" / "sample"], "weka", model=DEMO_MODEL, cluster=DEMO_CLUSTER,
            controller=controller, seed=DEMO_SEED, sessions_per_hour=DEMO_LOAD.sessions_per_hour,
            think_scale=DEMO_LOAD.think_scale, repeat=DEMO_LOAD.repeat,
            duration_s=DEMO_LOAD.duration_s)
        for sessions in (30, 113):
            out[f"dev{sessions}-{controller}"] = spec(
                [DEV_TRACES], "weka", controller=controller, sessions_per_hour=240.0,
                max_sessions=sessions)
        for requests in (4000, 10000):
            out[f"azure{requests}-{controller}"] = spec(
                [AZURE_CONV], "azure", model="llama-3.1-70b", cluster=H100_LLAMA_CLUSTER,
                controller=controller, max_sessions=requests)
    # The essay's scale (docs/performance.md): hundreds of links, thousands of paths.
    out["scale16-buffered"] = spec([DEV_TRACES], "weka", cluster=folder / SCALE16_PLAN,
                                   sessions_per_hour=10_000.0, repeat=50, duration_s=3_600.0,
                                   max_sessions=100)
    return out


SCALE16_PLAN = "gb200-16-racks.toml"


def _plan_scale16(folder: Path) -> None:
    """The 16-rack plan of bench_scale.py, written into `folder` unless there."""
    out = folder / SCALE16_PLAN
    if not out.exists():
        subprocess.run([sys.executable, "-m", "orchestrator.cli", "plan", "--model",
                        "kimi-k3-like", "--hardware", "gb200", "--gpus", "1152", "--trace",
                        str(DEV_TRACES), "--out", str(out)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def _plain(value):
    """Arrays, dataclasses, enums and tuples as plain lists and dicts, floats as repr."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        items = value.tolist() if hasattr(value, "tolist") else value
        return [_plain(v) for v in items]
    if hasattr(value, "value") and hasattr(value, "name"):  # an enum
        return f"{type(value).__name__}.{value.name}"
    return value


def _record(run: dict) -> dict:
    """One replay's results, as plain data (in the child process)."""
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from traces.replay import LoadOptions

    settings = RunSettings(model=run["model"], cluster=run["cluster"],
                           controller=run["controller"], seed=run["seed"],
                           load=LoadOptions(**run["load"]))
    prepared = prepare(run["paths"], run["trace_format"], settings)
    cpu0 = time.process_time()
    result, summary = run_replay(prepared, settings)
    cpu_s = time.process_time() - cpu0
    summary["sim"].pop("wall_s")
    calls = [[_plain(getattr(r, name)) for name in CALL_FIELDS] + [_plain(list(r.parts_s))]
             for r in result.requests]
    out = {
        "summary": _plain(summary),
        "series": _plain(result.series),
        "decisions": _plain(result.decisions),
        "realloc": _plain(list(zip(result.realloc_times_s, result.realloc_decisions, strict=True))),
        "reconfigurations": _plain(result.reconfigurations),
        "rejected_arrivals_s": _plain(result.rejected_arrivals_s),
        "events": result.events,
        "store": _plain(result.store_counters),
        "calls": calls,
    }
    return {"results": out, "cpu_s": cpu_s}


def _digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _first_diffs(ref, new, path="", out=None, limit=5) -> list[str]:
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(ref, dict) and isinstance(new, dict):
        for key in sorted(set(ref) | set(new)):
            if key not in ref or key not in new:
                out.append(f"{path}.{key}: only in {'new' if key in new else 'reference'}")
            else:
                _first_diffs(ref[key], new[key], f"{path}.{key}", out, limit)
    elif isinstance(ref, list) and isinstance(new, list):
        if len(ref) != len(new):
            out.append(f"{path}: {len(ref)} items, now {len(new)}")
        for i, (a, b) in enumerate(zip(ref, new, strict=False)):
            _first_diffs(a, b, f"{path}[{i}]", out, limit)
            if len(out) >= limit:
                break
    elif ref != new:
        out.append(f"{path}: {ref!r} -> {new!r}")
    return out


def _run_child(run: dict, env: dict[str, str] | None = None) -> dict:
    """One run's results and replay CPU, from a child process (with `env`, its
    environment: TOKENFACTORY_PURE=1 runs the compiled core as Python)."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "child",
                           json.dumps(run)], capture_output=True, cwd=ROOT, env=env)
    if proc.returncode != 0:
        tail = proc.stderr.decode().strip().splitlines()[-1:] or ["(no stderr)"]
        raise RuntimeError(f"replay exited {proc.returncode}: {tail[0]}")
    return pickle.loads(proc.stdout)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        sys.stdout.buffer.write(pickle.dumps(_record(json.loads(sys.argv[2]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("record", "compare"))
    ap.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "tokenfactory-identical"))
    ap.add_argument("--only", default=None, help="run names, comma-separated")
    args = ap.parse_args()
    folder = Path(args.dir)
    all_runs = runs(folder)
    names = list(all_runs) if args.only is None else args.only.split(",")
    unknown = [n for n in names if n not in all_runs]
    if unknown:
        print(f"--only: unknown run {unknown[0]!r} (known: {', '.join(all_runs)})",
              file=sys.stderr)
        return 2
    folder.mkdir(parents=True, exist_ok=True)
    if "scale16-buffered" in names:
        _plan_scale16(folder)
    differ = 0
    for name in names:
        got = _run_child(all_runs[name])
        new, cpu_s = got["results"], got["cpu_s"]
        path = folder / f"{name}.pkl"
        calls = len(new["calls"])
        if args.mode == "record":
            path.write_bytes(pickle.dumps(new))
            print(f"{name:>16}: recorded {calls:,} calls, {new['events']:,} events, digest "
                  f"{_digest(new)}, replay CPU {cpu_s:.2f} s", flush=True)
            continue
        if not path.exists():
            print(f"{name:>16}: no reference in {folder} (run record first)", flush=True)
            differ += 1
            continue
        ref = pickle.loads(path.read_bytes())
        diffs = _first_diffs(ref, new)
        if diffs:
            differ += 1
            print(f"{name:>16}: DIFFERS: " + "; ".join(diffs), flush=True)
        else:
            print(f"{name:>16}: identical ({calls:,} calls, digest {_digest(new)}), replay CPU "
                  f"{cpu_s:.2f} s", flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
