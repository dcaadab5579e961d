"""Shared by the replay benchmarks: one replay in its own subprocess, its figures as JSON.

Each replay runs in a fresh Python process so that its peak resident set size is the
run's own (the child reads `resource.getrusage(RUSAGE_SELF).ru_maxrss` when it is done,
imports and trace reading included) and runs do not warm caches for each other.

    python benchmarks/replay_runner.py '{"paths": [...], "trace_format": "weka", ...}'

prints one JSON line: calls, submitted, lost, sessions, simulated_s, events, prepare_s
(reading and checking the trace), replay_s (the replay itself), replay_cpu_s (the
process's CPU time in the replay: what a shared machine's other work changes least),
peak_rss_mb, ttft_p50_s, ttft_p99_s. The parent adds process_s (the whole process,
interpreter start included).

A run with `"out": true` writes its outputs as `tokenfactory replay --out DIR` does
(summary.json, series.csv, decisions.jsonl, metrics.om.gz at the default `--metrics`
level), into a temporary directory removed afterwards; replay_s and replay_cpu_s then
include the writing, and out_bytes gives the folder's size (out_files each file's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The public data sets bundled in the repository (traces/data/README.md);
# TOKENFACTORY_TRACE_DATA names another folder holding the same layout.
TRACE_DATA = Path(os.environ.get("TOKENFACTORY_TRACE_DATA", ROOT / "traces" / "data"))
DEV_TRACES = TRACE_DATA / "weka-cc-dev"
AZURE_CONV = TRACE_DATA / "azure-2023" / "AzureLLMInferenceTrace_conv.csv"
H100_LLAMA_CLUSTER = ROOT / "examples" / "clusters" / "hgx-h100-llama70b.toml"


def shared_missing(*paths: Path) -> str | None:
    """A one-line reason to skip when a data set is missing (a checkout without
    traces/data, or a TOKENFACTORY_TRACE_DATA that lacks it)."""
    for path in paths:
        if not path.exists():
            return f"skipped: {path} not found (the data sets ship in traces/data)"
    return None


def core_line() -> str:
    """Whether the replays run the compiled core (`native`): the figures depend on it.
    The child processes see the same files and environment as this one."""
    import native
    return native.summary()


def spec(paths, trace_format: str, *, model: str = "kimi-k3-like",
         cluster: str = "gb200-nvl72x2", controller: str = "buffered", seed: int = 1,
         out: bool = False, **load) -> dict:
    """A run's description; `load` takes LoadOptions' fields (sessions_per_hour, ...);
    `out`: write the outputs as `--out` does."""
    run = {"paths": [str(p) for p in paths], "trace_format": trace_format, "model": model,
           "cluster": str(cluster), "controller": controller, "seed": seed, "load": load}
    if out:
        run["out"] = True
    return run


def run_isolated(run: dict) -> dict:
    """Run one replay in a child process; its figures, or RuntimeError with its stderr."""
    wall0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), json.dumps(run)],
                          capture_output=True, text=True, cwd=ROOT)
    process_s = time.perf_counter() - wall0
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
        raise RuntimeError(f"replay exited {proc.returncode}: {tail[0]}")
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    figures["process_s"] = process_s
    return figures


def per_wall(figures: dict) -> dict:
    """Rates over the replay's own wall time (and calls per CPU second of it)."""
    wall_s = max(figures["replay_s"], 1e-9)
    calls = max(figures["calls"], 1)
    return {"calls_per_s": figures["calls"] / wall_s,
            "calls_per_cpu_s": figures["calls"] / max(figures["replay_cpu_s"], 1e-9),
            "sim_per_wall": figures["simulated_s"] / wall_s,
            "events_per_call": figures["events"] / calls}


def positive_ints(option: str, text: str) -> list[int]:
    """Comma-separated integers > 0, or SystemExit(2) after one line on stderr."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) <= 0:
        print(f"{option}: expected integers > 0, comma-separated, got {text!r}", file=sys.stderr)
        raise SystemExit(2)
    return values


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _child(run: dict) -> dict:
    import resource

    sys.path.insert(0, str(ROOT))
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from traces.replay import LoadOptions

    settings = RunSettings(model=run["model"], cluster=run["cluster"],
                           controller=run["controller"], seed=run["seed"],
                           load=LoadOptions(**run["load"]))
    wall0 = time.perf_counter()
    prepared = prepare(run["paths"], run["trace_format"], settings)
    out_files: dict[str, int] = {}
    if run.get("out"):  # the CLI's modules imported before the clock starts, as a replay
        import tempfile  # without --out has its own imported by then

        from orchestrator.cli import build_parser
        from orchestrator.cli._replay_run import replay_into
        from orchestrator.run.output import run_dir

        args = build_parser().parse_args(["replay", "--no-progress"])  # the defaults
    wall1, cpu1 = time.perf_counter(), time.process_time()
    if run.get("out"):
        with tempfile.TemporaryDirectory(prefix="bench-out-") as parent:
            out = Path(parent) / "out"
            with run_dir(out) as directory:
                result, summary = replay_into(prepared, settings, directory, args)
            wall2, cpu2 = time.perf_counter(), time.process_time()
            out_files = {f.name: f.stat().st_size for f in sorted(out.iterdir())}
    else:
        result, summary = run_replay(prepared, settings)
        wall2, cpu2 = time.perf_counter(), time.process_time()
    requests = summary["requests"]
    return {"out_bytes": sum(out_files.values()), "out_files": out_files,"calls": requests["completed"], "submitted": requests["submitted"],
            "lost": requests["lost"], "sessions": requests["sessions"],
            "simulated_s": result.simulated_s, "events": result.events,
            "prepare_s": wall1 - wall0, "replay_s": wall2 - wall1, "replay_cpu_s": cpu2 - cpu1,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "ttft_p50_s": summary["ttft_s"]["p50"], "ttft_p99_s": summary["ttft_s"]["p99"]}


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
