"""The run's timeline: every worker event with its integer-nanosecond time."""

from __future__ import annotations

from collections.abc import Callable

# (now_s, worker, event, call ids): what a subscriber is handed for each event.
EventTap = Callable[[float, str, str, tuple[int, ...]], None]


class EventLog:
    """Append-only list of (time_ns, worker, event, call ids). Kept only when asked
    (tests compare two runs event for event); otherwise it counts.

    Subscribers (`subscribe`) see each event as it happens; the run's trace-event
    recorder (orchestrator.run.trace_events) is one. With none, an event costs a count."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        self.count = 0
        self.events: list[tuple[int, str, str, tuple[int, ...]]] = []
        self._taps: list[EventTap] = []

    def subscribe(self, tap: EventTap) -> None:
        self._taps.append(tap)

    def add(self, now_s: float, worker: str, event: str, *call_ids: int) -> None:
        self.count += 1
        if self.keep:
            self.events.append((round(now_s * 1e9), worker, event, call_ids))
        for tap in self._taps:
            tap(now_s, worker, event, call_ids)
