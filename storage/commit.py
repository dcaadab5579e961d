"""Committing a plan: its steps made to happen, the invariants checked again.

A plan is made against one version of the store without changing it (`BlobStore.plan_*`);
`Commit.apply` changes the placement as its steps say, in order, checks what planning
decided once more (a stale plan, a pinned copy dropped, the last copy of a blob a live
session references dropped, a place overfilled: each raises), touches the plan's chain
where it went, adds the plan's bytes and tokens to the counters and bumps the version.
"""

from __future__ import annotations

from collections.abc import Callable

from storage.counters import StoreCounters
from storage.holds import Holds
from storage.plans import DROP, FETCH, OFFLOAD, TransferPlan


class Commit(Holds):
    """The commit of a plan, a base of `BlobStore` (which owns the index, the placement,
    the counters, the version and the `on_apply` hook these read and change)."""

    counters: StoreCounters
    on_apply: Callable[[TransferPlan], object] | None

    def apply(self, plan: TransferPlan) -> object:
        """Commit a plan made against the current version of the store. Returns what
        `on_apply(plan)` returns when the plan moves bytes (None without it, or when
        nothing moves: a write placing blobs, drops, a fetch that loads nothing)."""
        # (Its fields unpacked at once: a named tuple's fields are read one lookup each.)
        (purpose, location, now_s, base_version, fits, _, steps, _, _, requested, _,
         recomputed, _, _, chain, new_blobs, hits, misses, local) = plan
        if not fits:
            raise ValueError(f"cannot apply a {purpose.value} plan that does not fit")
        if base_version != self.version:
            raise ValueError(
                f"stale {purpose.value} plan: made at version {base_version}, "
                f"store is at {self.version}"
            )
        for blob in new_blobs:
            self.index.register(blob)
        placement = self.placement
        counters = self.counters
        dropped_here = 0  # copies dropped at the plan's own place
        moves = False  # some copy sends bytes
        for kind, blob_ids, place, sources, kv_bytes, _ in steps:  # (~9 steps a dev call)
            if kind is DROP:
                if place == location:
                    dropped_here += len(blob_ids)
                pins = self._pins_at(place)
                for blob_id in filter(pins.__contains__, blob_ids) if pins else ():
                    raise ValueError(f"plan drops pinned blob {blob_id} at {place}")
                for blob_id in placement.remove_run(blob_ids, place, kv_bytes):  # last copies
                    if self.referenced(blob_id):
                        raise AssertionError(f"plan dropped the last copy of live blob {blob_id}")
                counters.dropped_blobs += len(blob_ids)
                continue
            # Bytes at a place only grow along a run, so one check covers every blob.
            placement.add_run(blob_ids, place, kv_bytes, now_s)
            if placement.used_bytes[place] > placement.capacity_bytes[place]:
                raise AssertionError(f"plan overfills {place}")
            for source in sources:  # (a step's sources are the holders that send bytes)
                counters.moved_bytes[(source.location.tier, place.tier)] += source.kv_bytes
                moves = True
        if new_blobs and purpose is OFFLOAD:
            # A write and offload as one plan: its new blobs were computed at its place
            # and left it at once (never placed there): each counts as a copy dropped there.
            counters.dropped_blobs += len(new_blobs)
            dropped_here += len(new_blobs)
        last = steps[-1] if steps else None
        if chain and not (last is not None and last.kind is not DROP
                and last.location == location and last.blob_ids[-len(chain):] == chain) and not (
                purpose is OFFLOAD and dropped_here == len(chain)):
            # (When the last step added the whole chain there, in order, just now, it is
            # already the most recently used, in chain order: touching it changes nothing.
            # An offload drops only copies of its chain at its place, each once: when it
            # dropped as many as the chain holds, none is left there to touch. What is
            # left there of a write and offload's chain, the pinned copies, is touched
            # once here: the write's touch, then the offload's, would leave it so.)
            placement.touch_run(chain, location, now_s)
        if purpose is FETCH:
            totals = counters.hit_tokens
            for tier, n in hits.items():  # Counter.update, without its type checks
                totals[tier] += n
            totals = counters.miss_tokens
            for tier, n in misses.items():
                totals[tier] += n
            counters.requested_tokens += requested
            counters.recomputed_tokens += recomputed
            counters.local_hit_tokens += local
        self.version += 1
        return None if self.on_apply is None or not moves else self.on_apply(plan)
