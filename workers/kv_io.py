"""A worker's dealings with the blob store: fetch a prefix into HBM, write new KV, offload.

Plans are pure decisions of the store; these helpers apply them at `now_s` and
return what the shell must wait for. A plan that does not fit in HBM falls
back to what a real system does: evict first, then retry; failing that, the
prefix is recomputed (fetch) or written straight to host memory (write).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from storage.plans import FetchAction
from storage.store import BlobStore
from storage.tiers import Location, Tier


@dataclass(frozen=True)
class FetchResult:
    prefix_tokens: int  # cached tokens the request need not compute
    recompute_tokens: int  # of those, recomputed from text because loading is slower
    transfer_s: float  # time to bring the rest into HBM
    pinned: tuple  # blob ids pinned at the worker's HBM until `release_fetch`


def fetch(store: BlobStore, block_ids: tuple[int, ...], hbm: Location, now_s: float,
          recompute_s: Callable[[int], float] | None) -> FetchResult:
    if not block_ids:
        return FetchResult(0, 0, 0.0, ())
    plan = store.plan_fetch(block_ids, hbm, now_s, recompute_s)
    if not plan.fits:
        # No room at this HBM for the prefix: compute it all from text.
        return FetchResult(0, 0, 0.0, ())
    store.apply(plan)
    store.pin(hbm, plan.chain)
    recompute = plan.recompute_tokens if plan.action is FetchAction.RECOMPUTE else 0
    return FetchResult(plan.prefix_tokens, recompute, plan.time_s, plan.chain)


def release_fetch(store: BlobStore, hbm: Location, result: FetchResult) -> None:
    if result.pinned:
        store.unpin(hbm, result.pinned)


def write_and_offload(store: BlobStore, session_id: str, block_ids: tuple[int, ...],
                      hbm: Location, host: Location, now_s: float) -> tuple:
    """Record the KV just computed as blobs the session references, then move the
    session's copies out of HBM (between turns KV leaves HBM). Returns the chain."""
    if not block_ids:
        return ()
    plan = store.plan_write(block_ids, hbm, now_s)
    if not plan.fits:
        plan = store.plan_write(block_ids, host, now_s)
        if not plan.fits:
            return ()
    store.apply(plan)
    store.ref(session_id, plan.chain)
    if plan.location.tier is Tier.HBM:
        offload = store.plan_offload(plan.chain, hbm, now_s)
        if offload.fits:
            store.apply(offload)
    return plan.chain
