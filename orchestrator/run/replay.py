"""The control plane's async shell: sessions in, admission, routing, the two loops.

Only this module (with `reconfig`) awaits anything on the orchestrator side.
It samples the cluster every fast-loop period, hands the policies their
lagged observations, applies their decisions, and records the series and the
counters the summary is built from. Conservation is checked at every sample:
submitted = completed + rejected + in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import ObservationLag
from orchestrator.control.policies.base import AdmissionDecision, AdmissionPolicy
from orchestrator.control.realloc import Reallocator, ReallocDecision
from orchestrator.control.router import FillCandidate, PrefixAffinityRouter
from orchestrator.control.snapshot import Predictor, energy_j, hbm_per_gpu, observe
from orchestrator.run.reconfig import Reconfigurer
from orchestrator.run.result import ReplayResult, decode_slots
from orchestrator.run.series import Series
from orchestrator.run.sessions import Outcome, Pending, run_session
from storage.tiers import Tier
from traces.model import Session
from traces.replay import LoadOptions, session_starts
from workers.cluster import BoundCluster
from workers.request import Request
from workers.runtime import ClusterRuntime


class PolicyError(RuntimeError):
    """A policy returned something that is not a decision: names the policy."""


class ConservationError(AssertionError):
    """Calls appeared or vanished: the emulator is wrong, not the input."""


class Orchestrator:
    def __init__(self, cluster: BoundCluster, sessions: Sequence[Session], policy: AdmissionPolicy,
                 control: ControlConfig, load: LoadOptions, seed: int,
                 on_progress: Callable[[int, int], None] | None = None, logger=None,
                 listeners: Sequence[object] = (), deadline_s: float | None = None,
                 reallocator=None, router=None, backend=None, skip_idle: bool = True):
        self.cluster, self.sessions, self.policy = cluster, list(sessions), policy
        self.control, self.load, self.seed = control, load, seed
        self.on_progress = on_progress
        self.logger = logger  # a structlog logger for decisions, or None
        # Observers of the run (metrics, trace events): each may define on_sample(orch, obs,
        # now_s), on_submit/on_done/on_reject(orch, req, now_s), on_decision(orch, decision,
        # now_s) and on_reallocation(orch, decision, now_s). They read; they never steer.
        self.listeners = list(listeners)
        # Stop the run at this simulated time even if calls are still in flight (they are
        # then reported as such); None runs until every session has finished.
        self.deadline_s = deadline_s
        self.timed_out = False
        self.skip_idle = skip_idle  # virtual time: skip sampling idle spans
        # Live mode's worker processes (orchestrator.live.LiveBackend): its `executor` runs
        # the workers' steps; it re-dispatches a lost worker's calls. None: in-process.
        self.backend = backend
        self.interrupted = False  # stopped by `interrupt()` (SIGINT/SIGTERM in live mode)
        # The slow loop and the router, each behind its public interface (ReallocationPolicy,
        # RoutingPolicy); None: the built-ins.
        self._reallocator, self.router = reallocator, router or PrefixAffinityRouter()
        sizes = {c.block_size for s in self.sessions for c in s.calls}
        if len(sizes) != 1:
            raise ValueError(f"traces mix block sizes {sorted(sizes)}: replay one kind at a time")
        self.block_tokens = sizes.pop()
        calls = [c for s in self.sessions for c in s.calls]
        self.predictor = Predictor(float(np.mean([c.input_tokens for c in calls])),
                                   float(np.mean([c.new_tokens for c in calls])),
                                   float(np.mean([c.output_tokens for c in calls])))
        self.counters = dict.fromkeys(
            ("submitted", "admitted", "completed", "retired", "rejected", "redispatched"), 0)
        self.queue: deque[Pending] = deque()
        self._pending: dict[int, Pending] = {}
        self._call_ids = iter(range(1, 1 << 62))
        self.series = Series()
        # (first time, reason, periods): runs of the fast loop's decisions by reason.
        self.decisions: list[tuple[float, str, int]] = []
        self._last_logged: tuple | None = None
        self._wake = asyncio.Event()
        self._skipping_from_s: float | None = None
        self._same_samples = 0  # consecutive samples equal but for their time
        self._last_obs = None
        self.realloc_decisions: list[ReallocDecision] = []
        self.realloc_times_s: list[float] = []
        self.done: list[Request] = []
        self._rejected_arrivals_s: list[float] = []
        self._period_done: list[Request] = []
        self._period_admitted = 0
        self._busy_last: dict[str, float] = {}
        self._peak_hbm_per_gpu = 0.0

    # -- sessions and calls ----------------------------------------------------------
    def _next_call_id(self) -> int:
        return next(self._call_ids)

    async def _submit(self, req: Request) -> str:
        loop = asyncio.get_running_loop()
        req.arrival_s = loop.time()
        pending = Pending(req, loop.create_future(), req.interactive)
        self.counters["submitted"] += 1
        self.queue.append(pending)
        self._pending[req.call_id] = pending
        self._wake.set()
        self._notify("on_submit", req, req.arrival_s)
        return await pending.future

    def _on_done(self, req: Request, now_s: float) -> None:
        pending = self._pending.pop(req.call_id, None)
        # A cancelled future: the run was stopped (deadline, signal) and the call finished
        # while it wound down. It did complete; its session is gone.
        if pending is None or (pending.future.done() and not pending.future.cancelled()):
            raise ConservationError(f"call {req.call_id} completed twice")
        self.counters["completed"] += 1
        if req.decode_worker is not None:
            self.counters["retired"] += 1
        self.done.append(req)
        self._period_done.append(req)
        self.predictor.observe_completion(req.input_tokens, req.computed_tokens,
                                          req.output_tokens)
        self._notify("on_done", req, now_s)
        req.compact()  # kept for the summary: its block ids are not
        if not pending.future.done():
            pending.future.set_result(Outcome.DONE)

    def _reject(self, pending: Pending) -> None:
        del self._pending[pending.request.call_id]
        self._rejected_arrivals_s.append(pending.request.arrival_s)
        self.counters["rejected"] += 1
        self._notify("on_reject", pending.request, asyncio.get_running_loop().time())
        pending.future.set_result(Outcome.REJECTED)

    # -- the fast loop ---------------------------------------------------------------
    def _candidates(self) -> list[FillCandidate]:
        out = []
        for w in self.runtime.intake_workers():  # fill workers and mixed workers
            queued = sum(r.input_tokens - r.prefix_tokens for r in w.queue)
            out.append(FillCandidate(w.name, w.spec.phase.name.lower(), w.spec.node, queued,
                                     w.accepting))
        return out

    def _route(self, pending: Pending, now_s: float) -> bool:
        req = pending.request
        match = self.runtime.store.match(req.block_ids)
        nodes = frozenset()
        if match.blob_ids:
            nodes = frozenset(loc.holder for loc in self.runtime.store.holders(match.blob_ids[-1])
                              if loc.tier is Tier.DRAM)
        worker = self.router.choose(match.matched_tokens, self._candidates(), nodes)
        if worker is None:
            return False
        self.runtime.submit_fill(worker, req, now_s)
        return True

    def _apply(self, decision: AdmissionDecision, now_s: float) -> None:
        if not isinstance(decision, AdmissionDecision):
            raise PolicyError(f"controller {self.policy.name!r} returned {type(decision).__name__}"
                              f", not an AdmissionDecision")
        if decision.decode_target_batch is not None:
            self._apply_target_batch(decision.decode_target_batch)
        if decision.reject_ttft_above_s is not None:
            self._reject_predicted_misses(decision, now_s)
        budget, background = decision.admit, decision.background_limit
        released: list[Pending] = []
        for pending in list(self.queue):
            if budget <= 0:
                break
            if not pending.interactive:
                if background is not None and background <= 0:
                    continue
                if background is not None:
                    background -= 1
            released.append(pending)
            budget -= 1
        for pending in released:
            if not self._route(pending, now_s):
                break
            self.queue.remove(pending)
            self.counters["admitted"] += 1
            self._period_admitted += 1

    def _apply_target_batch(self, per_unit: int) -> None:
        for w in self.runtime.decode_workers.values():
            w.set_target_batch(per_unit * w.slots_per_unit)

    def _reject_predicted_misses(self, decision: AdmissionDecision, now_s: float) -> None:
        """Predicted TTFT: time waited, plus the wait for the calls ahead at this period's
        admission rate, plus a typical fill."""
        rate = max(decision.admit, 1) / self.control.fast_period_s
        fill_s = self.predictor.fill_latency_s(self.runtime)
        for position, pending in enumerate(list(self.queue)):
            predicted = now_s - pending.request.arrival_s + position / rate + fill_s
            if predicted > decision.reject_ttft_above_s:
                self.queue.remove(pending)
                self._reject(pending)

    def _sample(self, now_s: float) -> None:
        rt = self.runtime
        period = self.control.fast_period_s
        busy = {}
        fill_states = [w.state() for w in rt.fill_workers.values()]
        decode_states = [w.state() for w in rt.decode_workers.values()]
        busy_last = self._busy_last
        for st in (*fill_states, *decode_states):
            busy[st.name] = min(1.0, (st.busy_s - busy_last.get(st.name, 0.0)) / period)
            busy_last[st.name] = st.busy_s
        interactive = sum(p.interactive for p in self.queue) if self.queue else 0
        obs = observe(rt, now_s, self.counters, len(self.queue), interactive, self.predictor, busy,
                      fill_states, decode_states)
        self.lag.record(obs)
        in_flight = len(self._pending)
        if in_flight:  # only an idle sample can repeat the last
            self._same_samples, self._last_obs = 0, None
        else:
            content = replace(obs, time_s=0.0)
            self._same_samples = self._same_samples + 1 if content == self._last_obs else 1
            self._last_obs = content
        c = self.counters
        if c["submitted"] != c["completed"] + c["rejected"] + in_flight:
            raise ConservationError(
                f"at {now_s:.3f} s: submitted {c['submitted']} != completed {c['completed']} + "
                f"rejected {c['rejected']} + in flight {in_flight}")
        s = self.series
        s.time_s.append(now_s)
        s.decode_occupancy.append(obs.decode_occupancy)
        s.decode_running.append(obs.decode_running)
        s.decode_slots.append(obs.decode_slots)
        s.backlog.append(obs.backlog)
        s.ready_depth.append(obs.ready_depth)
        s.admission_queue.append(obs.admission_queue)
        # Work decode could be running: admitted and filled, or held back by admission.
        s.upstream_waiting.append(obs.admission_queue + obs.ready_depth)
        s.admitted.append(self._period_admitted)
        s.completed.append(len(self._period_done))
        ttfts = [r.ttft_s for r in self._period_done if r.ttft_s is not None]
        s.ttft_mean_s.append(sum(ttfts) / len(ttfts) if ttfts else float("nan"))
        s.add_breakdown(self._period_done)
        s.ticks.append(1)
        s.in_flight.append(in_flight)
        s.submitted_total.append(c["submitted"])
        s.completed_total.append(c["completed"])
        s.rejected_total.append(c["rejected"])
        workers = {p.name: p.workers for p in obs.pools}
        last = s.workers_by_pool[-1] if s.workers_by_pool else None
        s.workers_by_pool.append(last if workers == last else workers)  # shared when same
        self._period_done = []
        self._period_admitted = 0
        if self._same_samples <= 1:  # HBM only changes while calls run or just after
            states = {st.name: st for st in (*fill_states, *decode_states)}
            self._peak_hbm_per_gpu = max(self._peak_hbm_per_gpu, hbm_per_gpu(
                rt, self.weights_per_gpu, states))
        self._notify("on_sample", obs, now_s)

    def _notify(self, event: str, *args) -> None:
        for listener in self.listeners:
            method = getattr(listener, event, None)
            if method is not None:
                method(self, *args)

    async def _fast_loop(self) -> None:
        loop = asyncio.get_running_loop()
        period = self.control.fast_period_s
        # Idle spans are skipped in virtual time only: live time passes anyway.
        skips = self.skip_idle and hasattr(loop, "time_ns")
        try:
            while True:
                now_s = loop.time()
                self._sample(now_s)
                decision = self.policy.decide(self.lag.seen_at(now_s), now_s)
                self._apply(decision, now_s)
                self._decided(decision, now_s, 1)
                if skips and self._idle():
                    await self._skip_idle(loop, now_s)
                else:
                    await asyncio.sleep(period)
        finally:
            self._skipping_from_s = None

    def _decided(self, decision: AdmissionDecision, now_s: float, ticks: int) -> None:
        """Record a decision standing for `ticks` periods; the log only when it changes."""
        reason = decision.reason.value
        if ticks == 1:
            self.series.reason.append(reason)
            self.series.admit.append(decision.admit)
            self._notify("on_decision", decision, now_s)
        key = (decision.admit, reason, decision.decode_target_batch)
        if not self.decisions or self.decisions[-1][1] != reason:
            self.decisions.append((now_s, reason, ticks))
        else:
            t, r, n = self.decisions[-1]
            self.decisions[-1] = (t, r, n + ticks)
        if self.logger is not None and key != self._last_logged:
            self._last_logged = key
            self.logger.info("admission", t_s=round(now_s, 6), controller=self.policy.name,
                             admit=decision.admit, reason=reason,
                             decode_target_batch=decision.decode_target_batch,
                             queue=len(self.queue), periods=ticks)

    def _idle(self) -> bool:
        """Nothing queued or in flight, no worker moving, and the policy has seen only
        idle samples for as long as its observation lag: until the next arrival every
        sample would be the last one restamped."""
        return (not self._pending and not self.reconfigurer.busy()
                and self._same_samples * self.control.fast_period_s
                > self.control.observation_lag_s)

    async def _skip_idle(self, loop, last_s: float) -> None:
        """Sleep until work arrives, then account for the periods skipped and resume on
        the sampling grid."""
        period = self.control.fast_period_s
        period_ns = round(period * 1e9)
        last_ns = round(last_s * 1e9)
        self.lag.hold(period)
        self._skipping_from_s = last_s
        self._wake.clear()
        try:
            await self._wake.wait()
        finally:
            now_ns = loop.time_ns()
            # Samples strictly before now were idle; one at this instant sees the arrival.
            ticks = max(0, -(-(now_ns - last_ns) // period_ns) - 1)
            self._skipping_from_s = None
            if ticks:
                self._catch_up((last_ns + period_ns) / 1e9, ticks)
        await asyncio.sleep((last_ns + (ticks + 1) * period_ns - now_ns) / 1e9)

    def _catch_up(self, first_s: float, ticks: int) -> None:
        """The skipped periods: the policy brought up to date (in closed form when it can),
        the series, decisions and listeners told of `ticks` idle samples."""
        period = self.control.fast_period_s
        skip = getattr(self.policy, "skip_idle", None)
        seen = self.lag.seen_at(first_s)
        decision = skip(seen, first_s, ticks) if skip is not None and seen is not None else None
        if decision is None:  # tick through: exact, a decide per period
            for k in range(ticks):
                t = first_s + k * period
                decision = self.policy.decide(self.lag.seen_at(t), t)
                if decision.decode_target_batch is not None:
                    self._apply_target_batch(decision.decode_target_batch)
        elif decision.decode_target_batch is not None:
            self._apply_target_batch(decision.decode_target_batch)
        if not isinstance(decision, AdmissionDecision):
            raise PolicyError(f"controller {self.policy.name!r} returned "
                              f"{type(decision).__name__}, not an AdmissionDecision")
        self.series.repeat_idle(first_s, ticks, decision.reason.value, decision.admit)
        self._decided(decision, first_s, ticks)
        self._notify("on_skip", first_s, first_s + (ticks - 1) * period, ticks)

    def wake(self) -> None:
        """Work arrived (a call, a worker move): the fast loop samples again."""
        self._wake.set()

    async def _slow_loop(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.control.slow_period_s)
        while True:
            now_s = loop.time()
            decision = self.realloc.decide(self.lag.seen_at(now_s), now_s)
            self.realloc_decisions.append(decision)
            self.realloc_times_s.append(now_s)
            started = decision.move is not None and self.reconfigurer.start(decision.move, now_s)
            if started:
                self.wake()
            self._notify("on_reallocation", decision, now_s)
            if self.logger is not None:
                self.logger.info("reallocation", t_s=round(now_s, 6), reason=decision.reason.value,
                                 imbalance=round(decision.imbalance, 6),
                                 move=(f"{decision.move.from_pool}->{decision.move.to_pool}"
                                       if decision.move else None), started=started)
            await asyncio.sleep(self.control.slow_period_s)

    # -- the run -------------------------------------------------------------------------
    async def _feed(self, rng: np.random.Generator) -> None:
        loop = asyncio.get_running_loop()
        tasks = []
        started = 0
        finished = 0
        total = len(self.sessions) * self.load.repeat
        if self.load.max_sessions is not None:
            total = min(total, self.load.max_sessions)

        def on_finished(_task: asyncio.Task) -> None:
            nonlocal finished
            finished += 1
            if self.on_progress is not None:
                self.on_progress(finished, total)

        for start_s, session in session_starts(self.sessions, self.load, rng):
            if start_s > loop.time():
                await asyncio.sleep(start_s - loop.time())
            task = asyncio.create_task(run_session(session, self.load, self._next_call_id,
                                                   self._submit))
            task.add_done_callback(on_finished)
            tasks.append(task)
            if not started:
                self.first_session_s = loop.time()
            self.last_session_s = loop.time()
            started += 1
        if self.on_progress is not None:
            self.on_progress(finished, started)
        total = started
        self.sessions_run = started  # also when the run is stopped before they finish
        await asyncio.gather(*tasks)

    async def run(self) -> ReplayResult:
        wall0 = time.perf_counter()  # wall-clock ok: reported as sim.wall_s
        from costmodel.memory import weight_bytes_per_gpu

        self.weights_per_gpu = {p.name: float(weight_bytes_per_gpu(self.cluster.model, p.layout))
                                for p in self.cluster.spec.pools}
        self.runtime = ClusterRuntime(self.cluster, self.block_tokens, on_done=self._on_done,
                                      executor=getattr(self.backend, "executor", None),
                                      seed=self.seed)
        self.lag = ObservationLag(self.control.observation_lag_s)
        self.series.period_s = self.control.fast_period_s
        self.realloc = self._reallocator or Reallocator(self.control)
        self.reconfigurer = Reconfigurer(self.runtime, self.cluster, self.weights_per_gpu)
        loop = asyncio.get_running_loop()
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
        for task in self.runtime.start():
            task.add_done_callback(lambda t: t.cancelled() or t.exception() is None
                                   or crashed(loop, {"exception": t.exception()}))
        loops = [asyncio.create_task(self._fast_loop())]
        if self.control.realloc_enabled:
            loops.append(asyncio.create_task(self._slow_loop()))
        feeder = asyncio.create_task(self._feed(np.random.default_rng(self.seed)))
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
        self._sample(loop.time())
        await self.reconfigurer.stop()
        await self.runtime.stop()
        return self._result(loop.time(), time.perf_counter() - wall0)  # wall-clock ok

    def interrupt(self) -> None:
        """Stop the run now; calls still in flight are reported as such."""
        self.interrupted = True
        feeder = getattr(self, "_feeder", None)
        if feeder is not None:
            feeder.cancel()

    def _result(self, end_s: float, wall_s: float) -> ReplayResult:
        rt = self.runtime
        energy = energy_j(rt, end_s) + self.reconfigurer.idle_energy_j(
            end_s, rt.eff.idle_power_fraction)
        snap = rt.store.snapshot()
        return ReplayResult(
            requests=self.done, counters=dict(self.counters), series=self.series,
            decisions=self.decisions, reconfigurations=self.reconfigurer.log,
            sessions=getattr(self, "sessions_run", 0), simulated_s=end_s, wall_s=wall_s,
            events=rt.log.count, energy_j=energy, peak_hbm_bytes_per_gpu=self._peak_hbm_per_gpu,
            kv_bytes_moved=int(sum(snap.moved_bytes.values())), gpus=self.cluster.spec.gpus,
            store_counters=snap, control=self.control, policy=self.policy.name,
            realloc_decisions=self.realloc_decisions, realloc_times_s=self.realloc_times_s,
            first_session_s=getattr(self, "first_session_s", 0.0),
            last_session_s=getattr(self, "last_session_s", 0.0),
            predicted_fill_latency_s=self.predictor.fill_latency_s(rt),
            predicted_decode_calls_per_s=self.predictor.decode_calls_per_s(rt),
            rejected_arrivals_s=self._rejected_arrivals_s,
            decode_slots=decode_slots(self.cluster))
