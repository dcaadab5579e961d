"""Where blob copies live: the committed state of the store's placement.

``Placement`` is what a plan is made against and what ``BlobStore.apply`` changes;
``storage.draft.Draft`` layers a plan's changes over it without mutating it.

A session's chain is ~100 blobs and every call moves most of them, so the
placement adds, removes and touches a run of blobs in one call.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from itertools import islice
from operator import eq
from typing import TYPE_CHECKING

from storage.blobs import BlobId
from storage.tiers import Location, StoreLayout, Tier

if TYPE_CHECKING:
    from storage.stripes import Stripe

_UNKNOWN = frozenset(("unknown",))  # not yet worked out (None is a real answer: no copy left)


class Placement:
    """Where each blob has copies; per location, its blobs with their last use
    time in least-recently-used order, and the bytes they use.

    A blob's holders are one shared frozenset per distinct set of places
    (``shared_set``): a store keeps every blob a session ever wrote, and a few
    dozen sets of places stand for all of them (a set per blob was a fifth of
    the store's memory)."""

    def __init__(self, layout: StoreLayout) -> None:
        self.layout = layout
        self.copies: dict[BlobId, frozenset[Location]] = {}  # no entry once the last copy goes
        self.at: dict[Location, dict[BlobId, float]] = {loc: {} for loc in layout.all_locations()}
        self.used_bytes: dict[Location, int] = dict.fromkeys(layout.all_locations(), 0)
        self.capacity_bytes: dict[Location, int] = {
            loc: layout.spec(loc).capacity_bytes for loc in layout.all_locations()
        }
        # Striping depends on the layout alone: one per destination and holders.
        self.stripes: dict[Location, dict[frozenset[Location], Stripe]] = {}
        # The shared holder sets, and the set after adding or removing one place.
        # By place, then set (no key tuple to build and hash per blob moved).
        self._plus: dict[Location, dict[frozenset[Location] | None, frozenset[Location]]] = {
            loc: {} for loc in layout.all_locations()}
        self._minus: dict[Location, dict[frozenset[Location], frozenset[Location] | None]] = {
            loc: {} for loc in layout.all_locations()}
        self._sets: dict[frozenset[Location], frozenset[Location]] = {}
        # The fastest and slowest tier of each shared set: a lookup serves a blob from
        # the first; an offload drops a copy that the second holds further down.
        self.fastest_tier: dict[frozenset[Location], Tier] = {}
        self.slowest_tier: dict[frozenset[Location], Tier] = {}

    def holders(self, blob_id: BlobId) -> tuple[Location, ...]:
        return tuple(sorted(self.copies.get(blob_id, ())))

    def shared_set(self, held: Collection[Location]) -> frozenset[Location]:
        """The one shared frozenset equal to ``held`` (not empty)."""
        out = frozenset(held)
        known = self._sets.get(out)
        if known is None:
            known = self._sets[out] = out
            self.fastest_tier[out] = min(out).tier
            self.slowest_tier[out] = max(out).tier
        return known

    def _with(self, held: frozenset[Location] | None, location: Location) -> frozenset[Location]:
        out = self._plus[location][held] = self.shared_set(
            (location,) if held is None else (*held, location))
        return out

    def _without(self, held: frozenset[Location], location: Location) -> frozenset[Location] | None:
        rest = held - {location}
        out = self._minus[location][held] = self.shared_set(rest) if rest else None
        return out

    def add(self, blob_id: BlobId, location: Location, kv_bytes: int, now_s: float) -> None:
        self.add_run((blob_id,), location, kv_bytes, now_s)

    def add_run(
        self, blob_ids: Collection[BlobId], location: Location, kv_bytes: int, now_s: float
    ) -> None:
        """Copies of ``blob_ids`` (``kv_bytes`` in all) now exist at ``location``."""
        here = self.at[location]
        copies = self.copies
        held_by = copies.get
        grown_from = self._plus[location].get
        before = len(here)
        # The last holder set met and what it grows to: a chain's blobs share a few
        # sets, so most blobs take it by one identity check, not a lookup.
        last = grown = _UNKNOWN
        for blob_id in blob_ids:
            here[blob_id] = now_s
            held = held_by(blob_id)
            if held is not last:
                last = held
                grown = grown_from(held)
                if grown is None:
                    grown = self._with(held, location)
            copies[blob_id] = grown
        # (One check a run, not a lookup a blob: a copy already here, or an id given
        # twice, leaves the place fewer new copies than ids.)
        if len(here) - before != len(blob_ids):
            raise ValueError(f"a blob of {tuple(blob_ids)} already had a copy at {location}")
        self.used_bytes[location] += kv_bytes

    def remove(self, blob_id: BlobId, location: Location, kv_bytes: int) -> None:
        self.remove_run((blob_id,), location, kv_bytes)

    def remove_run(self, blob_ids: Iterable[BlobId], location: Location,
                   kv_bytes: int) -> list[BlobId]:
        """The copies of ``blob_ids`` (``kv_bytes`` in all) at ``location`` are gone.
        Returns the blobs whose last copy that was (usually none)."""
        here = self.at[location]
        copies = self.copies
        rest_of = self._minus[location].get
        gone: list[BlobId] = []
        blob_id = None
        last = rest = _UNKNOWN  # the last holder set met and what is left of it (as add_run)
        try:
            for blob_id in blob_ids:
                del here[blob_id]  # (a statement, not a method call: KeyError when absent)
                held = copies[blob_id]
                if held is not last:
                    last = held
                    rest = rest_of(held, _UNKNOWN)
                    if rest is _UNKNOWN:
                        rest = self._without(held, location)
                if rest is None:
                    del copies[blob_id]
                    gone.append(blob_id)
                else:
                    copies[blob_id] = rest
        except KeyError:
            raise ValueError(f"blob {blob_id} has no copy at {location}") from None
        self.used_bytes[location] -= kv_bytes
        return gone

    def touch(self, blob_id: BlobId, location: Location, now_s: float) -> None:
        self.touch_run((blob_id,), location, now_s)

    def touch_run(self, blob_ids: Iterable[BlobId], location: Location, now_s: float) -> None:
        """Mark the copies at ``location`` used at ``now_s``, in the order given."""
        here = self.at[location]
        if type(blob_ids) is tuple:
            n = len(blob_ids)
            # Already the most recently used there, in this order, none used before
            # ``now_s`` (a write's chain just after its fetch brought the chain there):
            # the touch changes nothing. Found in C, most often at the first compare.
            if (0 < n <= len(here) and all(map(eq, reversed(here), reversed(blob_ids)))
                    and min(islice(reversed(here.values()), n)) >= now_s):
                return
        pop = here.pop
        for blob_id in blob_ids:
            # Re-insert so each location's dict stays in least-recently-used order
            # (one lookup a blob: those not here pop nothing; a use time is never None).
            last = pop(blob_id, None)
            if last is not None:
                here[blob_id] = now_s if now_s > last else last
