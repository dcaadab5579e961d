"""Building an Observation from the running cluster, with the predictor's expectations
(orchestrator.control.predictor)."""

from __future__ import annotations

from itertools import chain

from orchestrator.control.observe import Observation, PoolObservation
from workers.kv_policy import KVPolicy
from workers.runtime import ClusterRuntime


def observe(rt: ClusterRuntime, now_s: float, counters: dict[str, int], queue_total: int,
            queue_interactive: int, predictor, busy_fraction: dict[str, float] | None,
            fill_states: list | None = None, decode_states: list | None = None,
            pool_memo: dict | None = None, same_as: Observation | None = None,
            totals: tuple | None = None) -> Observation:
    """The cluster now; `fill_states`/`decode_states`: the workers' states, when the
    caller has just taken them. `pool_memo`: a dict the caller keeps between calls, so a
    pool whose figures did not change gets its last PoolObservation again. `same_as`: an
    observation built from these very states (the same objects, so no busy time since):
    its worker and pool figures are taken, with idle pools, instead of walking the
    workers again (`busy_fraction` is not read). `totals`: the walk's figures, when the
    caller has just made it (`worker_totals`; `busy_fraction` is not read)."""
    if totals is not None:
        (fill_queue, fill_running, decode_loading, decode_running, decode_slots,
         pool_obs) = totals
    elif same_as is not None:
        fill_queue, fill_running = same_as.fill_queue, same_as.fill_running
        decode_loading, decode_running = same_as.decode_loading, same_as.decode_running
        decode_slots = same_as.decode_slots
        pool_obs = idle_pools(same_as.pools, pool_memo if pool_memo is not None else {})
    else:
        (fill_queue, fill_running, decode_loading, decode_running, decode_slots,
         pool_obs) = _worker_totals(rt, busy_fraction, fill_states, decode_states, pool_memo)
    # `observation(...)` without its keyword call and field check: every field is here
    # (tests/scenario/test_fast_loop_samples.py checks a snapshot's fields against the class's).
    obs = object.__new__(Observation)
    obs.__dict__.update({
        "time_s": now_s, "admission_queue": queue_total,
        "admission_queue_interactive": queue_interactive,
        "fill_queue": fill_queue, "fill_running": fill_running, "ready_depth": rt.ready.depth,
        "decode_loading": decode_loading, "decode_running": decode_running,
        "decode_slots": decode_slots,
        "admitted_total": counters["admitted"], "retired_total": counters["retired"],
        "completed_total": counters["completed"], "rejected_total": counters["rejected"],
        "predicted_decode_calls_per_s": predictor.decode_calls_per_s(rt),
        "predicted_fill_latency_s": predictor.fill_latency_s(rt),
        "pools": pool_obs,
    })
    return obs


def _worker_totals(rt: ClusterRuntime, busy_fraction: dict[str, float] | None,
                   fill_states: list | None, decode_states: list | None,
                   pool_memo: dict | None) -> tuple:
    """`observe`'s walk over the workers' states (taken here when not given)."""
    if fill_states is None:
        fill_states = [w.state() for w in rt.fill_workers.values()]
    if decode_states is None:
        decode_states = [w.state() for w in rt.decode_workers.values()]
    return worker_totals(fill_states, decode_states, pool_memo, busy_fraction)


def worker_totals(fill_states: list, decode_states: list, pool_memo: dict | None,
                  busy_fraction: dict[str, float] | None = None,
                  busy_last: dict[str, float] | None = None, period_s: float = 1.0) -> tuple:
    """The fill and decode totals and the pools' observations of the workers' states, as
    (fill_queue, fill_running, decode_loading, decode_running, decode_slots, pools).
    Each worker's busy fraction is `busy_fraction`'s (0.0 if not there) or, given
    `busy_last` (a worker's busy_s at the last look, by name; brought up to date), its
    busy time since then over `period_s`, at most 1.0, worked out in the same pass.
    `pool_memo`: as `observe`'s."""
    # One pass over the workers: per pool [phase, workers, queued, running, slots, busy, n].
    pools: dict[str, list] = {}
    fill_queue = fill_running = 0
    decode_loading = decode_running = decode_slots = 0
    get_busy = busy_fraction.get if busy_last is None else None
    last = busy_last.get if busy_last is not None else None
    for decode, states in ((False, fill_states), (True, decode_states)):
        for st in states:
            queued, running, accepting = st.queue_depth, st.running, st.accepting
            if decode:
                decode_loading += queued
                decode_running += running
                if accepting:
                    decode_slots += st.target_batch
            else:
                fill_queue += queued
                fill_running += running
            p = pools.get(st.pool)
            if p is None:
                p = pools[st.pool] = [st.phase, 0, 0, 0, 0, 0.0, 0]
            p[1] += accepting
            p[2] += queued
            p[3] += running
            if accepting and st.phase == "decode":
                p[4] += st.target_batch
            if last is None:
                p[5] += get_busy(st.name, 0.0)
            else:
                name, busy_s = st.name, st.busy_s
                busy = (busy_s - last(name, 0.0)) / period_s
                busy_last[name] = busy_s
                p[5] += busy if busy < 1.0 else 1.0  # min(1.0, busy)
            p[6] += 1
    if pool_memo is None:
        pool_obs = tuple([PoolObservation(name, q[0], q[1], q[2], q[3], q[4], q[5] / q[6])
                          for name, q in sorted(pools.items())])
    else:
        pool_obs = tuple([pool_observation(pool_memo, name, pools[name])
                          for name in sorted(pools)])
    return fill_queue, fill_running, decode_loading, decode_running, decode_slots, pool_obs


def idle_pools(pools: tuple, memo: dict) -> tuple:
    """`pools` with no busy time in the period (`pool_observation`'s figures with a busy
    sum of 0.0 over one worker: 0.0, as over any number), the same tuple when none had."""
    if not any(p.busy_fraction for p in pools):
        return pools
    return tuple([pool_observation(memo, p.name, [p.phase, p.workers, p.queue_depth,
                                                  p.running, p.slots, 0.0, 1])
                  for p in pools])


def pool_observation(memo: dict, name: str, p: list) -> PoolObservation:
    """The pool's observation from its figures ([phase, workers, queued, running, slots,
    busy sum, workers counted]), the last one again when they repeat."""
    phase, workers, queued, running, slots = p[0], p[1], p[2], p[3], p[4]
    busy = p[5] / p[6]
    figures = (phase, workers, queued, running, slots, busy)
    last = memo.get(name)
    if last is None or last[0] != figures:
        # PoolObservation(name, *figures) without the frozen dataclass's per-field
        # `object.__setattr__` (a busy pool's figures change nearly every sample); every
        # field is here, in order (tests/scenario/test_fast_loop_samples.py checks it).
        pool = object.__new__(PoolObservation)
        pool.__dict__.update({"name": name, "phase": phase, "workers": workers,
                              "queue_depth": queued, "running": running, "slots": slots,
                              "busy_fraction": busy})
        last = memo[name] = (figures, pool)
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
