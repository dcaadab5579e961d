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

Flows on the same path get the same max-min rate, so the fabric works per path
in flight (a "group"), as a processor-sharing queue does: the filling runs over
the paths with their numbers of flows, and each group keeps a clock, the bytes
each of its flows moved since the group was made, running at the group's rate.
A flow is done when its group's clock reaches where it stood at the flow's start
plus the flow's size; each group keeps its flows' ends in a heap, and the next
finish is the earliest over the groups. A start or a finish sets each group's
clock and rate afresh: its cost is the paths in flight, not the flows (hundreds
of copies share a cluster of 16 racks' links at the essay's load, over far fewer
paths).

A start or a finish can change the rates only of the paths connected to it through
shared links: max-min fairness falls apart over the connected pieces of the graph of
paths in flight and the links they cross. So a re-share fills only the piece the
changed paths' links are in (found by a walk from those links), and every other path
keeps its rate. The filling over a piece does, for each of its links, the very float
operations the filling over every path in flight would (a link's figures move only
with the paths crossing it, and the links are picked in the same order), so the rates
and loads are the same to the last bit; its cost is the piece, not the cluster (a
cluster of 16 racks has hundreds of paths in flight at the essay's load, in pieces of
a rack's links or less).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from heapq import heappop, heappush

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


class _LinkState:
    """A link in use by some path: the flows in flight crossing it and the groups (paths
    in flight) crossing it, in the order they came into use, kept as flows start and
    finish; and the progressive filling's working figures for it."""

    __slots__ = ("bytes_per_s", "count", "groups", "load", "n", "name", "spare", "stamp")

    def __init__(self, link: Link) -> None:
        self.name = link.name
        self.bytes_per_s = link.bytes_per_s
        self.n = 0  # flows in flight crossing it
        self.groups: list[_Group] = []  # the groups in flight crossing it, oldest first
        self.spare = 0.0  # the filling's: bandwidth not yet given out
        self.count = 0  # the filling's: flows crossing it whose rate is not fixed yet
        self.load = 0.0  # bandwidth in use at its flows' rates (set by the last filling
        # of its piece)
        self.stamp = 0  # the walk or filling that last set it up


_Route = tuple[tuple[str, ...], float, dict[str, tuple[float, str]], int,
               tuple[_LinkState, ...]]


class _Flow:
    """A copy in flight: its place on its path's clock (`_Group`), where it started and
    where it ends (start + size). (A plain class, not a dataclass: links.pxd compiles it
    to a typed extension type.)"""

    __slots__ = ("end_at", "fid", "route", "size_bytes", "start_at")

    def __init__(self, fid: int, route: _Route, size_bytes: float, start_at: float) -> None:
        self.fid = fid
        self.route = route  # its path's links, narrowest bandwidth, narrowest others,
        # number, links' states
        self.size_bytes = size_bytes
        self.start_at = start_at  # its group's clock when it started
        self.end_at = start_at + size_bytes  # its group's clock when it is done

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
        links (absent for a one-link path)."""
        return self.route[2]

    @property
    def path_key(self) -> int:
        """Its path's number: equal paths in the same order share the same way."""
        return self.route[3]


class _Group:
    """The flows in flight on one path: they all run at the same max-min rate, so they
    share one clock, `at_bytes` (the bytes each of them moved since the group was made;
    it stood there at the fabric's `_based_s` and runs on at `rate_bytes_per_s`). A flow
    is done when the clock reaches its `end_at`; the group keeps its flows' ends in a
    heap (the first one first, start order on a tie)."""

    __slots__ = ("at_bytes", "ends", "n", "rate_bytes_per_s", "route", "share", "stamp",
                 "starts")

    def __init__(self, route: _Route) -> None:
        self.route = route
        self.stamp = 0  # the walk that last found it
        self.n = 0  # flows in flight on the path
        self.at_bytes = 0.0
        self.rate_bytes_per_s = 0.0  # each flow's
        self.ends: list[tuple[float, int]] = []  # (end_at, flow id), a heap
        self.starts = 0.0  # its flows' start_at added up (their bytes moved: n x clock - this)
        self.share = 0.0  # each flow's max-min fair rate, set by its piece's filling

    def at(self, dt: float) -> float:
        """The clock `dt` seconds after the fabric's `_based_s`."""
        return self.at_bytes + self.rate_bytes_per_s * dt

    def moved(self, dt: float) -> float:
        """The bytes its flows in flight moved, `dt` seconds after `_based_s`."""
        moved = self.n * (self.at_bytes + self.rate_bytes_per_s * dt) - self.starts
        return moved if moved > 0.0 else 0.0


class Fabric:
    """The links of a cluster and the flows crossing them, at time `now_s`."""

    def __init__(self, links: Iterable[Link]) -> None:
        self._links: dict[str, Link] = {}
        for link in links:
            if link.name in self._links:
                raise ValueError(f"Fabric: link {link.name!r} is listed twice")
            self._links[link.name] = link
        self._flows: dict[int, _Flow] = {}
        # Path number -> its flows in flight, in the order the paths came into use.
        self._groups: dict[int, _Group] = {}
        # Per link in use by some path, its flows and groups in flight (`_LinkState`).
        self._states: dict[str, _LinkState] = {}
        self._stamp = 0  # the fillings so far
        self._next_id = 0
        self.now_s = 0.0
        # When the groups' clocks were last set (at the last start or finish: their
        # rates hold from there on).
        self._based_s = 0.0
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
        # it, do not change it), and the groups whose first flow finishes then.
        self.next_s = math.inf
        self._due: list[_Group] = []
        # Bandwidth in use per busy link at today's rates (read it, do not change it).
        self.loads: dict[str, float] = {}
        # A path as given -> (its links, each once; its narrowest bandwidth; per link, the
        # narrowest other link; its number).
        self._paths: dict[tuple[str, ...], _Route] = {}
        # The links of the paths whose flows started or finished since the last share:
        # where the next one starts its walk (`_fill_piece`).
        self._touched: list[_LinkState] = []

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
        new: list[tuple[_Route, float]] = []
        paths = self._paths
        for path, size_bytes in flows:
            path = tuple(path)
            route = paths.get(path)
            if route is None:
                route = self._path(path)
            if not (math.isfinite(size_bytes) and size_bytes >= 0):
                raise ValueError(f"Fabric.start: size_bytes must be finite and >= 0, "
                                 f"got {size_bytes!r}")
            new.append((route, float(size_bytes)))
        if now_s != self.now_s or self.next_s <= now_s:
            self._finished = self.advance(now_s)
        first = fid = self._next_id
        in_flight, groups, touched = self._flows, self._groups, self._touched
        dt = self.now_s - self._based_s
        for route, size in new:
            key = route[3]  # its path's number
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group(route)
                for state in route[4]:
                    state.groups.append(group)
            at = group.at(dt)  # the clock now, as `_share` sets it
            flow = in_flight[fid] = _Flow(fid, route, size, at)
            heappush(group.ends, (flow.end_at, fid))
            group.n += 1
            group.starts += at
            for state in route[4]:
                state.n += 1
                touched.append(state)
            fid += 1
        self._next_id = fid
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
            states = self._states
            for name in links:
                if name not in states:
                    states[name] = _LinkState(self._links[name])
            known = self._paths[path] = (links, min(bw for bw, _ in bandwidths), others,
                                         number, tuple([states[name] for name in links]))
            self._ended_bytes.append(0.0)
            link_paths = self._link_paths
            for name in links:
                link_paths.setdefault(name, []).append(number)
        return known

    def advance(self, now_s: float) -> list[tuple[int, float]]:
        """Progress every flow to `now_s`; returns `(flow id, finish time)` of the flows
        that finished, in finishing order (start order on a tie)."""
        done = self._finished
        if done:
            self._finished = []
        else:
            done = []
        flows = self._flows
        while flows and self.next_s <= now_s:
            finish_s = self.next_s
            groups, ended, moved = self._groups, self._ended_bytes, self._ended_moved
            touched = self._touched
            finished: list[int] = []
            for group in self._due:  # the groups whose first flow finishes now
                ends = group.ends
                end_at = ends[0][0]
                route = group.route
                links = route[0]
                k = 0
                while ends and ends[0][0] == end_at:  # and those ending with it
                    fid = heappop(ends)[1]
                    flow = flows.pop(fid)
                    ended[route[3]] += flow.size_bytes  # by its path's number
                    group.starts -= flow.start_at
                    finished.append(fid)
                    k += 1
                group.n -= k
                gone = group.n == 0
                if gone:
                    del groups[route[3]]
                for name in links:
                    moved[name] = None
                for state in route[4]:
                    state.n -= k
                    touched.append(state)
                    if gone:
                        state.groups.remove(group)
            if len(finished) > 1:
                finished.sort()  # start order
            for fid in finished:
                done.append((fid, finish_s))
            self.now_s = finish_s
            self._share()
        if now_s != self.now_s:  # every flow moves on to now_s (the groups' clocks run)
            if now_s < self.now_s:
                raise ValueError(f"Fabric: time went back from {self.now_s} to {now_s}")
            self.now_s = now_s
        return done

    def next_finish_s(self) -> float | None:
        """When the next flow finishes at today's rates (None with no flow in flight)."""
        if self._finished:
            return self.now_s
        if not self._flows:
            return None
        return self.next_s

    def rate(self, flow_id: int) -> float:
        return self._groups[self._flows[flow_id].route[3]].rate_bytes_per_s

    def remaining_bytes(self, flow_id: int) -> float:
        flow = self._flows[flow_id]
        left = flow.end_at - self._groups[flow.route[3]].at(self.now_s - self._based_s)
        return left if left > 0.0 else 0.0

    def in_flight(self) -> int:
        return len(self._flows)

    def carried_bytes(self, name: str) -> float:
        """Bytes that crossed link `name` up to `now_s`: utilisation over a span is the
        difference between two readings over bandwidth x span."""
        self.link(name)
        dt = self.now_s - self._based_s
        carried = self._ended_sum(name)
        for group in self._groups.values():
            if name in group.route[0]:
                carried += group.moved(dt)
        return carried

    def carried_bytes_moved(self) -> dict[str, float]:
        """`carried_bytes` of every link whose figure may have moved since the last call:
        the links of the flows in flight and of the flows finished since (every other
        link reads as it did then), the same figures to the last bit, in one pass over
        the paths in flight."""
        dt = self.now_s - self._based_s
        out = {name: self._ended_sum(name) for name in self._ended_moved}
        self._ended_moved = {}
        for group in self._groups.values():
            moved = group.moved(dt)
            for name in group.route[0]:
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
        return self.loads.get(name, 0.0)

    def _share(self) -> None:
        """At `now_s`, after a start or a finish: the piece the changed paths are in takes
        its new max-min fair rates (`_fill_piece`); every group's clock runs on to now at
        its old rate and takes its new rate; then the earliest finish (each group's first
        flow's), the groups due then and the load on every busy link, in the order the
        groups (in theirs) first cross them. The cost is the paths in flight, not the
        flows, and the filling's the piece's."""
        groups = self._groups
        now_s = self.now_s
        dt = now_s - self._based_s
        self._based_s = now_s
        if not groups:  # the fabric emptied
            self.loads = _NO_LOADS
            self.next_s = _INF
            self._due = []
            self._touched = []
            return
        if self._touched:
            self._fill_piece()
        loads: dict[str, float] = {}
        next_s = _INF
        due: list[_Group] = []
        for group in groups.values():
            at = group.at_bytes
            if dt > 0.0:
                at = group.at_bytes = at + group.rate_bytes_per_s * dt
            group.rate_bytes_per_s = rate = group.share
            for state in group.route[4]:
                if state.name not in loads:
                    loads[state.name] = state.load
            left = group.ends[0][0] - at
            if left <= 0.0:
                finish_s = now_s
            elif rate <= 0.0:
                finish_s = _INF
            else:
                finish_s = now_s + left / rate
            if finish_s < next_s:
                next_s = finish_s
                due = [group]
            elif finish_s == next_s:
                due.append(group)
        self.loads = loads
        self.next_s = next_s
        self._due = due

    def _fill_piece(self) -> None:
        """Progressive filling over the piece of the paths in flight that the links
        touched since the last share are in (the links and the paths reached from them
        through the paths crossing them), each path counting its flows: the link offering
        the smallest equal share fixes the rate of every unfixed flow crossing it; repeat.
        Sets each of the piece's groups' `share` and each of its links' `load`; the paths
        outside it keep theirs (no path outside crosses a link inside, so their max-min
        rates are unchanged). (Flows on the same path get the same rate: the filling fixes
        a path's flows together, and a link's spare goes down by the share once a flow, as
        filling over the flows takes it off: the same rates to the last bit. A link's
        figures move only with the paths crossing it, and the links are picked by their
        share and name alone: the same floats as a filling over every path in flight.)

        Each step picks the link with the smallest equal share (spare over unfixed
        flows; the first name on a tie) by a scan over the piece's links: a few dozen
        doubles at most, cheaper than a heap of (share, name) entries pushed at every
        change (it picks the same link)."""
        self._stamp += 1
        stamp = self._stamp
        touched, self._touched = self._touched, []
        busy: list[_LinkState] = []  # the piece's links
        for state in touched:
            if state.stamp != stamp and state.groups:  # no path in flight: not busy
                state.stamp = stamp
                busy.append(state)
        i = 0
        while i < len(busy):  # the walk: the paths crossing each link found, their links
            for group in busy[i].groups:
                if group.stamp != stamp:
                    group.stamp = stamp
                    group.share = -1.0  # not fixed yet
                    for state in group.route[4]:
                        if state.stamp != stamp:
                            state.stamp = stamp
                            busy.append(state)
            i += 1
        for state in busy:
            state.spare = state.bytes_per_s
            state.count = state.n
        while True:
            link = None
            then = 0.0
            for state in busy:  # the smallest (share, name) of the unfixed links
                count = state.count
                if count == 0:
                    continue
                share = state.spare / count
                if link is None or share < then or (share == then and state.name < link.name):
                    link = state
                    then = share
            if link is None:
                break
            share = then
            if not share > 0.0:  # max(0.0, share)
                share = 0.0
            for group in link.groups:
                if group.share >= 0.0:
                    continue  # fixed on another link
                group.share = share
                n = group.n
                for state in group.route[4]:
                    left = state.spare
                    for _j in range(n):  # once a flow: the very floats filling flows gives
                        left -= share
                    state.spare = left
                    if state is not link:
                        state.count -= n
            link.count = 0
        for state in busy:  # its flows' rates added one by one, its paths in their order
            load = 0.0
            for group in state.groups:
                share = group.share
                for _j in range(group.n):
                    load += share
            state.load = load
