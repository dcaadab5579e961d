"""Transfer plans: what a placement decision asks to be done, and what it costs.

A plan is a value. ``BlobStore.plan_*`` build one without touching the store;
``BlobStore.apply`` commits it at once (the shell then waits ``time_s`` on the
run's clock before the KV is usable). Steps run in order: evictions first,
then loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import NamedTuple

from storage.blobs import Blob, BlobId
from storage.tiers import Location, Tier


class StepKind(Enum):
    COPY = "copy"  # bytes move from the sources to ``location``; sources keep their copies
    PLACE = "place"  # KV computed at ``location`` (a write or a recompute); no bytes move
    DROP = "drop"  # the copy at ``location`` is released


class Purpose(Enum):
    FETCH = "fetch"
    WRITE = "write"
    OFFLOAD = "offload"
    EVICT = "evict"
    PROMOTE = "promote"


class FetchAction(Enum):
    """How a fetch gets the cached prefix to its destination."""

    MISS = "miss"  # no prefix is cached anywhere
    HIT = "hit"  # the whole cached prefix is already at the destination
    LOAD = "load"  # copy the missing blobs, striped across their holders
    RECOMPUTE = "recompute"  # recomputing from text is faster than loading


# The members as module constants, for the hot paths to import: on Python 3.11 a member
# read off its enum class is an attribute lookup of ~0.1 us, a module constant ~15 ns.
COPY, PLACE, DROP = StepKind.COPY, StepKind.PLACE, StepKind.DROP
FETCH, WRITE, OFFLOAD = Purpose.FETCH, Purpose.WRITE, Purpose.OFFLOAD
MISS, HIT, LOAD, RECOMPUTE = FetchAction.MISS, FetchAction.HIT, FetchAction.LOAD, FetchAction.RECOMPUTE


class NoFit(Enum):
    """Why a plan does not fit (closed list, exported as a label later)."""

    NO_ROOM = "no_room"  # not enough evictable bytes at the destination
    NO_ROOM_BELOW = "no_room_below"  # offload found no room in a lower tier


class Source(NamedTuple):
    """What one holder sends over a step's copies."""

    location: Location
    kv_bytes: int


class _StepFields(NamedTuple):
    kind: StepKind
    blob_ids: tuple[BlobId, ...]
    location: Location
    sources: tuple[Source, ...] = ()
    kv_bytes: int = 0
    time_s: float = 0.0


class Step(_StepFields):
    """One kind of change at one location for a run of blobs, in order.

    Consecutive changes of one kind at one location make one step: applying
    it is applying its blobs one after another. ``kv_bytes`` and ``time_s``
    are the run's totals (a blob's copy time is its bytes over its striped
    rate); each ``Source`` is what one holder sends over the whole run, the
    sum of its shares of the blobs it holds.

    A named tuple, as ``TransferPlan`` is: a draft builds one per run of
    changes (several a call), and a tuple is built in C (a frozen
    dataclass's ``__init__`` sets each field with a Python-level call).
    """

    __slots__ = ()

    def __new__(cls, kind: StepKind, blob_ids: tuple[BlobId, ...], location: Location,
                sources: tuple[Source, ...] = (), kv_bytes: int = 0,
                time_s: float = 0.0) -> Step:
        if not blob_ids:
            raise ValueError(f"Step.blob_ids must name at least one blob, got {blob_ids!r}")
        return tuple.__new__(cls, (kind, blob_ids, location, sources, kv_bytes, time_s))


_NO_TOKENS: Mapping[Tier, int] = MappingProxyType({})


class TransferPlan(NamedTuple):
    """A decision and its price; ``fits=False`` plans carry no steps.

    ``time_s`` is the sum of the blobs' copy times (steps run one after
    another; each copy is striped across all holders of its blob), added up
    blob by blob in step order; it excludes
    compute. For a fetch, ``prefix_tokens`` is the cached prefix the request
    can skip computing, ``recompute_tokens`` the part of it that the plan
    recomputes instead of loading (the worker prices and runs that as
    prefill; ``recompute_time_s`` is the caller's estimate), and
    ``hit_tokens``/``miss_tokens`` the lookup accounting per tier that
    ``apply`` adds to the counters (``local_tokens``: the hits the
    destination itself holds, which move nothing).

    A named tuple (immutable; its token mappings are not to be changed): the
    store builds several a call, and a tuple of its 19 fields is built in C.
    """

    purpose: Purpose
    location: Location
    now_s: float
    base_version: int
    fits: bool = True
    no_fit: NoFit | None = None
    steps: tuple[Step, ...] = ()
    time_s: float = 0.0
    action: FetchAction | None = None
    requested_tokens: int = 0
    prefix_tokens: int = 0
    recompute_tokens: int = 0
    load_time_s: float = 0.0
    recompute_time_s: float = 0.0
    chain: tuple[BlobId, ...] = ()
    new_blobs: tuple[Blob, ...] = ()
    hit_tokens: Mapping[Tier, int] = _NO_TOKENS
    miss_tokens: Mapping[Tier, int] = _NO_TOKENS
    local_tokens: int = 0  # of the hit tokens, those ``location`` itself holds

    @property
    def moved_bytes(self) -> int:
        return sum(step.kv_bytes for step in self.steps if step.kind is StepKind.COPY)
