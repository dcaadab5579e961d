"""A draft of changes that planning works on, over the committed ``Placement``.

``Draft`` layers a plan's changes over the placement without mutating it, so
planning stays pure and a plan that turns out not to fit is simply thrown away.
The hot paths work on runs of blobs: a draft records consecutive changes of one
kind at one place as one ``Step`` (a copy's sources striped over its holders as
``storage.stripes`` works them out).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence

from storage.blobs import BlobId, BlobIndex
from storage.placement import Placement
from storage.plans import Step, StepKind
from storage.stripes import Stripe, add_sent, sources_of
from storage.tiers import Location

_NONE: frozenset[Location] = frozenset()


class _Run:
    """A step being recorded: it grows while changes of its kind keep coming."""

    __slots__ = ("blob_ids", "kind", "kv_bytes", "location", "sent_bytes", "times_s")

    def __init__(self, kind: StepKind, location: Location) -> None:
        self.kind = kind
        self.location = location
        self.blob_ids: list[BlobId] = []
        self.kv_bytes = 0
        self.sent_bytes: dict[Location, int] = {}  # by holder, over the run
        self.times_s: list[float] = []  # of the copies, blob by blob

    def step(self) -> Step:
        return Step(kind=self.kind, blob_ids=tuple(self.blob_ids), location=self.location,
                    sources=sources_of(self.sent_bytes), kv_bytes=self.kv_bytes,
                    time_s=sum(self.times_s))


def _joined_run(runs: list[_Run], kind: StepKind, location: Location) -> _Run:
    """The run a step of ``kind`` at ``location`` joins: the last one when it is of the
    same kind and place (a plan's consecutive changes there are one step), else a new one."""
    if runs:
        last = runs[-1]
        if last.kind is kind and last.location == location:
            return last
    run = _Run(kind, location)
    runs.append(run)
    return run


class Draft:
    """A plan being built: steps plus their effect on a view of the placement.

    ``referenced`` says whether a live session needs a blob; ``pinned`` whether
    a computation is using the copy at a location. Neither may be lost.
    """

    __slots__ = ("_added", "_removed", "_runs", "_times_s", "_used_delta", "index", "layout",
                 "now_s", "pinned", "placement", "referenced")

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
        self._runs: list[_Run] = []
        self._times_s: list[float] = []  # of the copies, blob by blob in step order
        self._added: dict[Location, set[BlobId]] = {}
        self._removed: dict[Location, set[BlobId]] = {}
        self._used_delta: dict[Location, int] = {}

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(run.step() for run in self._runs)

    @property
    def time_s(self) -> float:
        """Seconds the steps take: the copies' times added up in step order."""
        return sum(self._times_s)

    # -- the view ---------------------------------------------------------
    def _changes(self, location: Location) -> tuple[set[BlobId], set[BlobId]]:
        """This draft's added and removed blobs at ``location`` (live sets)."""
        added = self._added.get(location)
        if added is None:
            added = self._added[location] = set()
            self._removed[location] = set()
        return added, self._removed[location]

    def has(self, blob_id: BlobId, location: Location) -> bool:
        removed = self._removed.get(location)
        if removed is None:
            return blob_id in self.placement.at[location]
        if blob_id in removed:
            return False
        return blob_id in self._added[location] or blob_id in self.placement.at[location]

    @property
    def pristine(self) -> bool:
        """No change recorded yet: the view is the committed placement."""
        return not self._added

    def holder_set(self, blob_id: BlobId) -> Collection[Location]:
        """Where the blob has a copy in this view (unordered; do not modify)."""
        held = self.placement.copies.get(blob_id)
        found: set[Location] | None = None
        for location, added in self._added.items():
            if blob_id in added:
                found = set(held or ()) if found is None else found
                found.add(location)
            elif blob_id in self._removed[location] and held and location in held:
                found = set(held) if found is None else found
                found.discard(location)
        if found is not None:
            return found
        return _NONE if held is None else held

    def holders(self, blob_id: BlobId) -> tuple[Location, ...]:
        return tuple(sorted(self.holder_set(blob_id)))

    def free_bytes(self, location: Location) -> int:
        used = self.placement.used_bytes[location] + self._used_delta.get(location, 0)
        return self.placement.capacity_bytes[location] - used

    def _lru_victims(self, location: Location) -> Iterator[BlobId]:
        """Oldest use first, lazily: a location's dict is kept in use order (insertion
        and `touch` move a blob to its end; a run's times never go backwards), then the
        copies this draft added, by blob id so the order is deterministic."""
        added, removed = self._changes(location)
        # Read in place, not copied: a draft never changes the committed placement, and
        # make_room usually needs the first few of thousands of resident blobs.
        for blob in self.placement.at[location]:
            if blob not in removed:
                yield blob
        yield from sorted(added)

    # -- steps ------------------------------------------------------------
    def _run(self, kind: StepKind, location: Location) -> _Run:
        return _joined_run(self._runs, kind, location)

    def _record_adds(self, run: _Run, blob_ids: Sequence[BlobId], kv_bytes: int) -> None:
        added, removed = self._changes(run.location)
        removed.difference_update(blob_ids)
        added.update(blob_ids)
        run.blob_ids.extend(blob_ids)
        run.kv_bytes += kv_bytes
        self._used_delta[run.location] = self._used_delta.get(run.location, 0) + kv_bytes

    def stripe(self, blob_id: BlobId, dst: Location) -> Stripe:
        """The striping of a copy of the blob to ``dst`` across all its holders."""
        return self.stripes((blob_id,), dst)[0]

    def stripes(self, blob_ids: Iterable[BlobId], dst: Location) -> list[Stripe]:
        """The striping of a copy to ``dst`` of each blob, across all its holders."""
        known = self.placement.stripes.setdefault(dst, {})
        copies = self.placement.copies
        pristine = self.pristine
        out = []
        for blob_id in blob_ids:
            held = copies.get(blob_id, _NONE) if pristine else self.holder_set(blob_id)
            key = held if type(held) is frozenset else frozenset(held)
            stripe = known.get(key)
            if stripe is None:
                stripe = known[key] = Stripe.to(self.layout, dst, held)
            if not stripe.holders:
                raise ValueError(f"blob {blob_id} has no copy to load into {dst}")
            out.append(stripe)
        return out

    def copy_time_s(self, blob_id: BlobId, dst: Location) -> float:
        """Seconds to copy a blob to ``dst`` striped across all its holders."""
        return self.index[blob_id].kv_bytes / self.stripe(blob_id, dst).rate

    def copy(self, blob_id: BlobId, dst: Location) -> None:
        kv_bytes = self.index[blob_id].kv_bytes
        stripe = self.stripe(blob_id, dst)
        self.copy_run((blob_id,), (kv_bytes,), dst, [stripe], [kv_bytes / stripe.rate])

    def copy_run(
        self,
        blob_ids: Sequence[BlobId],
        kv_bytes: Sequence[int],
        dst: Location,
        stripes: Sequence[Stripe],
        times_s: list[float],
    ) -> None:
        """Copy the blobs to ``dst`` in order, each striped across its holders
        (``stripes`` and ``times_s`` as worked out by ``stripes``)."""
        run = self._run(StepKind.COPY, dst)
        if len(kv_bytes) != len(stripes):
            raise ValueError(f"{len(kv_bytes)} sizes for {len(stripes)} stripes")
        add_sent(run.sent_bytes, kv_bytes, stripes)
        run.times_s += times_s
        self._times_s += times_s
        self._record_adds(run, blob_ids, sum(kv_bytes))

    def place(self, blob_id: BlobId, dst: Location, kv_bytes: int | None = None) -> None:
        if kv_bytes is None:
            kv_bytes = self.index[blob_id].kv_bytes
        self._record_adds(self._run(StepKind.PLACE, dst), (blob_id,), kv_bytes)

    def place_run(self, blob_ids: Sequence[BlobId], dst: Location, kv_bytes: int) -> None:
        """KV of ``blob_ids`` (``kv_bytes`` in all) computed at ``dst``."""
        if blob_ids:
            self._record_adds(self._run(StepKind.PLACE, dst), blob_ids, kv_bytes)

    def drop(self, blob_id: BlobId, location: Location) -> None:
        self.drop_run((blob_id,), location)

    def drop_run(self, blob_ids: Sequence[BlobId], location: Location) -> None:
        """Release the copies of ``blob_ids`` at ``location``, in order."""
        if not blob_ids:
            return
        kv_bytes = sum(map(self.index.sizes.__getitem__, blob_ids))
        added, removed = self._changes(location)
        added.difference_update(blob_ids)
        removed.update(blob_ids)
        run = self._run(StepKind.DROP, location)
        run.blob_ids.extend(blob_ids)
        run.kv_bytes += kv_bytes
        self._used_delta[location] = self._used_delta.get(location, 0) - kv_bytes

    # -- decisions --------------------------------------------------------
    def demote(self, blob_id: BlobId, src: Location, protect: Collection[BlobId]) -> bool:
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

    def make_room(self, location: Location, need_bytes: int, protect: Collection[BlobId]) -> bool:
        """Free ``need_bytes`` at ``location`` by evicting LRU unpinned copies.

        A victim with a copy elsewhere is dropped; otherwise it is moved one
        tier down; if that is impossible it is dropped only when no live
        session references it. Pinned and ``protect``ed copies stay.
        """
        if need_bytes > self.placement.capacity_bytes[location]:
            return False
        if self.free_bytes(location) >= need_bytes:
            return True  # the common case: no need to rank every resident blob
        if type(protect) is not frozenset:  # made only when some copy must go
            protect = frozenset(protect)
        for victim in self._lru_victims(location):
            if self.free_bytes(location) >= need_bytes:
                break
            if victim in protect or self.pinned(victim, location):
                continue
            if len(self.holder_set(victim)) > 1:
                self.drop(victim, location)  # another copy keeps it reachable
                continue
            if not self.demote(victim, location, protect) and not self.referenced(victim):
                self.drop(victim, location)  # nobody needs it: a cache may forget it
        return self.free_bytes(location) >= need_bytes
