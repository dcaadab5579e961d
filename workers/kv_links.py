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
mean and p99 per link (`utilisation`).
"""

from __future__ import annotations

import asyncio
import math
from array import array
from collections import Counter
from collections.abc import Callable

import numpy as np

from storage.links import Fabric
from storage.plans import StepKind, TransferPlan
from storage.tiers import Location, Tier
from workers.cluster import BoundCluster, WorkerSpec
from workers.network import Topology, fabric_links, worker_links

# Utilisation windows: the p99 is over the run's windows of this length.
UTILISATION_WINDOW_S = 1.0
_COPY = StepKind.COPY  # an enum member read once (a class attribute lookup per step otherwise)


class _Windows:
    """One link's bytes carried per utilisation window, for the windows it carried any:
    parallel arrays in window order. Windows come in time order, so a window is either
    the last one kept or a new one after it."""

    __slots__ = ("carried", "index")

    def __init__(self, first: int | None = None, moved: float = 0.0) -> None:
        self.index = array("q")
        self.carried = array("d")
        if first is not None:
            self.index.append(first)
            self.carried.append(moved)

    def add(self, window: int, moved: float) -> None:
        index = self.index
        if index and index[-1] == window:
            self.carried[-1] += moved
        else:
            index.append(window)
            self.carried.append(0.0 + moved)


class Transfer:
    """The flows of one plan; done (`done_s` set) when the last one has crossed."""

    __slots__ = ("_callbacks", "done_s", "landed", "pending")

    def __init__(self) -> None:
        self.pending = 0
        self.landed: list[tuple[Location, tuple]] = []  # (place, blob ids) it writes
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
        self.bytes_by_path: Counter[str] = Counter()  # bytes started, by `path_kind`
        self._flows: dict[int, Transfer] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_s = math.inf
        self._loads: dict[str, float] = {}  # bytes per second on busy links since _last_s
        self._last_s = 0.0
        # Per link, the windows it carried bytes in and the bytes, in window order (time
        # only moves forward, so only the last window is ever added to): 16 bytes a
        # window, where a dict of them held ~90 (a million-call run has ~10^7).
        self._bins: dict[str, _Windows] = {}
        self._carried: dict[str, float] = {}  # link -> bytes carried up to _last_s
        # Copies still on their way to a place: place -> transfer -> the blobs it is the
        # latest copy of there (a later copy of a blob to the same place takes it over).
        self._landing: dict[Location, dict[Transfer, set[int]]] = {}
        # (source, destination) -> (the copy's path, its `path_kind`), kept once worked out.
        self._routes: dict[tuple[Location, Location], tuple[tuple[str, ...], str]] = {}
        self._wake = self._on_timer  # bound once: the timer is armed at almost every finish

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
        after: dict[Transfer, None] = {}  # ordered: callbacks registered in a fixed order
        routes = self._routes
        by_path = self.bytes_by_path
        landing = self._landing
        for step in plan.steps:
            if step.kind is not _COPY:
                continue
            ids, dst = step.blob_ids, step.location
            for source in step.sources:
                kv_bytes = source.kv_bytes
                if kv_bytes <= 0:
                    continue
                src = source.location
                route = routes.get((src, dst))
                if route is None:
                    path = self.topology.path(src, dst)
                    route = routes[src, dst] = (path, path_kind(src, dst, path))
                path, kind = route
                flows[path] = flows.get(path, 0) + kv_bytes
                by_path[kind] += kv_bytes
                there = landing.get(src)
                if there:
                    for earlier, blobs in there.items():
                        if not blobs.isdisjoint(ids):
                            after[earlier] = None
            landed.append((dst, ids))
        if not flows:
            return None
        transfer = Transfer()
        transfer.landed = landed
        for location, ids in landed:
            claimed = set(ids)
            here = landing.get(location)
            if here is None:
                here = landing[location] = {}
            for blobs in here.values():
                if not blobs.isdisjoint(claimed):
                    blobs -= claimed
            mine = here.get(transfer)
            if mine is None:
                here[transfer] = claimed
            else:  # a second step to the same place
                mine |= claimed
        now_s = self._settle(now_s)
        transfer.pending = len(flows) + len(after)
        for earlier in after:
            earlier.add_done_callback(lambda end_s, t=transfer: self._one_done(t, end_s))
        for flow_id in self.fabric.start_many(now_s, flows.items()):
            self._flows[flow_id] = transfer
        self._after_change()
        return transfer

    def _one_done(self, transfer: Transfer, end_s: float) -> None:
        transfer.pending -= 1
        if transfer.pending == 0:
            for location, _ in transfer.landed:
                self._landing[location].pop(transfer, None)
            transfer.landed = []
            transfer._finish(end_s)

    def applied(self, plan: TransferPlan) -> Transfer | None:
        """The store's `on_apply`: an applied plan's copies start at its `now_s`. Most
        plans a store applies copy nothing (writes placing blobs, drops): they are
        passed over at once."""
        for step in plan.steps:
            if step.kind is _COPY:
                return self.copy(plan, plan.now_s)
        return None

    def in_flight(self) -> int:
        return self.fabric.in_flight()

    # -- events -----------------------------------------------------------------------
    def _settle(self, now_s: float) -> float:
        """Bring the fabric to `now_s` (never back: a timer may have run it a rounding
        ahead), finishing the flows done by then. Returns the time it stands at."""
        fabric_s = self.fabric.now_s
        if fabric_s > now_s:
            now_s = fabric_s
        self._integrate(now_s)
        finished = self.fabric.advance(now_s)
        if finished:
            self._finished(finished)
        return now_s

    def _finished(self, finished: list[tuple[int, float]]) -> None:
        flows = self._flows
        for fid, end_s in finished:
            self._one_done(flows.pop(fid), end_s)
        self._after_change()

    def _after_change(self) -> None:
        """The fabric changed (a start, a finish): its loads from now on, and its one timer
        at its next finish, kept when that did not move."""
        fabric = self.fabric
        self._loads = fabric.loads()
        next_s = fabric.next_finish_s()
        if next_s == self._timer_s:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if next_s is None:
            self._timer_s = math.inf
        else:
            self._timer_s = next_s
            self._timer = asyncio.get_running_loop().call_at(next_s, self._wake, next_s)

    def _on_timer(self, due_s: float) -> None:
        """The fabric's next finish is due: `_settle` there, then one `_after_change`
        (the finishes' callbacks may have started copies, which re-armed the timer)."""
        self._timer, self._timer_s = None, math.inf
        # The loop's clock keeps integer nanoseconds: it may stand a rounding before
        # the finish it was woken for.
        now_s = asyncio.get_running_loop().time()
        if due_s > now_s:  # max(loop_s, due_s)
            now_s = due_s
        fabric = self.fabric
        if fabric.now_s > now_s:  # never back (as _settle)
            now_s = fabric.now_s
        self._integrate(now_s)
        finished = fabric.advance(now_s)
        if finished:
            flows = self._flows
            for fid, end_s in finished:
                self._one_done(flows.pop(fid), end_s)
        self._after_change()

    # -- utilisation ------------------------------------------------------------------
    def _integrate(self, now_s: float) -> None:
        """Add what the busy links carried from the last event to `now_s` to their
        windows (rates were constant in between)."""
        t0 = self._last_s
        if now_s <= t0:
            return
        self._last_s = now_s
        w = self.window_s
        first, last = int(t0 // w), int(now_s // w)
        dt = now_s - t0
        carried, all_bins = self._carried, self._bins
        if first == last:  # the common case: within one window
            for name, load in self._loads.items():
                moved = load * dt
                bins = all_bins.get(name)
                if bins is None:  # 0.0 + moved, as every later sum starts
                    carried[name] = moved
                    all_bins[name] = _Windows(first, moved)
                else:
                    carried[name] += moved
                    bins.add(first, moved)
            return
        for name, load in self._loads.items():
            moved = load * dt
            bins = all_bins.get(name)
            if bins is None:
                carried[name] = moved
                bins = all_bins[name] = _Windows()
            else:
                carried[name] += moved
            for k in range(first, last + 1):
                span = min(now_s, (k + 1) * w) - max(t0, k * w)
                if span > 0:
                    bins.add(k, load * span)

    def carried_bytes(self, now_s: float) -> dict[str, float]:
        """Bytes every link that carried any has carried up to `now_s` (not before the
        last event: rates are known from there on)."""
        self._integrate(now_s)
        return self._carried

    def bandwidth(self, name: str) -> float:
        return self.fabric.link(name).bytes_per_s

    def utilisation(self, end_s: float) -> dict[str, dict[str, float]]:
        """Per link that carried bytes: `mean` (bytes carried over bandwidth x `end_s`)
        and `p99` of its utilisation over the run's windows of `window_s` (idle windows
        count as 0), up to `end_s`."""
        self._integrate(max(end_s, self._last_s))
        out: dict[str, dict[str, float]] = {}
        if end_s <= 0:
            return out
        w = self.window_s
        n = max(1, math.ceil(end_s / w))
        spans = np.full(n, w)
        spans[-1] = end_s - (n - 1) * w
        spans = np.maximum(spans, 1e-12)
        for name in sorted(self._bins):
            bw = self.fabric.link(name).bytes_per_s
            bins = self._bins[name]
            windows = np.array(bins.index, dtype=np.int64)
            carried = np.array(bins.carried, dtype=np.float64)
            kept = windows < n
            per = np.zeros(n)
            per[windows[kept]] = carried[kept]
            util = per / (bw * spans)
            out[name] = {"mean": float(per.sum() / (bw * end_s)),
                         "p99": float(np.percentile(util, 99))}
        return out
