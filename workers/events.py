"""The run's timeline: every worker event with its integer-nanosecond time."""

from __future__ import annotations


class EventLog:
    """Append-only list of (time_ns, worker, event, call ids). Kept only when asked
    (tests compare two runs event for event); otherwise it counts."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        self.count = 0
        self.events: list[tuple[int, str, str, tuple[int, ...]]] = []

    def add(self, now_s: float, worker: str, event: str, *call_ids: int) -> None:
        self.count += 1
        if self.keep:
            self.events.append((round(now_s * 1e9), worker, event, call_ids))
