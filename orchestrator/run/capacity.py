"""A cluster's planned capacity for a set of sessions, and loads relative to it.

`tokenfactory plan` sizes pools from a trace's work mix: each pool sustains
(its GPUs) / (GPU-seconds it spends per call of the mix) calls a second, every
call priced at its own shape in a full batch by the cost core
(`costmodel.plan_candidates.work_per_call`). Here the same figure is taken for
a cluster that exists (a preset or a file), pool by pool at the pool's own
layout and batch; the cluster's capacity is its slowest pool's. On a cluster
planned from the same traces it is the plan's figure (`gb200-nvl72x1` on the
development traces: 32.90 calls/s, decode binding).

A load `L` is then session starts at `L` times the rate that, in steady state,
issues calls at that capacity: `L x capacity x 3600 / (calls per session)`
session starts an hour. It is an offered load. Steady state arrives only once
sessions have run for their whole length (about 2.7 hours at the development
traces' recorded think times, `docs/control.md`): a shorter replay window sees
part of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.model import ModelSpec
from costmodel.phase import Phase
from costmodel.plan_candidates import work_per_call
from costmodel.plan_values import WorkloadStats
from traces.model import Session
from traces.stats import session_duration_s
from workers.cluster import ClusterSpec


@dataclass(frozen=True)
class Capacity:
    """Calls a second each phase's pools sustain on the sessions' mix, and the cluster's."""

    pools: dict[str, float]  # by phase: prefill, midfill, decode
    sessions: int
    calls: int

    @property
    def calls_per_s(self) -> float:
        return min(self.pools.values())

    @property
    def binding_pool(self) -> str:
        return min(self.pools, key=self.pools.__getitem__)

    @property
    def sessions_per_hour(self) -> float:
        """Session starts an hour that, in steady state, issue calls at `calls_per_s`."""
        return self.calls_per_s * 3600.0 * self.sessions / self.calls


def workload_of(sessions: Sequence[Session]) -> WorkloadStats:
    """The planner's view of sessions (as `tokenfactory plan` reads a trace)."""
    from costmodel.fill_phase import MIDFILL_MIN_PREFIX_TOKENS

    calls = [c for s in sessions for c in s.calls]
    if not calls:
        raise ValueError("no calls in the sessions")
    arrivals = [c.arrival_s for c in calls if c.arrival_s is not None]
    span = max(arrivals) - min(arrivals) if len(arrivals) == len(calls) else None
    return WorkloadStats(
        len(sessions), np.array([c.input_tokens for c in calls], dtype=np.float64),
        np.array([c.cached_tokens for c in calls], dtype=np.float64),
        np.array([c.output_tokens for c in calls], dtype=np.float64),
        sum(session_duration_s(s) for s in sessions), MIDFILL_MIN_PREFIX_TOKENS, span)


def planned_capacity(model: ModelSpec, cluster: ClusterSpec,
                     sessions: Sequence[Session]) -> Capacity:
    """Each phase's sustained calls a second on the sessions' mix, summed over its pools
    at their own layouts: decode at its target batch per attention rank, fills at their
    sequences per step shared over the worker's attention ranks. Calls go where the
    router sends them: a cluster without a midfill pool fills every call on prefill,
    one of mixed pools fills and decodes every call there (its work per call is both,
    at the pool's layout, fills one sequence per rank). A phase the mix gives no work
    is left out."""
    workload = workload_of(sessions)
    kinds = {pool.phase.name.lower() for pool in cluster.pools}
    arrangement = ("mixed" if "mixed" in kinds
                   else "three-pool" if "midfill" in kinds else "two-pool")
    shapes = workload.shapes(arrangement, model.max_context_tokens)
    rates: dict[str, float] = {}
    for pool in cluster.pools:
        phase = pool.phase.name.lower()
        lay = pool.layout
        ranks = max(1, lay.stage_gpus // lay.tp)
        if phase == "mixed":
            parts = [(shapes["mixed"], 1), (shapes.get("decode"), pool.batch.target_batch)]
        elif phase in shapes:
            parts = [(shapes[phase], pool.batch.target_batch if pool.phase is Phase.DECODE
                      else max(1, pool.batch.max_batch_sequences // ranks))]
        else:
            continue
        gpu_s = sum(work_per_call(model, pool.hardware, shape, lay.pp, lay.tp, lay.ep, batch,
                                  lay.weights, lay.kv,
                                  lay.mtp if shape.phase is Phase.DECODE else 0)
                    for shape, batch in parts if shape is not None)
        if gpu_s > 0:
            rates[phase] = rates.get(phase, 0.0) + pool.workers * lay.instance_gpus / gpu_s
    if not rates:
        raise ValueError(f"cluster {cluster.name}: no pool has work in the sessions' mix")
    return Capacity(rates, workload.sessions, workload.calls)


def sessions_for_load(capacity: Capacity, load: float, duration_s: float) -> tuple[float, int]:
    """Session starts an hour for `load` x capacity, and the copies of the sessions
    (`repeat`) a window of `duration_s` needs so that the Poisson start process does not
    run out (its expected count plus five standard deviations)."""
    rate = load * capacity.sessions_per_hour
    expected = rate * duration_s / 3600.0
    needed = expected + 5.0 * math.sqrt(expected) + 1.0
    return rate, max(1, math.ceil(needed / capacity.sessions))
