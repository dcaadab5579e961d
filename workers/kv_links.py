"""KV copies on the cluster's links, on the run's clock: the async shell of `Fabric`.

A plan the store applied (a fetch, a write's evictions, an offload, a
promotion) says which bytes move from which place to which (`Step.sources`);
`KvLinks.copy(plan, now_s)` starts one flow per source on the links of its
path (`workers.network.Topology`) and returns a `Transfer`, done when the last
of them has crossed. Flows in flight share every link max-min fairly
(`storage.links.Fabric`), so a copy's end moves as others start and finish.

Event-driven: the fabric recomputes its rates only when a flow starts or
finishes, and the shell keeps one timer, armed at the fabric's next finish;
nothing ticks. Link utilisation is integrated exactly between those events
into windows of `window_s` (rates are constant in between), for the run's
mean and p99 per link (`utilisation`; a link's windows: `workers.link_use`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from storage.links import Fabric
from storage.plans import COPY, TransferPlan
from storage.tiers import Location, Tier
from workers.cluster import BoundCluster, WorkerSpec
from workers.link_use import LinkUse, link_utilisation
from workers.network import Topology, fabric_links, worker_links
from workers.virtual_loop import VirtualEventLoop

# Utilisation windows: the p99 is over the run's windows of this length.
UTILISATION_WINDOW_S = 1.0
_INF = math.inf


class Transfer:
    """The flows of one plan; done (`done_s` set) when the last one has crossed."""

    __slots__ = ("_callbacks", "done_s", "landed", "pending")

    def __init__(self, landed: list[tuple[Location, tuple]] | None = None,
                 pending: int = 0) -> None:
        self.pending = pending  # flows and earlier copies it still waits for
        self.landed = [] if landed is None else landed  # (place, blob ids) it writes
        self.done_s: float | None = None
        self._callbacks: list[Callable[[float], None]] = []

    @property
    def done(self) -> bool:
        return self.done_s is not None

    def add_done_callback(self, fn: Callable[[float], None]) -> None:
        """`fn(done_s)` when the transfer is done (at once when it is already)."""
        if self.done_s is not None:
            fn(self.done_s)
        else:
            self._callbacks.append(fn)

    def wait(self) -> asyncio.Future:
        """A future resolved when the transfer is done."""
        fut = asyncio.get_running_loop().create_future()
        self.add_done_callback(lambda _s: fut.done() or fut.set_result(None))
        return fut

    def _finish(self, now_s: float) -> None:
        self.done_s = now_s
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(now_s)


def path_kind(src: Location, dst: Location, path: tuple[str, ...]) -> str:
    """The label a copy's bytes are counted under: `hbm_hbm_nvlink`, `hbm_hbm_nic`,
    else `{src tier}_{dst tier}` (`hbm_dram`, `dram_hbm`, `rack_hbm`, `dram_rack`...)."""
    kind = f"{src.tier.name.lower()}_{dst.tier.name.lower()}"
    if src.tier is Tier.HBM and dst.tier is Tier.HBM:
        kind += "_nvlink" if path[0].startswith("nvlink") else "_nic"
    return kind


class KvLinks:
    """The fabric of one cluster on the running loop."""

    def __init__(self, bound: BoundCluster, window_s: float = UTILISATION_WINDOW_S) -> None:
        self.topology = Topology(bound)
        self.handoff = bound.spec.kv.handoff
        self.promote_min_sessions = bound.spec.kv.promote_min_sessions
        self._racks = {r.name for r in bound.spec.racks if r.cache_bytes}
        self.fabric = Fabric(fabric_links(bound))
        self.window_s = window_s
        self.bytes_by_path: dict[str, int] = {}  # bytes started, by `path_kind`
        self._flows: dict[int, Transfer] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_s = _INF
        # On a virtual loop, the timer that fired last while it is not armed again, and
        # its loop: the next timer on that loop is that handle again
        # (`VirtualEventLoop.call_at_again`).
        self._fired: asyncio.TimerHandle | None = None
        self._fired_on: asyncio.AbstractEventLoop | None = None
        self._last_s = 0.0
        self._last_window = 0  # the utilisation window _last_s is in
        # Per link that carried any (in the order they first did), its bytes up to _last_s.
        self._use: dict[str, LinkUse] = {}
        # Every link's bytes carried, made when a sharing first puts it to use (a link is
        # in _use from the first time its bytes are added: its first window).
        self._uses: dict[str, LinkUse] = {}
        # Each link busy since _last_s (its use) and its bytes per second, in the same
        # order: the fabric's `loads` as a list of uses and a tuple of loads (the fabric
        # makes a loads dict at every change).
        self._busy: list[LinkUse] = []
        self._busy_loads: tuple[float, ...] = ()
        # Copies still on their way to a place: place -> transfer -> the blobs it is the
        # latest copy of there (a later copy of a blob to the same place takes it over):
        # the step's tuple of ids as given, made a set the first time another copy reads
        # from or lands at the place while it is on its way (few do).
        self._landing: dict[Location, dict[Transfer, tuple | set[int]]] = {}
        # (source, destination) -> (the copy's path, its `path_kind`), kept once worked out.
        self._routes: dict[tuple[Location, Location], tuple[tuple[str, ...], str]] = {}
        # Bound once: the timer is armed at almost every finish (with its loop, which it
        # hands back: asyncio.get_running_loop costs a system call, getpid, on Python 3.11).
        self._wake = self._on_timer

    def rack_cache(self, spec: WorkerSpec) -> Location | None:
        """The cache of the worker's rack, when the rack has one."""
        return Location(Tier.RACK, spec.rack) if spec.rack in self._racks else None

    def add_worker(self, spec: WorkerSpec, holder: str | None = None) -> None:
        """A worker started under a new name (or on GPUs that served under `holder`)."""
        self.topology.add_worker(spec, holder)
        self._routes.clear()  # a place's HBM may now sit elsewhere
        for link in worker_links(spec):
            try:
                self.fabric.link(link.name)
            except KeyError:
                self.fabric.add_link(link)

    def copy(self, plan: TransferPlan, now_s: float) -> Transfer | None:
        """Start the copies of an applied plan at `now_s`; None when it moves no byte.
        The bytes a plan sends over one path are one flow (its steps run one after
        another). A copy reading blobs that another copy is still writing to its source
        is done only when that one is too (its bytes follow the others' in a pipeline)."""
        flows: dict[tuple[str, ...], int] = {}  # one flow per path: its steps run in turn
        landed: list[tuple[Location, tuple]] = []
        # The copies it waits for, ordered (callbacks registered in a fixed order); few
        # copies wait for any.
        after: dict[Transfer, None] | None = None
        routes = self._routes
        by_path = self.bytes_by_path
        landing = self._landing
        for step in plan.steps:
            if step.kind is not COPY:
                continue
            ids, dst = step.blob_ids, step.location
            for src, kv_bytes in step.sources:  # (location, kv_bytes)
                if kv_bytes <= 0:
                    continue
                route = routes.get((src, dst))
                if route is None:
                    path = self.topology.path(src, dst)
                    route = routes[src, dst] = (path, path_kind(src, dst, path))
                path, kind = route
                flows[path] = flows.get(path, 0) + kv_bytes
                by_path[kind] = by_path.get(kind, 0) + kv_bytes
                there = landing.get(src)
                if there:
                    for earlier, blobs in there.items():
                        if type(blobs) is tuple:
                            blobs = there[earlier] = set(blobs)
                        if not blobs.isdisjoint(ids):
                            if after is None:
                                after = {}
                            after[earlier] = None
            if landed and landed[-1][0] is dst:  # (an offload's copies down: one place)
                landed[-1] = (dst, landed[-1][1] + ids)
            else:
                landed.append((dst, ids))
        if not flows:
            return None
        transfer = Transfer(landed, len(flows) if after is None else len(flows) + len(after))
        self._land(transfer)
        loop = asyncio.get_running_loop()
        now_s = self._settle(now_s, loop)
        if after is not None:
            for earlier in after:
                earlier.add_done_callback(lambda end_s, t=transfer: self._one_done(t, end_s))
        in_flight = self._flows
        for flow_id in self.fabric.start_many(now_s, flows.items()):
            in_flight[flow_id] = transfer
        self._after_change(loop)
        return transfer

    def _land(self, transfer: Transfer) -> None:
        """`transfer` is now the latest copy of the blobs it lands at each place (an
        earlier copy still on its way there is no longer the latest of those)."""
        landing = self._landing
        for location, ids in transfer.landed:
            here = landing.get(location)
            if here is None:
                here = landing[location] = {}
            elif here:
                for earlier, blobs in here.items():  # no longer the latest of `ids`
                    if type(blobs) is tuple:
                        blobs = here[earlier] = set(blobs)
                    blobs.difference_update(ids)
            mine = here.get(transfer)
            if mine is None:
                here[transfer] = ids
            else:  # a second step to the same place (its own entry is a set by now)
                mine.update(ids)

    def _one_done(self, transfer: Transfer, end_s: float) -> None:
        """One of the flows and earlier copies `transfer` waits for is done."""
        transfer.pending -= 1
        if transfer.pending == 0:
            self._done(transfer, end_s)

    def _done(self, transfer: Transfer, end_s: float) -> None:
        """`transfer` is done: its copies have landed."""
        for location, _ in transfer.landed:
            self._landing[location].pop(transfer, None)
        transfer.landed = []
        transfer._finish(end_s)

    def applied(self, plan: TransferPlan) -> Transfer | None:
        """The store's `on_apply` (told of the applied plans that move bytes): the plan's
        copies start at its `now_s`."""
        return self.copy(plan, plan.now_s)

    def in_flight(self) -> int:
        return self.fabric.in_flight()

    # -- events -----------------------------------------------------------------------
    def _settle(self, now_s: float, loop: asyncio.AbstractEventLoop) -> float:
        """Bring the fabric to `now_s` (never back: a timer may have run it a rounding
        ahead), finishing the flows done by then (`loop`: the running loop). Returns the
        time it stands at."""
        fabric = self.fabric
        if fabric.now_s > now_s:
            now_s = fabric.now_s
        self._integrate(now_s)
        finished = fabric.advance(now_s)
        if finished:
            flows = self._flows
            for fid, end_s in finished:  # _one_done inline: most copies are several flows
                transfer = flows.pop(fid)
                transfer.pending -= 1
                if transfer.pending == 0:
                    self._done(transfer, end_s)
            self._after_change(loop)
        return now_s

    def _after_change(self, loop: asyncio.AbstractEventLoop) -> None:
        """The fabric changed (a start, a finish): its loads from now on, and its one timer
        (on `loop`, the running loop) at its next finish, kept when that did not move."""
        fabric = self.fabric
        loads = fabric.loads
        uses = self._uses
        busy = []
        for name in loads:
            use = uses.get(name)
            if use is None:
                use = uses[name] = LinkUse(name)
            busy.append(use)
        self._busy = busy
        self._busy_loads = tuple(loads.values())
        next_s = fabric.next_s  # inf with no flow in flight, as _timer_s with no timer
        if next_s == self._timer_s:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_s = next_s
        fired = self._fired
        if next_s == _INF:
            self._timer = None
        elif fired is not None and self._fired_on is loop:  # armed again: no new handle
            self._fired = None
            self._timer = loop.call_at_again(fired, next_s)  # type: ignore[attr-defined]
        else:
            self._timer = loop.call_at(next_s, self._wake, loop)

    def _on_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        """The fabric's next finish (`_timer_s`: the timer is cancelled whenever that
        moves) is due on `loop`, the timer's: `_settle` there (a finish arms the timer
        again; when none did, the fabric is as it was and the timer is armed here)."""
        due_s = self._timer_s
        if isinstance(loop, VirtualEventLoop):
            self._fired, self._fired_on = self._timer, loop
        self._timer, self._timer_s = None, _INF
        # The loop's clock keeps integer nanoseconds: it may stand a rounding before
        # the finish it was woken for.
        now_s = loop.time()
        self._settle(due_s if due_s > now_s else now_s, loop)  # max(loop_s, due_s)
        if self.fabric.next_s != self._timer_s:
            self._after_change(loop)

    # -- utilisation ------------------------------------------------------------------
    def _integrate(self, now_s: float) -> None:
        """Add what the busy links carried from the last event to `now_s` to their
        windows (rates were constant in between). A link enters `_use` with its first
        window."""
        t0 = self._last_s
        if now_s <= t0:
            return
        self._last_s = now_s
        w = self.window_s
        first = self._last_window  # int(t0 // w), worked out at the last event
        last = self._last_window = int(now_s // w)
        dt = now_s - t0
        busy, loads = self._busy, self._busy_loads
        if first == last:  # the common case: within one window (LinkUse.add inline)
            for use, load in zip(busy, loads, strict=True):
                moved = load * dt
                use.total += moved
                if use.window == first:
                    use.acc += moved
                else:  # a later window (a link's event in four): the open one closes
                    if use.window < 0:
                        self._use[use.name] = use
                    use.add(first, moved)
            return
        for use, load in zip(busy, loads, strict=True):
            if use.window < 0:
                self._use[use.name] = use
            use.total += load * dt
            for k in range(first, last + 1):
                span = min(now_s, (k + 1) * w) - max(t0, k * w)
                if span > 0:
                    use.add(k, load * span)

    def carried_bytes(self, now_s: float) -> dict[str, float]:
        """Bytes every link that carried any has carried up to `now_s` (not before the
        last event: rates are known from there on)."""
        self._integrate(now_s)
        return {name: use.total for name, use in self._use.items()}

    def bandwidth(self, name: str) -> float:
        return self.fabric.link(name).bytes_per_s

    def utilisation(self, end_s: float) -> dict[str, dict[str, float]]:
        """Per link that carried bytes: `mean` (bytes carried over bandwidth x `end_s`)
        and `p99` of its utilisation over the run's windows of `window_s` (idle windows
        count as 0), up to `end_s` (`workers.link_use.link_utilisation`)."""
        self._integrate(max(end_s, self._last_s))
        return link_utilisation(self._use, self.bandwidth, self.window_s, end_s)
