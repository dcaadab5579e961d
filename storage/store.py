"""The blob store: pure placement decisions over immutable KV blobs.

Plans are computed without side effects (``plan_*``) and committed with
``apply`` (``storage.commit``), which checks the invariants: capacity is never
exceeded and the last copy of a blob a live session references is never
dropped. Time is passed in as ``now_s``; nothing here reads a clock.

Typical worker use::

    plan = store.plan_fetch(block_ids, hbm, now_s, recompute_s=cost.prefill_s)
    if plan.fits:
        store.apply(plan); store.pin(hbm, plan.chain); await asyncio.sleep(plan.time_s)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from itertools import filterfalse, islice
from operator import attrgetter, lt, truediv

from storage.blobs import Blob, BlobId, BlobIndex, PrefixMatch
from storage.commit import Commit
from storage.counters import (
    CounterSnapshot,
    StoreCounters,
    lookup_tokens,
    miss_tokens,
    served_hits,
)
from storage.draft import Draft
from storage.offload import direct_offload, leading_drops, offload_on_draft
from storage.placement import Placement
from storage.plans import (
    COPY,
    FETCH,
    HIT,
    LOAD,
    MISS,
    OFFLOAD,
    PLACE,
    WRITE,
    FetchAction,
    NoFit,
    Purpose,
    Step,
    TransferPlan,
)
from storage.stripes import SentByChain, Stripe, sources_of
from storage.tiers import Location, StoreLayout, Tier

_rate = attrgetter("rate")
_id = attrgetter("id")
_kv_bytes = attrgetter("kv_bytes")
_TIERS = tuple(Tier)  # (in order, as miss_tokens gives them)


def _sorted_ids(blob_ids: Iterable[BlobId]) -> tuple[BlobId, ...]:
    """The distinct ids in increasing order: a chain as given (its ids increase from
    the root: a blob is created after its parent), anything else sorted."""
    if type(blob_ids) is tuple and all(map(lt, blob_ids, islice(blob_ids, 1, None))):
        return blob_ids
    return tuple(sorted(set(blob_ids)))


def _recompute_steps(ids: list[BlobId], dst: Location, missing_bytes: int,
                     draft: Draft | None) -> tuple[tuple[Step, ...], float]:
    """The steps and time of a fetch that recomputes the missing blobs ``ids`` at
    ``dst``: the draft's evictions, if any, then one place. The worker charges the
    compute (it batches the recomputed tokens as prefill); the time is the transfer
    time of the evictions."""
    if draft is None:
        return (Step(kind=PLACE, blob_ids=tuple(ids), location=dst, kv_bytes=missing_bytes,
                     time_s=0),), 0
    draft.place_run(ids, dst, missing_bytes)
    return draft.steps, draft.time_s


def _load_steps(ids: list[BlobId], sizes: list[int], missing_bytes: int, dst: Location,
                stripes: list[Stripe], times_s: list[float], load_time_s: float,
                draft: Draft | None, sent_memo: SentByChain
                ) -> tuple[tuple[Step, ...], float, dict[Tier, int]]:
    """The steps, time and bytes sent by tier of a fetch that loads the missing blobs
    ``ids`` (``sizes``, ``missing_bytes`` in all) to ``dst``, each striped as ``stripes``
    says and taking ``times_s`` (``load_time_s`` in all): the draft's evictions, if any,
    then one copy (its bytes by holder through ``sent_memo``, the loads to ``dst`` kept)."""
    sent: dict[Tier, int] = {}  # the load's bytes by the sending holder's tier
    if draft is None:
        sources = sources_of(sent_memo.sent(ids, sizes, stripes))
        # (A draft adds the copies' times up in the same order: load_time_s.)
        steps = (Step(kind=COPY, blob_ids=tuple(ids), location=dst, sources=sources,
                      kv_bytes=missing_bytes, time_s=load_time_s),)
        for loc, n in sources:
            sent[loc.tier] = sent.get(loc.tier, 0) + n
        return steps, load_time_s, sent
    draft.copy_run(ids, sizes, dst, stripes, times_s)
    steps = draft.steps
    for step in steps:
        if step.kind is COPY and step.location == dst:  # not evictions
            for source in step.sources:
                tier = source.location.tier
                sent[tier] = sent.get(tier, 0) + source.kv_bytes
    return steps, draft.time_s, sent


class _StoreBase(Commit):
    """The store's state, lookups and plans: all of `BlobStore` but its cold plans (a base
    of it, so that a build that compiles this module as a typed class leaves the store's
    methods patchable, on the class as on an instance, as the tests and the store's
    benchmark patch them)."""

    # A fetch of which nothing is cached builds its plan without the lookup's walk of
    # the tiers (the state machine in tests/ shuts this to compare the two).
    _miss_directly = True

    def __init__(self, layout: StoreLayout, block_tokens: int, kv_bytes_per_token: int) -> None:
        self.layout = layout
        self.index = BlobIndex(block_tokens, kv_bytes_per_token)
        self.placement = Placement(layout)
        self.counters = StoreCounters()
        self.version = 0  # bumped by every mutation; a plan applies to its version only
        super().__init__()  # session references and pins (`Holds`, a base of `Commit`)
        # Told of every plan applied that moves bytes, once committed; what it returns,
        # `apply` returns (the workers' links shell starts the plan's copies on the
        # cluster's links there).
        self.on_apply: Callable[[TransferPlan], object] | None = None
        # What each holder sent for the latest loads to each place (`SentByChain`).
        self._sent_by_chain: defaultdict[Location, SentByChain] = defaultdict(SentByChain)

    # -- lookups ----------------------------------------------------------
    def match(self, block_ids: Sequence[int]) -> PrefixMatch:
        """Longest cached prefix whose blobs all still have a copy somewhere."""
        return self._reachable(self.index.match(block_ids))

    def _reachable(self, match: PrefixMatch) -> PrefixMatch:
        """The index's match up to its first blob without a copy left."""
        copies = self.placement.copies
        if all(map(copies.__contains__, match.blob_ids)):  # the common case, in C
            return match
        for i, blob in enumerate(match.chain):
            if blob.id not in copies:  # a blob's entry goes with its last copy
                end = blob.first_block
                return PrefixMatch(match.chain[:i], end, end * self.index.block_tokens)
        return match

    def holders(self, blob_id: BlobId) -> tuple[Location, ...]:
        return self.placement.holders(blob_id)

    def hot_blobs(self, min_sessions: int) -> tuple[BlobId, ...]:
        """Blobs live sessions share (system prompts): candidates for the rack cache."""
        return tuple(BlobId(b) for b, n in enumerate(self._ref_count) if n > 0 and n >= min_sessions)

    def snapshot(self) -> CounterSnapshot:
        return self.counters.snapshot(dict(self.placement.used_bytes))

    def resize(self, location: Location, capacity_bytes: int, now_s: float) -> TransferPlan | None:
        """Give ``location`` a new capacity (a worker's GPUs reloaded with other weights
        leave another KV room). When what it holds no longer fits, the least recently
        used blobs are demoted first; the eviction plan is returned (None when none was
        needed). Raises ValueError when pinned or last copies keep it from fitting."""
        if capacity_bytes < 1:
            raise ValueError(f"capacity_bytes must be >= 1, got {capacity_bytes}")
        plan = None
        if self.placement.used_bytes[location] > capacity_bytes:
            # make_room frees bytes under the current capacity: free what the shrink takes.
            shrink = self.placement.capacity_bytes[location] - capacity_bytes
            plan = self.plan_evict(location, shrink, now_s)
            if not plan.fits:
                raise ValueError(f"{location} cannot shrink to {capacity_bytes} bytes: "
                                 f"{self.placement.used_bytes[location]} are held")
            self.apply(plan)
        self.placement.capacity_bytes[location] = int(capacity_bytes)
        self.version += 1
        return plan

    # -- plans ------------------------------------------------------------
    def _check(self, location: Location, now_s: float) -> None:
        if location not in self.placement.at:  # (the layout's places, in a dict)
            raise KeyError(f"unknown storage location {location}")
        if now_s != now_s:  # NaN
            raise ValueError(f"now_s must be a number, got {now_s!r}")

    def _draft(self, location: Location, now_s: float) -> Draft:
        self._check(location, now_s)
        return Draft(self.placement, self.index, self.referenced, self.pinned, now_s)

    def _has_room(self, location: Location, need_bytes: int) -> bool:
        """``location`` has ``need_bytes`` free as committed: a draft's `make_room` would
        find the room without evicting anything (plans then need no draft)."""
        placement = self.placement
        return placement.capacity_bytes[location] - placement.used_bytes[location] >= need_bytes

    def _plan(self, draft: Draft, purpose: Purpose, location: Location,
              steps: tuple[Step, ...] | None = None, **fields) -> TransferPlan:
        return TransferPlan(purpose, location, draft.now_s, self.version, True, None,
                            draft.steps if steps is None else steps, draft.time_s, **fields)

    def _no_fit(self, purpose: Purpose, location: Location, now_s: float, why: NoFit, **fields):
        return TransferPlan(purpose, location, now_s, self.version, False, why, **fields)

    def plan_fetch(
        self,
        block_ids: Sequence[int],
        dst: Location,
        now_s: float,
        recompute_s: Callable[[int], float] | None = None,
    ) -> TransferPlan:
        """Bring the longest cached prefix of ``block_ids`` to ``dst``.

        Missing blobs are loaded (striped across holders) unless
        ``recompute_s(tokens)`` says recomputing them from text is faster.
        The whole of each blob is moved, even one the prefix uses in part.
        A load's hit tokens count at the tiers that sent its bytes, in
        proportion to the bytes each sent (``served_hits``).
        """
        self._check(dst, now_s)
        match, ids, helds = self._fetch_lookup(block_ids, dst)
        chain = match.blob_ids
        index = self.index
        requested = len(block_ids) * index.block_tokens
        if not chain and self._miss_directly:  # nothing cached: no hits, all misses
            return TransferPlan(
                purpose=FETCH, location=dst, now_s=now_s, base_version=self.version, time_s=0,
                action=MISS, requested_tokens=requested, chain=chain, hit_tokens={},
                miss_tokens=dict.fromkeys(_TIERS, requested))
        hits, local = lookup_tokens(match, dst, self.placement, index.block_tokens, helds)
        unmatched = requested - match.matched_tokens
        if not ids:
            misses = miss_tokens(hits, unmatched)
            action = HIT if match.chain else MISS
            return TransferPlan(
                purpose=FETCH, location=dst, now_s=now_s, base_version=self.version, time_s=0,
                action=action, requested_tokens=requested, prefix_tokens=match.matched_tokens,
                chain=chain, hit_tokens=hits, miss_tokens=misses, local_tokens=local)
        sizes = list(map(index.sizes.__getitem__, ids))
        missing_bytes = sum(sizes)
        # Room as committed (the common case): the steps are built without a draft.
        draft = None if self._has_room(dst, missing_bytes) else self._draft(dst, now_s)
        if draft is not None and not draft.make_room(dst, missing_bytes, chain):
            return self._no_fit(Purpose.FETCH, dst, now_s, NoFit.NO_ROOM,
                                requested_tokens=requested, local_tokens=local,
                                prefix_tokens=match.matched_tokens, chain=chain,
                                hit_tokens=hits, miss_tokens=miss_tokens(hits, unmatched))
        stripes = self._fetch_stripes(ids, dst, now_s, helds, draft)
        times_s = list(map(truediv, sizes, map(_rate, stripes)))
        load_time_s = sum(times_s)
        # Exact: every blob holds its tokens x kv_bytes_per_token bytes.
        missing_tokens = missing_bytes // index.kv_bytes_per_token
        recompute_time_s = math.inf if recompute_s is None else recompute_s(missing_tokens)
        if recompute_time_s < load_time_s:
            steps, time_s = _recompute_steps(ids, dst, missing_bytes, draft)
            return TransferPlan(Purpose.FETCH, dst, now_s, self.version, True, None, steps,
                                time_s, FetchAction.RECOMPUTE, requested,
                                match.matched_tokens, missing_tokens, load_time_s,
                                recompute_time_s, chain, hit_tokens=hits,
                                miss_tokens=miss_tokens(hits, unmatched), local_tokens=local)
        steps, time_s, sent = _load_steps(ids, sizes, missing_bytes, dst, stripes, times_s,
                                          load_time_s, draft, self._sent_by_chain[dst])
        served = served_hits(hits, local, dst.tier, sent)
        return TransferPlan(
            purpose=FETCH, location=dst, now_s=now_s, base_version=self.version, steps=steps,
            time_s=time_s, action=LOAD, requested_tokens=requested,
            prefix_tokens=match.matched_tokens, load_time_s=load_time_s,
            recompute_time_s=recompute_time_s, chain=chain, hit_tokens=served,
            miss_tokens=miss_tokens(served, unmatched), local_tokens=local)

    def _fetch_lookup(self, block_ids: Sequence[int], dst: Location
                      ) -> tuple[PrefixMatch, list[BlobId], list[frozenset[Location]] | None]:
        """A fetch's lookup: the longest cached prefix of ``block_ids`` whose blobs all
        still have a copy, the blobs of it ``dst`` lacks, and their holder sets when
        ``dst`` holds none of the prefix (else None)."""
        match = self.index.match(block_ids)
        chain = match.blob_ids
        if not chain:  # nothing cached
            return match, [], []
        placement = self.placement
        at_dst = placement.at[dst]
        helds = None
        if at_dst.keys().isdisjoint(chain):  # (the common case: all of it is missing)
            # The holder sets, which also say that every blob has a copy left (a blob's
            # entry goes with its last copy; a holder set is never empty).
            helds = list(map(placement.copies.get, chain))
            if not all(helds):
                helds = None
        if helds is not None:
            return match, list(chain), helds
        match = self._reachable(match)
        chain = match.blob_ids
        if at_dst.keys().isdisjoint(chain):
            ids = list(chain)
            return match, ids, list(map(placement.copies.__getitem__, ids))
        return match, list(filterfalse(at_dst.__contains__, chain)), None

    def _fetch_stripes(self, ids: list[BlobId], dst: Location, now_s: float,
                       helds: list[frozenset[Location]] | None, draft: Draft | None
                       ) -> list[Stripe]:
        """The striping of a copy of each blob to ``dst``: the ones the placement keeps
        when every one was worked out before (a chain's blobs have a few holder sets
        between them) and the draft, if any, has changed nothing; else the draft's (one
        made for it if need be). ``helds``: the blobs' holder sets, when known."""
        if draft is None or draft.pristine:
            known = self.placement.stripes.get(dst)
            if known is not None:
                if helds is None:
                    helds = list(map(self.placement.copies.__getitem__, ids))
                stripes = list(map(known.get, helds))
                if all(stripes):  # (a stripe is never false)
                    return stripes
        return (draft or self._draft(dst, now_s)).stripes(ids, dst)

    def plan_write(
        self,
        block_ids: Sequence[int],
        dst: Location,
        now_s: float,
        segment_ends: Sequence[int] = (),
    ) -> TransferPlan:
        """Record KV just computed at ``dst`` for ``block_ids`` as new blobs.

        Only the part no blob covers yet becomes new blobs (split at
        ``segment_ends``); the already cached prefix is shared. A blob of that
        prefix whose every copy was dropped is placed at ``dst`` again: its KV
        was just computed there.
        """
        self._check(dst, now_s)
        match, new = self.index.describe(block_ids, segment_ends)
        new_ids = tuple(map(_id, new))
        return self._write_plan(match, new, new_ids, match.blob_ids + new_ids, dst, now_s)

    def _write_plan(self, match: PrefixMatch, new: tuple[Blob, ...], new_ids: tuple[BlobId, ...],
                    chain: tuple[BlobId, ...], dst: Location, now_s: float) -> TransferPlan:
        """`plan_write`'s plan, once the index has described the write (``match``, then
        the ``new`` blobs, ``new_ids``; ``chain``: both)."""
        lost = list(filterfalse(self.placement.copies.__contains__, match.blob_ids))
        lost_bytes = sum(map(self.index.sizes.__getitem__, lost))
        need = sum(map(_kv_bytes, new))
        if self._has_room(dst, need + lost_bytes):
            # One step places both (a draft records consecutive places at one place as one).
            placed = (*lost, *new_ids) if lost else new_ids
            steps = (Step(kind=PLACE, blob_ids=placed, location=dst,
                          kv_bytes=lost_bytes + need, time_s=0),) if placed else ()
            return TransferPlan(purpose=WRITE, location=dst, now_s=now_s,
                                base_version=self.version, steps=steps, time_s=0, chain=chain,
                                new_blobs=new)
        draft = self._draft(dst, now_s)
        if not draft.make_room(dst, need + lost_bytes, match.blob_ids):
            return self._no_fit(Purpose.WRITE, dst, now_s, NoFit.NO_ROOM, chain=chain)
        draft.place_run(lost, dst, lost_bytes)
        # Not in the index until applied, so their sizes are given.
        draft.place_run(new_ids, dst, need)
        return self._plan(draft, Purpose.WRITE, dst, chain=chain, new_blobs=new)

    def plan_write_offload(self, block_ids: Sequence[int], src: Location,
                           now_s: float) -> TransferPlan:
        """A call's end under the offload policy as one plan: the KV just computed at
        ``src`` recorded as blobs (``plan_write``, no segment ends) and the chain's copies
        moved out of ``src`` (``plan_offload``), its new blobs copied down from ``src``
        without being placed there first. The plan (an offload with ``new_blobs``) has
        the offload's steps but the new blobs' drops at ``src``, and applied it leaves
        the store as the write and then the offload would, each applied (the same
        copies in the same order, the same counters, the same use order everywhere;
        only its version moves by one, not two: one apply).

        Made so when the write has room at ``src`` as committed, re-places no dropped
        blob and the offload needs no draft (`direct_offload`); otherwise the write's
        own plan (``plan_write``'s: purpose WRITE, maybe not fitting) is returned, for
        the caller to apply and offload after, as two plans."""
        self._check(src, now_s)
        match, new = self.index.describe(block_ids, ())
        new_ids = tuple(map(_id, new))
        old = match.blob_ids
        chain = old + new_ids
        placement = self.placement
        if (all(map(placement.copies.__contains__, old))  # (no blob of it to place again)
                and self._has_room(src, sum(map(_kv_bytes, new)))):
            # A chain is in increasing order by construction (a blob's parent is older),
            # as `_sorted_ids` would give it; the new blobs are none of `src`'s copies yet.
            pins = self._pins_at(src)
            drops, ids = leading_drops(placement, pins, old, src)
            plain = self._plain_offload(ids, drops, src, chain, new)
            if plain is not None:
                steps, time_s = plain
                return TransferPlan(purpose=OFFLOAD, location=src, now_s=now_s,
                                    base_version=self.version, steps=steps, time_s=time_s,
                                    chain=chain, new_blobs=new)
        return self._write_plan(match, new, new_ids, chain, src, now_s)

    def plan_offload(self, blob_ids: Iterable[BlobId], src: Location, now_s: float) -> TransferPlan:
        """Move these blobs' copies out of ``src`` (between turns KV leaves HBM).

        A copy that also exists in a lower tier is dropped; otherwise it moves
        one tier down. Pinned copies stay.
        """
        self._check(src, now_s)
        chain = _sorted_ids(blob_ids)  # (also what make_room protects, when it must evict)
        pins = self._pins_at(src)
        drops, ids = leading_drops(self.placement, pins, chain, src)
        plain = self._plain_offload(ids, drops, src, chain)
        if plain is not None:
            steps, time_s = plain
            return TransferPlan(purpose=OFFLOAD, location=src, now_s=now_s,
                                base_version=self.version, steps=steps, time_s=time_s,
                                chain=chain)
        draft = self._draft(src, now_s)
        if not offload_on_draft(draft, pins, ids, drops, src, chain):
            return self._no_fit(Purpose.OFFLOAD, src, now_s, NoFit.NO_ROOM_BELOW)
        return self._plan(draft, Purpose.OFFLOAD, src, chain=chain)

    def _plain_offload(self, ids: Sequence[BlobId], drops: list[BlobId], src: Location,
                       protect: Collection[BlobId], new: Sequence[Blob] = ()
                       ) -> tuple[tuple[Step, ...], float] | None:
        """`storage.offload.direct_offload` over this store (the state machine's tests
        switch it off to compare with the draft's plans). The pins at ``src`` and the
        tier below, which it reads, are counted in first (`_pins_at`)."""
        lower = self.layout.lower(src)
        if lower is not None:
            self._pins_at(lower)
        return direct_offload(self.placement, self.index.sizes, self._pins, ids, drops, src,
                              protect, new)


class BlobStore(_StoreBase):
    """The blob store (`_StoreBase`), with its plans that evict and promote."""

    def plan_evict(self, location: Location, need_bytes: int, now_s: float) -> TransferPlan:
        """Make ``need_bytes`` free at ``location`` (LRU, demoting down the tiers)."""
        if need_bytes < 0:
            raise ValueError(f"need_bytes must be >= 0, got {need_bytes}")
        draft = self._draft(location, now_s)
        if not draft.make_room(location, need_bytes, frozenset()):
            return self._no_fit(Purpose.EVICT, location, now_s, NoFit.NO_ROOM)
        return self._plan(draft, Purpose.EVICT, location)

    def plan_promote(self, blob_ids: Iterable[BlobId], dst: Location, now_s: float) -> TransferPlan:
        """Copy blobs to ``dst`` (a hot prefix into the rack cache)."""
        draft = self._draft(dst, now_s)
        ids = tuple(b for b in sorted(set(blob_ids)) if not draft.has(b, dst))
        need = sum(self.index[b].kv_bytes for b in ids)
        if not draft.make_room(dst, need, frozenset(ids)):
            return self._no_fit(Purpose.PROMOTE, dst, now_s, NoFit.NO_ROOM, chain=ids)
        for blob_id in ids:
            draft.copy(blob_id, dst)
        return self._plan(draft, Purpose.PROMOTE, dst, chain=ids)
