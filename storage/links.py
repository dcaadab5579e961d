"""Links shared by the copies in flight on them: max-min fair bandwidth.

A copy of KV crosses a path of links (a GPU's NVLink port, a node's NIC, the
host link between a GPU and its CPU's memory, a rack cache's port, the parallel
file system's front end). Copies in flight on the same link share its
bandwidth. `Fabric` gives every flow its max-min fair rate (progressive
filling, as flow-level network models and the processor-sharing view of a
link do: Bertsekas and Gallager, *Data Networks*, 2nd ed., section 6.5.2), so
two equal copies on one link each take twice as long as one alone, and a flow
bottlenecked elsewhere leaves the rest of a link to the others.

Rates change only when a flow starts or finishes, so the fabric is advanced
from event to event in closed form: `advance(now_s)` finishes, in order, every
flow whose last byte crosses by `now_s`, re-sharing the links after each. The
fabric is pure: the async shell asks `next_finish_s()` when to wake.

The max-min fair rates and the links' loads depend only on the paths of the
flows in flight (the bandwidths are fixed), and a cluster's copies take a few
paths over and over: the sharing is kept per sequence of paths in flight
(most re-shares find theirs already worked out), in a bounded table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from heapq import heapify, heappop, heappush

# Sharings kept (per sequence of paths in flight); the table starts over when full.
SHARINGS_KEPT = 4096
# The loads with no flow in flight (read, never changed).
_NO_LOADS: dict[str, float] = {}
_INF = math.inf


@dataclass(frozen=True, slots=True)
class Link:
    """One link and its bandwidth in one direction."""

    name: str
    bytes_per_s: float

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("Link.name must be a non-empty name")
        if not (math.isfinite(self.bytes_per_s) and self.bytes_per_s > 0):
            raise ValueError(f"Link {self.name!r}: bytes_per_s must be finite and > 0, "
                             f"got {self.bytes_per_s!r}")


_Route = tuple[tuple[str, ...], float, dict[str, tuple[float, str]], int]


class _Flow:
    """A copy in flight. What its path gives is kept once per path (`Fabric._path`) and
    read only when a sharing is worked out: a flow is made with three fields. (A plain
    class, not a dataclass: links.pxd compiles it to a typed extension type.)"""

    __slots__ = ("fid", "rate_bytes_per_s", "remaining_bytes", "route", "size_bytes")

    def __init__(self, fid: int, route: _Route, size_bytes: float,
                 remaining_bytes: float, rate_bytes_per_s: float = 0.0) -> None:
        self.fid = fid
        self.route = route  # its path's links, narrowest bandwidth, narrowest others, number
        self.size_bytes = size_bytes
        self.remaining_bytes = remaining_bytes
        self.rate_bytes_per_s = rate_bytes_per_s

    @property
    def path(self) -> tuple[str, ...]:
        """Its links, each once."""
        return self.route[0]

    @property
    def narrowest_bytes_per_s(self) -> float:
        """Its rate while it shares no link."""
        return self.route[1]

    @property
    def narrowest_other(self) -> dict[str, tuple[float, str]]:
        """Per link of the path: (bandwidth, name) of the narrowest of the path's other
        links (absent for a one-link path): what the flow is offered off a shared link."""
        return self.route[2]

    @property
    def path_key(self) -> int:
        """Its path's number: equal paths in the same order share the same way."""
        return self.route[3]


class Fabric:
    """The links of a cluster and the flows crossing them, at time `now_s`."""

    def __init__(self, links: Iterable[Link]) -> None:
        self._links: dict[str, Link] = {}
        for link in links:
            if link.name in self._links:
                raise ValueError(f"Fabric: link {link.name!r} is listed twice")
            self._links[link.name] = link
        self._flows: dict[int, _Flow] = {}
        self._keys: dict[int, int] = {}  # flow id -> its path's number, for the flows in flight
        self._crossing: dict[str, int] = {}  # flows in flight per busy link
        self._next_id = 0
        self.now_s = 0.0
        # Bytes of the finished flows per path's number (a link's are its paths' added
        # up when read); the flows in flight add what they moved.
        self._ended_bytes: list[float] = []
        # Per link, the numbers of the paths crossing it (in number order), its finished
        # flows' bytes as those paths' added up in that order (kept while none of them
        # changed), and the links whose paths' finished bytes changed since
        # `carried_bytes_moved` last read them: a look at the links' bytes costs the
        # links that moved, not every link and path (a cluster of 16 racks has hundreds
        # of links and thousands of paths).
        self._link_paths: dict[str, list[int]] = {}
        self._link_ended: dict[str, float] = {}
        self._ended_moved: dict[str, None] = {}
        self._finished: list[tuple[int, float]] = []
        # The earliest flow's finish at today's rates (inf with no flow in flight; read
        # it, do not change it), and the flows finishing then, in start order.
        self.next_s = math.inf
        self._due: list[int] = []
        # Bandwidth in use per busy link at today's rates (read it, do not change it).
        self.loads: dict[str, float] = {}
        # A path as given -> (its links, each once; its narrowest bandwidth; per link, the
        # narrowest other link; its number).
        self._paths: dict[tuple[str, ...], _Route] = {}
        # The paths' numbers of the flows in flight, in start order -> their rates in that
        # order and the load on every busy link.
        self._sharings: dict[tuple[int, ...], tuple[tuple[float, ...], dict[str, float]]] = {}

    def link(self, name: str) -> Link:
        try:
            return self._links[name]
        except KeyError:
            raise KeyError(f"unknown link {name!r}") from None

    def links(self) -> tuple[Link, ...]:
        return tuple(self._links.values())

    def add_link(self, link: Link) -> None:
        """A link that was not there (a worker started under a new name); a name
        already known is refused."""
        if link.name in self._links:
            raise ValueError(f"Fabric: link {link.name!r} is listed twice")
        self._links[link.name] = link

    def start(self, now_s: float, path: Iterable[str], size_bytes: float) -> int:
        """A copy of `size_bytes` over `path` begins at `now_s`; returns its flow id.
        Flows that finished by `now_s` are kept for the next `advance` to return."""
        return self.start_many(now_s, [(path, size_bytes)])[0]

    def start_many(self, now_s: float, flows: Iterable[tuple[Iterable[str], float]]
                   ) -> list[int]:
        """Several copies `(path, size_bytes)` begin at `now_s` (the links are shared
        out once for all); returns their flow ids."""
        new: list[_Flow] = []
        first = fid = self._next_id
        paths = self._paths
        for path, size_bytes in flows:
            path = tuple(path)
            route = paths.get(path)
            if route is None:
                route = self._path(path)
            if not (math.isfinite(size_bytes) and size_bytes >= 0):
                raise ValueError(f"Fabric.start: size_bytes must be finite and >= 0, "
                                 f"got {size_bytes!r}")
            size = float(size_bytes)
            new.append(_Flow(fid, route, size, size))
            fid += 1
        if now_s != self.now_s or self.next_s <= now_s:
            self._finished = self.advance(now_s)
        self._next_id = fid
        in_flight, keys, crossing = self._flows, self._keys, self._crossing
        for flow in new:
            in_flight[flow.fid] = flow
            keys[flow.fid] = flow.route[3]  # its path's number
            for name in flow.route[0]:
                crossing[name] = crossing.get(name, 0) + 1
        self._share()
        return list(range(first, fid))

    def _path(self, path: tuple[str, ...]) -> _Route:
        """A path's links, each once (a link crossed twice is shared once), its narrowest
        bandwidth, per link the (bandwidth, name) of the narrowest other link, and its
        number; kept once worked out (links are only ever added; `start_many` looks
        there first)."""
        known = self._paths.get(path)
        if known is None:
            links = tuple(dict.fromkeys(path))
            if not links:
                raise ValueError("Fabric.start: a flow needs at least one link")
            bandwidths = [(self.link(name).bytes_per_s, name) for name in links]
            others = {name: min(b for b in bandwidths if b[1] != name)
                      for name in links if len(links) > 1}
            number = len(self._paths)
            known = self._paths[path] = (links, min(bw for bw, _ in bandwidths), others,
                                         number)
            self._ended_bytes.append(0.0)
            link_paths = self._link_paths
            for name in links:
                link_paths.setdefault(name, []).append(number)
        return known

    def advance(self, now_s: float) -> list[tuple[int, float]]:
        """Progress every flow to `now_s`; returns `(flow id, finish time)` of the flows
        that finished, in finishing order."""
        done = self._finished
        if done:
            self._finished = []
        else:
            done = []
        flows = self._flows
        while flows and self.next_s <= now_s:
            finish_s = self.next_s
            keys, ended, moved = self._keys, self._ended_bytes, self._ended_moved
            crossing = self._crossing
            for fid in self._due:  # the flows whose finish is the earliest
                flow = flows.pop(fid)
                route = flow.route
                ended[route[3]] += flow.size_bytes  # by its path's number
                for name in route[0]:
                    moved[name] = None
                    if crossing[name] == 1:
                        del crossing[name]
                    else:
                        crossing[name] -= 1
                del keys[fid]
                done.append((fid, finish_s))
            # The others move to finish_s (never before the fabric's now_s) as they
            # take their new shares.
            dt = finish_s - self.now_s
            self.now_s = finish_s
            self._share(dt)
        if now_s != self.now_s:  # every flow moves on to now_s
            dt = now_s - self.now_s
            if dt < 0.0:
                raise ValueError(f"Fabric: time went back from {self.now_s} to {now_s}")
            self._move(dt)
            self.now_s = now_s
        return done

    def _move(self, dt: float) -> None:
        """Every flow in flight moves on by `dt` at its rate."""
        for flow in self._flows.values():
            left = flow.remaining_bytes
            moved = flow.rate_bytes_per_s * dt
            flow.remaining_bytes = left - (moved if moved < left else left)

    def next_finish_s(self) -> float | None:
        """When the next flow finishes at today's rates (None with no flow in flight)."""
        if self._finished:
            return self.now_s
        if not self._flows:
            return None
        return self.next_s

    def rate(self, flow_id: int) -> float:
        return self._flows[flow_id].rate_bytes_per_s

    def remaining_bytes(self, flow_id: int) -> float:
        return self._flows[flow_id].remaining_bytes

    def in_flight(self) -> int:
        return len(self._flows)

    def carried_bytes(self, name: str) -> float:
        """Bytes that crossed link `name` up to `now_s`: utilisation over a span is the
        difference between two readings over bandwidth x span."""
        self.link(name)
        return self._ended_sum(name) + sum(f.size_bytes - f.remaining_bytes
                                           for f in self._flows.values() if name in f.path)

    def carried_bytes_moved(self) -> dict[str, float]:
        """`carried_bytes` of every link whose figure may have moved since the last call:
        the links of the flows in flight and of the flows finished since (every other
        link reads as it did then), the same figures to the last bit, in one pass over
        the flows in flight."""
        in_flight: dict[str, float] = {}  # per link, its flows' bytes moved, in start order
        for f in self._flows.values():
            moved = f.size_bytes - f.remaining_bytes
            for name in f.route[0]:
                in_flight[name] = in_flight.get(name, 0) + moved
        out = {name: self._ended_sum(name) for name in self._ended_moved}
        self._ended_moved = {}
        for name, moved in in_flight.items():
            out[name] = (out[name] if name in out else self._ended_sum(name)) + moved
        return out

    def _ended_sum(self, name: str) -> float:
        """The finished flows' bytes on link `name`: its paths' added up in number order,
        worked out again only after one of them changed."""
        if name in self._ended_moved or name not in self._link_ended:
            ended = self._ended_bytes
            self._link_ended[name] = sum(ended[key] for key in self._link_paths.get(name, ()))
        return self._link_ended[name]

    def load_bytes_per_s(self, name: str) -> float:
        """Bandwidth in use on link `name` now."""
        return sum(f.rate_bytes_per_s for f in self._flows.values() if name in f.path)

    def _share(self, dt: float = 0.0) -> None:
        """Max-min fair rates, then each flow's finish at them (they hold until the next
        start or finish: the flows' finishes move only here), the earliest finish, the
        flows due then and the load on every busy link. With `dt` > 0 (after a finish),
        each flow in flight first moves on by `dt` at its old rate, up to `now_s`, in the
        same pass (the flows that finished are gone: their bytes left are read no more)."""
        flows = self._flows
        if not flows:  # the fabric emptied (a fifth of the re-shares on the dev traces)
            self.loads = _NO_LOADS
            self.next_s = _INF
            self._due = []
            return
        key = tuple(self._keys.values())
        sharing = self._sharings.get(key)
        if sharing is None:  # the filling sets the rates in place: the flows move first
            if dt > 0.0:
                self._move(dt)
                dt = 0.0
            sharing = self._work_out_sharing(key)
        rates, self.loads = sharing
        now_s = self.now_s
        next_s = _INF
        due: list[int] = []
        i = 0  # a counter, not zip or enumerate: cheaper over a handful of flows
        for flow in flows.values():
            left = flow.remaining_bytes
            if dt > 0.0:
                moved = flow.rate_bytes_per_s * dt
                left = flow.remaining_bytes = left - (moved if moved < left else left)
            flow.rate_bytes_per_s = rate = rates[i]
            i += 1  # noqa: SIM113
            if left <= 0.0:
                finish_s = now_s
            elif rate <= 0.0:
                finish_s = _INF
            else:
                finish_s = now_s + left / rate
            if finish_s < next_s:
                next_s = finish_s
                due = [flow.fid]
            elif finish_s == next_s:
                due.append(flow.fid)
        self.next_s = next_s
        self._due = due

    def _work_out_sharing(self, key: tuple[int, ...]
                          ) -> tuple[tuple[float, ...], dict[str, float]]:
        """The max-min fair rates of the flows in flight (in start order) and the load on
        every busy link at them, kept under `key` (their paths' numbers)."""
        flows = self._flows.values()
        crossing = self._crossing  # flows in flight per busy link (kept as they come and go)
        shared = [name for name, n in crossing.items() if n > 1]
        if len(shared) == 1:
            self._fill_one_shared(shared[0])
        elif shared:
            self._fill(crossing)
        else:  # No link is shared: each flow runs at its narrowest link's rate.
            for flow in flows:
                flow.rate_bytes_per_s = flow.narrowest_bytes_per_s
        loads: dict[str, float] = {}
        for flow in flows:
            rate = flow.rate_bytes_per_s
            for name in flow.route[0]:
                loads[name] = loads.get(name, 0.0) + rate
        if len(self._sharings) >= SHARINGS_KEPT:
            self._sharings.clear()
        sharing = self._sharings[key] = (tuple([flow.rate_bytes_per_s for flow in flows]),
                                         loads)
        return sharing

    def _fill_one_shared(self, shared: str) -> None:
        """`_fill` when a single link is shared, in closed form, with the same operations
        in the same order (so the same rates to the last bit). Every other link of a flow
        on it is the flow's own: the narrowest of them offers a share that stays put until
        the flow is fixed. Taken from the smallest, each such share below the shared
        link's equal share fixes its flow there and leaves the shared link's spare to the
        rest; the flows left share what remains equally."""
        on_shared: list[_Flow] = []
        own: list[tuple[float, str, int]] = []  # (narrowest own link's share, its name, flow)
        for flow in self._flows.values():
            other = flow.narrowest_other.get(shared)
            if other is None:
                if shared in flow.path:  # a one-link path: the shared link only
                    on_shared.append(flow)
                else:
                    flow.rate_bytes_per_s = flow.narrowest_bytes_per_s
                continue
            own.append((other[0], other[1], len(on_shared)))
            on_shared.append(flow)
        spare = self._links[shared].bytes_per_s
        left = len(on_shared)
        fixed: set[int] = set()
        for share, name, i in sorted(own):
            if (share, name) > (spare / left, shared):
                break
            on_shared[i].rate_bytes_per_s = share
            fixed.add(i)
            spare -= share
            left -= 1
        if left:
            share = max(0.0, spare / left)
            for i, flow in enumerate(on_shared):
                if i not in fixed:
                    flow.rate_bytes_per_s = share

    def _fill(self, crossing: dict[str, int]) -> None:
        """Progressive filling: the link offering the smallest equal share fixes the rate
        of every unfixed flow crossing it; repeat.

        A flow that shares none of its links runs at its narrowest link's rate, which
        is what the filling would give it (its links' spare stays whole until it is
        fixed), and fixing it changes no other flow's share: only the flows crossing a
        shared link are filled; `crossing` counts the flows on each busy link.

        The links wait in a heap by (equal share, name), the smallest first (the first
        name on a tie), as a minimum over them all would pick: an entry is pushed
        whenever a link's share changes, and one whose link is fixed or whose share
        moved since is passed over. Picking costs a logarithm of the busy links, not
        their number: a cluster of 16 racks at 10,000 sessions an hour has hundreds of
        flows in flight."""
        flows = self._flows
        unfixed: dict[str, list[int]] = {}
        for fid, flow in flows.items():
            path = flow.route[0]
            for name in path:
                if crossing[name] > 1:
                    break
            else:
                flow.rate_bytes_per_s = flow.route[1]  # its narrowest link's bandwidth
                continue
            for name in path:
                unfixed.setdefault(name, []).append(fid)
        # Only the links some flow crosses (a cluster has hundreds, a few are busy).
        spare = {name: self._links[name].bytes_per_s for name in unfixed}
        heap = [(spare[n] / len(fids), n) for n, fids in unfixed.items()]
        heapify(heap)
        while unfixed:
            then, name = heappop(heap)
            fids = unfixed.get(name)
            if fids is None or spare[name] / len(fids) != then:
                continue  # fixed, or its share moved (a later entry holds it)
            share = max(0.0, spare[name] / len(fids))
            moved: dict[str, None] = {}  # the links whose share this changes, in order
            # Each flow is on its links' lists once (a path holds a link once) and leaves
            # them all when fixed: every flow listed here is still unfixed.
            for fid in fids:
                flow = flows[fid]
                flow.rate_bytes_per_s = share
                for other in flow.route[0]:
                    spare[other] -= share
                    if other != name:
                        left = unfixed[other]
                        left.remove(fid)
                        if left:
                            moved[other] = None
                        else:
                            del unfixed[other]
            del unfixed[name]
            for other in moved:
                left = unfixed.get(other)
                if left:
                    heappush(heap, (spare[other] / len(left), other))
