"""One replay from user-level settings: what `replay`, `compare` and `demo` share."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from costmodel.model import ModelSpec, load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.control.predictor import PredictorSettings
from orchestrator.plugins import load as load_plugin
from orchestrator.run.collector import fewer_young_collections
from orchestrator.run.replay import Orchestrator, ReplayResult
from orchestrator.run.summary import summarize
from traces import read_sessions
from traces.model import Session
from traces.replay import LoadOptions
from workers.clock import make_clock
from workers.cluster import ClusterError, ClusterSpec
from workers.cluster_toml import load_cluster
from workers.kv_policy import DEFAULT_KV_POLICY, KVPolicy

DEFAULT_MODEL = "kimi-k3-like"
DEFAULT_CLUSTER = "gb200-nvl72x2"
DEFAULT_CONTROLLER = "buffered"


@dataclass(frozen=True)
class RunSettings:
    model: str = DEFAULT_MODEL
    cluster: str = DEFAULT_CLUSTER
    controller: str = DEFAULT_CONTROLLER
    seed: int = 0
    load: LoadOptions = field(default_factory=LoadOptions)
    control: ControlConfig = field(default_factory=ControlConfig)
    clock: str = "virtual"
    speed: float = 1.0
    reallocator: str = "hysteresis"  # a registered name or module:Class
    router: str = "prefix-affinity"
    # Live clock: the workers in separate processes (orchestrator.live.LiveOptions); None
    # keeps them in this process.
    live: object | None = None
    # Virtual time: skip sampling idle spans (docs/metrics.md); False samples every period.
    skip_idle: bool = True
    # The controller's model of the service (--predictor-error, --predictor-learning).
    predictor: PredictorSettings = field(default_factory=PredictorSettings)
    # Where a call's KV goes when it ends: "offload" or "retain" (workers.kv_policy).
    kv_policy: str = DEFAULT_KV_POLICY.value


@dataclass(frozen=True)
class Prepared:
    """Everything a run needs that can fail on bad input, checked before anything runs."""

    model: ModelSpec
    cluster: ClusterSpec
    sessions: tuple[Session, ...]


def prepare(paths: Sequence[str | Path], trace_format: str, settings: RunSettings) -> Prepared:
    model = load_model(settings.model)
    cluster = load_cluster(settings.cluster)
    try:
        cluster.bind(model)  # refuses layouts the model cannot run
    except ClusterError as exc:  # (its pool named, not the cluster: named here)
        raise ClusterError(f"{settings.cluster} with model {model.name}: {exc}") from None
    make_policy(settings.controller, settings.control)  # refuses unknown names
    load_plugin("reallocator", settings.reallocator, settings.control)
    load_plugin("router", settings.router, settings.control)
    sessions = tuple(read_sessions(list(paths), trace_format, one_kind=True))
    if not sessions:
        raise ValueError(f"no sessions in {', '.join(str(p) for p in paths)}")
    return Prepared(model, cluster, sessions)


def run_replay(prepared: Prepared, settings: RunSettings,
               on_progress: Callable[[int, int], None] | None = None,
               logger=None, listeners: Sequence[object] = ()) -> tuple[ReplayResult, dict]:
    bound = prepared.cluster.bind(prepared.model)
    decode_targets = [p.batch.target_batch for p in prepared.cluster.pools
                      if p.phase.name in ("DECODE", "MIXED")]
    policy = make_policy(settings.controller, settings.control, decode_targets[0])
    backend = None
    if settings.clock == "live" and settings.live is not None:
        from orchestrator.live.backend import LiveBackend
        from orchestrator.live.metrics import register_live_metrics

        backend = LiveBackend(settings.live, settings.speed)
        register_live_metrics(backend, listeners)
    orch = Orchestrator(bound, prepared.sessions, policy, settings.control, settings.load,
                        settings.seed, on_progress=on_progress, logger=logger,
                        listeners=listeners,
                        reallocator=load_plugin("reallocator", settings.reallocator,
                                                settings.control),
                        router=load_plugin("router", settings.router, settings.control),
                        backend=backend, skip_idle=settings.skip_idle,
                        predictor=settings.predictor, kv_policy=KVPolicy(settings.kv_policy))
    result = make_clock(settings.clock, settings.speed).run(orch.run())
    interrupted = orch.interrupted
    # The run's state (workers, store, sessions: most of a long run's memory) is garbage
    # now, held in reference cycles: collected before the summary's per-call lists are
    # made, they reuse its memory instead of adding to the peak (docs/performance.md,
    # "Where it stands": -65 MB of 794 at 200,000 calls, for 1.3 s).
    del orch
    gc.collect()
    with fewer_young_collections():
        summary = summarize(result, settings.control.ttft_target_s,
                            settings.control.tpot_target_s,
                            run=f"{settings.controller}-seed{settings.seed}",
                            controller=settings.controller, load=settings.load,
                            trace_sessions=len(prepared.sessions))
    if backend is not None:
        summary["live"] = {**backend.summary(), "interrupted": interrupted}
        ledger = summary["live"].get("ledger")
        if ledger is not None:  # measured by the call ledger (orchestrator.run.ledger)
            summary["requests"].update(lost=ledger["lost"], in_flight=ledger["in_flight"],
                                       ledger=ledger)
    control = summary["control"]
    margin, ring = control["phase_margin_deg"], control["ringing_period_s"]
    if margin is not None and margin < 0:
        # The model assumes admission binds every period; say how often it did, and what
        # was measured (docs/control.md, "Why retire does not ring here").
        predicted = "" if ring["predicted"] is None else f" near {ring['predicted']:.1f} s"
        measured = ("none" if ring["measured"] is None
                    else f"a Welch peak at {ring['measured']:.1f} s")
        sys.stderr.write(
            f"warning: controller {settings.controller}: the linearised admission loop has a "
            f"phase margin of {margin:.0f} degrees (observation lag "
            f"{settings.control.observation_lag_s:g} s): it rings{predicted} where admission "
            f"binds; here it bound in {control['admission_bound_fraction']:.0%} of the periods, "
            f"measured: {measured}\n")
    return result, summary


def progress_bar(label: str, enabled: bool | None = None):
    """A rich progress bar on stderr, as a context manager yielding an on_progress
    callback; silent when stderr is not a terminal unless forced."""
    from contextlib import contextmanager

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    @contextmanager
    def bar():
        show = sys.stderr.isatty() if enabled is None else enabled
        if not show:
            yield None
            return
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), "sessions", TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task(label, total=None)

            def update(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            yield update

    return bar()
