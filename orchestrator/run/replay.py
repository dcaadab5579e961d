"""The control plane's async shell: sessions in, admission, routing, the two loops.

Only this module (with `feeder`, `fast_loop`, `idle_spans`, `slow_loop` and
`reconfig`) awaits anything on the orchestrator side. The
`Orchestrator` is composed of its parts: the `Feeder` starts the sessions, the
`FastLoop` (orchestrator.run.fast_loop, asleep over idle spans in
orchestrator.run.idle_spans) samples the cluster every period through the
`Sampler` (orchestrator.run.sampler), hands the admission policy its lagged
observation and applies its decision; the `SlowLoop` (orchestrator.run.slow_loop)
does the same for reallocation; they record the series and the counters the
summary is built from. Its routing is `CallRouting` (orchestrator.run.routing).
Conservation is checked at every sample: submitted = completed + rejected + in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import ObservationLag
from orchestrator.control.policies.base import (
    QUEUE_POOLS,
    AdmissionPolicy,
    loop_model_of,
    observed_facts,
)
from orchestrator.control.predictor import Predictor, PredictorSettings
from orchestrator.control.realloc import ReallocationPolicy, Reallocator
from orchestrator.control.router import PrefixAffinityRouter, RoutingPolicy
from orchestrator.control.stability import LoopModel
from orchestrator.run.collector import fewer_young_collections
from orchestrator.run.completed import CompletedCalls
from orchestrator.run.fast_loop import ConservationError, DecisionLog, FastLoop
from orchestrator.run.feeder import Feeder
from orchestrator.run.ledger import LedgerListener, held_call_ids
from orchestrator.run.plugin_checks import plugin_failed, takes_new_tokens
from orchestrator.run.quotes import PoolQuotes
from orchestrator.run.reconfig import Reconfigurer
from orchestrator.run.result import ReplayResult, decode_slots
from orchestrator.run.routing import CallRouting
from orchestrator.run.sampler import HbmPeak, Sampler, energy_j
from orchestrator.run.series import Series
from orchestrator.run.sessions import Outcome, Pending
from orchestrator.run.slow_loop import SlowLoop
from traces.model import Session
from traces.replay import LoadOptions
from traces.shared_prefix import SharedChains
from workers.cluster import BoundCluster
from workers.executor import StepExecutor
from workers.kv_policy import DEFAULT_KV_POLICY, KVPolicy
from workers.request import Request
from workers.runtime import ClusterRuntime


class Backend(Protocol):
    """Live mode's worker processes (orchestrator.live.LiveBackend): its `executor` runs
    the workers' steps; it re-dispatches a lost worker's calls."""

    executor: StepExecutor

    async def start(self, orch: Orchestrator) -> None: ...

    async def stop(self) -> None: ...


def _block_tokens(sessions: Sequence[Session]) -> int:
    """The one KV block size of the sessions' calls (a replay does not mix them)."""
    sizes = {c.block_size for s in sessions for c in s.calls}
    if len(sizes) != 1:
        raise ValueError(f"traces mix block sizes {sorted(sizes)}: replay one kind at a time")
    return sizes.pop()


class Orchestrator(CallRouting):
    """A replay: the sessions fed into the cluster's runtime, the fast loop admitting
    them, the slow loop reallocating workers between pools. The first six arguments
    may be given in order; the rest by name."""

    def __init__(self, cluster: BoundCluster, sessions: Sequence[Session],
                 policy: AdmissionPolicy, control: ControlConfig, load: LoadOptions,
                 seed: int, *, on_progress: Callable[[int, int], None] | None = None,
                 logger: DecisionLog | None = None, listeners: Sequence[object] = (),
                 deadline_s: float | None = None,
                 reallocator: ReallocationPolicy | None = None,
                 router: RoutingPolicy | None = None, backend: Backend | None = None,
                 skip_idle: bool = True, predictor: PredictorSettings | None = None,
                 kv_policy: KVPolicy = DEFAULT_KV_POLICY,
                 keep_token_gaps: bool = False) -> None:
        self.cluster, self.sessions, self.policy = cluster, list(sessions), policy
        self.control, self.load, self.seed = control, load, seed
        self.logger = logger  # where decisions are logged (DecisionLog), or None
        # Observers of the run (metrics, trace events): each may define on_sample(orch, obs,
        # now_s), on_submit/on_done/on_reject(orch, req, now_s), on_decision(orch, decision,
        # now_s), on_skip(orch, first_s, last_s, ticks), on_reallocation(orch, decision,
        # now_s) and on_end(orch, end_s), after which they keep no reference to the run.
        # They read; they never steer.
        self.listeners = list(listeners)
        # Each event's listener methods, looked up once (`notify`); listeners are only
        # ever added (a live backend's ledger), which looks them up again.
        self._hooks: dict[str, list] = {}
        self._hooks_of = 0
        # The call ledger (orchestrator.run.ledger) measures lost and in-flight calls; a
        # live backend keeps its own, reconciled as its processes stop.
        self.ledger = LedgerListener() if backend is None else None
        if self.ledger is not None:
            self.listeners.append(self.ledger)
        self.ledger_report = None
        # Stop the run at this simulated time even if calls are still in flight (they are
        # then reported as such); None runs until every session has finished.
        self.deadline_s = deadline_s
        self.timed_out = False
        self.skip_idle = skip_idle  # virtual time: skip sampling idle spans
        # Live mode's worker processes; None: in-process.
        self.backend = backend
        self.interrupted = False  # stopped by `interrupt()` (SIGINT/SIGTERM in live mode)
        # The slow loop and the router, each behind its public interface (ReallocationPolicy,
        # RoutingPolicy); None: the built-ins.
        self._reallocator = reallocator
        self.router: RoutingPolicy = router or PrefixAffinityRouter()
        self.router_takes_new_tokens = takes_new_tokens(self.router)
        self._kept_candidates: dict[str, tuple] = {}  # name -> (spec, candidate): `_candidates`
        self.block_tokens = _block_tokens(self.sessions)
        # The controller's model of the service: its own, learnt from completed calls,
        # pricing steps with its own copy of the cost core.
        settings = predictor or PredictorSettings()
        self.predictor = Predictor(PoolQuotes(cluster, settings.efficiency), settings)
        self.counters = dict.fromkeys(
            ("submitted", "admitted", "completed", "retired", "rejected", "redispatched",
             "context_rejected", "context_truncated"), 0)
        # What an engine does with a call beyond the model's context window (vLLM's
        # max_model_len): a prompt that fills it is refused, a generation that would pass
        # it stops there (finish reason "length").
        self.max_context_tokens = int(cluster.model.max_context_tokens)
        self.queue: deque[Pending] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None  # the run's, set when it starts
        self._pending: dict[int, Pending] = {}
        self._call_ids = iter(range(1, 1 << 62))
        self.done = CompletedCalls()  # completed calls, as columns
        self.series = Series(period_s=control.fast_period_s)
        self._rejected_arrivals_s: list[float] = []
        # A policy that decides at every event on the cluster as it is (policies.local).
        self._event_driven = bool(getattr(policy, "event_driven", False))
        # A policy that decides on every arrival too, on its lagged view (policies.smith).
        self._on_arrival = bool(getattr(policy, "decides_on_arrival", False))
        # Each arriving call's fill pool is asked of the router only for a policy that
        # caps admissions per pool (policies.base, `queue_pools`).
        self._queue_pools = QUEUE_POOLS in observed_facts(policy)
        self.shared_chains = SharedChains()  # what the sessions share (traces.shared_prefix)
        self.kv_policy = kv_policy  # where a call's KV goes when it ends (workers.kv_policy)
        # Keep every token gap's record (workers.token_gaps): a benchmark reads a window.
        self.keep_token_gaps = keep_token_gaps
        self.feeder = Feeder(sessions=self.sessions, load=load, shared_chains=self.shared_chains,
                             next_call_id=self._next_call_id, submit=self._submit,
                             arrive=self._arrive, on_progress=on_progress)
        self.fast: FastLoop | None = None  # built with the runtime (`_set_up`)

    @property
    def decisions(self) -> list[tuple[float, str, int]]:
        """The fast loop's decisions: (first time, reason, periods) per run of a reason."""
        return self.fast.decisions if self.fast is not None else []

    # -- what the fast loop asks of the run (fast_loop.LoopHost) -------------------------
    def in_flight(self) -> int:
        return len(self._pending)

    def moving(self) -> bool:
        return self.reconfigurer.busy()

    # -- sessions and calls ----------------------------------------------------------
    def _next_call_id(self) -> int:
        return next(self._call_ids)

    async def _submit(self, req: Request) -> str:
        return await self._arrive(req, self._loop.create_future()).future

    def _arrive(self, req: Request, future: asyncio.Future | None) -> Pending:
        """A call arrives now: queued for admission, or refused for its length. Its
        pending call; `future` gets the outcome (None: the call of a one-call session
        that has no task, `Feeder`)."""
        loop = self._loop
        self.fast.idle.flush_now(loop)  # the idle span's samples before this arrival
        req.arrival_s = loop.time()
        pending = Pending(req, future, req.interactive)
        self.counters["submitted"] += 1
        if (req.input_tokens + req.output_tokens > self.max_context_tokens
                and self._refused_for_context(pending)):
            return pending
        if self._queue_pools:
            pending.fill_pool = self.fill_pool(pending)
        self.queue.append(pending)
        self._pending[req.call_id] = pending
        self.wake()
        self.notify("on_submit", req, req.arrival_s)
        if self._event_driven:
            self.fast.decide_now(req.arrival_s)
        elif self._on_arrival:
            self.fast.decide_lagged(req.arrival_s)
        return pending

    def _on_done(self, req: Request, now_s: float) -> None:
        pending = self._pending.pop(req.call_id, None)
        # A cancelled future: the run was stopped (deadline, signal) and the call finished
        # while it wound down. It did complete; its session is gone.
        future = None if pending is None else pending.future
        if pending is None or (future is not None and future.done() and not future.cancelled()):
            raise ConservationError(f"call {req.call_id} completed twice")
        self.counters["completed"] += 1
        if req.decode_worker is not None:
            self.counters["retired"] += 1
        self.fast.completed(req)
        self.predictor.observe_completion(self.sampler.completed(req))
        self.notify("on_done", req, now_s)
        self.done.append(req)  # its row, for the summary
        req.compact()  # the period's calls keep it until the next sample: not its block ids
        if future is None:
            self.feeder.session_finished(alone=True)
        elif not future.done():
            future.set_result(Outcome.DONE)
        if self._event_driven and self.queue:
            self.fast.decide_now(now_s)

    def _refused_for_context(self, pending: Pending) -> bool:
        """A call longer than the model's context: its output cut to fit (False), or its
        prompt alone fills the context and it is refused (True)."""
        req = pending.request
        if req.input_tokens < self.max_context_tokens:
            self.counters["context_truncated"] += 1
            req.output_tokens = self.max_context_tokens - req.input_tokens
            return False
        self.counters["context_rejected"] += 1
        self._pending[req.call_id] = pending
        self.notify("on_submit", req, req.arrival_s)
        self.reject(pending)
        return True

    def reject(self, pending: Pending) -> None:
        del self._pending[pending.request.call_id]
        self._rejected_arrivals_s.append(pending.request.arrival_s)
        self.counters["rejected"] += 1
        self.notify("on_reject", pending.request, self._loop.time())
        if pending.future is None:
            self.feeder.session_finished(alone=True)
        else:
            pending.future.set_result(Outcome.REJECTED)

    def notify(self, event: str, *args: object) -> None:
        if len(self.listeners) != self._hooks_of:  # listeners added: look hooks up again
            self._hooks.clear()
            self._hooks_of = len(self.listeners)
        methods = self._hooks.get(event)
        if methods is None:
            methods = self._hooks[event] = [
                method for method in (getattr(listener, event, None) for listener in self.listeners)
                if method is not None]
        for method in methods:
            method(self, *args)

    # -- the run -------------------------------------------------------------------------
    async def run(self) -> ReplayResult:
        with fewer_young_collections():
            return await self._run()

    def _set_up(self) -> None:
        """What the run works on: the workers' runtime, the observation lag, the
        reallocator and reconfigurer, and the HBM peak's weights per GPU."""
        from costmodel.memory import weight_bytes_per_gpu

        self.weights_per_gpu = {p.name: float(weight_bytes_per_gpu(self.cluster.model, p.layout))
                                for p in self.cluster.spec.pools}
        self._hbm_peak = HbmPeak(self.weights_per_gpu)  # the largest HBM per GPU sampled
        self.runtime = ClusterRuntime(self.cluster, self.block_tokens, on_done=self._on_done,
                                      executor=getattr(self.backend, "executor", None),
                                      seed=self.seed, kv_policy=self.kv_policy,
                                      keep_token_gaps=self.keep_token_gaps)
        # An event-driven policy is the engine's own scheduler: it sees its state unlagged.
        self.lag = ObservationLag(0.0 if self._event_driven else self.control.observation_lag_s)
        self.reconfigurer = Reconfigurer(self.runtime, self.cluster, self.weights_per_gpu)
        self.sampler = Sampler(self.runtime, self.predictor, self.control.fast_period_s,
                               facts=observed_facts(self.policy))
        self.fast = FastLoop(queue=self.queue, runtime=self.runtime, policy=self.policy,
                             series=self.series, control=self.control, lag=self.lag,
                             sampler=self.sampler, hbm_peak=self._hbm_peak, host=self,
                             logger=self.logger, skip_idle=self.skip_idle)
        self.slow = SlowLoop(control=self.control, lag=self.lag,
                             reallocator=self._reallocator or Reallocator(self.control),
                             pools=frozenset(p.name for p in self.cluster.spec.pools),
                             reconfigurer=self.reconfigurer, idle=self.fast.idle,
                             notify=self.notify, logger=self.logger)

    async def _run(self) -> ReplayResult:
        wall0 = time.perf_counter()  # wall-clock ok: reported as sim.wall_s
        self._set_up()
        # Kept: asyncio.get_running_loop makes a system call (getpid) on Python 3.11.
        loop = self._loop = asyncio.get_running_loop()
        feeder_box: list[asyncio.Task] = []
        self._crash: BaseException | None = None

        def crashed(_loop, context: dict) -> None:
            # An exception in a worker callback or task must stop the run, not vanish.
            if self._crash is None:
                self._crash = context.get("exception") or RuntimeError(context["message"])
            for task in feeder_box:
                task.cancel()

        loop.set_exception_handler(crashed)
        if self.backend is not None:
            await self.backend.start(self)
        self.runtime.start()  # a worker task that fails reaches `crashed` (workers.runtime)
        loops = [asyncio.create_task(self.fast.run())]
        if self.control.realloc_enabled:
            loops.append(asyncio.create_task(self.slow.run()))
        feeder = asyncio.create_task(self.feeder.feed(np.random.default_rng(self.seed)))
        feeder_box.append(feeder)
        self._feeder = feeder
        if self.interrupted:
            feeder.cancel()
        for task in loops:
            task.add_done_callback(lambda t: t.cancelled() or t.exception() is None
                                   or crashed(loop, {"exception": t.exception()}))
        try:
            if self.deadline_s is None:
                await feeder
            else:
                await asyncio.wait_for(feeder, timeout=self.deadline_s)
        except TimeoutError:
            self.timed_out = True
        except asyncio.CancelledError:
            if self._crash is None and not self.interrupted:
                raise
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            if self.backend is not None:
                await self.backend.stop()
        if self._crash is not None:
            await self.runtime.stop()
            raise self._crash
        self.fast.sample(loop.time())
        await self.reconfigurer.stop()
        if self.ledger is not None:
            self.ledger_report = self.ledger.ledger.reconcile(held_call_ids(self))
        await self.runtime.stop()
        self.notify("on_end", loop.time())
        return self._result(loop.time(), time.perf_counter() - wall0)  # wall-clock ok

    def wake(self) -> None:
        """Work arrived (a call, a worker move): the fast loop samples again."""
        self.fast.idle.wake()

    def interrupt(self) -> None:
        """Stop the run now; calls still in flight are reported as such."""
        self.interrupted = True
        feeder = getattr(self, "_feeder", None)
        if feeder is not None:
            feeder.cancel()

    def _loop_model(self) -> LoopModel | None:
        """The policy's linearised loop; its mistakes stop the run as a PolicyError."""
        try:
            return loop_model_of(self.policy, self.control)
        except Exception as exc:
            raise plugin_failed("controller", self.policy, exc) from exc

    def _result(self, end_s: float, wall_s: float) -> ReplayResult:
        rt = self.runtime
        energy = energy_j(rt, end_s) + self.reconfigurer.idle_energy_j(
            end_s, rt.eff.idle_power_fraction)
        snap = rt.store.snapshot()
        return ReplayResult(
            requests=self.done, counters=dict(self.counters), series=self.series,
            decisions=self.decisions, reconfigurations=self.reconfigurer.log,
            sessions=self.feeder.sessions_run, simulated_s=end_s, wall_s=wall_s,
            events=rt.log.count, energy_j=energy, peak_hbm_bytes_per_gpu=self._hbm_peak.peak,
            kv_bytes_moved=int(sum(snap.moved_bytes.values())), gpus=self.cluster.spec.gpus,
            store_counters=snap, control=self.control, policy=self.policy.name,
            kv_policy=self.kv_policy.value, kv_bytes_per_token=rt.store.index.kv_bytes_per_token,
            service=rt.service,
            link_utilisation=rt.links.utilisation(end_s),
            path_bytes={k: int(v) for k, v in sorted(rt.links.bytes_by_path.items())},
            realloc_decisions=self.slow.decisions, realloc_times_s=self.slow.times_s,
            first_session_s=self.feeder.first_session_s,
            last_session_s=self.feeder.last_session_s,
            predicted_fill_latency_s=self.sampler.predicted_fill_latency_s(),
            predicted_decode_calls_per_s=self.sampler.predicted_decode_calls_per_s(),
            rejected_arrivals_s=self._rejected_arrivals_s,
            decode_slots=decode_slots(self.cluster), ledger=self.ledger_report,
            loop_model=self._loop_model(),
            token_gaps=rt.token_gaps,
            shared_prefix={"sessions": self.shared_chains.sessions,
                           "tokens": self.shared_chains.tokens,
                           "chains": self.shared_chains.count})
