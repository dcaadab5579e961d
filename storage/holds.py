"""What keeps a blob's copies: the live sessions that reference it, the computations
that pin it.

A session references its chain's blobs (ancestors included) until it ends: the last copy
of a blob a live session references is never dropped. A computation pins the copies it
uses at its place: a pinned copy is never evicted nor dropped. `Holds` keeps both for
`storage.store.BlobStore`, which checks them when it plans and when it applies a plan;
every change bumps the store's version, so a plan made before it no longer applies.
"""

from __future__ import annotations

from collections import _count_elements  # (the C helper behind Counter.update)
from collections.abc import Iterable
from itertools import filterfalse

from storage.blobs import BlobId, BlobIndex
from storage.placement import Placement
from storage.plans import FETCH, TransferPlan
from storage.tiers import Location

_NO_PINS: dict = {}  # (read only: the pins of a place where nothing was ever pinned)


class Holds:
    """Session references and pins, a base of `BlobStore` (through `storage.commit.Commit`;
    the store owns the index, the placement and the version these read and bump)."""

    index: BlobIndex
    placement: Placement
    version: int

    def __init__(self) -> None:
        self._refs: dict[str, set[BlobId]] = {}
        self._ref_count: list[int] = []  # live sessions referencing each blob, by blob id
        self._pins: dict[Location, dict[BlobId, int]] = {}  # pin counts by place, then blob
        # Chains pinned as a whole and not yet counted into `_pins`, by place: a call's
        # fetch pins its chain and releases it whole, most often before anything reads
        # the pins there, so a chain's pins are one entry, not one count a blob. A read
        # of a place's pins counts its runs in first (`_pins_at`).
        self._pin_runs: dict[Location, list[tuple[BlobId, ...]]] = {}

    def referenced(self, blob_id: BlobId) -> bool:
        counts = self._ref_count
        return 0 <= blob_id < len(counts) and counts[blob_id] > 0

    def sessions_referencing(self, blob_id: BlobId) -> int:
        counts = self._ref_count
        return counts[blob_id] if 0 <= blob_id < len(counts) else 0

    def ref(self, session_id: str, blob_ids: Iterable[BlobId]) -> None:
        """Mark blobs as needed by a live session (with their ancestors)."""
        held = self._refs.setdefault(session_id, set())
        counts = self._ref_count
        known = len(self.index.sizes)  # (one size a blob: a list's len, in C)
        if len(counts) < known:
            counts.extend([0] * (known - len(counts)))
        copies = self.placement.copies
        for blob_id in list(filterfalse(held.__contains__, blob_ids)):  # most are held
            # Walk up to the first ancestor already held: a chain is referenced once.
            needed: BlobId | None = blob_id
            while needed is not None and needed not in held:
                if needed not in copies:
                    raise ValueError(f"session {session_id!r}: blob {needed} has no copy left")
                held.add(needed)
                counts[needed] += 1
                needed = self.index[needed].parent
        self.version += 1

    def release(self, session_id: str) -> None:
        """The session ended: its blobs become ordinary cache entries."""
        counts = self._ref_count
        for blob_id in self._refs.pop(session_id, ()):
            counts[blob_id] -= 1
        self.version += 1

    def session_blobs(self, session_id: str) -> frozenset[BlobId]:
        return frozenset(self._refs.get(session_id, ()))

    def pinned(self, blob_id: BlobId, location: Location) -> bool:
        pins = self._pins_at(location)
        return blob_id in pins  # counts that reach zero are deleted

    def pinned_bytes(self, location: Location) -> int:
        """Bytes of the copies pinned at ``location``."""
        return sum(map(self.index.sizes.__getitem__, self._pins_at(location)))

    def pin_counts(self) -> dict[Location, dict[BlobId, int]]:
        """The pins by place (places with none left out), then blob: how many
        computations pin each copy."""
        return {loc: dict(pins) for loc in list(self._pin_runs) + list(self._pins)
                if (pins := self._pins_at(loc))}

    def _pins_at(self, location: Location) -> dict[BlobId, int]:
        """The pin counts at ``location`` by blob, its pinned chains counted in (the
        dict itself: the store's plans read it; an empty one when nothing is pinned)."""
        runs = self._pin_runs.get(location)
        if runs:
            pins = self._pins.get(location)
            if pins is None:
                pins = self._pins[location] = {}
            for run in runs:
                # `Counter.update`'s counting loop, in C: pins[id] = pins.get(id, 0) + 1.
                _count_elements(pins, run)
            runs.clear()
            return pins
        return self._pins.get(location, _NO_PINS)

    def pin(self, location: Location, blob_ids: Iterable[BlobId]) -> None:
        """A computation at ``location`` uses these copies: never evict them."""
        here = self.placement.at[location]
        ids = blob_ids if type(blob_ids) is tuple else tuple(blob_ids)
        for blob_id in filterfalse(here.__contains__, ids):
            raise ValueError(f"cannot pin blob {blob_id} at {location}: no copy there")
        self._count_pins(location, ids)

    def pin_fetched(self, plan: TransferPlan) -> None:
        """Pin the chain of the fetch plan applied last at its destination (what a
        worker computes on). A fitting fetch leaves its whole chain there once applied:
        its load copies or places the blobs missing there and its evictions spare the
        chain; so this pins without ``pin``'s check for a copy of each. The chain is
        pinned as one entry: `unpin` of that very tuple releases it whole."""
        if plan.purpose is not FETCH or plan.base_version != self.version - 1:
            raise ValueError("pin_fetched takes the fetch plan applied last")
        self._pin_run(plan.location, plan.chain)

    def pin_present(self, location: Location, blob_ids: Iterable[BlobId]) -> tuple[BlobId, ...]:
        """Pin those of these copies that are at ``location``; returns them, in order
        (pinned as one entry, as `pin_fetched` pins: `unpin` of the tuple returned
        releases them whole)."""
        ids = tuple(filter(self.placement.at[location].__contains__, blob_ids))
        self._pin_run(location, ids)
        return ids

    def pin_more(self, location: Location, pinned: tuple[BlobId, ...],
                 blob_ids: Iterable[BlobId]) -> tuple[BlobId, ...]:
        """Pin those of ``blob_ids`` at ``location`` (as `pin_present`) in addition to
        ``pinned``, a tuple pinned there as one entry that stays pinned; returns both
        as one tuple (``pinned`` then the new ones), pinned as one entry in its place:
        `unpin` of it releases them all."""
        more = tuple(filter(self.placement.at[location].__contains__, blob_ids))
        runs = self._pin_runs.get(location)
        if runs:
            for i, run in enumerate(runs):
                if run is pinned:
                    runs[i] = both = pinned + more
                    self.version += 1
                    return both
        self._count_pins(location, more)  # (``pinned`` was counted blob by blob already)
        return pinned + more

    def _pin_run(self, location: Location, ids: tuple[BlobId, ...]) -> None:
        runs = self._pin_runs.get(location)
        if runs is None:
            runs = self._pin_runs[location] = []
        runs.append(ids)
        self.version += 1

    def _count_pins(self, location: Location, ids: Iterable[BlobId]) -> None:
        pins = self._pins.get(location)
        if pins is None:
            pins = self._pins[location] = {}
        # `Counter.update`'s counting loop, in C: pins[id] = pins.get(id, 0) + 1, id by id.
        _count_elements(pins, ids)
        self.version += 1

    def unpin(self, location: Location, blob_ids: Iterable[BlobId]) -> None:
        runs = self._pin_runs.get(location)
        if runs:
            for i, run in enumerate(runs):  # (a few: the calls computing there)
                if run is blob_ids:  # a chain pinned as one entry, released whole
                    del runs[i]
                    self.version += 1
                    return
        pins = self._pins_at(location)
        pop = pins.pop
        for blob_id in blob_ids:
            count = pop(blob_id, 0)  # (most are pinned once: one lookup)
            if count != 1:
                if count <= 0:
                    raise ValueError(f"blob {blob_id} is not pinned at {location}")
                pins[blob_id] = count - 1
        self.version += 1
