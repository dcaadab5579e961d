"""Where a call's KV goes when the call ends: the KV placement policy (`--kv-policy`).

- `offload`, the source essay's design: HBM holds only what is computing. When a call
  ends its KV is written down to its node's host DRAM and leaves HBM; the next turn's
  worker loads the whole prefix back (`kv_io.write_and_offload`).
- `retain`, what serving engines do (SGLang RadixAttention with HiCache, vLLM automatic
  prefix caching, NVIDIA Dynamo's KV block manager): the KV stays resident in HBM after
  the call, unpinned, and is evicted only when HBM is needed, least recently used first.
  New KV is written through to host DRAM as it is stored (HiCache's `write_through`
  policy), so evicting a resident blob is a drop that copies nothing and never delays
  the call that needs the room; what is written through is only the KV no blob held
  yet, a call's new tokens.

Within one use time, eviction takes a chain's last blobs first and its root last (vLLM
frees a request's blocks in reverse order for this; SGLang's radix tree evicts leaves
only): a prefix many calls share outlives the tails that continue it.

A worker's KV budget does not count retained blobs: a decode worker admits on the KV
of the sequences it holds alone, and then evicts retained blobs until they fit in what
those sequences leave (`trim_retained`). The router and the decode workers see what is
resident through `resident_bytes`, as a real router learns it from the workers' KV
events (Dynamo's KV-aware router, SGLang's cache-aware router).
"""

from __future__ import annotations

import math
from enum import Enum

from storage.plans import TransferPlan
from storage.store import BlobStore
from storage.tiers import HBM, Location, Tier
from workers.kv_io import write_and_offload, write_chain


class KVPolicy(Enum):
    OFFLOAD = "offload"
    RETAIN = "retain"


DEFAULT_KV_POLICY = KVPolicy.OFFLOAD


def finish_call(policy: KVPolicy, store: BlobStore, session_id: str,
                block_ids: tuple[int, ...], hbm: Location, host: Location,
                now_s: float) -> tuple:
    """Record the KV a call computed as blobs its session references and place them as
    the policy says. Returns the session's chain."""
    if policy is KVPolicy.OFFLOAD:
        return write_and_offload(store, session_id, block_ids, hbm, host, now_s)
    return write_and_retain(store, session_id, block_ids, hbm, host, now_s)


def write_and_retain(store: BlobStore, session_id: str, block_ids: tuple[int, ...],
                     hbm: Location, host: Location, now_s: float) -> tuple:
    """The new KV stays in HBM, unpinned, and is written through to `host`; the chain is
    marked used now, its root last. No room in HBM: written to `host` alone."""
    plan = write_chain(store, session_id, block_ids, hbm, host, now_s)
    if plan is None:
        return ()
    if plan.location.tier is HBM:
        write_through(store, plan, host, now_s)
        store.placement.touch_run(reversed(plan.chain), hbm, now_s)
    return plan.chain


def write_through(store: BlobStore, write: TransferPlan, host: Location, now_s: float) -> None:
    """Copy the blobs an applied write plan created to `host` (HiCache's write-through).
    No room there: they stay in HBM alone, and eviction demotes them."""
    if write.new_blobs:
        plan = store.plan_promote([b.id for b in write.new_blobs], host, now_s)
        if plan.fits:
            store.apply(plan)


def trim_retained(store: BlobStore, hbm: Location, held_share: float, now_s: float) -> bool:
    """Evict retained (unpinned) blobs at `hbm`, least recently used first, until they
    fit in the share of its capacity the worker's sequences leave (`held_share`: their
    KV, the pinned blobs among it, over the worker's KV capacity). False, and nothing
    evicted, when that cannot be done (a blob a live session needs has no room below)."""
    capacity = store.placement.capacity_bytes[hbm]
    used = store.placement.used_bytes[hbm]
    room = capacity * (1.0 - min(1.0, max(0.0, held_share)))
    if used <= room:
        return True  # even counting the pinned blobs as retained, they fit
    retained = used - store.pinned_bytes(hbm)
    if retained <= room:
        return True
    # Free what the excess takes: used falls by it (pinned blobs stay).
    plan = store.plan_evict(hbm, capacity - used + math.ceil(retained - room), now_s)
    if plan.fits:
        store.apply(plan)
    return plan.fits


def resident_bytes(store: BlobStore, blob_ids: tuple) -> dict[str, int]:
    """Bytes of these blobs resident in each worker's HBM, by worker (HBM holder)."""
    copies, sizes = store.placement.copies, store.index.sizes
    by_holders: dict[frozenset, int] = {}
    for blob_id in blob_ids:
        held = copies.get(blob_id)
        if held is not None:
            by_holders[held] = by_holders.get(held, 0) + sizes[blob_id]
    out: dict[str, int] = {}
    for held, n in by_holders.items():
        for loc in held:
            if loc.tier is Tier.HBM:
                out[loc.holder] = out.get(loc.holder, 0) + n
    return out
