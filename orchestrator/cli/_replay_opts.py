"""Options shared by `replay`, `compare` and `demo`, and turning them into RunSettings."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from orchestrator.cli._common import (
    UserError,
    add_cost_source_option,
    add_service_options,
    non_negative_int,
    positive_float,
    positive_int,
    unit_float,
)
from orchestrator.cli._load import add_load_options, load_options_from_args
from orchestrator.cli._metrics_run import add_metrics_options
from orchestrator.control.config import ControlConfig, ControlConfigError, TimeScales
from orchestrator.control.predictor import PredictorSettings
from orchestrator.run.settings import (
    DEFAULT_CLUSTER,
    DEFAULT_CONTROLLER,
    DEFAULT_MODEL,
    RunSettings,
)
from workers.clock import TIMER_TICK_S, max_live_speed
from workers.kv_policy import DEFAULT_KV_POLICY, KVPolicy

FORMATS = ("auto", "weka", "mooncake", "azure", "native")
KV_POLICIES = tuple(p.value for p in KVPolicy)


@dataclass(frozen=True)
class CliRunSettings(RunSettings):
    """RunSettings plus what the command line changes in the cluster before it is bound:
    `mtp`, MTP drafts per step for every decode pool (None: as the cluster says)."""

    mtp: int | None = None
    # --engine and --mtp-acceptance (None: as the cluster says, workers.cluster_toml).
    engine: str | None = None
    mtp_acceptance: tuple[float, ...] | None = None
    cost_source: str | None = None  # --cost-source (None: as the cluster says)


def add_trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("traces", nargs="*", metavar="TRACE",
                   help="trace files or directories (default: the bundled sample)")
    p.add_argument("--format", default="auto", choices=FORMATS,
                   help="trace format (default: auto-detect)")


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def add_run_options(p: argparse.ArgumentParser, controller: bool = True) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"model preset or config.json (default: {DEFAULT_MODEL})")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER,
                   help="cluster preset or TOML file (default: %(default)s)")
    p.add_argument("--reallocator", default="hysteresis",
                   help="slow loop: a registered name, module:Class or file.py:Class "
                        "(default: hysteresis)")
    p.add_argument("--router", default="prefix-affinity",
                   help="router: a registered name, module:Class or file.py:Class "
                        "(default: prefix-affinity)")
    if controller:
        p.add_argument("--controller", default=DEFAULT_CONTROLLER,
                       help=f"admission policy: retire, buffered, predictive, local, smith, "
                            f"smith-pools, binding, admit-all, another registered name, module:Class "
                            f"or file.py:Class "
                            f"(default: {DEFAULT_CONTROLLER})")
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default %(default)s)")
    p.add_argument("--kv-policy", choices=KV_POLICIES, default=DEFAULT_KV_POLICY.value,
                   help="where a call's KV goes when it ends: offload (to host DRAM, leaving "
                        "HBM, the source essay's design) or retain (stays in HBM until "
                        "evicted, as engines do) (default: %(default)s; docs/storage.md)")
    p.add_argument("--mtp", type=non_negative_int, metavar="N",
                   help="MTP drafts per decode step for every decode pool; 0: MTP off "
                        "(default: each pool's mtp, else the model's shipped head)")
    add_service_options(p)
    add_cost_source_option(p)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--clock", choices=("virtual", "live"), default="virtual",
                   help="virtual time (default) or live time scaled by --speed")
    p.add_argument("--speed", type=positive_float, default=1.0,
                   help="live clock: simulated seconds per wall second (default 1; at most the fast "
                        "period / 1 ms: 1,000 at the default period)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress line on stderr (shown on a terminal: sessions, calls, "
                        "calls per wall second, simulated seconds per wall second)")
    add_live_options(p)
    add_load_options(p)
    c = p.add_argument_group("control")
    c.add_argument("--fast-period", type=positive_float, default=TimeScales.admission_s,
                   metavar="S", help="admission loop period (default %(default)s s)")
    c.add_argument("--slow-period", type=positive_float, default=TimeScales.reconfiguration_s,
                   metavar="S", help="reallocation loop period (default %(default)s s)")
    c.add_argument("--observation-lag", type=non_negative_float,
                   default=ControlConfig.observation_lag_s, metavar="S",
                   help="age of what controllers see (default %(default)g s)")
    c.add_argument("--no-realloc", action="store_true", help="never move workers between pools")
    c.add_argument("--no-hysteresis", action="store_true",
                   help="reallocate without dead band or dwell time (flaps)")
    c.add_argument("--ttft-target", type=positive_float, default=ControlConfig.ttft_target_s,
                   metavar="S", help="TTFT target for goodput (default %(default)s s)")
    c.add_argument("--tpot-target", type=positive_float, default=ControlConfig.tpot_target_s,
                   metavar="S", help="TPOT target for goodput (default %(default)s s)")
    c.add_argument("--predictor-error", type=positive_float, default=1.0, metavar="F",
                   help="scale every step time the controllers' model predicts by F (a "
                        "deliberately wrong model; default 1: its own prior, not the plant's)")
    c.add_argument("--predictor-learning", type=unit_float, default=0.02, metavar="W",
                   help="weight of each completed call in the model's online correction "
                        "(default %(default)s; 0 never learns)")
    add_metrics_options(p)
    add_trace_events_options(p)


def add_trace_events_options(p: argparse.ArgumentParser) -> None:
    from orchestrator.run.trace_events import DEFAULT_MAX_CALLS

    g = p.add_argument_group("trace events (docs/trace-events.md)")
    g.add_argument("--trace-events", metavar="FILE",
                   help="write the run's timeline as Chrome/Perfetto trace-event JSON "
                        "(compare, demo: one file per controller, CONTROLLER-FILE)")
    g.add_argument("--trace-events-max-calls", type=positive_int, default=DEFAULT_MAX_CALLS,
                   metavar="N", help="trace every call of a hash sample of sessions, at most "
                                     "N calls (default %(default)s)")


def add_live_options(p: argparse.ArgumentParser) -> None:
    from orchestrator.cli._metrics_run import port_number
    from orchestrator.live.options import DEFAULT_MAX_WORKER_PROCS

    g = p.add_argument_group("live mode (--clock live): worker processes")
    g.add_argument("--workers-per-process", type=positive_int, default=1, metavar="K",
                   help="workers hosted by each worker process (default 1)")
    g.add_argument("--max-worker-procs", type=positive_int, default=DEFAULT_MAX_WORKER_PROCS,
                   metavar="N", help="refuse to start more worker processes than this "
                                     "(default %(default)s)")
    g.add_argument("--in-process", action="store_true",
                   help="keep the workers in the orchestrator's process (no transport)")
    g.add_argument("--heartbeat-timeout", type=positive_float, default=1.0, metavar="S",
                   help="wall seconds of silence before a worker process is lost (default 1)")
    g.add_argument("--restart-delay", type=positive_float, default=0.5, metavar="S",
                   help="wall seconds before a lost worker process is started again "
                        "(default 0.5)")
    g.add_argument("--no-restart", action="store_true",
                   help="run on with fewer workers when a worker process is lost")
    g.add_argument("--live-port", type=port_number, metavar="P",
                   help="workers connect over TCP on this port (default: a private Unix "
                        "socket)")
    g.add_argument("--live-host", default="127.0.0.1", metavar="HOST",
                   help="address for --live-port (default 127.0.0.1)")
    g.add_argument("--live-allow-remote", action="store_true",
                   help="allow a --live-host that is not loopback")


def live_options_from_args(args: argparse.Namespace):
    """LiveOptions for `--clock live` with worker processes; None otherwise."""
    if getattr(args, "clock", "virtual") != "live" or getattr(args, "in_process", True):
        return None
    from orchestrator.live.options import LiveOptions

    try:
        return LiveOptions(workers_per_process=args.workers_per_process,
                           max_worker_procs=args.max_worker_procs,
                           heartbeat_timeout_s=args.heartbeat_timeout,
                           heartbeat_s=min(0.1, args.heartbeat_timeout / 4),
                           restart=not args.no_restart, restart_delay_s=args.restart_delay,
                           host=args.live_host, port=args.live_port,
                           allow_remote=args.live_allow_remote)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def settings_from_args(args: argparse.Namespace, controller: str | None = None) -> RunSettings:
    if getattr(args, "trace_events", None) is not None:
        from orchestrator.run.trace_events import check_path

        try:
            check_path(args.trace_events)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    try:
        load = load_options_from_args(args)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        control = ControlConfig(
            scales=TimeScales(admission_s=args.fast_period, reconfiguration_s=args.slow_period),
            observation_lag_s=args.observation_lag,
            batch_change_interval_s=max(ControlConfig.batch_change_interval_s,
                                        args.observation_lag + args.fast_period),
            realloc_enabled=not args.no_realloc, hysteresis=not args.no_hysteresis,
            ttft_target_s=args.ttft_target, tpot_target_s=args.tpot_target)
    except ControlConfigError as exc:
        raise UserError(f"control configuration refused: {exc}") from None
    if args.clock == "live" and args.speed > max_live_speed(control.fast_period_s):
        raise UserError(f"--speed {args.speed:g}: a live timer's {TIMER_TICK_S * 1e3:g} ms wall "
                        f"tick would be {args.speed * TIMER_TICK_S:g} s of loop time, over the "
                        f"fast period ({control.fast_period_s:g} s): at most "
                        f"{max_live_speed(control.fast_period_s):g} on the live clock")
    return CliRunSettings(model=args.model, cluster=args.cluster, mtp=getattr(args, "mtp", None),
                          engine=getattr(args, "engine", None),
                          mtp_acceptance=getattr(args, "mtp_acceptance", None),
                          cost_source=getattr(args, "cost_source", None),
                          reallocator=getattr(args, "reallocator", "hysteresis"),
                          router=getattr(args, "router", "prefix-affinity"),
                          controller=controller or args.controller, seed=args.seed, load=load,
                          kv_policy=getattr(args, "kv_policy", DEFAULT_KV_POLICY.value),
                          control=control, clock=args.clock, speed=args.speed,
                          live=live_options_from_args(args),
                          predictor=PredictorSettings(error=args.predictor_error,
                                                      learn=args.predictor_learning))


def trace_paths(args: argparse.Namespace) -> list:
    from traces import sample_path

    return list(args.traces) or [sample_path()]
