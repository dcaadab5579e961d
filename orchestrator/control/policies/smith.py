"""`smith`: admission on the predicted present, its observation lag compensated.

`local` (today's engines) decides at every event on the cluster as it is; the
orchestrator's own controllers see it `lag` seconds late (scraped metrics), and the
map (docs/control.md) shows `buffered` at a 5 s lag trailing `local`. `smith` keeps
the lag and removes it from the loop with a Smith predictor
(orchestrator.control.compensate): the calls admitted and not completed now are
predicted from the lagged observation, plus the orchestrator's own admissions since
(its admissions log), less the completions its learnt service model predicts since
(each call in decode a fill latency after its admission, then completing at the
predictor's per-call decode rate, corrected by what its lagged observations later
counted). It admits up to a target, every decode slot filled plus a cushion of
predicted completions (calls filled ahead, as buffered's ready buffer), and holds the
calls on their way (in fill, or admitted within the last predicted fill latency) to
that cushion too.

It decides every fast-loop period and on every arrival (the admission queue is the
orchestrator's own: a call arriving is known at once), each time on the newest lagged
observation: between two periods the predicted completions grow with the time, so an
arrival is admitted as soon as the model says a slot has come free. It never sees a
completion before its observation does.
"""

from __future__ import annotations

import math

from orchestrator.control.compensate import PresentEstimate
from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import QUEUE_POOLS, AdmissionDecision, AdmissionReason
from orchestrator.control.stability import LoopModel

# Seconds of predicted completions admitted beyond the decode slots, as buffered's
# ready buffer (ControlConfig.ready_buffer_s): covers the model's error over the lag, and
# calls that complete together (equal outputs started together: a memoryless model
# spreads their completions; 2 s starved decode in the kit's overload scenarios).
CUSHION_S = 8.0

_HOLD = AdmissionDecision(0, AdmissionReason.HOLD)


class SmithAdmission:
    name = "smith"
    decides_on_arrival = True  # the shell asks at every arrival too, on the lagged view

    def __init__(self, config: ControlConfig, cushion_s: float = CUSHION_S) -> None:
        if not (math.isfinite(cushion_s) and cushion_s >= 0):
            raise ValueError(f"cushion_s: expected seconds >= 0, got {cushion_s!r}")
        self.config = config
        self.cushion_s = cushion_s
        self.estimate = PresentEstimate()

    def on_admitted(self, admitted_total: int, now_s: float) -> None:
        """The shell's admissions counter after it released calls (its own log)."""
        self.estimate.admitted(admitted_total, now_s)

    def service_rate(self, obs: Observation) -> float:
        """Decode's completions a second, full, as the corrected model predicts them."""
        return obs.predicted_decode_calls_per_s * self.estimate.correction

    def target_in_system(self, obs: Observation) -> float:
        """Calls admitted and not completed to aim for: the decode slots, plus the
        completions predicted over the cushion (the fill pipeline's and the ready
        buffer's content: where fills bind, more admitted only waits at the fill
        workers, routed before their prefix's worker is free)."""
        return obs.decode_slots + self.service_rate(obs) * self.cushion_s

    def fill_room(self, obs: Observation, now_s: float) -> float:
        """Where the fills bind (a cold prefix each new session), calls admitted beyond
        what decode takes over the cushion only queue at the fill workers, routed before
        their prefix's worker is free: the calls being filled are held to the cushion's
        predicted completions, as local holds them to its free slots."""
        return self.service_rate(obs) * self.cushion_s - self.estimate.in_fill(obs, now_s)

    def rooms(self, obs: Observation, now_s: float) -> tuple[float, float]:
        """Learn from `obs`; the calls the predicted present leaves room for under the
        decode target (`target_in_system`) and under the fill bound (`fill_room`)."""
        self.estimate.observe(obs)
        present = self.estimate.present_in_system(obs, now_s)
        return self.target_in_system(obs) - present, self.fill_room(obs, now_s)

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(0, AdmissionReason.NO_OBSERVATION)
        decode, fill = self.rooms(obs, now_s)
        room = int(min(decode, fill))
        if room <= 0:
            return _HOLD
        return AdmissionDecision(room, AdmissionReason.PREDICTED_ROOM)

    def loop_model(self, config: ControlConfig) -> LoopModel:
        """With its model right, the predictor takes the lag out of the loop: it admits the
        predicted shortfall every period, an integrator over T with no delay
        (L(s) = 1 / (T s); Smith 1957). The model's error is what it feeds back late:
        this loop does not show that."""
        return LoopModel(numerator=(1.0,), denominator=(config.fast_period_s, 0.0),
                         delay_s=0.0, period_s=config.fast_period_s)


# A fill pool whose workers were busy at least this share of the time (smoothed over
# POOL_BUSY_S) has calls queuing at them: `smith-pools` holds its calls to the fill bound.
# Below it the pool fills a call as it comes (at the binding points of docs/control.md,
# since the fill split fix of 7dcbb5f: the prefill worker busy 4-95% of the time, the
# midfill pool 16-82%; before it, with every session's first call on midfill, 7-22% and
# 82-92%).
POOL_BINDS = 0.5
POOL_BUSY_S = 10.0


class SmithPoolsAdmission(SmithAdmission):
    """`smith`, with its fill bound applied per fill pool: the calls the router would send
    to a pool whose workers are busy (POOL_BINDS) are held to the fill bound, the others
    only to the decode target, so a call for an idle pool is not queued behind a busy
    pool's calls (the shell releases the queue in order under per-pool caps:
    policies.base, admission per pool). Each pool's busy share is its lagged
    `busy_fraction`, smoothed; a pool not yet seen counts as busy. Where every fill pool
    is busy its decisions are `smith`'s."""

    name = "smith-pools"
    observes = frozenset({QUEUE_POOLS})

    def __init__(self, config: ControlConfig, cushion_s: float = CUSHION_S) -> None:
        super().__init__(config, cushion_s)
        self.busy: dict[str, float] = {}  # each fill phase's busy share, smoothed
        self._seen_s: float | None = None  # the last observation's time learnt from

    def _learn_busy(self, obs: Observation) -> None:
        """Each fill phase's busy share (its pools' `busy_fraction`, weighted by their
        workers), smoothed over POOL_BUSY_S of observation time."""
        last = self._seen_s
        if last is not None and obs.time_s <= last:
            return
        shares: dict[str, list[float]] = {}
        for pool in obs.pools:
            if pool.phase == "decode":
                continue
            acc = shares.setdefault(pool.phase, [0.0, 0.0])
            acc[0] += pool.busy_fraction * pool.workers
            acc[1] += pool.workers
        keep = 0.0 if last is None else math.exp(-(obs.time_s - last) / POOL_BUSY_S)
        for phase, (busy, workers) in shares.items():
            share = busy / workers if workers else 1.0
            old = self.busy.get(phase)
            self.busy[phase] = share if old is None else share + keep * (old - share)
        self._seen_s = obs.time_s

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(0, AdmissionReason.NO_OBSERVATION)
        self._learn_busy(obs)
        idle = [phase for phase, share in self.busy.items() if share < POOL_BINDS]
        if not idle:
            return super().decide(obs, now_s)
        decode, fill = self.rooms(obs, now_s)
        room = int(decode)
        if room <= 0:
            return _HOLD
        limits = {phase: max(0, int(fill)) for phase in self.busy if phase not in idle}
        return AdmissionDecision(room, AdmissionReason.PREDICTED_ROOM, pool_limits=limits)
