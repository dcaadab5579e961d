"""Storage counters as plain snapshots; metrics exporters read these later."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from storage.tiers import Location, Tier


@dataclass(frozen=True)
class CounterSnapshot:
    """Totals since the store was built; resident bytes as of the snapshot.

    A lookup walks the tiers from fast to slow: at each tier the prefix
    tokens not yet found are either a hit or a miss there, so
    ``lookup_tokens(t) == hit_tokens[t] + miss_tokens[t]`` and the misses of
    one tier are the lookups of the next.
    """

    moved_bytes: dict[tuple[Tier, Tier], int]
    hit_tokens: dict[Tier, int]
    miss_tokens: dict[Tier, int]
    requested_tokens: int
    recomputed_tokens: int
    dropped_blobs: int
    resident_bytes_by_location: dict[Location, int]
    resident_bytes_by_tier: dict[Tier, int] = field(init=False)

    def __post_init__(self) -> None:
        by_tier = dict.fromkeys(Tier, 0)
        for location, kv_bytes in self.resident_bytes_by_location.items():
            by_tier[location.tier] += kv_bytes
        object.__setattr__(self, "resident_bytes_by_tier", by_tier)

    def lookup_tokens(self, tier: Tier) -> int:
        return self.hit_tokens.get(tier, 0) + self.miss_tokens.get(tier, 0)


class StoreCounters:
    """Mutable totals owned by one store (never module-level)."""

    def __init__(self) -> None:
        self.moved_bytes: Counter[tuple[Tier, Tier]] = Counter()
        self.hit_tokens: Counter[Tier] = Counter()
        self.miss_tokens: Counter[Tier] = Counter()
        self.requested_tokens = 0
        self.recomputed_tokens = 0
        self.dropped_blobs = 0

    def snapshot(self, resident_bytes_by_location: dict[Location, int]) -> CounterSnapshot:
        return CounterSnapshot(
            moved_bytes=dict(self.moved_bytes),
            hit_tokens={tier: self.hit_tokens[tier] for tier in Tier},
            miss_tokens={tier: self.miss_tokens[tier] for tier in Tier},
            requested_tokens=self.requested_tokens,
            recomputed_tokens=self.recomputed_tokens,
            dropped_blobs=self.dropped_blobs,
            resident_bytes_by_location=dict(resident_bytes_by_location),
        )
