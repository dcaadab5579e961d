"""Where blob copies live, and a draft of changes that planning works on.

``Placement`` is the committed state. ``Draft`` layers a plan's changes over
it without mutating it, so planning stays pure and a plan that turns out not
to fit is simply thrown away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from storage.blobs import BlobId, BlobIndex
from storage.plans import Source, Step, StepKind
from storage.tiers import Location, StoreLayout


class Placement:
    """Copies per blob with their last use time, and bytes used per location."""

    def __init__(self, layout: StoreLayout) -> None:
        self.layout = layout
        self.copies: dict[BlobId, dict[Location, float]] = {}
        self.at: dict[Location, dict[BlobId, float]] = {loc: {} for loc in layout.all_locations()}
        self.used_bytes: dict[Location, int] = dict.fromkeys(layout.all_locations(), 0)

    def holders(self, blob_id: BlobId) -> tuple[Location, ...]:
        return tuple(sorted(self.copies.get(blob_id, ())))

    def add(self, blob_id: BlobId, location: Location, kv_bytes: int, now_s: float) -> None:
        if blob_id in self.at[location]:
            raise ValueError(f"blob {blob_id} already has a copy at {location}")
        self.copies.setdefault(blob_id, {})[location] = now_s
        self.at[location][blob_id] = now_s
        self.used_bytes[location] += kv_bytes

    def remove(self, blob_id: BlobId, location: Location, kv_bytes: int) -> None:
        if blob_id not in self.at[location]:
            raise ValueError(f"blob {blob_id} has no copy at {location}")
        del self.at[location][blob_id]
        del self.copies[blob_id][location]
        if not self.copies[blob_id]:
            del self.copies[blob_id]
        self.used_bytes[location] -= kv_bytes

    def touch(self, blob_id: BlobId, location: Location, now_s: float) -> None:
        here = self.at[location]
        if blob_id in here:
            # Re-insert so each location's dict stays in least-recently-used order.
            last = max(here.pop(blob_id), now_s)
            here[blob_id] = last
            self.copies[blob_id][location] = last


class Draft:
    """A plan being built: steps plus their effect on a view of the placement.

    ``referenced`` says whether a live session needs a blob; ``pinned`` whether
    a computation is using the copy at a location. Neither may be lost.
    """

    def __init__(
        self,
        placement: Placement,
        index: BlobIndex,
        referenced: Callable[[BlobId], bool],
        pinned: Callable[[BlobId, Location], bool],
        now_s: float,
    ) -> None:
        self.placement = placement
        self.layout = placement.layout
        self.index = index
        self.referenced = referenced
        self.pinned = pinned
        self.now_s = now_s
        self.steps: list[Step] = []
        self._added: set[tuple[BlobId, Location]] = set()
        self._added_by_blob: dict[BlobId, set[Location]] = {}
        self._removed: set[tuple[BlobId, Location]] = set()
        self._used_delta: dict[Location, int] = {}

    # -- the view ---------------------------------------------------------
    def has(self, blob_id: BlobId, location: Location) -> bool:
        key = (blob_id, location)
        if key in self._removed:
            return False
        return key in self._added or blob_id in self.placement.at[location]

    def holders(self, blob_id: BlobId) -> tuple[Location, ...]:
        found = set(self.placement.copies.get(blob_id, ()))
        found |= self._added_by_blob.get(blob_id, set())
        return tuple(sorted(loc for loc in found if (blob_id, loc) not in self._removed))

    def free_bytes(self, location: Location) -> int:
        used = self.placement.used_bytes[location] + self._used_delta.get(location, 0)
        return self.layout.spec(location).capacity_bytes - used

    def _lru_victims(self, location: Location) -> Iterator[BlobId]:
        """Oldest use first, lazily: a location's dict is kept in use order (insertion
        and `touch` move a blob to its end; a run's times never go backwards), then the
        copies this draft added, by blob id so the order is deterministic."""
        for blob in list(self.placement.at[location]):
            if (blob, location) not in self._removed:
                yield blob
        yield from sorted(blob for blob, loc in self._added if loc == location)

    # -- steps ------------------------------------------------------------
    def _record(self, step: Step, delta_bytes: int) -> None:
        key = (step.blob_id, step.location)
        if delta_bytes > 0:
            self._removed.discard(key)
            self._added.add(key)
            self._added_by_blob.setdefault(step.blob_id, set()).add(step.location)
        else:
            self._added.discard(key)
            self._added_by_blob.get(step.blob_id, set()).discard(step.location)
            self._removed.add(key)
        self._used_delta[step.location] = self._used_delta.get(step.location, 0) + delta_bytes
        self.steps.append(step)

    def copy_time_s(self, blob_id: BlobId, dst: Location) -> float:
        """Seconds to copy a blob to ``dst`` striped across all its holders."""
        return self._striped(blob_id, dst)[1]

    def _striped(self, blob_id: BlobId, dst: Location) -> tuple[tuple[Source, ...], float]:
        # Each holder sends a share proportional to its path bandwidth; the
        # aggregate is capped by what the destination can write.
        kv_bytes = self.index[blob_id].kv_bytes
        holders = [loc for loc in self.holders(blob_id) if loc != dst]
        if not holders:
            raise ValueError(f"blob {blob_id} has no copy to load into {dst}")
        rates = [self.layout.path_bytes_per_s(src, dst) for src in holders]
        total_rate = sum(rates)
        rate = min(total_rate, self.layout.spec(dst).write_bytes_per_s)
        shares = [kv_bytes * r // total_rate for r in rates]
        shares[0] += kv_bytes - sum(int(s) for s in shares)
        sources = tuple(
            Source(loc, int(share)) for loc, share in zip(holders, shares, strict=True) if share
        )
        return sources, kv_bytes / rate

    def copy(self, blob_id: BlobId, dst: Location) -> Step:
        sources, time_s = self._striped(blob_id, dst)
        step = Step(StepKind.COPY, blob_id, dst, sources, self.index[blob_id].kv_bytes, time_s)
        self._record(step, self.index[blob_id].kv_bytes)
        return step

    def place(self, blob_id: BlobId, dst: Location, kv_bytes: int | None = None) -> None:
        if kv_bytes is None:
            kv_bytes = self.index[blob_id].kv_bytes
        self._record(Step(StepKind.PLACE, blob_id, dst, (), kv_bytes), kv_bytes)

    def drop(self, blob_id: BlobId, location: Location) -> None:
        kv_bytes = self.index[blob_id].kv_bytes
        self._record(Step(StepKind.DROP, blob_id, location, (), kv_bytes), -kv_bytes)

    # -- decisions --------------------------------------------------------
    def demote(self, blob_id: BlobId, src: Location, protect: frozenset[BlobId]) -> bool:
        """Move the copy at ``src`` one tier down (making room there), if possible."""
        lower = self.layout.lower(src)
        if lower is None:
            return False
        if not self.has(blob_id, lower):
            if not self.make_room(lower, self.index[blob_id].kv_bytes, protect):
                return False
            self.copy(blob_id, lower)
        self.drop(blob_id, src)
        return True

    def make_room(self, location: Location, need_bytes: int, protect: frozenset[BlobId]) -> bool:
        """Free ``need_bytes`` at ``location`` by evicting LRU unpinned copies.

        A victim with a copy elsewhere is dropped; otherwise it is moved one
        tier down; if that is impossible it is dropped only when no live
        session references it. Pinned and protected copies stay.
        """
        if need_bytes > self.layout.spec(location).capacity_bytes:
            return False
        if self.free_bytes(location) >= need_bytes:
            return True  # the common case: no need to rank every resident blob
        for victim in self._lru_victims(location):
            if self.free_bytes(location) >= need_bytes:
                break
            if victim in protect or self.pinned(victim, location):
                continue
            if len(self.holders(victim)) > 1:
                self.drop(victim, location)  # another copy keeps it reachable
                continue
            if not self.demote(victim, location, protect) and not self.referenced(victim):
                self.drop(victim, location)  # nobody needs it: a cache may forget it
        return self.free_bytes(location) >= need_bytes
