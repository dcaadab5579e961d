"""How a copy is striped over a blob's holders, and what each holder sends.

A blob held in several places is loaded from all of them at once: each holder sends a
share proportional to its path bandwidth to the destination (`Stripe`). A chain's blobs
have a few holder sets between them, so a stripe is worked out once per destination and
set of holders (`Placement.stripes` keeps them) and a run's bytes by holder are added up
per stripe (`add_sent`), then made a step's sources (`sources_of`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import islice

from storage.plans import Source
from storage.tiers import Location, StoreLayout


class _Shares(dict):
    """A holder's share of copies by size (`kv_bytes * rate // total_rate`, whole bytes),
    worked out on first use: a chain's blobs are fetched call after call from the same
    holders, and sizes recur (one entry per distinct blob size)."""

    __slots__ = ("rate", "total_rate")

    def __init__(self, rate: float, total_rate: float) -> None:
        super().__init__()
        self.rate = rate
        self.total_rate = total_rate

    def __missing__(self, kv_bytes: int) -> int:
        share = self[kv_bytes] = int(kv_bytes * self.rate // self.total_rate)
        return share


class Stripe:
    """How a copy to a destination from a set of holders is shared out: worked out
    once for a run of blobs with the same holders (`Stripe.to`)."""

    __slots__ = ("_shares", "holders", "rate", "rates", "total_rate")

    def __init__(self, holders: tuple, rates: list[float], rate: float) -> None:
        self.holders = holders
        self.rates = rates
        self.total_rate = sum(rates)
        self.rate = rate
        self._shares = [_Shares(r, self.total_rate) for r in rates[1:]]

    @classmethod
    def to(cls, layout: StoreLayout, dst: Location, held: Collection[Location]) -> Stripe:
        """The striping of a copy to ``dst`` from ``held`` (``dst`` itself sends nothing)."""
        # Each holder sends a share proportional to its path bandwidth; the
        # aggregate is capped by what the destination can write.
        holders = tuple(sorted(loc for loc in held if loc != dst))
        rates = [layout.path_bytes_per_s(src, dst) for src in holders]
        return cls(holders, rates, min(sum(rates), layout.spec(dst).write_bytes_per_s))

    def sent_bytes(self, kv_bytes: Collection[int]) -> list[int]:
        """What each holder sends, in `holders` order, for copies of these sizes: of
        each copy every holder but the first sends its share of the rate rounded down
        (`kv_bytes * rate // total_rate`), the first the rest. Summed over the copies
        holder by holder in C: shares are whole bytes, so the sums are exact."""
        total = sum(kv_bytes)
        if not self._shares:
            return [total]
        out = [0]
        for shares in self._shares:
            out.append(sum(map(shares.__getitem__, kv_bytes)))
        out[0] = total - sum(out)
        return out


def sources_of(sent: dict[Location, int]) -> tuple[Source, ...]:
    """A step's sources from what each holder sends over it: by holder, those that
    send bytes."""
    if not sent:  # a drop or a place: nothing moves
        return ()
    if len(sent) == 1:
        ((loc, n),) = sent.items()
        return (Source(location=loc, kv_bytes=n),) if n else ()
    items = sorted(sent.items())
    if 0 in sent.values():
        items = [item for item in items if item[1]]
    # (A list, not a generator: the compiled build has no closures in cpdef functions.)
    return tuple([Source(location=loc, kv_bytes=n) for loc, n in items])


def add_sent(sent: dict[Location, int], kv_bytes: Sequence[int],
             stripes: Sequence[Stripe]) -> None:
    """Add to ``sent`` (bytes by holder) what each holder sends for copies of these sizes
    striped as ``stripes`` says (one per copy)."""
    # A chain's blobs have a few holder sets between them (often one): add up what
    # each stripe's holders send for its blobs, in C.
    if not stripes:
        return
    if stripes.count(stripes[0]) == len(stripes):
        groups = {stripes[0]: kv_bytes}
    else:
        # The sets alternate along a chain, nearly blob by blob (turns written on two
        # nodes): one pass puts each size in its stripe's list.
        groups = {}
        get = groups.get
        for stripe, kv in zip(stripes, kv_bytes, strict=True):
            mine = get(stripe)
            if mine is None:
                groups[stripe] = [kv]
            else:
                mine.append(kv)
    for stripe, mine in groups.items():
        holders = stripe.holders
        if len(holders) == 1:  # (one holder sends it all: `sent_bytes` is the sum)
            loc = holders[0]
            sent[loc] = sent.get(loc, 0) + sum(mine)
            continue
        for loc, n in zip(holders, stripe.sent_bytes(mine), strict=True):
            sent[loc] = sent.get(loc, 0) + n


_CHAINS_KEPT = 256  # loads kept per destination (up to twice as many between trims)
_TAIL_TRIES = 6  # how far back from a load's last blob a kept load is looked for


class SentByChain:
    """What each holder sent for the last loads to one destination, by the blob each
    ended with: a load that starts with one of them (the same blobs, striped alike) adds
    only its own blobs to what that one sent.

    A session's chain is loaded call after call, the last load's blobs and its new ones
    (a call adds a blob or two), from holder sets that have not changed (the chain's
    copies went back to host memory between turns): on the development traces 58% of
    the blobs a load copies lead a chain loaded before to the same place, striped
    alike. What a holder sends is a sum of whole bytes, blob by blob, so a kept load's
    sums plus the new blobs' are `add_sent`'s over the whole load, exactly."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        # By last blob id: (blob ids, stripes, bytes sent by holder), oldest first.
        self._kept: dict[int, tuple[list, list[Stripe], dict[Location, int]]] = {}

    def sent(self, ids: list, sizes: list[int], stripes: list[Stripe]) -> dict[Location, int]:
        """Bytes sent by holder for copies of the blobs ``ids`` (``sizes``), striped as
        ``stripes`` says (one per blob), as `add_sent` adds them up."""
        kept = self._kept
        n = len(ids)
        sent: dict[Location, int] | None = None
        m = 0  # the blobs a kept load covers
        for last in range(n - 1, max(n - 1 - _TAIL_TRIES, -1), -1):
            entry = kept.get(ids[last])
            if entry is None:
                continue
            head_ids, head_stripes, head_sent = entry
            if len(head_ids) == last + 1 and ids[:last + 1] == head_ids and (
                    stripes[:last + 1] == head_stripes):
                sent = dict(head_sent)
                m = last + 1
                break
        if sent is None:
            sent = {}
        if n - m >= 2 and stripes[-1] is not stripes[-2]:
            # The last blob is striped unlike the one before it: a blob just written on
            # one worker, loaded with its chain from two places (a decode worker's load
            # from its fill worker's HBM and host memory). By the next load of the chain
            # it is held as the others are, so the load without it is kept as well: the
            # next one starts with that.
            add_sent(sent, sizes[m:n - 1], stripes[m:n - 1])
            self._keep(ids[:n - 1], stripes[:n - 1], dict(sent))
            add_sent(sent, sizes[n - 1:], stripes[n - 1:])
        else:
            add_sent(sent, sizes[m:], stripes[m:])
        self._keep(ids, stripes, sent)
        return sent

    def _keep(self, ids: list, stripes: list[Stripe], sent: dict[Location, int]) -> None:
        """Keep what a load of ``ids`` striped as ``stripes`` sent, by its last blob."""
        kept = self._kept
        key = ids[-1]
        if key in kept:
            del kept[key]  # (kept anew, latest last)
        kept[key] = (ids, stripes, sent)
        if len(kept) > 2 * _CHAINS_KEPT:
            # The latest kept, once in a while (dropping the oldest one at a time would
            # leave the dict's iteration to step over ever more holes at its front).
            self._kept = dict(islice(kept.items(), len(kept) - _CHAINS_KEPT, None))
