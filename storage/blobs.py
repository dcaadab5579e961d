"""Immutable KV blobs, content-addressed by the blocks they cover.

A request's input is a sequence of block ids (one id per ``block_tokens``
tokens; equal ids at equal positions after equal prefixes mean equal KV).
A blob is a contiguous run of blocks that continues a parent blob from block
position ``first_block``; its identity is (parent, first_block, block_ids), so
writing the same blocks after the same prefix yields the same blob, and a
prefix shared by many sessions is one blob. A branch that backs up and
diverges forks a new chain from the point of divergence (usually a blob's
end; a fork inside a blob is allowed: the child then continues the first
``first_block`` blocks of the chain through its parent).

Invariant kept by ``BlobIndex``: at any fork point (parent, position) at most
one child starts with a given block id, so the longest cached prefix of a
sequence is found by one walk with one dict lookup per block.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NewType

BlobId = NewType("BlobId", int)


@dataclass(frozen=True, slots=True)
class Blob:
    """KV of ``block_ids`` at positions first_block.. after ``parent``'s chain.

    The first block's id is kept apart from the ``rest``: the fork key already
    holds it, a walk compares only the rest, and the index keeps one ``rest``
    tuple per distinct content (a session replayed again with its first block
    id shifted, as ``--repeat`` does, shares every other block with the first).
    """

    id: BlobId
    parent: BlobId | None
    first_block: int
    first_id: int
    rest: tuple[int, ...]
    kv_bytes: int  # its tokens (blocks x block_tokens) x kv_bytes_per_token

    @property
    def block_ids(self) -> tuple[int, ...]:
        return (self.first_id, *self.rest)

    @property
    def end_block(self) -> int:
        return self.first_block + 1 + len(self.rest)


_blob_id = operator.attrgetter("id")


class KnownIds(tuple):
    """Block ids with what their maker knows of them by construction: they start with
    the ids ``starts_with`` and are the first ids of ``prefix_of`` (either may be None).

    The run shell makes a retiring call's write-back ids from the call's input (which
    they start with) and, when the session's next call resends it, from the first ids of
    that call's input (`orchestrator.run.sessions.writeback_blocks`). A walk resumed
    from one of those sequences' walks (`BlobIndex._resume`) then needs no compare of
    the thousands of ids the two share: the maker compared them already, or made one
    from the other. A tuple in every other respect."""

    starts_with: tuple[int, ...] | None
    prefix_of: tuple[int, ...] | None

    @classmethod
    def of(cls, ids: tuple[int, ...], starts_with: tuple[int, ...] | None,
           prefix_of: tuple[int, ...] | None) -> KnownIds:
        """``ids`` (which must start with ``starts_with`` and be the first ids of
        ``prefix_of``, where given) as known ids."""
        known = cls(ids)
        known.starts_with = starts_with
        known.prefix_of = prefix_of
        return known


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """The blobs covering the longest cached prefix of a block sequence.

    ``chain`` runs root first; the last blob may be matched only up to
    ``matched_blocks`` (a fork inside it). Loading uses whole blobs.
    """

    chain: tuple[Blob, ...]
    matched_blocks: int
    matched_tokens: int
    # The chain's ids, root first: given when the caller has them (a walk keeps them as
    # it goes: a resumed walk adds the ids of the blobs it passes to those of the walk
    # it resumes); None: taken from the chain.
    blob_ids: tuple[BlobId, ...] | None = None

    def __post_init__(self) -> None:
        if self.blob_ids is None:
            object.__setattr__(self, "blob_ids", tuple(map(_blob_id, self.chain)))
        elif len(self.blob_ids) != len(self.chain):
            raise ValueError(f"PrefixMatch: {len(self.blob_ids)} blob ids for a chain of "
                             f"{len(self.chain)} blobs")


# A walk as kept: (seq, chain, its ids, pos, parent, its match).
_Walk = tuple[tuple[int, ...], tuple[Blob, ...], tuple[BlobId, ...], int, BlobId | None,
              PrefixMatch]
_ForkKey = tuple[BlobId | None, int, int]  # (parent, position, first block id)
# (Immutable: one serves every empty match.)
_NO_MATCH = PrefixMatch(chain=(), matched_blocks=0, matched_tokens=0, blob_ids=())
_WALKS_KEPT = 64
_TIPS_KEPT = 256  # first block ids with walks to resume
_TIPS_PER_FIRST = 64  # walks kept to resume per first block id, latest first


_SLICE_BLOCKS = 64


def _common_blocks(seq: tuple[int, ...], pos: int, rest: tuple[int, ...], last: int) -> int:
    """How many of the first `last` blocks of a blob equal `seq` from `pos`: its first
    (the fork key matched it), then those of its `rest` that do. Compared a slice of 64
    at a time, then block by block inside the slice where they part: a blob thousands of
    blocks long that a request leaves near its end costs a few dozen slice compares, not
    a Python loop over it."""
    common = 1
    while common < last:
        step = min(_SLICE_BLOCKS, last - common)
        if seq[pos + common:pos + common + step] == rest[common - 1:common - 1 + step]:
            common += step
            continue
        while seq[pos + common] == rest[common - 1]:
            common += 1
        return common
    return common


class BlobIndex:
    """Every blob ever described, and the trie that finds shared prefixes.

    Blob ids are handed out in creation order, so the same sequence of
    writes gives the same ids in every run.
    """

    def __init__(self, block_tokens: int, kv_bytes_per_token: int) -> None:
        for name, value in (
            ("block_tokens", block_tokens),
            ("kv_bytes_per_token", kv_bytes_per_token),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"BlobIndex.{name} must be an int > 0, got {value!r}")
        self.block_tokens = block_tokens
        self.kv_bytes_per_token = kv_bytes_per_token
        # Ids are handed out densely from 0, so a blob and its size are list items.
        self._blobs: list[Blob] = []
        self.sizes: list[int] = []  # kv_bytes by blob id
        # One tuple per distinct `rest` of a registered blob, which new blobs share.
        self._contents: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._children: dict[_ForkKey, BlobId] = {}
        # Where recent walks stopped, by the sequence walked (the same tuple is
        # matched to route, fetch and write a call). Blobs are only ever added and
        # never change, so a walk resumed from where it stopped ends where a new
        # one would.
        self._walks: dict[int, _Walk] = {}
        # The latest walks that ended at a blob's end, by the first block id of the
        # sequence walked, then by the sequence (oldest first). A session's next call
        # resends the last one and adds to it: its walk resumes there once its first
        # blocks are found equal (one slice compare), instead of walking the session's
        # whole chain again. Sessions that share a prompt share their first block id:
        # each keeps its own walk there.
        self._tips: dict[int, dict[int, _Walk]] = {}

    def __len__(self) -> int:
        return len(self._blobs)

    def __getitem__(self, blob_id: BlobId) -> Blob:
        if isinstance(blob_id, int) and 0 <= blob_id < len(self._blobs):
            return self._blobs[blob_id]
        raise KeyError(f"unknown blob {blob_id}")

    def __contains__(self, blob_id: object) -> bool:
        return isinstance(blob_id, int) and 0 <= blob_id < len(self._blobs)

    def match(self, block_ids: Sequence[int]) -> PrefixMatch:
        """The longest prefix of ``block_ids`` that existing blobs cover."""
        seq = block_ids if isinstance(block_ids, tuple) else tuple(block_ids)
        key = id(seq)
        walk = self._walks.pop(key, None)
        resumed: _Walk | None = None
        if walk is not None and walk[0] is seq:
            _, found, found_ids, pos, parent, match = walk
        else:
            resumed = self._resume(seq)
            if resumed is None:
                found, found_ids, pos, parent, match = (), (), 0, None, _NO_MATCH
            else:
                _, found, found_ids, pos, parent, match = resumed
        children = self._children
        blobs = self._blobs
        n = len(seq)
        passed: list[Blob] = []
        while pos < n:
            child = children.get((parent, pos, seq[pos]))
            if child is None:
                break
            blob = blobs[child]
            passed.append(blob)
            rest = blob.rest
            end = pos + 1 + len(rest)
            # Compare the whole blob in one slice (the common case: it all
            # matches), block by block only where they part.
            if seq[pos + 1:end] == rest:
                pos = end
            else:
                pos += _common_blocks(seq, pos, rest, min(len(rest) + 1, n - pos))
                # The request leaves this blob midway: a branch may fork here.
            parent = child
        if passed:  # (else the walk it went on from ended here: its match is this one)
            found += tuple(passed)
            found_ids += tuple(map(_blob_id, passed))
            match = PrefixMatch(chain=found, matched_blocks=pos,
                                matched_tokens=pos * self.block_tokens, blob_ids=found_ids)
        walk = (seq, found, found_ids, pos, parent, match)
        if seq is block_ids:  # a caller's tuple, likely matched again
            if len(self._walks) >= _WALKS_KEPT:
                del self._walks[next(iter(self._walks))]
            self._walks[key] = walk
        if found and pos == found[-1].first_block + 1 + len(found[-1].rest):  # (its end)
            self._keep_tip(walk, resumed)
        return match

    def _keep_tip(self, walk: _Walk, resumed: _Walk | None) -> None:
        """Keep a walk that ended at a blob's end to resume from, in place of the one
        it resumed (which it extends)."""
        seq = walk[0]
        tips = self._tips
        group = tips.pop(seq[0], None)
        if group is None:
            group = {}
            if len(tips) >= _TIPS_KEPT:
                del tips[next(iter(tips))]
        tips[seq[0]] = group  # the latest first block id last
        if resumed is not None:
            group.pop(id(resumed[0]), None)
        group.pop(id(seq), None)
        group[id(seq)] = walk
        if len(group) > _TIPS_PER_FIRST:
            del group[next(iter(group))]

    def _resume(self, seq: tuple[int, ...]) -> _Walk | None:
        """A walk ``seq`` may resume: the latest kept walk of a sequence it starts with
        up to where that walk ended (a blob's end), or None. A walk is decided by the
        blocks before where it stands (blobs never change, and the one that ended
        there found no child or no block after it), so the walk of ``seq`` passes
        the same blobs to the same place and goes on from there."""
        group = self._tips.get(seq[0]) if seq else None
        if not group:
            return None
        n = len(seq)
        # What the maker of ids knows of them (`KnownIds`): the ids they start with.
        starts_with = seq.starts_with if type(seq) is KnownIds else None
        for tip in reversed(group.values()):
            prev, end = tip[0], tip[3]
            if prev is seq:
                return tip
            # Known when seq starts with prev or prev is seq's first ids (a walk stands
            # within its sequence); else compared, the last block first: another session
            # sharing the first ones differs there.
            if end <= n and (prev is starts_with or (
                    type(prev) is KnownIds and prev.prefix_of is seq) or (
                    seq[end - 1] == prev[end - 1] and seq[:end] == (
                        prev if end == len(prev) else prev[:end]))):
                return tip
        return None

    def describe(
        self, block_ids: Sequence[int], segment_ends: Sequence[int] = ()
    ) -> tuple[PrefixMatch, tuple[Blob, ...]]:
        """The match and the new blobs that would cover the rest, unregistered.

        ``segment_ends`` are block positions where a new blob must end (the
        end of a system prompt, of a turn) so later sessions can share them.
        New ids follow the index's current size; ``register`` them unchanged.
        """
        match = self.match(block_ids)
        start, n = match.matched_blocks, len(block_ids)
        if not segment_ends:  # (the workers' writes: no cuts, one new blob or none)
            if start == n:
                return match, ()
            rest = tuple(block_ids[start + 1:])
            blob = Blob(BlobId(len(self._blobs)), match.chain[-1].id if match.chain else None,
                        start, block_ids[start], self._contents.get(rest, rest),
                        (n - start) * self.block_tokens * self.kv_bytes_per_token)
            return match, (blob,)
        cuts = sorted({end for end in segment_ends if start < end < n})
        bounds = [match.matched_blocks, *cuts, len(block_ids)]
        parent = match.chain[-1].id if match.chain else None
        new: list[Blob] = []
        next_id = len(self._blobs)
        contents = self._contents
        for start, end in itertools.pairwise(bounds):
            if start == end:
                continue
            rest = tuple(block_ids[start + 1:end])
            rest = contents.get(rest, rest)
            kv_bytes = (end - start) * self.block_tokens * self.kv_bytes_per_token
            blob = Blob(BlobId(next_id), parent, start, block_ids[start], rest, kv_bytes)
            new.append(blob)
            parent = blob.id
            next_id += 1
        return match, tuple(new)

    def register(self, blob: Blob) -> None:
        """Record a blob from ``describe``; blobs never change once recorded."""
        if blob.id != len(self._blobs):
            raise ValueError(f"blob {blob.id} is stale: the next blob id is {len(self._blobs)}")
        if blob.parent is not None:
            parent = self[blob.parent]
            inside = blob.first_block - parent.first_block
            if not 0 < inside <= len(parent.rest) + 1 or (
                inside <= len(parent.rest) and parent.rest[inside - 1] == blob.first_id
            ):
                raise ValueError(
                    f"blob {blob.id} does not fork from parent {blob.parent} at block {blob.first_block}"
                )
        elif blob.first_block != 0:
            raise ValueError(f"root blob {blob.id} must start at block 0, got {blob.first_block}")
        key = (blob.parent, blob.first_block, blob.first_id)
        if key in self._children:
            raise ValueError(f"blob {blob.id} duplicates blob {self._children[key]}")
        shared = self._contents.setdefault(blob.rest, blob.rest)
        if shared is not blob.rest:  # equal content described twice before either was recorded
            object.__setattr__(blob, "rest", shared)
        self._blobs.append(blob)
        self.sizes.append(blob.kv_bytes)
        self._children[key] = blob.id

    def chain_of(self, blob_id: BlobId) -> tuple[BlobId, ...]:
        """The blob and all its ancestors, root first."""
        chain = []
        current: BlobId | None = blob_id
        while current is not None:
            chain.append(current)
            current = self[current].parent
        return tuple(reversed(chain))
