"""`tokenfactory demo`: the embedded default, retire vs buffered on the bundled sample."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli._common import print_json


def register(sub: argparse._SubParsersAction) -> None:
    from orchestrator.run.demo import DEMO_CLUSTER, DEMO_LOAD

    p = sub.add_parser(
        "demo", help="retire vs buffered control on the bundled sample, with a report",
        description="Replay the bundled agent sessions under admission on decode retirements "
                    "and under buffered admission, on the same sessions and seed, and write an "
                    f"HTML report. Load: cluster {DEMO_CLUSTER}, the sample x{DEMO_LOAD.repeat} "
                    f"at {DEMO_LOAD.sessions_per_hour:g} sessions/hour for "
                    f"{DEMO_LOAD.duration_s:g} s, think gaps x{DEMO_LOAD.think_scale:g}. At "
                    "this load neither controller's admission holds calls back and the two "
                    "runs match (docs/demo.md).")
    p.add_argument("--out", default="demo-out", help="report directory (default: demo-out)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    from orchestrator.cli._replay_opts import add_trace_events_options

    add_trace_events_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from orchestrator.cli import build_parser
    from orchestrator.cli.compare import compare
    from orchestrator.run.demo import (
        DEMO_CLUSTER,
        DEMO_CONTROLLERS,
        DEMO_LOAD,
        DEMO_MODEL,
        DEMO_SEED,
        run_binding_decisions,
    )
    from orchestrator.run.tables import summary_table

    # The demo is `compare` with fixed settings: parse them as a user would type them.
    argv = ["compare", "--cluster", DEMO_CLUSTER, "--model", DEMO_MODEL,
            "--seed", str(DEMO_SEED), "--out", args.out,
            "--sessions-per-hour", str(DEMO_LOAD.sessions_per_hour),
            "--think-scale", str(DEMO_LOAD.think_scale), "--repeat", str(DEMO_LOAD.repeat),
            "--duration", str(DEMO_LOAD.duration_s)]
    if args.no_progress:
        argv.append("--no-progress")
    if args.trace_events is not None:
        argv += ["--trace-events", args.trace_events,
                 "--trace-events-max-calls", str(args.trace_events_max_calls)]
    ns = build_parser().parse_args(argv)
    notes = ("Admission on decode retirements (retire) against ready buffers with admission on "
             "a smoothed backlog and the cost core's predicted service rate (buffered), on the "
             "bundled agent sessions. On this rack (384 decode slots) at this load neither "
             "controller's admission decision binds: every queued call is released at the next "
             "fast-loop period, so the two runs match (docs/demo.md). The control experiment "
             "is being rebuilt on the rack-scale presets.")
    summaries = compare(ns, list(DEMO_CONTROLLERS), "tokenfactory demo: retire vs buffered",
                        notes)
    held = {name: run_binding_decisions(Path(args.out), name) for name in DEMO_CONTROLLERS}
    if args.json:
        print_json({"runs": summaries, "binding_decisions": held})
        return 0
    summary_table(summaries, title="tokenfactory demo: retire vs buffered")
    r, b = summaries["retire"]["control"], summaries["buffered"]["control"]
    print(f"decode occupancy: retire {r['decode_occupancy_mean']:.3f}, buffered "
          f"{b['decode_occupancy_mean']:.3f}; oscillation index: retire "
          f"{r['oscillation_index']:.3f}, buffered {b['oscillation_index']:.3f}; decode "
          f"starvation: retire {r['decode_starvation_fraction']:.3f}, buffered "
          f"{b['decode_starvation_fraction']:.3f}")
    print("admission decisions that held queued calls back: "
          + ", ".join(f"{name} {n}" for name, n in held.items())
          + ("; at this load the controllers do not bind and the runs match (docs/demo.md)"
             if not any(held.values()) else ""))
    print(f"report: {args.out}/report.html")
    return 0
