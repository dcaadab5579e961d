"""The shell's look at the cluster: the workers' runtime walked into facts for the
control core (orchestrator.control), which never sees the runtime itself.

`Sampler` builds an `Observation` (frozen) from the workers' states, the admission
queue and the counters, with the predictor's rates for the workers serving now; the HBM
figures (`hbm_per_gpu`, `HbmPeak`) and the energy of the run are walked here too.
"""

from __future__ import annotations

from collections import deque
from itertools import chain
from operator import is_

from orchestrator.control.observe import Observation, PoolObservation
from orchestrator.control.policies.base import FILL_BACKLOG, KV_LINKS
from orchestrator.control.predictor import CompletedCall, Predictor
from orchestrator.run.sessions import Pending
from workers.kv_policy import KVPolicy
from workers.request import LatencyPart, Request
from workers.runtime import ClusterRuntime
from workers.state import WorkerState

_FILL = LatencyPart.FILL


class Sampler:
    """Observations of the cluster for the fast loop: `look` (each worker's busy share of
    the period since the last look), `look_still` (no busy time: an unlagged decision's,
    an idle span's next sample) and `idle` (an observation's pools with no busy time)."""

    def __init__(self, runtime: ClusterRuntime, predictor: Predictor, period_s: float,
                 facts: frozenset[str] = frozenset()) -> None:
        self.runtime, self.predictor, self.period_s = runtime, predictor, period_s
        # The optional facts the policy reads (orchestrator.control.policies.base,
        # `observes`): the fill backlogs and the links are walked only for it.
        self.facts = facts
        self._busy_last: dict[str, float] = {}  # each worker's busy_s at the last look
        # Each pool's last observation, again while its figures repeat: the series shares
        # the pools' row between samples with the same pools (FastLoop._append_row).
        self._pools: dict[str, tuple[tuple, PoolObservation]] = {}
        # The last look: its fill and decode states (the very objects) and observation.
        self._looked: tuple[list, list, Observation] | None = None
        # The links' bytes carried at the last look, by link, and its time (`_links_busiest`).
        self._carried: dict[str, float] = {}
        self._carried_s = 0.0  # the look that read them
        self._carried_at = 0.0  # the fabric's time then (its last event)
        self._link_utilisation = 0.0  # the last look's, for `look_still`

    def states(self) -> tuple[list[WorkerState], list[WorkerState]]:
        rt = self.runtime
        return ([w.state() for w in rt.fill_workers.values()],
                [w.state() for w in rt.decode_workers.values()])

    def look(self, now_s: float, counters: dict[str, int], queue: deque[Pending]
             ) -> tuple[Observation, tuple[list, list]]:
        """The cluster now, and the workers' fill and decode states it was built from."""
        fill_states, decode_states = self.states()
        looked = self._looked
        if looked is not None and self.unchanged(fill_states, decode_states, looked):
            # Every worker hands out the state it had at the last look: no busy time since
            # (busy_s as then), and that look's worker and pool figures hold.
            then = looked[2]
            figures = (then.fill_queue, then.fill_running, then.decode_loading,
                       then.decode_running, then.decode_slots, self.idle_pools(then.pools),
                       then.decode_draining)
        else:
            figures = self._walk(fill_states, decode_states, self._busy_last)
        if KV_LINKS in self.facts:
            self._link_utilisation = self._links_busiest(now_s)
        interactive = sum(p.interactive for p in queue) if queue else 0
        obs = self._observation(now_s, counters, len(queue), interactive, figures,
                                fill_states, decode_states)
        self._looked = (fill_states, decode_states, obs)
        return obs, (fill_states, decode_states)

    def look_still(self, now_s: float, counters: dict[str, int], queued: int,
                   interactive: int) -> Observation:
        """The cluster now with no busy time in its pools (the busy shares of the next
        `look` are not moved)."""
        fill_states, decode_states = self.states()
        figures = self._walk(fill_states, decode_states, None)
        return self._observation(now_s, counters, queued, interactive, figures, fill_states,
                                 decode_states)

    @staticmethod
    def unchanged(fill_states: list, decode_states: list, looked: tuple) -> bool:
        """The workers' states are the very objects of the last look (`looked`: its fill
        and decode states and observation): a worker hands its last state out again while
        none of its figures changed (workers.state.StateMemo)."""
        fill_then, decode_then = looked[0], looked[1]
        return (len(fill_states) == len(fill_then) and len(decode_states) == len(decode_then)
                and all(map(is_, fill_states, fill_then))
                and all(map(is_, decode_states, decode_then)))

    def predicted_fill_latency_s(self) -> float:
        return self.predictor.fill_latency_s(self.states()[0])

    def predicted_decode_calls_per_s(self) -> float:
        return self.predictor.decode_calls_per_s(self.states()[1])

    def completed(self, req: Request) -> CompletedCall:
        """A completed call's figures for the predictor: its workers' pools (each if it
        is still serving) and the batch its decode worker ran as it ended."""
        rt = self.runtime
        fill = rt.fill_workers.get(req.fill_worker) if req.fill_worker else None
        dec = rt.decode_workers.get(req.decode_worker) if req.decode_worker else None
        return CompletedCall(
            input_tokens=req.input_tokens, computed_tokens=req.computed_tokens,
            output_tokens=req.output_tokens, fill_s=req.parts_s[_FILL],
            fill_pool=None if fill is None else fill.spec.pool, itl_s=req.decode_s_per_token,
            decode_pool=None if dec is None else dec.spec.pool,
            decode_sequences=0 if dec is None else dec.sequences_running() + 1)

    def _observation(self, now_s: float, counters: dict[str, int], queued: int,
                     interactive: int, figures: tuple, fill_states: list,
                     decode_states: list) -> Observation:
        (fill_queue, fill_running, decode_loading, decode_running, decode_slots,
         pools, decode_draining) = figures
        return Observation(
            time_s=now_s, admission_queue=queued, admission_queue_interactive=interactive,
            fill_queue=fill_queue, fill_running=fill_running,
            ready_depth=self.runtime.ready.depth, decode_loading=decode_loading,
            decode_running=decode_running, decode_slots=decode_slots,
            admitted_total=counters["admitted"], retired_total=counters["retired"],
            completed_total=counters["completed"], rejected_total=counters["rejected"],
            predicted_decode_calls_per_s=self.predictor.decode_calls_per_s(decode_states),
            predicted_fill_latency_s=self.predictor.fill_latency_s(fill_states),
            pools=pools, decode_draining=decode_draining,
            kv_link_utilisation=self._link_utilisation,
            predicted_fill_tokens_per_call=self.predictor.new_tokens)

    def _walk(self, fill_states: list, decode_states: list,
              busy_last: dict[str, float] | None) -> tuple:
        """The fill and decode totals and the pools' observations of the workers' states,
        as (fill_queue, fill_running, decode_loading, decode_running, decode_slots,
        pools, decode_draining). Decode running and slots are the accepting workers':
        a draining (lost, or being moved) worker's sequences finish on slots no longer
        counted, so they are `decode_draining`, not occupancy (which would otherwise read
        up to 2 while a lost worker drains). Each worker's busy share is its busy time since `busy_last`'s (a worker's
        busy_s at the last look, by name; brought up to date) over the period, at most
        1.0; None: no busy time."""
        # One pass over the workers: per pool [phase, workers, queued, running, slots, busy, n,
        # backlog tokens, tokens done, busy seconds] (the last three: fill pools' serving
        # workers).
        backlogs = self.fill_backlog_tokens() if FILL_BACKLOG in self.facts else {}
        pools: dict[str, list] = {}
        fill_queue = fill_running = 0
        decode_loading = decode_running = decode_slots = decode_draining = 0
        period_s = self.period_s
        for decode, states in ((False, fill_states), (True, decode_states)):
            for st in states:
                queued, running, accepting = st.queue_depth, st.running, st.accepting
                if decode:
                    decode_loading += queued
                    if accepting:
                        decode_running += running
                        decode_slots += st.target_batch
                    else:
                        decode_draining += running
                else:
                    fill_queue += queued
                    fill_running += running
                p = pools.get(st.pool)
                if p is None:
                    p = pools[st.pool] = [st.phase, 0, 0, 0, 0, 0.0, 0, 0, 0, 0.0]
                p[1] += accepting
                p[2] += queued
                p[3] += running
                if accepting and st.phase == "decode":
                    p[4] += st.target_batch
                elif not decode:
                    p[7] += backlogs.get(st.name, 0)
                    if accepting:
                        p[8] += st.tokens_done
                        p[9] += st.busy_s
                if busy_last is None:
                    p[5] += 0.0
                else:
                    name, busy_s = st.name, st.busy_s
                    busy = (busy_s - busy_last.get(name, 0.0)) / period_s
                    busy_last[name] = busy_s
                    p[5] += min(busy, 1.0)
                p[6] += 1
        pool_obs = tuple([self._pool(name, pools[name]) for name in sorted(pools)])
        return (fill_queue, fill_running, decode_loading, decode_running, decode_slots,
                pool_obs, decode_draining)

    def fill_backlog_tokens(self) -> dict[str, int]:
        """Tokens each fill worker (by name) has still to compute for the calls queued or
        running at it: a call whose prefix was fetched, its input less that prefix less the
        tokens put in steps that ended (its step's chunk running counts); else its input
        less what its own session computed before (what the orchestrator expects to find
        cached). Steps in flight are where the call ledger finds them
        (orchestrator.run.ledger: `_steps`, `loading_step`)."""
        out: dict[str, int] = {}
        for w in self.runtime.fill_workers.values():
            fills = getattr(w, "fills", None)  # (a worker in another process has none here)
            if fills is None:
                continue
            total = 0
            fetched, planned = fills.fetched, fills.planned
            for req in fills.queue:
                if req.call_id in fetched:
                    total += max(1, req.input_tokens - req.prefix_tokens) - planned.get(
                        req.call_id, 0)
                else:
                    total += max(1, req.input_tokens - req.own_cached_tokens)
            steps = [*getattr(w, "_steps", {}).values(), getattr(w, "loading_step", ())]
            for step in steps:
                for c in getattr(step, "chunks", ()):
                    req = c.request
                    total += (max(1, req.input_tokens - req.prefix_tokens)
                              - planned.get(req.call_id, 0) + c.tokens)
            out[w.name] = total
        return out

    def _links_busiest(self, now_s: float) -> float:
        """The busiest link's bytes carried since the last look at which the fabric had
        moved on, counted up to its last event (as byte counters a scrape reads: they move
        when a copy starts or ends), over its bandwidth and the time between those looks.
        With no fabric event since the last look, the last figure: a cluster restamped
        (nothing ran) reads what looking at it would."""
        fabric = self.runtime.links.fabric
        if fabric.now_s <= self._carried_at:
            return self._link_utilisation
        span_s = now_s - self._carried_s
        if span_s <= 0:
            return self._link_utilisation
        # Only the links whose bytes may have moved: every other one reads 0.0 here.
        carried, busiest, link = self._carried, 0.0, fabric.link
        for name, moved in fabric.carried_bytes_moved().items():
            busiest = max(busiest, (moved - carried.get(name, 0.0))
                          / (link(name).bytes_per_s * span_s))
            carried[name] = moved
        self._carried_s, self._carried_at = now_s, fabric.now_s
        return busiest

    def idle_pools(self, pools: tuple) -> tuple:
        """`pools` with no busy time in the period (`_pool`'s figures with a busy sum of
        0.0 over one worker: 0.0, as over any number), the same tuple when none had."""
        if not any(p.busy_fraction for p in pools):
            return pools
        return tuple([self._pool(p.name, [p.phase, p.workers, p.queue_depth, p.running,
                                          p.slots, 0.0, 1, p.backlog_tokens, p.tokens_total,
                                          p.busy_s_total])
                      for p in pools])

    def idle(self, obs: Observation, time_s: float) -> Observation:
        """`obs` at `time_s` with no busy time in its period."""
        return obs.restamped(time_s, self.idle_pools(obs.pools))

    def _pool(self, name: str, p: list) -> PoolObservation:
        """The pool's observation from its figures ([phase, workers, queued, running, slots,
        busy sum, workers counted, backlog tokens, tokens done, busy seconds]), the last
        one again when they repeat."""
        figures = (p[0], p[1], p[2], p[3], p[4], p[5] / p[6], p[7], p[8], p[9])
        last = self._pools.get(name)
        if last is None or last[0] != figures:
            last = self._pools[name] = (figures, PoolObservation(
                name=name, phase=figures[0], workers=figures[1], queue_depth=figures[2],
                running=figures[3], slots=figures[4], busy_fraction=figures[5],
                backlog_tokens=figures[6], tokens_total=figures[7], busy_s_total=figures[8]))
        return last[1]


def hbm_per_gpu(rt: ClusterRuntime, weights_per_gpu: dict[str, float],
                states: dict | None = None, memo: dict | None = None) -> float:
    """The most any worker holds per GPU now: its slice's weights and the KV in its HBM:
    the blobs there or, for a decode worker, the KV of the sequences it runs, whichever
    is more (a running sequence's input is among the blobs it pinned). `states`: the
    workers' states by name, when the caller has just taken them. `memo`: a dict the
    caller keeps between calls (with `states`): a worker whose blob bytes and running
    KV did not change is not priced again. When KV stays resident after calls
    (`--kv-policy retain`), a decode worker holds its running KV and, besides, the
    retained blobs no running sequence pins."""
    used = rt.store.placement.used_bytes
    retain = rt.kv_policy is KVPolicy.RETAIN
    best = 0.0
    for w in (*rt.fill_workers.values(), *rt.decode_workers.values()):
        resident = states[w.name].kv_resident_bytes if states is not None else None
        blob_bytes = used.get(w.hbm, 0)
        retained = blob_bytes - rt.store.pinned_bytes(w.hbm) if retain and blob_bytes else 0
        if memo is None or states is None:
            value = worker_hbm_per_gpu(w, weights_per_gpu[w.spec.pool], blob_bytes, resident,
                                       retained)
        else:
            key = (w, blob_bytes, resident, retained)
            last = memo.get(w.name)
            if last is None or last[0] != key:
                last = memo[w.name] = (key, worker_hbm_per_gpu(
                    w, weights_per_gpu[w.spec.pool], blob_bytes, resident, retained))
            value = last[1]
        best = max(best, value)
    return best


def worker_hbm_per_gpu(worker, weights_per_gpu: float, blob_bytes: float,
                       resident_bytes: float | None = None, retained_bytes: float = 0) -> float:
    """One worker's HBM per GPU: weights, and its blobs' KV or its running sequences'
    (`resident_bytes`: its running KV, when known; else asked of the worker), or the
    running KV plus `retained_bytes`, blobs kept that no running sequence pins."""
    if resident_bytes is None and hasattr(worker, "kv_resident_bytes"):
        resident_bytes = worker.kv_resident_bytes()
    return _spec_hbm_per_gpu(worker.spec, weights_per_gpu, blob_bytes, resident_bytes,
                             retained_bytes)


def _spec_hbm_per_gpu(spec, weights_per_gpu: float, blob_bytes: float,
                      resident_bytes: float | None, retained_bytes: float = 0) -> float:
    # Blobs count logical KV; MLA's latent (and GQA beyond its KV heads) is whole on
    # every TP rank, so their bytes per GPU follow the worker's capacity figures.
    kv = spec.blob_bytes_per_gpu(blob_bytes)
    if resident_bytes:
        # Footprints are per GPU of a rank group; sequences balance over the ranks.
        kv = max(kv, resident_bytes / spec.kv.ranks)
        if retained_bytes:
            kv = max(kv, resident_bytes / spec.kv.ranks
                     + spec.blob_bytes_per_gpu(retained_bytes))
    return weights_per_gpu + kv


class HbmPeak:
    """The most any worker held per GPU over the samples it was given: the largest
    `hbm_per_gpu` of them, without pricing every sample. Unless KV stays resident after
    calls, a worker's HBM per GPU is its weights plus the larger of its blobs' and its
    running KV's per GPU, each its bytes times or over positive constants, which
    rounding keeps in order: its largest value over samples is its value at its
    largest blob bytes and largest running KV, so those are all a sample keeps (per
    worker and slice: a worker replaced or reshaped starts anew). With `--kv-policy
    retain` (running KV plus retained blobs, two figures moving apart) every sample is
    priced, as `hbm_per_gpu`."""

    def __init__(self, weights_per_gpu: dict[str, float]) -> None:
        self._weights = weights_per_gpu
        self._tops: dict[str, list] = {}  # name -> [worker, spec, blob bytes, running KV]
        self._closed = 0.0  # the peak of workers and slices gone
        self._memo: dict = {}

    def sample(self, rt: ClusterRuntime, fill_states: list, decode_states: list) -> None:
        """Workers' states just taken, in the runtime's order."""
        if rt.kv_policy is KVPolicy.RETAIN:
            states = {st.name: st for st in (*fill_states, *decode_states)}
            self._closed = max(self._closed, hbm_per_gpu(rt, self._weights, states, self._memo))
            return
        fill, decode = rt.fill_workers, rt.decode_workers
        if len(fill) != len(fill_states) or len(decode) != len(decode_states):
            raise ValueError(f"HbmPeak.sample: {len(fill_states)} fill and {len(decode_states)} "
                             f"decode states for {len(fill)} and {len(decode)} workers")
        used = rt.store.placement.used_bytes.get
        tops = self._tops
        top_of = tops.get
        # One pass over the workers and their states, in the runtime's order.
        for w, st in zip(chain(fill.values(), decode.values()), chain(fill_states, decode_states),
                         strict=True):
            blob = used(w.hbm, 0)
            resident = st.kv_resident_bytes
            if resident is None:
                resident = w.kv_resident_bytes() if hasattr(w, "kv_resident_bytes") else 0
            top = top_of(w.name)
            if top is None or top[0] is not w or top[1] is not w.spec:
                if top is not None:
                    self._closed = max(self._closed, self._value(top))
                tops[w.name] = [w, w.spec, blob, resident]
            else:
                if blob > top[2]:
                    top[2] = blob
                if resident > top[3]:
                    top[3] = resident

    def _value(self, top: list) -> float:
        _, spec, blob, resident = top
        return _spec_hbm_per_gpu(spec, self._weights[spec.pool], blob, resident)

    @property
    def peak(self) -> float:
        return max([self._closed] + [self._value(top) for top in self._tops.values()])


def energy_j(rt: ClusterRuntime, end_s: float) -> float:
    """Simulated energy of the workers running at the end: each instance's GPUs at TDP x
    (idle share for the whole run + busy share for its busy time)."""
    idle = rt.eff.idle_power_fraction
    total = 0.0
    for w in (*rt.fill_workers.values(), *rt.decode_workers.values()):
        power = w.spec.layout.instance_gpus * w.spec.hardware.tdp_w
        total += power * (idle * end_s + (1 - idle) * w.state().busy_s)
    return total
