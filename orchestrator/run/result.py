"""What a replay returns: requests, counters, series, decisions, and the resources used."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from costmodel.phase import Phase
from orchestrator.control.config import ControlConfig
from orchestrator.control.realloc import ReallocDecision
from orchestrator.control.stability import LoopModel
from orchestrator.run.series import Series
from workers.cluster import BoundCluster
from workers.request import Request


@dataclass
class ReplayResult:
    requests: Sequence[Request]  # completed calls (a run's: CompletedCalls, read-only rows)
    counters: dict[str, int]
    series: Series
    decisions: list[tuple[float, str]]  # (time, reason) per fast tick
    reconfigurations: list[tuple[float, str, str, str]]  # (time, worker, from, to)
    sessions: int
    simulated_s: float
    wall_s: float
    events: int
    energy_j: float
    peak_hbm_bytes_per_gpu: float
    kv_bytes_moved: int
    gpus: int
    store_counters: object
    control: ControlConfig
    policy: str
    realloc_decisions: list[ReallocDecision] = field(default_factory=list)
    realloc_times_s: list[float] = field(default_factory=list)  # when each was decided
    first_session_s: float = 0.0  # the span in which sessions were started
    last_session_s: float = 0.0
    predicted_fill_latency_s: float = 0.0  # the cost core's typical fill, at the end
    predicted_decode_calls_per_s: float = 0.0  # the cost core's decode rate, at the end
    rejected_arrivals_s: list[float] = field(default_factory=list)
    decode_slots: int = 0  # of the cluster as built (`decode_slots`)
    ledger: object = None  # the call ledger's LedgerReport (virtual mode), or None
    # Prefixes shared across sessions: base sessions given one, their tokens, chains.
    shared_prefix: dict = field(default_factory=dict)
    kv_policy: str = "offload"  # where a call's KV went when it ended (workers.kv_policy)
    # The serving engine whose host cost the steps paid and the MTP acceptance by draft
    # position they drew from (costmodel.engines.serving_efficiency).
    service: dict = field(default_factory=dict)
    kv_bytes_per_token: int = 0  # of the store's blobs: one KV copy of one token
    # Copies on the cluster's links (workers.kv_links): per link that carried KV, its
    # utilisation {"mean", "p99"}; bytes started per kind of path.
    link_utilisation: dict = field(default_factory=dict)
    path_bytes: dict = field(default_factory=dict)
    # The policy's linearised admission loop (orchestrator.control.stability); None: it
    # declares none.
    loop_model: LoopModel | None = None
    # The gap before every token streamed (workers.token_gaps.TokenGaps), or None.
    token_gaps: object = None


def decode_slots(cluster: BoundCluster) -> int:
    """Sequences the cluster's decoding workers aim to batch, as built: the pool's target
    batch per attention rank x attention ranks x pipeline stages, summed over workers."""
    return sum(w.batch.target_batch * w.kv.ranks * w.layout.pp for w in cluster.workers
               if w.phase not in (Phase.PREFILL, Phase.MIDFILL))
