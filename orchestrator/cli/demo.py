"""`tokenfactory demo`: retire, buffered and local admission side by side, with a report,
at a point of the operating region the control sweep found (docs/control.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli._common import UserError, positive_float, print_json


def register(sub: argparse._SubParsersAction) -> None:
    from orchestrator.cli._replay_opts import add_run_options, add_trace_args
    from orchestrator.run.demo import DEMO_CLUSTER, DEMO_POINT, DEMO_SEED

    p = sub.add_parser(
        "demo", help="retire vs buffered vs local admission on the bundled sample, with a report",
        description="Replay agent sessions (default: the bundled sample) under admission on "
                    "decode retirements, buffered admission and local admission, on the same "
                    "sessions and seed, and write an HTML report. Default load: session starts "
                    f"at {DEMO_POINT.load:g}x the cluster's planned capacity for "
                    f"{DEMO_POINT.duration_s:g} s, think gaps x{DEMO_POINT.think_scale:g}, "
                    f"observation lag {DEMO_POINT.observation_lag_s:g} s, on {DEMO_CLUSTER} "
                    "(docs/control.md says why). Every replay option can change it.")
    add_trace_args(p)
    add_run_options(p, controller=False)
    p.add_argument("--load", type=positive_float, default=DEMO_POINT.load, metavar="L",
                   help="session starts at L x the rate that uses the cluster's planned "
                        "capacity in steady state (default %(default)s; ignored with "
                        "--sessions-per-hour)")
    p.add_argument("--out", default="demo-out", metavar="DIR",
                   help="write into DIR, whole or not at all: report.html, compare.json and "
                        "each controller's CONTROLLER-summary.json, -series.csv, "
                        "-decisions.jsonl, -metrics.om.gz (--metrics) (default: demo-out; a DIR "
                        "that exists is refused unless empty, or an earlier run and "
                        "--overwrite)")
    from orchestrator.cli._common import add_overwrite_option

    add_overwrite_option(p)
    # set_defaults also sets each option's default as --help shows it (%(default)s).
    p.set_defaults(run=run, cluster=DEMO_CLUSTER, seed=DEMO_SEED,
                   think_scale=DEMO_POINT.think_scale, duration=DEMO_POINT.duration_s,
                   observation_lag=DEMO_POINT.observation_lag_s, repeat=None)
    from orchestrator.cli._common import set_help

    set_help(p, "duration", "admit no new session after S simulated seconds "
                            f"(default {DEMO_POINT.duration_s:g})")
    set_help(p, "repeat", "replay the trace K times over, each copy as new sessions "
                          "(default: as many times as the load needs over --duration)")


def _capacity(args: argparse.Namespace):
    """The cluster's planned capacity on the traces the demo replays."""
    from costmodel.errors import CostModelError
    from costmodel.model import load_model
    from orchestrator.cli._replay_opts import trace_paths
    from orchestrator.run.capacity import planned_capacity
    from traces import read_sessions
    from workers.cluster_toml import load_cluster

    try:
        model, cluster = load_model(args.model), load_cluster(args.cluster)
        sessions = tuple(read_sessions(trace_paths(args), args.format, one_kind=True))
    except (CostModelError, ValueError, OSError) as exc:
        raise UserError(str(exc)) from None
    if not sessions:
        raise UserError("no sessions in the traces")
    try:
        return planned_capacity(model, cluster, sessions)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _choose_load(args: argparse.Namespace) -> dict:
    """Fill in the session starts the demo's relative load stands for, and say why each
    of load, lag and think scale has its value (one line each)."""
    from orchestrator.run.capacity import sessions_for_load
    from orchestrator.run.demo import DEMO_POINT

    cap = _capacity(args)
    if args.duration is None:
        raise UserError("--duration: the demo needs a window for session starts")
    if args.sessions_per_hour is None:
        load_why = (DEMO_POINT.why_load if args.load == DEMO_POINT.load else "set by --load")
    else:
        args.load = args.sessions_per_hour / cap.sessions_per_hour
        load_why = "set by --sessions-per-hour"
    rate, repeat = sessions_for_load(cap, args.load, args.duration)
    if args.sessions_per_hour is None:
        args.sessions_per_hour = rate
    if args.repeat is None:
        args.repeat = repeat
    lag_why = (DEMO_POINT.why_lag if args.observation_lag == DEMO_POINT.observation_lag_s
               else "set by --observation-lag")
    think_why = (DEMO_POINT.why_think if args.think_scale == DEMO_POINT.think_scale
                 else "set by --think-scale")
    return {"cluster": args.cluster, "model": args.model, "seed": args.seed,
            "load": args.load, "capacity_calls_per_s": cap.calls_per_s,
            "binding_pool": cap.binding_pool,
            "capacity_sessions_per_hour": cap.sessions_per_hour,
            "sessions_per_hour": args.sessions_per_hour, "repeat": args.repeat,
            "max_sessions": args.max_sessions, "duration_s": args.duration,
            "think_scale": args.think_scale, "observation_lag_s": args.observation_lag,
            "predictor_error": args.predictor_error,
            "why": {"load": load_why, "observation_lag": lag_why, "think_scale": think_why}}


def run(args: argparse.Namespace) -> int:
    from orchestrator.cli._replay_run import out_dir_or_fail
    from orchestrator.cli.compare import compare
    from orchestrator.run.demo import DEMO_CONTROLLERS, oscillation_ratio, run_binding_decisions
    from orchestrator.run.tables import summary_table

    out_dir_or_fail(args.out, args.overwrite)  # before the capacity is worked out
    load = _choose_load(args)
    why = load["why"]
    lines = [
        f"load: {load['load']:.3g}x the planned capacity of {load['cluster']} on these traces "
        f"({load['capacity_calls_per_s']:.1f} calls/s, {load['binding_pool']} binding): "
        f"{load['sessions_per_hour']:,.0f} sessions/hour for {load['duration_s']:g} s; "
        f"{why['load']}",
        f"observation lag: {load['observation_lag_s']:g} s; {why['observation_lag']}",
        f"think scale: x{load['think_scale']:g}; {why['think_scale']}",
    ]
    notes = ("Admission on decode retirements (retire), ready buffers with admission on a "
             "smoothed backlog and the predictor's service rate (buffered), and admission on "
             "each arrival and completion with decode slots reserved (local), on the same "
             "sessions and seed. " + " ".join(lines) + " The operating region: "
             "docs/control.md.")
    summaries = compare(args, list(DEMO_CONTROLLERS), "tokenfactory demo", notes)
    if args.json:
        print_json({"load": load, "controllers": summaries})
        return 0
    for line in lines:
        print(line)
    summary_table(summaries, title="tokenfactory demo: retire vs buffered vs local")
    for name, s in summaries.items():
        c, ring = s["control"], s["control"]["ringing_period_s"]
        predicted = "none" if ring["predicted"] is None else f"{ring['predicted']:.1f} s"
        measured = "none" if ring["measured"] is None else f"{ring['measured']:.1f} s"
        index = ("null (decode almost idle)" if c["oscillation_index"] is None
                 else f"{c['oscillation_index']:.3f}")
        print(f"{name}: decode occupancy {c['decode_occupancy_mean']:.3f}, oscillation index "
              f"{index}, starvation {c['decode_starvation_fraction']:.3f}, "
              f"admission bound in {c['admission_bound_fraction']:.1%} of periods, "
              f"ringing period predicted {predicted} (model-derived, for a loop bound every "
              f"period), measured {measured}, lost {s['requests']['lost']}")
    ratio = oscillation_ratio(summaries["retire"], summaries["buffered"])
    print(f"oscillation index retire / buffered: {ratio:.2f}x")
    held = {name: run_binding_decisions(Path(args.out), name) for name in DEMO_CONTROLLERS}
    print("admission decisions that held queued calls back: "
          + ", ".join(f"{name} {n}" for name, n in held.items()))
    print(f"report: {args.out}/report.html")
    return 0
