"""An offload's steps: what leaves a place between turns, and how.

Between turns a session's copies leave HBM (`BlobStore.plan_offload`): a copy that also
exists in a slower tier is dropped, any other moves one tier down. The leading plain
drops are found in C (`leading_drops`). When each copy moved down finds room there as
committed, or once least recently used copies there are dropped or moved a tier further
down, the steps are the ones a `storage.draft.Draft` would record, in the same order
with the same sums; they are built without one (`direct_offload`: a draft keeps a view
of its own changes that such a plan never reads). Anything else is walked on a draft
(`offload_on_draft`). The store's state machine test compares the two on every offload
it makes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import filterfalse

from storage.blobs import Blob, BlobId
from storage.draft import Draft
from storage.placement import Placement
from storage.plans import COPY, DROP, Source, Step
from storage.stripes import Stripe
from storage.tiers import Location


def leading_drops(placement: Placement, pins: dict[BlobId, int], ids: tuple[BlobId, ...],
                  src: Location) -> tuple[list[BlobId], Sequence[BlobId]]:
    """The plain drops that lead an offload of ``ids`` (in increasing order) from ``src``:
    the copies there, not pinned (``pins``: the pins at ``src``), up to the first whose
    blob has no copy slower than ``src``; and the ids from that copy on (to walk)."""
    slowest = placement.slowest_tier
    here = placement.at[src]
    tier = src.tier
    if ids:  # a chain just written: its first copy is here, unpinned, and goes down
        first = ids[0]
        if first in here and first not in pins and slowest[placement.copies[first]] <= tier:
            return [], ids
    # The leading blobs that also have a slower copy are plain drops (pinned ones and
    # those not here are passed over): found in C.
    present = list(filter(here.__contains__, ids))
    if pins:
        present = list(filterfalse(pins.__contains__, present))
    # A chain's blobs share a few holder sets: the lead ends at the first blob
    # whose set has no copy slower than src.
    helds = list(map(placement.copies.__getitem__, present))
    if helds and slowest[helds[0]] <= tier:
        lead = 0
    else:
        lead = len(present)
        for held in set(helds):  # (a few sets: no generator to build)
            if slowest[held] <= tier:
                first = helds.index(held)
                if first < lead:
                    lead = first
    if lead == len(present):  # (the common case: all of them; no copy of the list)
        return present, ()
    # (Every id present: the walk starts at the same position in both.)
    return present[:lead], ids[lead if len(present) == len(ids) else ids.index(present[lead]):]


def offload_on_draft(draft: Draft, pins: dict[BlobId, int], ids: Sequence[BlobId],
                     drops: list[BlobId], src: Location, protect: Collection[BlobId]) -> bool:
    """Record on ``draft`` an offload from ``src`` that drops ``drops`` and then walks
    ``ids`` (``pins``: the pins at ``src``): plain drops gathered into runs, a copy with
    no slower copy moved one tier down (making room there) or, when it cannot move and
    no live session references it, dropped. False when a referenced last copy cannot
    move down (the offload does not fit)."""
    placement = draft.placement
    here = placement.at[src]
    copies = placement.copies
    slowest = placement.slowest_tier
    # Plain drops are gathered into one run; anything else records them first, so the
    # steps keep the order a blob-by-blob walk would give them. Until the first change
    # the draft's view is the committed placement, read directly.
    for blob_id in ids:
        if draft.pristine:
            if blob_id not in here or blob_id in pins:
                continue
            if slowest[copies[blob_id]] > src.tier:  # a slower copy exists
                drops.append(blob_id)
                continue
        else:
            if not draft.has(blob_id, src) or draft.pinned(blob_id, src):
                continue
            held = draft.holder_set(blob_id)
            if len(held) > 1 and max(held).tier > src.tier:  # a slower copy exists
                drops.append(blob_id)
                continue
        draft.drop_run(drops, src)
        drops.clear()
        if not draft.demote(blob_id, src, protect):
            if draft.referenced(blob_id) and len(draft.holder_set(blob_id)) == 1:
                return False
            draft.drop(blob_id, src)
    draft.drop_run(drops, src)
    return True


def direct_offload(placement: Placement, sizes: list[int],
                   pins: dict[Location, dict[BlobId, int]], ids: Sequence[BlobId],
                   drops: list[BlobId], src: Location, protect: Collection[BlobId],
                   new: Sequence[Blob] = ()) -> tuple[tuple[Step, ...], float] | None:
    """The steps and time of an offload that drops ``drops`` and then walks ``ids``,
    when each copy it demotes (one with no slower copy) finds room one tier down as
    committed (`_roomy_offload`), or once least recently used copies there are dropped
    or moved a tier further down (`_evicting_offload`): the steps a draft would record, built
    without one. None otherwise (the draft decides then).

    ``new``: blobs computed at ``src`` that are not placed yet (a call's write and
    offload as one plan, `BlobStore.plan_write_offload`): each is demoted after the
    walk, as a copy there that only ``src`` holds would be, but it is never placed at
    ``src``, so no step drops it there."""
    here = placement.at[src]
    copies = placement.copies
    pinned = pins.get(src, ())
    slowest = placement.slowest_tier
    tier = src.tier
    # The drops before each demoted copy. Nothing the walk passes is changed before
    # it gets there, so the committed placement answers for the draft's view.
    before: list[list[BlobId] | None] = []
    demoted: list[BlobId] = []
    pending = list(drops)
    for blob_id in ids:
        if blob_id not in here or blob_id in pinned:
            continue
        if slowest[copies[blob_id]] > tier:  # a slower copy exists
            pending.append(blob_id)
            continue
        before.append(pending)
        demoted.append(blob_id)
        pending = []
    if not demoted and not new:  # plain drops alone: one step
        return ((Step(kind=DROP, blob_ids=tuple(pending), location=src,
                      kv_bytes=sum(map(sizes.__getitem__, pending)), time_s=0),)
                if pending else ()), 0
    lower = placement.layout.lower(src)
    if lower is None:
        return None
    # Each demoted copy's bytes and holders (a new blob's: ``src`` alone, as once placed).
    kvs = list(map(sizes.__getitem__, demoted))
    helds = list(map(copies.__getitem__, demoted))
    after: list[BlobId] | None = pending
    if new:
        # The drops after the last copy placed at src go with its drop; a new blob
        # has none (None: it was never placed, so no drop follows its copy).
        solo = placement.shared_set((src,))
        for blob in new:
            before.append(after)
            demoted.append(blob.id)
            kvs.append(blob.kv_bytes)
            helds.append(solo)
            after = None
    if placement.capacity_bytes[lower] - placement.used_bytes[lower] < sum(kvs):
        return _evicting_offload(placement, sizes, pins, before, demoted, kvs, helds, after,
                                 src, lower, protect)
    return _roomy_offload(placement, sizes, before, demoted, kvs, helds, after, src, lower)


def _copy_step(blob_id: BlobId, kv_bytes: int, dst: Location, stripe: Stripe
               ) -> tuple[Step, float]:
    """The step copying one blob of ``kv_bytes`` to ``dst`` striped as ``stripe`` says,
    and its time: the step a draft records for it (its sources what `add_sent` and
    `sources_of` give: the stripe's holders are in order and distinct)."""
    time_s = kv_bytes / stripe.rate
    holders = stripe.holders
    if len(holders) == 1:  # (one holder sends it all)
        sources = (Source(location=holders[0], kv_bytes=kv_bytes),) if kv_bytes else ()
    else:
        sources = tuple(Source(location=loc, kv_bytes=n)
                        for loc, n in zip(holders, stripe.sent_bytes((kv_bytes,)), strict=True)
                        if n)
    return Step(kind=COPY, blob_ids=(blob_id,), location=dst, sources=sources,
                kv_bytes=kv_bytes, time_s=time_s), time_s


def _drops_then_copy(steps: list[Step], times_s: list[float], ids: list[BlobId],
                     place: Location, dropped: int, blob_id: BlobId, kv_bytes: int,
                     dst: Location, stripe: Stripe) -> None:
    """`_evicting_offload`'s run of drops not yet a step (``ids`` at ``place``,
    ``dropped`` bytes; none when empty) made one, then the copy of ``blob_id`` to
    ``dst`` (`_copy_step`), its time to ``times_s``."""
    if ids:
        steps.append(Step(kind=DROP, blob_ids=tuple(ids), location=place, kv_bytes=dropped,
                          time_s=0))
    step, time_s = _copy_step(blob_id, kv_bytes, dst, stripe)
    steps.append(step)
    times_s.append(time_s)


def _roomy_offload(placement: Placement, sizes: list[int],
                   before: list[list[BlobId] | None], demoted: list[BlobId], kvs: list[int],
                   helds: list[frozenset[Location]], after: list[BlobId] | None,
                   src: Location, lower: Location) -> tuple[tuple[Step, ...], float]:
    """`direct_offload`'s steps when ``lower`` has room as committed for the copies it
    demotes (``kvs`` bytes each, held at ``helds``): the drops before each demoted copy
    (``before``; ``after``: those after the last), its copy down, then its drop with the
    plain drops up to the next (None after a new blob: it has no drop, never placed)."""
    known = placement.stripes.setdefault(lower, {})
    steps: list[Step] = []
    if before[0]:
        steps.append(Step(kind=DROP, blob_ids=tuple(before[0]), location=src,
                          kv_bytes=sum(map(sizes.__getitem__, before[0])), time_s=0))
    times_s = []
    # Each demotion copies one tier down, then drops the copy here along with the
    # plain drops up to the next demotion (one run of drops).
    for blob_id, kv_bytes, held, drops in zip(demoted, kvs, helds, (*before[1:], after),
                                              strict=True):
        stripe = known.get(held)
        if stripe is None:
            stripe = known[held] = Stripe.to(placement.layout, lower, held)
        step, time_s = _copy_step(blob_id, kv_bytes, lower, stripe)
        times_s.append(time_s)
        steps.append(step)
        if drops:
            steps.append(Step(kind=DROP, blob_ids=(blob_id, *drops), location=src,
                              kv_bytes=kv_bytes + sum(map(sizes.__getitem__, drops)), time_s=0))
        elif drops is not None:  # (the common case: a chain just written demotes blob after blob)
            steps.append(Step(kind=DROP, blob_ids=(blob_id,), location=src, kv_bytes=kv_bytes,
                              time_s=0))
    return tuple(steps), sum(times_s)


def _evicting_offload(placement: Placement, sizes: list[int],
                      pins: dict[Location, dict[BlobId, int]],
                      before: list[list[BlobId] | None], demoted: list[BlobId],
                      kvs: list[int], helds: list[frozenset[Location]],
                      after: list[BlobId] | None, src: Location, lower: Location,
                      protect: Collection[BlobId]) -> tuple[tuple[Step, ...], float] | None:
    """`direct_offload`'s steps when ``lower`` must make room for the copies it
    demotes (arguments as `_roomy_offload`'s): as a draft's `make_room` would, least
    recently used first (pinned and ``protect``ed copies stay), a copy held elsewhere
    too is dropped and any other moved a tier down, where there is room as committed. None when that does not
    free enough, or a copy cannot move down so (the draft decides then).

    The steps are those a draft records: every copy is a step of its own (a drop
    follows each), and drops at one place in a row are one step (`ids`, `place`,
    `dropped`: the run of drops not yet made a step)."""
    copies = placement.copies
    sizes_of = sizes.__getitem__
    steps: list[Step] = []
    times_s: list[float] = []  # of the copies, in step order
    ids: list[BlobId] = list(before[0])
    place = src
    dropped = sum(map(sizes_of, ids))
    capacity = placement.capacity_bytes[lower]
    free = capacity - placement.used_bytes[lower]
    resident = placement.at[lower]
    pinned = pins.get(lower, ())
    evicted: set[BlobId] = set()
    protected: frozenset[BlobId] | None = None
    below = placement.layout.lower(lower)
    free_below = 0 if below is None else (placement.capacity_bytes[below]
                                          - placement.used_bytes[below])
    for blob_id, kv_bytes, held_here, drops in zip(demoted, kvs, helds,
                                                   (*before[1:], after), strict=True):
        if kv_bytes > capacity:
            return None
        if free < kv_bytes:
            if protected is None:
                protected = frozenset(protect)
            for victim in resident:  # (oldest use first; this plan's copies come last)
                if free >= kv_bytes:
                    break
                if victim in evicted or victim in protected or victim in pinned:
                    continue
                held = copies[victim]
                size = sizes[victim]
                if len(held) == 1:  # the only copy: moved down, then dropped here
                    if free_below < size:
                        return None
                    free_below -= size
                    _drops_then_copy(steps, times_s, ids, place, dropped, victim, size, below,
                                     _stripe(placement, below, held))
                    ids, place, dropped = [victim], lower, size
                elif ids and place == lower:  # dropped with the drops there before it
                    ids.append(victim)
                    dropped += size
                else:
                    if ids:
                        steps.append(Step(kind=DROP, blob_ids=tuple(ids), location=place, kv_bytes=dropped,
                          time_s=0))
                    ids, place, dropped = [victim], lower, size
                evicted.add(victim)
                free += size
            if free < kv_bytes:
                return None
        free -= kv_bytes
        _drops_then_copy(steps, times_s, ids, place, dropped, blob_id, kv_bytes, lower,
                         _stripe(placement, lower, held_here))
        if drops is None:  # (a new blob: never placed at src, so not dropped there)
            ids, place, dropped = [], src, 0
        else:
            ids, place = [blob_id, *drops], src
            dropped = kv_bytes + sum(map(sizes_of, drops)) if drops else kv_bytes
    if ids:
        steps.append(Step(kind=DROP, blob_ids=tuple(ids), location=place, kv_bytes=dropped,
                          time_s=0))
    return tuple(steps), sum(times_s)


def _stripe(placement: Placement, dst: Location, held: frozenset[Location]) -> Stripe:
    """The striping of a copy to ``dst`` from the holders ``held``."""
    known = placement.stripes.setdefault(dst, {})
    stripe = known.get(held)
    if stripe is None:
        stripe = known[held] = Stripe.to(placement.layout, dst, held)
    return stripe
