"""Prometheus metrics of a run, defined once here, and the listener that feeds them.

`Metrics(registry)` declares every family on the registry it is given (tests
pass a fresh `CollectorRegistry`). `MetricsListener(metrics, run, controller)`
(in `orchestrator.run.metrics_listener`) is an observer of one `Orchestrator` (its `listeners` hook): it reads the
cluster at every fast-loop sample and every completion and never steers. All
series carry the `run` and `controller` labels, so two runs share a registry,
a Prometheus and a dashboard side by side. Names follow the Prometheus
conventions: prefix `tokenfactory_`, base units in the name, `_total` for
counters. `docs/metrics.md` lists them; `VLLM_COMPAT` adds each worker's
counterparts under vLLM's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "tokenfactory_"
RUN = ("run", "controller")
POOL = (*RUN, "pool", "phase")
WORKER = (*POOL, "worker")


def decade_buckets(first_exp: int, last_exp: int, mantissas: tuple[float, ...]) -> tuple:
    """Bucket bounds m x 10^e for e in first_exp..last_exp-1 and each mantissa, then
    10^last_exp; written so that a bound prints as a short decimal (`le="0.0132"`)."""
    bounds = [float(f"{m}e{e}") for e in range(first_exp, last_exp) for m in mantissas]
    return (*bounds, float(f"1e{last_exp}"))


# 25 per decade, about 10^(k/25) to three digits: neighbours 1.09 to 1.1 apart, so the
# quantile Prometheus interpolates inside a bucket (histogram_quantile) and the value at
# that rank share a bucket and differ by at most 10% of it, whatever the values.
FINE_MANTISSAS = (1.0, 1.1, 1.2, 1.32, 1.45, 1.59, 1.74, 1.91, 2.09, 2.29, 2.51, 2.75, 3.02,
                  3.31, 3.63, 3.98, 4.37, 4.79, 5.25, 5.75, 6.31, 6.92, 7.59, 8.32, 9.12)
# TTFT and end-to-end latency from 10 ms to 10,000 s; inter-token latency from 1 ms to
# 10 s. A value beyond the last bound counts only in +Inf (its quantile reads as the
# last bound, as Prometheus does).
TTFT_BUCKETS_S = decade_buckets(-2, 4, FINE_MANTISSAS)
ITL_BUCKETS_S = decade_buckets(-3, 1, FINE_MANTISSAS)
# The latency parts (five label sets) 1-2-5 per decade from 0.1 ms to 10,000 s: coarser,
# to within a bucket (a factor of up to 2.5).
PART_BUCKETS_S = decade_buckets(-4, 4, (1.0, 2.0, 5.0))
# vLLM's own buckets (vllm/v1/metrics/loggers.py), so its dashboards' quantiles read alike.
VLLM_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                      5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
# The oscillation index is computed over this many slow-loop periods of trailing samples.
OSCILLATION_WINDOW_SLOW_PERIODS = 5


class Compat(Enum):
    """Metric names exposed besides ours (`--metrics-compat`)."""

    NONE = "none"
    VLLM = "vllm"


@dataclass(frozen=True)
class Family:
    """What docs/metrics.md and the dashboard test know of a metric."""

    name: str  # as queried: counters with `_total`
    kind: str
    labels: tuple[str, ...]
    unit: str
    help: str


def _load_rows(p: str) -> list[tuple]:
    """Rows of the load on the service and of the fast loop: queues, pools and
    workers, admission and its outcomes, decode starvation, oscillation."""
    return [
        (f"{p}admission_queue_requests", "gauge", RUN, "requests", "calls waiting for admission"),
        (f"{p}admission_held_requests", "gauge", RUN, "requests",
         "calls the last admission decision left queued (held back)"),
        (f"{p}ready_buffer_requests", "gauge", RUN, "requests",
         "filled calls waiting in the ready buffer for decode"),
        (f"{p}backlog_requests", "gauge", RUN, "requests",
         "admitted calls not yet decoding (fill queues and batches, ready buffer, KV loads)"),
        (f"{p}pool_queue_requests", "gauge", POOL, "requests", "calls queued at a pool's workers"),
        (f"{p}pool_running_requests", "gauge", POOL, "requests", "calls in a pool's batches"),
        (f"{p}pool_slots_requests", "gauge", POOL, "requests",
         "sequences a pool's serving workers aim to batch (decode target, fill maximum)"),
        (f"{p}pool_occupancy_ratio", "gauge", POOL, "ratio", "running / slots of a pool"),
        (f"{p}pool_workers", "gauge", POOL, "workers", "workers serving in a pool"),
        (f"{p}pool_gpus", "gauge", POOL, "GPUs", "GPUs of a pool's workers"),
        (f"{p}worker_batch_requests", "gauge", WORKER, "requests", "calls in a worker's batch"),
        (f"{p}worker_queue_requests", "gauge", WORKER, "requests", "calls queued at a worker"),
        (f"{p}worker_hbm_per_gpu_bytes", "gauge", WORKER, "bytes",
         "resident HBM per GPU of a worker: weights plus the KV it holds"),
        (f"{p}admitted_requests_total", "counter", RUN, "requests", "calls admitted"),
        (f"{p}admission_decisions_total", "counter", (*RUN, "reason"), "decisions",
         "fast-loop decisions by reason (closed set: AdmissionReason)"),
        (f"{p}requests_submitted_total", "counter", RUN, "requests", "calls the sessions issued"),
        (f"{p}requests_completed_total", "counter", RUN, "requests",
         "calls that produced all their output tokens"),
        (f"{p}requests_rejected_total", "counter", RUN, "requests", "calls refused"),
        (f"{p}decode_starved", "gauge", RUN, "boolean",
         "1 while decode runs below half its slots and work waits upstream (calls the "
         "admission decision held back, or filled calls in the ready buffer)"),
        (f"{p}decode_starved_seconds_total", "counter", RUN, "seconds",
         "time decode spent starved"),
        (f"{p}oscillation_index", "gauge", RUN, "index",
         "relative RMS of decode occupancy's fast fluctuations over the trailing "
         f"{OSCILLATION_WINDOW_SLOW_PERIODS} slow-loop periods"),
    ]


def _call_rows(p: str) -> list[tuple]:
    """Rows of the completed calls: latencies, preemptions, tokens."""
    return [
        (f"{p}request_ttft_seconds", "histogram", RUN, "seconds", "time to first token"),
        (f"{p}request_itl_seconds", "histogram", RUN, "seconds",
         "a call's mean inter-token latency as the client sees it: first token to last "
         "over the tokens after the first (its TPOT; stalls included)"),
        (f"{p}request_tpot_seconds", "histogram", RUN, "seconds",
         "alias of request_itl_seconds (same observations)"),
        (f"{p}request_latency_part_seconds", "histogram", (*RUN, "part"), "seconds",
         "a completed call's time in one part: admission_wait, fill, decode_wait, transfer, "
         "decode (the parts sum to request_e2e_seconds)"),
        (f"{p}requests_preempted_total", "counter", RUN, "requests",
         "preemptions of completed calls by decode workers short of KV"),
        (f"{p}recomputed_tokens_total", "counter", RUN, "tokens",
         "generated tokens whose KV was recomputed when a preempted call resumed"),
        (f"{p}request_e2e_seconds", "histogram", RUN, "seconds",
         "submission to last token"),
        (f"{p}input_tokens_total", "counter", RUN, "tokens", "input tokens of completed calls"),
        (f"{p}output_tokens_total", "counter", RUN, "tokens", "output tokens of completed calls"),
    ]


def _kv_rows(p: str) -> list[tuple]:
    """Rows of the cluster's KV (tiers, lookups, paths, links), its moves between
    pools and its energy."""
    return [
        (f"{p}kv_moved_bytes_total", "counter", (*RUN, "src_tier", "dst_tier"), "bytes",
         "KV bytes copied between storage tiers"),
        (f"{p}kv_lookup_tokens_total", "counter", (*RUN, "tier", "result"), "tokens",
         "prefix tokens looked up per tier, result hit or miss"),
        (f"{p}kv_resident_bytes", "gauge", (*RUN, "tier"), "bytes", "KV held per tier"),
        (f"{p}kv_local_hit_tokens_total", "counter", RUN, "tokens",
         "prefix tokens the fetching worker's own HBM held already (nothing moved for them)"),
        (f"{p}kv_recomputed_prefix_tokens_total", "counter", RUN, "tokens",
         "cached prefix tokens recomputed from text because that was faster than loading"),
        (f"{p}kv_path_bytes_total", "counter", (*RUN, "path"), "bytes",
         "KV bytes whose copy started, by kind of path: hbm_hbm_nvlink, hbm_hbm_nic, "
         "hbm_dram, dram_hbm, rack_hbm, dram_rack, ... (workers.kv_links.path_kind)"),
        (f"{p}kv_link_utilisation_ratio", "gauge", (*RUN, "link"), "ratio",
         "bytes a link carried over the last sample period over its bandwidth x the period "
         "(links that have carried KV)"),
        (f"{p}reconfigurations_total", "counter", (*RUN, "from_pool", "to_pool"), "moves",
         "workers the slow loop started moving between pools"),
        (f"{p}energy_joules_total", "counter", RUN, "joules", "simulated GPU energy"),
    ]


def _families() -> list[Family]:
    """Every tokenfactory family: (name, kind, labels, unit, help), by subject."""
    rows = (*_load_rows(PREFIX), *_call_rows(PREFIX), *_kv_rows(PREFIX))
    return [Family(*row) for row in rows]


def _vllm_families() -> list[Family]:
    labels = ("model_name", *WORKER)
    rows = [
        ("vllm:num_requests_waiting", "gauge", "requests", "requests waiting (worker queue)"),
        ("vllm:num_requests_running", "gauge", "requests", "requests in the batch"),
        ("vllm:kv_cache_usage_perc", "gauge", "ratio", "KV cache usage, 1 = full"),
        ("vllm:gpu_cache_usage_perc", "gauge", "ratio", "KV cache usage (name before v0.10)"),
        ("vllm:time_to_first_token_seconds", "histogram", "seconds",
         "TTFT, by the worker that filled the call"),
        ("vllm:inter_token_latency_seconds", "histogram", "seconds",
         "mean inter-token latency of a call, by its decode worker"),
        ("vllm:prompt_tokens_total", "counter", "tokens", "prompt tokens computed (fill worker)"),
        ("vllm:generation_tokens_total", "counter", "tokens",
         "tokens generated (decode worker)"),
    ]
    return [Family(n, k, labels, u, h) for n, k, u, h in rows]


FAMILIES = _families()
VLLM_FAMILIES = _vllm_families()


def family_names(compat: Compat = Compat.NONE) -> list[str]:
    fams = FAMILIES + (VLLM_FAMILIES if compat is Compat.VLLM else [])
    return [f.name for f in fams]


class Metrics:
    """Every family declared on one registry; `m["tokenfactory_pool_workers"]`."""

    def __init__(self, registry: CollectorRegistry, compat: Compat = Compat.NONE) -> None:
        self.registry, self.compat = registry, compat
        self._by_name: dict[str, object] = {}
        for fam in FAMILIES + (VLLM_FAMILIES if compat is Compat.VLLM else []):
            self._by_name[fam.name] = self._declare(fam)

    def _declare(self, fam: Family):
        kwargs = dict(labelnames=fam.labels, registry=self.registry)
        if fam.kind == "counter":
            return Counter(fam.name, fam.help, **kwargs)
        if fam.kind == "gauge":
            return Gauge(fam.name, fam.help, **kwargs)
        return Histogram(fam.name, fam.help, buckets=histogram_buckets(fam.name), **kwargs)

    def __getitem__(self, name: str):
        return self._by_name[name]


def histogram_buckets(name: str) -> tuple[float, ...]:
    """The bucket bounds of a histogram family (docs/metrics.md, "Prometheus metrics")."""
    if name.startswith("vllm:"):
        return VLLM_TTFT_BUCKETS_S if "first_token" in name else VLLM_ITL_BUCKETS_S
    if name.endswith(("_itl_seconds", "_tpot_seconds")):
        return ITL_BUCKETS_S
    if name.endswith("_latency_part_seconds"):
        return PART_BUCKETS_S
    return TTFT_BUCKETS_S  # ttft, e2e


def oscillation_index(occupancy: np.ndarray, samples_per_slow_period: int) -> float:
    """The summary's definition (docs/metrics.md) over the samples given: occupancy minus
    its centred moving average over one slow period, standard deviation / mean."""
    if len(occupancy) < 2:
        return 0.0
    mean = occupancy.mean()
    if mean <= 0:
        return 0.0
    n = max(1, min(samples_per_slow_period, len(occupancy)))
    kernel = np.ones(n)
    smooth = np.convolve(occupancy, kernel, mode="same") / _window_counts(len(occupancy), n)
    return float((occupancy - smooth).std() / mean)


@lru_cache(maxsize=16)
def _window_counts(samples: int, n: int) -> np.ndarray:
    """How many samples each centred window of `n` holds over `samples` samples (fewer at
    the ends): the same few lengths at every reading of a run (MetricsListener), so kept."""
    counts = np.convolve(np.ones(samples), np.ones(n), mode="same")
    counts.flags.writeable = False
    return counts
