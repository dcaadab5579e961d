"""Running a benchmark's points: one replay per layout and concurrency, on local cores.

A point is pure data (the model, the load, the cluster for its layout and concurrency)
and `run_point` a top-level function, so the points run on the process pool
(`orchestrator.executors`) as they would here, and come back in the order they were
listed whatever order they finish in: the same inputs and seed give the same table.
The largest points are handed out first, so the last to finish is a small one.

Each point replays its users under `local` admission (today's engines: admitted at
every arrival and completion, a decode slot reserved), data-parallel replicas behind a
router balancing calls in flight (`orchestrator.bench.router`), without the slow loop (an
engine does not move workers between pools during a benchmark). A disaggregated call's
KV goes from its prefill worker to its decode worker GPU to GPU (the clusters' direct
hand-off, as NIXL and Mooncake's transfer engine move it), and a finished call's KV
leaves HBM for host memory (`offload`): prompts share nothing, so nothing reads it back.
(`retain`, which keeps it in HBM and stripes a decode worker's load over the prefill
worker's HBM and host copies, gave 5% more throughput on a disaggregated DeepSeek-V3
point and cost the replay ~1.2-2x the time.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from costmodel.model import ModelSpec
from orchestrator.bench.layouts import BenchLayout
from orchestrator.bench.load import BenchLoad
from orchestrator.bench.measure import measure
from orchestrator.bench.router import BalancedRouter
from workers.cluster import ClusterSpec

ADMISSION = "local"
KV_POLICY = "offload"


@dataclass(frozen=True)
class BenchShared:
    """What every point shares (sent once to each worker process)."""

    model: ModelSpec
    load: BenchLoad
    engine: str | None  # None: each cluster's, else costmodel.engines.DEFAULT_ENGINE
    mtp_acceptance: tuple[float, ...] | None = None  # None: the cluster's, else the model's
    cost_source: str | None = None  # None: the cluster's, else the roofline


@dataclass(frozen=True)
class BenchTask:
    layout: BenchLayout
    cluster: ClusterSpec
    concurrency: int


def run_point(shared: BenchShared, task: BenchTask) -> dict:
    """Replay `task.concurrency` users on the task's cluster; the point's figures."""
    from orchestrator.control.config import ControlConfig
    from orchestrator.control.policies import make_policy
    from orchestrator.run.replay import Orchestrator
    from traces.replay import LoadOptions
    from workers.clock import VirtualClock
    from workers.cluster_toml import with_service
    from workers.kv_policy import KVPolicy

    load = shared.load
    control = ControlConfig(realloc_enabled=False)
    decode_target = next(p.batch.target_batch for p in task.cluster.pools
                         if p.phase.name in ("DECODE", "MIXED"))
    router = BalancedRouter()
    cluster = with_service(task.cluster, shared.engine, shared.mtp_acceptance,
                           shared.cost_source)
    orch = Orchestrator(cluster.bind(shared.model), load.sessions(task.concurrency),
                        make_policy(ADMISSION, control, decode_target), control, LoadOptions(),
                        load.seed, listeners=[router], router=router,
                        kv_policy=KVPolicy(KV_POLICY), keep_token_gaps=True)
    result = VirtualClock().run(orch.run())
    expected = task.concurrency * load.calls
    if result.counters["completed"] != expected:
        raise RuntimeError(f"{task.layout.name} at concurrency {task.concurrency}: "
                           f"{result.counters['completed']} of {expected} calls completed")
    figures = measure(result.requests, result.token_gaps, result.gpus, load.warmup_calls)
    preempted = sum(1 for n in result.requests.column("preemptions") if n)
    return {"concurrency": task.concurrency, "layout": task.layout.name,
            "family": task.layout.family.value, "mtp": task.layout.mtp, "gpus": result.gpus,
            "engine": result.service["engine"], **figures,
            "warmup_calls_per_user": load.warmup_calls, "calls_per_user": load.calls_per_user,
            "preempted_calls": preempted, "simulated_s": result.simulated_s}


def run_points(shared: BenchShared, tasks: Sequence[BenchTask], workers: int | None,
               advance: Callable[[], None] = lambda: None) -> list[dict]:
    """Every task's point, in the order of `tasks`; `workers` processes (1: here)."""
    from orchestrator.executors import InlineExecutor, LocalExecutor

    # Largest first: a point costs about its calls times the batch its steps carry.
    order = sorted(range(len(tasks)), key=lambda i: (-tasks[i].concurrency, i))
    listed = [tasks[i] for i in order]
    executor = (InlineExecutor() if workers == 1 or len(tasks) == 1
                else LocalExecutor(workers))
    out: list[dict | None] = [None] * len(tasks)
    with executor:
        for index, outcome in executor.run(run_point, shared, listed):
            if outcome.error is not None:
                task = listed[index]
                raise RuntimeError(f"{task.layout.name} at concurrency {task.concurrency}: "
                                   f"{outcome.error}")
            out[order[index]] = outcome.value
            advance()
    return out


@contextmanager
def points_progress(total: int, enabled: bool | None, console=None):
    """A rich bar on stderr (or `console`) counting points, shown on a terminal unless
    `enabled` says otherwise; yields the callback that advances it."""
    show = sys.stderr.isatty() if enabled is None else enabled
    if not show or total == 0:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), "points", TimeElapsedColumn(),
                  console=console or Console(stderr=True), transient=True) as bar:
        task = bar.add_task("bench", total=total)
        yield lambda: bar.advance(task)
