"""`buffered`: ready buffers, admission on a smoothed backlog and a predicted service rate.

The remedies the source essay names for admission (docs/sources.md), together:
- a ready buffer between fill and decode holds `ready_buffer_s` seconds of decode
  service, so a retirement is refilled at once from filled work;
- admission runs at the decode service rate the cost core predicts, corrected
  by a proportional term on the EWMA-smoothed backlog (admitted work not yet
  decoding) against its target: the fill pipeline's content plus the buffer;
- a share of each period's admissions is reserved for interactive calls;
- the decode batch target moves by one sequence at a time, and no more often
  than the feedback time constant allows (`ControlConfig` refuses otherwise).
"""

from __future__ import annotations

import math

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason
from orchestrator.control.stability import LoopModel


class BufferedAdmission:
    name = "buffered"

    def __init__(self, config: ControlConfig, base_target_batch: int = 4,
                 max_target_batch: int | None = None) -> None:
        self.config = config
        self.period_s = config.fast_period_s
        self.base_target_batch = base_target_batch
        # Growing the decode batch trades latency for throughput (the source essay's batching part): off
        # unless a maximum above the pool's target is given.
        self.max_target_batch = max_target_batch or base_target_batch
        self._ewma: float | None = None
        self._last_time_s: float | None = None
        self._credit = 0.0  # fractional admissions carried between periods
        self._target_batch = base_target_batch
        self._last_batch_change_s = -math.inf

    def target_backlog(self, obs: Observation) -> float:
        rate = obs.predicted_decode_calls_per_s
        return rate * (obs.predicted_fill_latency_s + self.config.ready_buffer_s)

    def _smooth(self, time_s: float, backlog: int) -> float:
        """The EWMA of the backlog, brought to the sample of `backlog` at `time_s`."""
        if self._ewma is None or self._last_time_s is None:
            self._ewma = float(backlog)
        else:
            dt = max(time_s - self._last_time_s, 0.0)
            alpha = 1.0 - math.exp(-dt / self.config.backlog_ewma_s) if dt else 0.0
            self._ewma += alpha * (backlog - self._ewma)
        self._last_time_s = time_s
        return self._ewma

    def _batch_target(self, obs: Observation, now_s: float) -> int | None:
        """One step at a time, never faster than the feedback time constant: grow when the
        ready buffer stays well above target (decode is the bottleneck), shrink back when
        decode has spare slots and nothing waits."""
        if now_s - self._last_batch_change_s < self.config.batch_change_interval_s:
            return None
        target = self._target_batch
        per_slot = obs.decode_slots / max(self._target_batch, 1)
        if obs.ready_depth > 2 * obs.decode_slots and target < self.max_target_batch:
            target += 1
        elif (obs.ready_depth == 0 and obs.decode_running < obs.decode_slots - per_slot
              and target > self.base_target_batch):
            target -= 1
        if target == self._target_batch:
            return None
        self._target_batch = target
        self._last_batch_change_s = now_s
        return target

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(0, AdmissionReason.NO_OBSERVATION)
        target = self.target_backlog(obs)
        error = target - self._smooth(obs.time_s, obs.backlog)
        admit = self._admit(self._credit_step(obs, error), max(target, 1.0))
        return self._decision(admit, error, target, self._batch_target(obs, now_s))

    def _credit_step(self, obs: Observation, error: float) -> float:
        """Admissions a period earns: the predicted service rate, corrected in proportion
        to the backlog's error over the smoothing time (never below zero)."""
        cfg = self.config
        rate = max(0.0, obs.predicted_decode_calls_per_s
                   + cfg.backlog_gain * error / cfg.backlog_ewma_s)
        return rate * self.period_s

    def _admit(self, step: float, cap: float) -> int:
        """The credit earns `step` (held at most `cap`); its whole part is admitted."""
        self._credit = min(self._credit + step, cap)
        admit = int(self._credit)
        self._credit -= admit
        return admit

    def _decision(self, admit: int, error: float, target: float,
                  batch: int | None) -> AdmissionDecision:
        if abs(error) <= 0.25 * max(target, 1.0):
            reason = AdmissionReason.RATE_MATCH
        else:
            reason = AdmissionReason.BACKLOG_LOW if error > 0 else AdmissionReason.BACKLOG_HIGH
        background = int(admit * (1.0 - self.config.interactive_reserve))
        return AdmissionDecision(admit, reason, batch, background_limit=background)

    def skip_idle(self, obs: Observation, first_s: float, ticks: int,
                  ) -> AdmissionDecision | None:
        """`ticks` idle periods, `obs` seen at the first and restamped every period after.
        Period by period, as `decide` would, while the smoothed backlog still moves the
        admission error (some dozens of smoothing steps); from there in closed form:
        the EWMA decays geometrically and the credit advances by the same increment
        every period, so its fractional part after n more is that of (credit + n x step)
        (equal to the period-by-period sum but for float rounding, ~n ulps). While the
        batch target is above its base (it would step down during the span) the shell
        ticks instead."""
        if self._target_batch != self.base_target_batch:
            return None
        period_ns = round(self.period_s * 1e9)
        start_ns = round(obs.time_s * 1e9)
        target = self.target_backlog(obs)
        cap, backlog = max(target, 1.0), float(obs.backlog)
        previous, admit, k, observed = None, 0, 0, obs.backlog
        while k < ticks:
            error = target - self._smooth((start_ns + k * period_ns) / 1e9, observed)
            step = self._credit_step(obs, error)
            k += 1
            if error == previous and step < cap - 1.0 and k < ticks:
                # Closed form for this period and the rest: the credit never reaches its
                # cap (it stays below 1 + step), so it only adds `step` and drops integers.
                rest = ticks - k + 1
                before = (self._credit + (rest - 1) * step) % 1.0
                admit = int(before + step)
                self._credit = before + step - admit
                decay = math.exp(-(rest - 1) * self.period_s / self.config.backlog_ewma_s)
                self._ewma = backlog + (self._ewma - backlog) * decay
                self._last_time_s = (start_ns + (ticks - 1) * period_ns) / 1e9
                break
            previous = error
            admit = self._admit(step, cap)
        return self._decision(admit, error, target, None)

    def loop_model(self, config: ControlConfig) -> LoopModel:
        """A proportional gain g / tau on the backlog's EWMA of time constant tau, seen
        `lag` late: L(s) = g / (tau s (1 + tau s)) e^{-lag s} (the backlog counts admitted
        calls at once: the pipeline adds no delay)."""
        tau, gain = config.backlog_ewma_s, config.backlog_gain
        return LoopModel(numerator=(gain,), denominator=(tau * tau, tau, 0.0),
                         delay_s=config.observation_lag_s, period_s=config.fast_period_s)
