"""`tokenfactory demo`: retire, buffered, local and smith admission side by side, with a
report, at a point of the operating region the control sweep found (docs/control.md),
its load found for the traces given by the demo's rule (orchestrator.run.demo.DEMO_RULE)."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli._common import UserError, positive_float, print_json


def register(sub: argparse._SubParsersAction) -> None:
    from orchestrator.cli._replay_opts import add_run_options, add_trace_args
    from orchestrator.run.demo import DEMO_CLUSTER, DEMO_POINT, DEMO_RULE, DEMO_SEED

    p = sub.add_parser(
        "demo", help="retire vs buffered vs local vs smith admission on the bundled sample, "
                     "with a report",
        description="Replay agent sessions (default: the bundled sample) under admission on "
                    "decode retirements, buffered admission, local admission and "
                    "delay-compensated admission (smith), on the same sessions and seed, and "
                    "write an HTML report. Default load: session starts at a multiple of the "
                    f"cluster's planned capacity found by a rule ({DEMO_RULE}) for "
                    f"{DEMO_POINT.duration_s:g} s, think gaps x{DEMO_POINT.think_scale:g}, "
                    f"observation lag {DEMO_POINT.observation_lag_s:g} s, on {DEMO_CLUSTER} "
                    "(docs/control.md says why). Every replay option can change it.")
    add_trace_args(p)
    add_run_options(p, controller=False)
    p.add_argument("--load", type=positive_float, default=None, metavar="L",
                   help="session starts at L x the rate that uses the cluster's planned "
                        "capacity in steady state (default: found by the demo's rule, "
                        "docs/control.md; ignored with --sessions-per-hour)")
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


def _probe(args: argparse.Namespace, cap, load: float) -> float | None:
    """Retire's admission bound fraction at `load`, the demo's point otherwise (one run,
    nothing written)."""
    from orchestrator.cli._replay_opts import settings_from_args, trace_paths
    from orchestrator.cli._replay_run import prepare_or_fail
    from orchestrator.run.capacity import sessions_for_load
    from orchestrator.run.settings import run_replay

    probe = argparse.Namespace(**vars(args))
    probe.sessions_per_hour, probe.repeat = sessions_for_load(cap, load, args.duration)
    if args.repeat is not None:
        probe.repeat = args.repeat
    settings = settings_from_args(probe, controller="retire")
    _, summary = run_replay(prepare_or_fail(trace_paths(args), args.format, settings), settings)
    return summary["control"]["admission_bound_fraction"]


def _search(args: argparse.Namespace, cap) -> tuple[float, str, dict]:
    """The load by the demo's rule: (load, why, the search as `--json` gives it)."""
    import sys

    from orchestrator.run.demo import DEMO_RULE, DEMO_RULE_SHARE, choose_load

    def at(load: float) -> float | None:
        fraction = _probe(args, cap, load)
        shown = "none (no period in the window)" if fraction is None else f"{fraction:.1%}"
        print(f"demo: searching the load: retire at {load:g}x binds in {shown} of its periods",
              file=sys.stderr)
        return fraction

    load, probes, found = choose_load(at)
    search = [{"load": p.load, "retire_bound_fraction": p.bound_fraction} for p in probes]
    if found:
        why = (f"the demo's rule, {DEMO_RULE}: retire binds in {probes[-1].bound_fraction:.0%} "
               f"of its periods here, in less than {DEMO_RULE_SHARE:.0%} at every smaller "
               f"load probed")
    else:
        why = (f"the demo's rule, {DEMO_RULE}: no load probed reaches it, so the largest; "
               f"retire's admission does not bind enough here for it to ring")
    return load, why, {"rule": DEMO_RULE, "share": DEMO_RULE_SHARE, "found": found,
                       "search": search}


def _choose_load(args: argparse.Namespace) -> dict:
    """Fill in the session starts the demo's relative load stands for, and say why each
    of load, lag and think scale has its value (one line each)."""
    from orchestrator.run.capacity import sessions_for_load
    from orchestrator.run.demo import DEMO_POINT

    cap = _capacity(args)
    if args.duration is None:
        raise UserError("--duration: the demo needs a window for session starts")
    rule = None
    if args.sessions_per_hour is not None:
        args.load = args.sessions_per_hour / cap.sessions_per_hour
        load_why = "set by --sessions-per-hour"
    elif args.load is not None:
        load_why = "set by --load"
    else:
        args.load, load_why, rule = _search(args, cap)
    rate, repeat = sessions_for_load(cap, args.load, args.duration)
    if args.sessions_per_hour is None:
        args.sessions_per_hour = rate
    if args.repeat is None:
        args.repeat = repeat
    lag_why = (DEMO_POINT.why_lag if args.observation_lag == DEMO_POINT.observation_lag_s
               else "set by --observation-lag")
    think_why = (DEMO_POINT.why_think if args.think_scale == DEMO_POINT.think_scale
                 else "set by --think-scale")
    out = {"cluster": args.cluster, "model": args.model, "seed": args.seed,
           "load": args.load, "capacity_calls_per_s": cap.calls_per_s,
           "binding_pool": cap.binding_pool,
           "capacity_sessions_per_hour": cap.sessions_per_hour,
           "sessions_per_hour": args.sessions_per_hour, "repeat": args.repeat,
           "max_sessions": args.max_sessions, "duration_s": args.duration,
           "think_scale": args.think_scale, "observation_lag_s": args.observation_lag,
           "predictor_error": args.predictor_error,
           "why": {"load": load_why, "observation_lag": lag_why, "think_scale": think_why}}
    if rule is not None:
        out["rule"] = rule["rule"]
        out["search"] = rule["search"]
        out["rule_found"] = rule["found"]
    return out


def run(args: argparse.Namespace) -> int:
    from orchestrator.cli._replay_run import out_dir_or_fail
    from orchestrator.cli.compare import compare
    from orchestrator.run.demo import (
        DEMO_CONTROLLERS,
        demo_claims,
        oscillation_ratio,
        run_binding_decisions,
        shown_ratio,
    )
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
             "smoothed backlog and the predictor's service rate (buffered), admission on "
             "each arrival and completion with decode slots reserved (local, unlagged), and "
             "admission on the present predicted from the lagged view, the orchestrator's "
             "own admissions and its learnt model (smith), on the same sessions and seed. "
             + " ".join(lines) + " The operating region: docs/control.md.")
    summaries = compare(args, list(DEMO_CONTROLLERS), "tokenfactory demo", notes,
                        claims_of=demo_claims)
    if args.json:
        print_json({"load": load, "controllers": summaries})
        return 0
    if "search" in load:
        shares = [(p["load"], p["retire_bound_fraction"]) for p in load["search"]]
        print("load search, retire's admission bound fraction: " + ", ".join(
            f"{x:g}x {'none' if f is None else format(f, '.0%')}" for x, f in shares))
    for line in lines:
        print(line)
    summary_table(summaries, title="tokenfactory demo: " + " vs ".join(DEMO_CONTROLLERS))
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
    for name in ("buffered", "smith"):
        ratio = oscillation_ratio(summaries["retire"], summaries[name])
        print(f"oscillation index retire / {name}: {shown_ratio(ratio)}")
    smith, local = summaries["smith"], summaries["local"]
    print(f"smith (lag {load['observation_lag_s']:g} s, compensated) against local (unlagged): "
          f"goodput {smith['goodput']['output_tokens_per_s']:,.0f} against "
          f"{local['goodput']['output_tokens_per_s']:,.0f} tokens/s, p99 TTFT "
          f"{smith['ttft_s']['p99']:.2f} against {local['ttft_s']['p99']:.2f} s")
    claims = demo_claims(summaries)
    print(f"the demo's claims on these traces: {sum(c.holds for c in claims)} of "
          f"{len(claims)} hold (docs/demo.md)")
    for c in claims:
        print(f"  {'holds' if c.holds else 'does NOT hold'}: {c.claim} ({c.figures})")
    held = {name: run_binding_decisions(Path(args.out), name) for name in DEMO_CONTROLLERS}
    print("admission decisions that held queued calls back: "
          + ", ".join(f"{name} {n}" for name, n in held.items()))
    print(f"report: {args.out}/report.html")
    return 0
