"""The observer that feeds `orchestrator.run.metrics.Metrics` from one run.

It implements the `Orchestrator` listener hooks: `on_sample` (every fast-loop
period: depths, occupancy, per-worker state, storage and energy totals),
`on_done` (latency histograms, token counters), `on_decision` and
`on_reallocation`. Totals the orchestrator keeps (its counters, the store's
counters, the reconfiguration log) are turned into counter increments by
difference, so the exported counters equal the run's own figures. It reads
only; time comes in as `now_s`. It writes the registry through `RegistryWrites`
(`orchestrator.run.registry_writes`), which notes what moved for the recorder.
"""

from __future__ import annotations

import itertools

from orchestrator.control.policies.base import AdmissionReason
from orchestrator.run.metrics import (
    OSCILLATION_WINDOW_SLOW_PERIODS,
    PREFIX,
    Compat,
    Metrics,
    oscillation_index,
)
from orchestrator.run.registry_writes import RegistryWrites
from orchestrator.run.sampler import worker_hbm_per_gpu
from storage.tiers import Tier
from workers.request import LatencyPart

_POOL_GAUGES = ("pool_queue_requests", "pool_running_requests", "pool_slots_requests",
                "pool_occupancy_ratio", "pool_workers", "pool_gpus")
_WORKER_GAUGES = ("worker_batch_requests", "worker_queue_requests", "worker_hbm_per_gpu_bytes")
_VLLM_GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running",
                "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_VLLM_DONE = ("vllm:time_to_first_token_seconds", "vllm:prompt_tokens_total",
              "vllm:inter_token_latency_seconds", "vllm:generation_tokens_total")


_TIER_NAMES = {t: t.name.lower() for t in Tier}
_tier = _TIER_NAMES.__getitem__  # a tier's label value


class MetricsListener(RegistryWrites):
    def __init__(self, metrics: Metrics, run: str, controller: str, readings=None) -> None:
        super().__init__(metrics, (run, controller))
        self.run, self.controller = run, controller
        # When only metrics.om reads the registry (no /metrics): its recorder, whose
        # `due(now_s)` says which samples it reads; the cluster is then read at those
        # samples and at idle ones (the last before a skipped span), not at every sample.
        self.readings = readings
        self._pending = None  # (orch, obs, now_s) of a sample not read yet
        self._read_s: float | None = None  # the last sample read
        self.observations = 0  # calls the histograms have observed (OpenMetricsRecorder)
        self._seen: dict[str, tuple[str, str]] = {}  # worker -> (pool, phase), for labels
        self._gauged: set[tuple] = set()  # worker label sets exported last sample
        self._last_time_s: float | None = None
        self._obs, self._period_s = None, 0.0  # the last sample and the period it ended
        self._started = False
        self._done_kids: tuple | None = None  # on_done's children and families (`_done_of`)
        self._link_values: dict[str, tuple] = {}  # a link's gauge value, family, bandwidth
        self._carried: dict[str, float] = {}  # each link's bytes at the last reading
        self._store_sums: tuple | None = None  # the store's totals summed, last reading
        self._path_sum: float | None = None  # the links' bytes by path summed, likewise

    # -- the run's figures -------------------------------------------------------------
    def _start(self, orch) -> None:
        """Create every series of a closed set at zero, so dashboards see them at once."""
        self._started = True
        for reason in AdmissionReason:
            self._c("admission_decisions_total", reason.value)
        for src, dst in itertools.permutations(Tier, 2):
            self._c("kv_moved_bytes_total", _tier(src), _tier(dst))
        for tier in Tier:
            for result in ("hit", "miss"):
                self._c("kv_lookup_tokens_total", _tier(tier), result)
        pools = sorted({p.name for p in orch.cluster.spec.pools})
        for a, b in itertools.permutations(pools, 2):
            self._c("reconfigurations_total", a, b)
        for name in ("admitted_requests_total", "requests_submitted_total",
                     "requests_completed_total", "requests_rejected_total",
                     "input_tokens_total", "output_tokens_total", "energy_joules_total",
                     "decode_starved_seconds_total", "requests_preempted_total",
                     "recomputed_tokens_total", "kv_local_hit_tokens_total",
                     "kv_recomputed_prefix_tokens_total"):
            self._c(name)
        for name in ("request_ttft_seconds", "request_itl_seconds", "request_tpot_seconds",
                     "request_e2e_seconds"):
            self._c(name)
        for part in LatencyPart:
            self._c("request_latency_part_seconds", part.key)

    def _workers(self, orch):
        rt = orch.runtime
        return [*rt.fill_workers.values(), *rt.decode_workers.values()]

    # -- hooks -------------------------------------------------------------------------
    def on_sample(self, orch, obs, now_s: float) -> None:
        if not self._started:
            self._start(orch)
        period_s = 0.0 if self._last_time_s is None else now_s - self._last_time_s
        self._last_time_s = now_s
        self._obs, self._period_s = obs, period_s  # for the decision on this sample
        if self.readings is None or self.readings.due(now_s):
            self._read(orch, obs, now_s)
        else:
            self._pending = (orch, obs, now_s)

    def on_idle(self, orch, now_s: float) -> None:
        """The fast loop goes idle, or has taken an idle span's samples: what the registry
        holds through the span (the recorder reads it at `on_skip`, after the work that
        ends the span has arrived) is the last sample's cluster, read now."""
        self.refresh()

    def on_end(self, orch, end_s: float) -> None:
        """The run has ended: the last sample is read now, for the recorder's reading at
        the end (`OpenMetricsRecorder.finish`), and no reference to the run is kept (its
        state is then freed before its summary is made, not after)."""
        self.refresh()

    def refresh(self) -> None:
        """Read the cluster as of the last sample, if that was not done (before a
        reading the run did not sample for: an idle span's, `on_idle`; the run's end,
        `on_end`)."""
        if self._pending is not None:
            self._read(*self._pending)

    def _read(self, orch, obs, now_s: float) -> None:
        """The sample's gauges and the counters kept as totals (links' utilisation over
        the time since the last sample read)."""
        period_s = 0.0 if self._read_s is None else now_s - self._read_s
        self._pending, self._read_s = None, now_s
        self._set(obs.admission_queue, "admission_queue_requests")
        self._set(obs.ready_depth, "ready_buffer_requests")
        self._set(obs.backlog, "backlog_requests")
        c = orch.counters
        self._inc_to("admitted", c["admitted"], "admitted_requests_total")
        self._inc_to("submitted", c["submitted"], "requests_submitted_total")
        self._inc_to("rejected", c["rejected"], "requests_rejected_total")
        workers = self._workers(orch)
        states = [w.state() for w in workers]  # one snapshot each for pools, workers, energy
        self._pools(orch, obs, workers, states)
        self._per_worker(orch, workers, states)
        self._storage(orch)
        self._links(orch, now_s, period_s)
        self._energy(orch, now_s, workers, states)
        self._reconfigurations(orch)
        control = orch.control
        per_slow = max(1, round(control.slow_period_s / control.fast_period_s))
        occ = orch.series.tail("decode_occupancy", OSCILLATION_WINDOW_SLOW_PERIODS * per_slow)
        self._set(oscillation_index(occ, per_slow), "oscillation_index")

    def _done_of(self) -> tuple:
        """The children on_done writes (all but the two it writes rarely), with their
        families: looked up once, not per call."""
        def pair(name: str, *labels: str) -> tuple:
            return self._c(name, *labels), self.m[PREFIX + name]

        return (pair("requests_completed_total"), pair("input_tokens_total"),
                pair("output_tokens_total"), pair("request_ttft_seconds"),
                pair("request_itl_seconds"), pair("request_tpot_seconds"),
                pair("request_e2e_seconds"),
                [(part, *pair("request_latency_part_seconds", part.key))
                 for part in LatencyPart])

    def on_done(self, orch, req, now_s: float) -> None:
        if not self._started:
            self._start(orch)
        self.observations += 1
        kids = self._done_kids
        if kids is None:
            kids = self._done_kids = self._done_of()
        completed, inputs, outputs, ttft, itl, tpot, e2e, parts = kids
        touched, observe = self.touched, self._observe_in
        for (child, family), amount in ((completed, 1), (inputs, req.input_tokens),
                                        (outputs, req.output_tokens)):
            touched.add(family)
            child._value._value += amount
        if req.ttft_s is not None:
            touched.add(ttft[1])
            observe(ttft[0], req.ttft_s)
        tpot_s = req.tpot_s  # the call's mean gap between tokens, as the client sees it
        if tpot_s is not None:
            touched.add(itl[1])
            observe(itl[0], tpot_s)
            touched.add(tpot[1])
            observe(tpot[0], tpot_s)  # the alias
        touched.add(e2e[1])
        observe(e2e[0], now_s - req.arrival_s)
        parts_s = req.parts_s
        for part, child, family in parts:
            touched.add(family)
            observe(child, parts_s[part])
        if req.preemptions:
            self._add(req.preemptions, "requests_preempted_total")
        if req.recomputed_tokens:
            self._add(req.recomputed_tokens, "recomputed_tokens_total")
        if self.m.compat is Compat.VLLM:
            self._vllm_done(orch, req)

    def on_decision(self, orch, decision, now_s: float) -> None:
        """A decision on the last sample: counted, and the sample's starvation judged on
        what it left queued (the summary's condition, docs/metrics.md)."""
        self._w("admission_decisions_total", decision.reason.value)._value._value += 1
        obs, held = self._obs, orch.series.held[-1]
        starved = obs.decode_running < 0.5 * obs.decode_slots and held + obs.ready_depth > 0
        self._set(held, "admission_held_requests")
        self._set(1 if starved else 0, "decode_starved")
        if starved and self._period_s > 0:
            self._w("decode_starved_seconds_total")._value._value += self._period_s

    def on_skip(self, orch, first_s: float, last_s: float, ticks: int) -> None:
        """`ticks` idle samples skipped: gauges keep their values; the decisions the
        policy made over them count under the reason of the last one."""
        self._last_time_s = last_s
        self._w("admission_decisions_total", orch.decisions[-1][1]).inc(ticks)

    def on_reallocation(self, orch, decision, now_s: float) -> None:
        self._reconfigurations(orch)

    # -- parts of a sample -------------------------------------------------------------
    def _pools(self, orch, obs, workers, states) -> None:
        gpus: dict[str, int] = {}
        for w in workers:
            gpus[w.spec.pool] = gpus.get(w.spec.pool, 0) + w.spec.layout.instance_gpus
        slots_of: dict[str, int] = {}
        for s in states:
            if s.accepting:
                slots_of[s.pool] = slots_of.get(s.pool, 0) + s.target_batch
        for p in obs.pools:
            labels = (p.name, p.phase)
            slots = slots_of.get(p.name, 0)
            self._put(self._row(_POOL_GAUGES, labels),
                      (p.queue_depth, p.running, slots, p.running / slots if slots else 0.0,
                       p.workers, gpus.get(p.name, 0)))

    def _per_worker(self, orch, workers, states) -> None:
        used = orch.runtime.store.placement.used_bytes
        vllm = self.m.compat is Compat.VLLM
        model = orch.cluster.model.name
        now: set[tuple] = set()
        for w, s in zip(workers, states, strict=True):
            self._seen[s.name] = (s.pool, s.phase)
            labels = (s.pool, s.phase, s.name)
            now.add(labels)
            hbm = worker_hbm_per_gpu(w, orch.weights_per_gpu[w.spec.pool], used.get(w.hbm, 0))
            self._put(self._row(_WORKER_GAUGES, labels), (s.running, s.queue_depth, hbm))
            if vllm:
                v = (model, *self.base, *labels)
                usage = s.kv_resident_bytes / s.kv_capacity_bytes if s.kv_capacity_bytes else 0.0
                self.m["vllm:num_requests_waiting"].labels(*v).set(s.queue_depth)
                self.m["vllm:num_requests_running"].labels(*v).set(s.running)
                self.m["vllm:kv_cache_usage_perc"].labels(*v).set(usage)
                self.m["vllm:gpu_cache_usage_perc"].labels(*v).set(usage)
                self.touched.update(self.m[n] for n in _VLLM_GAUGES)
        # A worker that moved pools serves under a new name: drop the old one's gauges.
        for labels in self._gauged - now:
            self._rows.pop((_WORKER_GAUGES, labels), None)
            for name in _WORKER_GAUGES:
                self.touched.add(self.m[PREFIX + name])
                self.m[PREFIX + name].remove(*self.base, *labels)
                self._children.pop((name, *labels), None)
                self._values.pop((name, *labels), None)
                self._written.pop((name, *labels), None)
            if vllm:
                for name in _VLLM_GAUGES:
                    self.touched.add(self.m[name])
                    self.m[name].remove(model, *self.base, *labels)
        self._gauged = now

    def _links(self, orch, now_s: float, period_s: float) -> None:
        """Local hits and recomputed prefixes, bytes per kind of copy, and each link's
        utilisation over the last period."""
        links = orch.runtime.links
        counters = orch.runtime.store.counters
        self._inc_to("local_hits", counters.local_hit_tokens, "kv_local_hit_tokens_total")
        self._inc_to("recomputed_prefix", counters.recomputed_tokens,
                     "kv_recomputed_prefix_tokens_total")
        by_path = links.bytes_by_path
        if sum(by_path.values()) != self._path_sum:  # totals only grow, as _storage's
            self._path_sum = sum(by_path.values())
            for path, n in by_path.items():
                self._inc_to(("path", path), n, "kv_path_bytes_total", path)
        carried_before, known, touched = self._carried, self._link_values, self.touched
        for name, carried in links.carried_bytes(now_s).items():
            before = carried_before.get(name, 0.0)
            carried_before[name] = carried
            if not period_s > 0:
                continue
            got = known.get(name)
            if got is None:  # as _set: the gauge's value object and family, looked up once
                self._set(0.0, "kv_link_utilisation_ratio", name)
                got = known[name] = (*self._values["kv_link_utilisation_ratio", name],
                                     links.bandwidth(name))
            v, family, bandwidth = got
            value = (carried - before) / (bandwidth * period_s) if carried != before else 0.0
            if v._value != value:  # _set, inline: a reading sets every link's
                v._value = value
                touched.add(family)

    def _storage(self, orch) -> None:
        store = orch.runtime.store
        counters = store.counters
        # Totals only grow: while their sums stand still, none of them moved.
        sums = (sum(counters.moved_bytes.values()), sum(counters.hit_tokens.values()),
                sum(counters.miss_tokens.values()))
        if sums != self._store_sums:
            self._store_sums = sums
            self._store_counters(counters)
        resident = dict.fromkeys(Tier, 0)
        for location, kv_bytes in store.placement.used_bytes.items():
            resident[location.tier] += kv_bytes
        for tier, kv_bytes in resident.items():
            self._set(kv_bytes, "kv_resident_bytes", _tier(tier))

    def _store_counters(self, counters) -> None:
        for (src, dst), moved in counters.moved_bytes.items():
            self._inc_to(("moved", src, dst), moved, "kv_moved_bytes_total", _tier(src),
                         _tier(dst))
        for tier in Tier:
            self._inc_to(("hit", tier), counters.hit_tokens[tier], "kv_lookup_tokens_total",
                         _tier(tier), "hit")
            self._inc_to(("miss", tier), counters.miss_tokens[tier], "kv_lookup_tokens_total",
                         _tier(tier), "miss")

    def _energy(self, orch, now_s: float, workers, states) -> None:
        """As the summary counts it: each worker's GPUs at TDP x (idle share + busy share x
        busy time), plus the reconfigurer's account of workers that came and went."""
        idle = orch.runtime.eff.idle_power_fraction
        energy = 0.0
        for w, s in zip(workers, states, strict=True):
            power = w.spec.layout.instance_gpus * w.spec.hardware.tdp_w
            energy += power * (idle * now_s + (1 - idle) * s.busy_s)
        energy += orch.reconfigurer.idle_energy_j(now_s, idle)
        self._inc_to("energy", energy, "energy_joules_total")

    def _reconfigurations(self, orch) -> None:
        log = orch.reconfigurer.log
        done = int(self._last.get("reconf", 0))
        for _t, _worker, src, dst in log[done:]:
            self._w("reconfigurations_total", src, dst).inc()
        self._last["reconf"] = len(log)

    def _vllm_done(self, orch, req) -> None:
        model = orch.cluster.model.name
        self.touched.update(self.m[n] for n in _VLLM_DONE)
        if req.fill_worker is not None and req.fill_worker in self._seen:
            labels = (model, *self.base, *self._seen[req.fill_worker], req.fill_worker)
            if req.ttft_s is not None:
                self._observe_in(self.m["vllm:time_to_first_token_seconds"].labels(*labels),
                                 req.ttft_s)
            self.m["vllm:prompt_tokens_total"].labels(*labels).inc(req.input_tokens)
        worker = req.decode_worker or req.fill_worker
        if worker is not None and worker in self._seen:
            labels = (model, *self.base, *self._seen[worker], worker)
            if req.tpot_s is not None:
                self._observe_in(self.m["vllm:inter_token_latency_seconds"].labels(*labels),
                                 req.tpot_s)
            self.m["vllm:generation_tokens_total"].labels(*labels).inc(req.output_tokens)
