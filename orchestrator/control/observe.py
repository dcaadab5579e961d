"""What controllers see: observations of the cluster, delivered late as scraped metrics are.

An `Observation` is a frozen snapshot. Counters (`admitted_total`,
`retired_total`, ...) are cumulative, as Prometheus counters are, so a
controller computes its own rates. `ObservationLag` hands a controller the
snapshot taken `lag_s` ago: feedback delay is what makes admission on decode
retirements ring.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields, replace
from operator import attrgetter


@dataclass(frozen=True)
class PoolObservation:
    name: str
    phase: str  # prefill, midfill or decode
    workers: int  # serving (not draining or loading weights)
    queue_depth: int  # requests waiting at the pool's workers
    running: int  # requests in a batch
    slots: int  # decode: sequences the workers aim to run together; fills: 0
    busy_fraction: float  # share of the last period the workers spent in steps
    # Fill pools (0 for decode), last and with defaults as Observation's own additions:
    # tokens still to compute for the calls queued or running at the pool's workers, and
    # its serving workers' tokens computed and seconds in steps (counters).
    backlog_tokens: int = 0
    tokens_total: int = 0
    busy_s_total: float = 0.0


@dataclass(frozen=True)
class Observation:
    time_s: float  # when the snapshot was taken
    admission_queue: int  # calls waiting for admission
    admission_queue_interactive: int
    fill_queue: int  # admitted, waiting at a fill worker
    fill_running: int  # in a prefill or midfill batch
    ready_depth: int  # filled, waiting in the ready buffer for decode
    decode_loading: int  # a decode worker is loading their KV
    decode_running: int  # decoding on the accepting decode workers
    decode_slots: int  # sum of the accepting decode workers' target batches
    admitted_total: int
    retired_total: int  # decode completions
    completed_total: int  # all completions (fills that need no decode included)
    rejected_total: int
    # The orchestrator's own model of the service (orchestrator.control.predictor): not the
    # plant's costs; learnt from completed calls.
    predicted_decode_calls_per_s: float  # decode service rate at the target batches, in calls
    predicted_fill_latency_s: float  # time for a typical fill
    pools: tuple[PoolObservation, ...] = ()
    # Sequences still decoding on draining decode workers (lost, or being moved by the
    # slow loop): their slots are no longer in decode_slots, nor these in decode_running.
    # Last, with a default, so that observations built by keyword or position before it
    # existed still build.
    decode_draining: int = 0
    # What binds where decode's slots do not (docs/control.md, "Admission on the resource
    # that binds"), scraped as the rest and as late (the fill pools' backlogs and counters
    # are in `pools`). Last, with defaults, for the same reason.
    # The busiest KV link's bytes over its bandwidth, between the last two samples at which
    # the links' byte counters had moved (they move when a copy starts or ends).
    kv_link_utilisation: float = 0.0
    # The orchestrator's model again: the new tokens of a typical call's fill.
    predicted_fill_tokens_per_call: float = 0.0

    @property
    def backlog(self) -> int:
        """Admitted work not yet decoding: the upstream buffer a controller steers."""
        return self.fill_queue + self.fill_running + self.ready_depth + self.decode_loading

    @property
    def fill_backlog_tokens(self) -> int:
        """Tokens the fill pools have still to compute for the calls queued or running
        at them."""
        return sum(p.backlog_tokens for p in self.pools)

    @property
    def decode_occupancy(self) -> float:
        return self.decode_running / self.decode_slots if self.decode_slots else 0.0

    def content(self) -> tuple:
        """Every field but the time: equal for two snapshots of an unchanged cluster."""
        return _CONTENT(self)

    def restamped(self, time_s: float, pools: tuple | None = None) -> Observation:
        """This snapshot taken at `time_s` (and with `pools`, when given): the fast loop
        restamps an unchanged cluster."""
        if pools is None:
            return replace(self, time_s=time_s)
        return replace(self, time_s=time_s, pools=pools)


_CONTENT = attrgetter(*(f.name for f in fields(Observation) if f.name != "time_s"))


class _Repeats:
    """Samples the shell took without recording them one by one: `count` snapshots,
    `obs` restamped every `period_ns` from `next_ns` on. `held`: the last of them is
    held once delivered (`ObservationLag.hold`)."""

    __slots__ = ("count", "held", "next_ns", "obs", "period_ns")

    def __init__(self, obs: Observation, period_ns: int, count: int) -> None:
        self.obs, self.period_ns, self.count, self.held = obs, period_ns, count, True
        self.next_ns = round(obs.time_s * 1e9)


class ObservationLag:
    """Delivers, at time t, the newest snapshot taken at or before t - lag_s.

    `hold(period_s)` says the newest snapshot repeats every `period_s` until the next
    `record` (the shell skips sampling an idle cluster, whose snapshots would only differ
    in their time): in between, `seen_at` returns copies of it stamped with the sample
    times on that grid, as if they had been recorded. `hold(period_s, obs, repeats)`
    says the same of `repeats` samples not recorded, `obs` restamped a period apart
    from its own time, the last of them then held (`release(taken)`: only the first
    `taken` of them were taken, and none is held).
    """

    def __init__(self, lag_s: float) -> None:
        if lag_s < 0:
            raise ValueError(f"observation lag must be >= 0 s, got {lag_s}")
        self.lag_s = lag_s
        self._pending: deque[Observation | _Repeats] = deque()
        self._current: Observation | None = None
        self._hold: tuple[Observation, int, int] | None = None  # obs, its ns, period ns
        self._synth: Observation | None = None
        self._repeats: _Repeats | None = None  # the last hold's, while some are pending

    def record(self, obs: Observation) -> None:
        self._pending.append(obs)

    def hold(self, period_s: float, obs: Observation | None = None, repeats: int = 0) -> None:
        if obs is not None:
            self._repeats = _Repeats(obs, round(period_s * 1e9), repeats)
            self._pending.append(self._repeats)
            return
        held = self._pending[-1] if self._pending else self._current
        if held is not None:
            self._hold = (held, round(held.time_s * 1e9), round(period_s * 1e9))

    def release(self, taken: int) -> None:
        """Of the last hold's repeats, only the first `taken` were samples; none is held."""
        run = self._repeats
        if run is not None:
            delivered = (run.next_ns - round(run.obs.time_s * 1e9)) // run.period_ns
            run.count = max(0, taken - delivered)
            run.held = False
            self._repeats = None

    def seen_at(self, now_s: float) -> Observation | None:
        # A 1 ns tolerance absorbs float rounding of equal instants.
        horizon = now_s - self.lag_s + 1e-9
        pending = self._pending
        while pending:
            head = pending[0]
            if type(head) is _Repeats:
                if not self._deliver(head, horizon):
                    break
                pending.popleft()
            elif head.time_s <= horizon:
                self._current = pending.popleft()
            else:
                break
        if self._hold is not None:
            held, start_ns, period_ns = self._hold
            if self._current is held:
                k = int((round(horizon * 1e9) - start_ns) // period_ns)
                if k >= 1:
                    time_s = (start_ns + k * period_ns) / 1e9
                    if self._synth is None or self._synth.time_s != time_s:
                        self._synth = held.restamped(time_s)
                    return self._synth
            elif self._current is not None and self._current.time_s > held.time_s:
                self._hold = self._synth = None
        return self._current

    def _deliver(self, run: _Repeats, horizon: float) -> bool:
        """The run's samples due by `horizon` become current, in turn; True when none is
        left (the last then held, if it is)."""
        while run.count and run.next_ns / 1e9 <= horizon:
            time_s = run.next_ns / 1e9
            self._current = run.obs if run.obs.time_s == time_s else run.obs.restamped(time_s)
            run.next_ns += run.period_ns
            run.count -= 1
            if not run.count and run.held:
                self._hold = (self._current, run.next_ns - run.period_ns, run.period_ns)
                self._synth = None
        if run.count:
            return False
        if self._repeats is run:
            self._repeats = None
        return True
