"""Storage counters as plain snapshots; metrics exporters read these later."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from storage.blobs import PrefixMatch
from storage.tiers import DRAM, HBM, PFS, RACK, Location, Tier

if TYPE_CHECKING:
    from storage.placement import Placement


@dataclass(frozen=True)
class CounterSnapshot:
    """Totals since the store was built; resident bytes as of the snapshot.

    A lookup walks the tiers from fast to slow: at each tier the prefix
    tokens not yet found are either a hit (served by that tier) or a miss
    there, so
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
    local_hit_tokens: int = 0  # of the hits, those the fetching place held itself
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
        self.local_hit_tokens = 0

    def snapshot(self, resident_bytes_by_location: dict[Location, int]) -> CounterSnapshot:
        return CounterSnapshot(
            moved_bytes=dict(self.moved_bytes),
            hit_tokens={tier: self.hit_tokens[tier] for tier in Tier},
            miss_tokens={tier: self.miss_tokens[tier] for tier in Tier},
            requested_tokens=self.requested_tokens,
            recomputed_tokens=self.recomputed_tokens,
            dropped_blobs=self.dropped_blobs,
            resident_bytes_by_location=dict(resident_bytes_by_location),
            local_hit_tokens=self.local_hit_tokens,
        )


def lookup_tokens(
    match: PrefixMatch, dst: Location, placement: Placement, block_tokens: int,
    helds: list[frozenset[Location]] | None = None,
) -> tuple[dict[Tier, int], int]:
    """Per-tier hit tokens of a lookup walking the tiers fast to slow, and the hit
    tokens ``dst`` itself holds (the misses follow from the hits: ``miss_tokens``).
    ``helds``, the holder sets of the match's blobs in chain order, may be given when
    ``dst`` holds none of them.

    A prefix token is a hit at ``dst``'s tier when ``dst`` holds its blob,
    else at the fastest tier holding a copy, and a miss at every tier before.
    A fetch that loads the blobs counts its hits by the tiers that sent the
    bytes instead (``served_hits``); one that recomputes them, as found here.
    """
    hits: dict[Tier, int] = {}
    local = 0
    at_dst = placement.at[dst]
    copies = placement.copies
    fastest = placement.fastest_tier
    chain = match.chain
    ids = match.blob_ids
    if ids and (helds is not None or at_dst.keys().isdisjoint(ids)):
        if helds is None:
            helds = list(map(copies.__getitem__, ids))
        served_by_all = set(map(fastest.__getitem__, set(helds)))
        if len(served_by_all) == 1:
            # One tier serves the whole chain (the common case): the blobs' used
            # lengths add up to the matched prefix, so no walk over them is needed.
            (served,) = served_by_all
            hits[served] = match.matched_tokens
            chain = ()
    # A blob is used up to where the next one forks off, or the match ends.
    used_ends = [blob.first_block for blob in chain[1:]]
    if chain:
        used_ends.append(match.matched_blocks)
    for blob, used_end in zip(chain, used_ends, strict=True):
        first = blob.first_block
        end = first + 1 + len(blob.rest)
        tokens = ((used_end if used_end < end else end) - first) * block_tokens
        if blob.id in at_dst:
            served = dst.tier
            local += tokens
        else:
            served = fastest[copies[blob.id]]
        hits[served] = hits.get(served, 0) + tokens
    return hits, local


def miss_tokens(hits: dict[Tier, int], unmatched_tokens: int) -> dict[Tier, int]:
    """Per-tier misses of a lookup whose hits are ``hits``: a token is a miss at every
    tier faster than the one that served it, and the ``unmatched_tokens`` no blob
    covers are misses at every tier."""
    # From the slowest tier up: the hits served below a tier are misses at it. (The four
    # tiers spelt out, in `Tier` order: no list, zip or reversal a fetch.)
    get = hits.get
    rack = unmatched_tokens + get(PFS, 0)
    dram = rack + get(RACK, 0)
    return {HBM: dram + get(DRAM, 0), DRAM: dram, RACK: rack, PFS: unmatched_tokens}


def served_hits(
    hits: dict[Tier, int], local: int, dst_tier: Tier, sent_bytes: dict[Tier, int]
) -> dict[Tier, int]:
    """The hit tokens of a load, by the tier that served them: the ``local`` tokens the
    destination held stay at ``dst_tier``; the rest went over the links, so each tier
    that sent bytes of the load (``sent_bytes``, striped copies' shares by the sending
    holder's tier) serves them in proportion to the bytes it sent.

    Whole tokens, by largest remainder (ties to the faster tier): the result sums to
    ``sum(hits.values())`` exactly. Without bytes sent the hits are returned as given.
    """
    loaded = sum(hits.values()) - local
    total = sum(sent_bytes.values())
    if loaded <= 0 or total <= 0:
        return hits
    if len(sent_bytes) == 1:  # one tier sent it all (a load from host memory): all its
        out = dict.fromkeys(sent_bytes, loaded)
        if local:
            out[dst_tier] = out.get(dst_tier, 0) + local
        return out
    out = {}
    remainders = []
    given = 0
    for tier in sorted(sent_bytes):
        sent = sent_bytes[tier]
        if sent > 0:
            n, remainder = divmod(loaded * sent, total)
            out[tier] = n
            given += n
            remainders.append((-remainder, tier))
    left = loaded - given  # < len(out): one more token each to the largest
    if left:
        remainders.sort()
        for _, tier in remainders[:left]:
            out[tier] += 1
    if local:
        out[dst_tier] = out.get(dst_tier, 0) + local
    if 0 in out.values():  # (a tier whose share rounded to nothing serves no hits)
        return {tier: n for tier, n in out.items() if n}
    return out


_TIERS = tuple(Tier)  # iterating the enum class builds its member list every time
