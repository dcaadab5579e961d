"""A worker's dealings with the blob store: fetch a prefix into HBM, write new KV, offload.

Plans are pure decisions of the store; these helpers apply them at `now_s` and
return what the shell must wait for. A plan that does not fit in HBM falls
back to what a real system does: evict first, then retry; failing that, the
prefix is recomputed (fetch) or written straight to host memory (write).

When the cluster's links are attached to the store (`workers.kv_links.KvLinks`
as `store.on_apply`), every byte an applied plan moves runs on them: a fetch's
`transfer` is done when its copies have crossed, sharing the links with every
other copy in flight; a write's evictions, an offload and a promotion occupy
their links too, and nothing waits for them but later copies that read what
they are still writing. Without links (a worker tested on its own) a fetch
takes the store's uncontended estimate, `transfer_s`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from storage.plans import OFFLOAD, RECOMPUTE, TransferPlan
from storage.store import BlobStore
from storage.tiers import HBM, Location
from workers.kv_links import Transfer


class FetchResult(NamedTuple):
    """What a fetch brought to HBM."""

    prefix_tokens: int  # cached tokens the request need not compute
    recompute_tokens: int  # of those, recomputed from text because loading is slower
    transfer_s: float  # the store's estimate of the time to bring the rest into HBM
    pinned: tuple  # blob ids pinned at the worker's HBM until `release_fetch`
    transfer: Transfer | None = None  # the copies on the links (None: nothing moves)


def fetch(store: BlobStore, block_ids: tuple[int, ...], hbm: Location, now_s: float,
          recompute_s: Callable[[int], float] | None) -> FetchResult:
    if not block_ids:
        return FetchResult(0, 0, 0.0, ())
    plan = store.plan_fetch(block_ids, hbm, now_s, recompute_s)
    if not plan.fits:
        # No room at this HBM for the prefix: compute it all from text.
        return FetchResult(0, 0, 0.0, ())
    transfer = store.apply(plan)
    if plan.chain:  # (nothing to pin on a miss)
        store.pin_fetched(plan)
    recompute = plan.recompute_tokens if plan.action is RECOMPUTE else 0
    if store.on_apply is not None and transfer is None:  # nothing moves
        return FetchResult(prefix_tokens=plan.prefix_tokens, recompute_tokens=recompute,
                           transfer_s=0.0, pinned=plan.chain)
    return FetchResult(prefix_tokens=plan.prefix_tokens, recompute_tokens=recompute,
                       transfer_s=plan.time_s, pinned=plan.chain, transfer=transfer)


def release_fetch(store: BlobStore, hbm: Location, result: FetchResult) -> None:
    if result.pinned:
        store.unpin(hbm, result.pinned)


def write_chain(store: BlobStore, session_id: str, block_ids: tuple[int, ...],
                hbm: Location, host: Location, now_s: float) -> TransferPlan | None:
    """Record the KV just computed as blobs the session references: in HBM, or in `host`
    when HBM has no room. The applied write, or None when nothing was written."""
    if not block_ids:
        return None
    return _commit_write(store, session_id, block_ids, store.plan_write(block_ids, hbm, now_s),
                         host, now_s)


def _commit_write(store: BlobStore, session_id: str, block_ids: tuple[int, ...],
                  plan: TransferPlan, host: Location, now_s: float) -> TransferPlan | None:
    """Apply a write planned at HBM (`plan`), or at `host` when that one does not fit, and
    reference its chain. The applied write, or None when neither fits."""
    if not plan.fits:
        plan = store.plan_write(block_ids, host, now_s)
        if not plan.fits:
            return None
    store.apply(plan)
    # (The chain's last blob: `ref` marks its ancestors, the rest of the chain, with it.)
    store.ref(session_id, plan.chain[-1:])
    return plan


def write_and_offload(store: BlobStore, session_id: str, block_ids: tuple[int, ...],
                      hbm: Location, host: Location, now_s: float) -> tuple:
    """Record the KV just computed (as `write_chain`), then move the session's copies out
    of HBM (between turns KV leaves HBM). Returns the chain.

    Most calls do both as one plan (`BlobStore.plan_write_offload`: the new blobs go down
    from HBM without being placed there first); the others apply the write, then the
    offload. The store ends the same either way (but for its version count), and the same
    copies run on the links."""
    if not block_ids:
        return ()
    plan = store.plan_write_offload(block_ids, hbm, now_s)
    if plan.purpose is OFFLOAD:  # written and offloaded at once
        store.apply(plan)
        store.ref(session_id, plan.chain[-1:])  # (with its ancestors: the whole chain)
        return plan.chain
    written = _commit_write(store, session_id, block_ids, plan, host, now_s)
    if written is None:
        return ()
    if written.location.tier is HBM:
        offload(store, written.chain, hbm, now_s)
    return written.chain


def offload(store: BlobStore, chain: tuple, hbm: Location, now_s: float) -> None:
    """Move these copies out of `hbm` (pinned ones stay)."""
    plan = store.plan_offload(chain, hbm, now_s)
    if plan.fits:
        store.apply(plan)


@dataclass
class Handoff:
    """A filled call's KV kept pinned in its fill worker's HBM until its decode worker
    has pulled it (a direct hand-off: GPU to GPU, as NIXL and Mooncake's transfer engine
    move KV between prefill and decode instances). Released once (`released`): by the
    decode worker, or by the fill worker when it stops."""

    hbm: Location
    pinned: tuple
    released: bool = False


def write_for_handoff(store: BlobStore, session_id: str, block_ids: tuple[int, ...],
                      hbm: Location, host: Location, now_s: float
                      ) -> tuple[tuple, Handoff | None]:
    """Record the KV just computed as blobs at `hbm`, pinned there for the decode worker
    to copy from (`release_handoff` once it has). No room at `hbm`: written to host
    memory and offloaded as `write_and_offload` does, no hand-off."""
    if not block_ids:
        return (), None
    plan = store.plan_write(block_ids, hbm, now_s)
    if not plan.fits:
        return write_and_offload(store, session_id, block_ids, hbm, host, now_s), None
    store.apply(plan)
    store.ref(session_id, plan.chain[-1:])  # (with its ancestors: the whole chain)
    pinned = store.pin_present(hbm, plan.chain)
    return plan.chain, Handoff(hbm, pinned)


def handoff_fetched(store: BlobStore, fetched: FetchResult, session_id: str,
                    block_ids: tuple[int, ...], hbm: Location, host: Location, now_s: float
                    ) -> tuple[tuple, Handoff | None]:
    """A fill's end that hands its KV off: `release_fetch` of its fetch (``fetched``), then
    `write_for_handoff`, with the store left as those two leave it. The fetch's pins
    pass to the hand-off instead of being taken off and put back blob by blob: its chain
    leads the written chain and is all at ``hbm`` (pinned there), so only the blobs
    after it are pinned anew. (Pinned or not, the fetched chain is no victim of the
    write's evictions: the write protects the chain it extends.)"""
    pinned = fetched.pinned
    if not block_ids or not pinned:
        release_fetch(store, hbm, fetched)
        return write_for_handoff(store, session_id, block_ids, hbm, host, now_s)
    plan = store.plan_write(block_ids, hbm, now_s)
    if not plan.fits:
        release_fetch(store, hbm, fetched)
        return write_and_offload(store, session_id, block_ids, hbm, host, now_s), None
    chain = plan.chain
    n = len(pinned)
    if chain[:n] != pinned:  # (never so: the write's chain extends the fetched one)
        raise AssertionError(f"write at {hbm} does not extend the chain fetched there")
    store.apply(plan)
    store.ref(session_id, chain[-1:])  # (with its ancestors: the whole chain)
    return chain, Handoff(hbm, store.pin_more(hbm, pinned, chain[n:]))


def release_handoff(store: BlobStore, handoff: Handoff, now_s: float) -> None:
    """The decode worker has its copy (or the fill worker stops): the fill worker's
    leaves HBM (to host memory, between turns, as `write_and_offload` moves it)."""
    if handoff.released:
        return
    handoff.released = True
    store.unpin(handoff.hbm, handoff.pinned)
    offload(store, handoff.pinned, handoff.hbm, now_s)


def promote_hot(store: BlobStore, chain: tuple, rack: Location, min_sessions: int,
                now_s: float) -> int:
    """Copy to the rack cache the leading blobs of `chain` that at least `min_sessions`
    live sessions reference and the cache lacks; returns how many. A chain's sessions
    reference every ancestor of what they hold, so the shared blobs lead the chain and
    the walk stops at the first one shared less. Does nothing when the cache is full of
    what it cannot drop."""
    if min_sessions <= 0 or not chain:
        return 0
    there = store.placement.at[rack]
    hot = []
    for blob_id in chain:
        if store.sessions_referencing(blob_id) < min_sessions:
            break
        if blob_id not in there:
            hot.append(blob_id)
    if not hot:
        return 0
    plan = store.plan_promote(hot, rack, now_s)
    if not plan.fits:
        return 0
    store.apply(plan)
    return len(hot)
