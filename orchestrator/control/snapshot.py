"""Building an Observation from the running cluster, with the cost core's predictions."""

from __future__ import annotations

from costmodel.phase import Phase
from orchestrator.control.observe import Observation, PoolObservation
from workers.runtime import ClusterRuntime


class Predictor:
    """The cost core's service rates for what the cluster is running now: decode calls per
    second at the workers' target batches, and the latency of a typical fill. Typical call
    shapes start from the trace's means and follow completed calls (EWMA)."""

    def __init__(self, mean_input_tokens: float, mean_new_tokens: float,
                 mean_output_tokens: float) -> None:
        self.input_tokens = mean_input_tokens
        self.new_tokens = max(mean_new_tokens, 1.0)
        self.output_tokens = max(mean_output_tokens, 1.0)
        self._cache: dict[tuple, float] = {}

    def observe_completion(self, input_tokens: int, computed_tokens: int, output_tokens: int,
                           weight: float = 0.02) -> None:
        self.input_tokens += weight * (input_tokens - self.input_tokens)
        self.new_tokens += weight * (max(computed_tokens, 1) - self.new_tokens)
        self.output_tokens += weight * (max(output_tokens, 1) - self.output_tokens)

    def _tpot(self, rt: ClusterRuntime, pool: str, sequences: int, context: float) -> float:
        key = ("decode", pool, sequences, round(context, -3))
        if key not in self._cache:
            self._cache[key] = float(rt.pricers[pool].decode_steps_s(sequences, key[3], 1)[0])
        return self._cache[key]

    def decode_calls_per_s(self, rt: ClusterRuntime) -> float:
        context = self.input_tokens + self.output_tokens / 2
        total = 0.0
        for w in rt.decode_workers.values():
            if not w.accepting:
                continue
            tpot = self._tpot(rt, w.spec.pool, w.target_batch, context)
            total += w.target_batch / (tpot * self.output_tokens)
        return total

    def fill_latency_s(self, rt: ClusterRuntime) -> float:
        cached = max(self.input_tokens - self.new_tokens, 0.0)
        worst = 0.0
        for w in rt.fill_workers.values():
            phase = Phase.MIDFILL if w.spec.phase is Phase.MIDFILL else Phase.PREFILL
            key = ("fill", w.spec.pool, round(self.new_tokens, -2), round(cached, -3))
            if key not in self._cache:
                self._cache[key] = rt.pricers[w.spec.pool].fill_s(phase, 1, key[2] or 1, key[3])[0]
            worst = max(worst, self._cache[key])
        return worst


def observe(rt: ClusterRuntime, now_s: float, counters: dict[str, int], queue_total: int,
            queue_interactive: int, predictor: Predictor,
            busy_fraction: dict[str, float]) -> Observation:
    fill_states = [w.state() for w in rt.fill_workers.values()]
    decode_states = [w.state() for w in rt.decode_workers.values()]
    pools: dict[str, list] = {}
    for s in (*fill_states, *decode_states):
        pools.setdefault(s.pool, []).append(s)
    pool_obs = tuple(
        PoolObservation(
            name=name, phase=states[0].phase, workers=sum(s.accepting for s in states),
            queue_depth=sum(s.queue_depth for s in states),
            running=sum(s.running for s in states),
            slots=sum(s.target_batch for s in states if s.phase == "decode" and s.accepting),
            busy_fraction=(sum(busy_fraction.get(s.name, 0.0) for s in states) / len(states)),
        )
        for name, states in sorted(pools.items()))
    return Observation(
        time_s=now_s, admission_queue=queue_total,
        admission_queue_interactive=queue_interactive,
        fill_queue=sum(s.queue_depth for s in fill_states),
        fill_running=sum(s.running for s in fill_states),
        ready_depth=rt.ready.depth,
        decode_loading=sum(s.queue_depth for s in decode_states),
        decode_running=sum(s.running for s in decode_states),
        decode_slots=sum(s.target_batch for s in decode_states if s.accepting),
        admitted_total=counters["admitted"], retired_total=counters["retired"],
        completed_total=counters["completed"], rejected_total=counters["rejected"],
        predicted_decode_calls_per_s=predictor.decode_calls_per_s(rt),
        predicted_fill_latency_s=predictor.fill_latency_s(rt),
        pools=pool_obs,
    )


def hbm_per_gpu(rt: ClusterRuntime, weights_per_gpu: dict[str, float]) -> float:
    """The most any worker holds per GPU now: its slice's weights and the KV in its HBM:
    the blobs there or, for a decode worker, the KV of the sequences it runs, whichever
    is more (a running sequence's input is among the blobs it pinned)."""
    used = rt.store.placement.used_bytes
    return max((worker_hbm_per_gpu(w, weights_per_gpu[w.spec.pool], used.get(w.hbm, 0))
                for w in (*rt.fill_workers.values(), *rt.decode_workers.values())),
               default=0.0)


def worker_hbm_per_gpu(worker, weights_per_gpu: float, blob_bytes: float) -> float:
    """One worker's HBM per GPU: weights, and its blobs' KV or its running sequences'."""
    # Blobs count logical KV; MLA's latent (and GQA beyond its KV heads) is whole on
    # every TP rank, so their bytes per GPU follow the worker's capacity figures.
    kv = worker.spec.blob_bytes_per_gpu(blob_bytes)
    if hasattr(worker, "kv_resident_bytes"):
        # Footprints are per GPU of a rank group; sequences balance over the ranks.
        kv = max(kv, worker.kv_resident_bytes() / worker.spec.kv.ranks)
    return weights_per_gpu + kv


def energy_j(rt: ClusterRuntime, end_s: float) -> float:
    """Simulated energy of the workers running at the end: each instance's GPUs at TDP x
    (idle share for the whole run + busy share for its busy time)."""
    idle = rt.eff.idle_power_fraction
    total = 0.0
    for w in (*rt.fill_workers.values(), *rt.decode_workers.values()):
        power = w.spec.layout.instance_gpus * w.spec.hardware.tdp_w
        total += power * (idle * end_s + (1 - idle) * w.state().busy_s)
    return total
