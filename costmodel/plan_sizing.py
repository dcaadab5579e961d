"""The planner's sizing step: whole workers per pool within the GPUs and their nodes.

Given each pool's candidates (one per instance size, with the GPU-seconds it spends per
call of the trace's mix), every combination of one candidate per pool is sized: the
call rate a pool sustains is its GPUs over its work per call, the cluster's is the
smallest of them, so workers go one at a time to the pool that limits the rate while
they still pack onto the nodes; GPUs left over go to the next-lowest pools. Among the
combinations within `RATE_TOLERANCE` of the best rate, the one with more pools of at
least two workers wins (a pool of one has no worker to give), then one whose decode and
main fill pool share a worker size (the slow loop moves a worker only between pools of
equal worker size), then the highest rate.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from costmodel.phase import Phase
from costmodel.plan_candidates import Candidate

# A smaller or movable arrangement is worth up to this share of the sustainable call
# rate: a pool the slow loop can rebalance recovers more than that under bursty load.
RATE_TOLERANCE = 0.15
# From this many GPUs on, sizing starts from each pool's share of the GPUs rather than
# one worker each (the same balanced end, without thousands of one-worker steps).
BULK_START_GPUS = 4096
BULK_START_SHARES = (0.99, 0.95, 0.8)


@dataclass(frozen=True)
class Nodes:
    """The scale-up domains (nodes) the GPUs come in: `count` nodes of `gpus_each`, the
    last one holding `last` GPUs."""

    count: int
    gpus_each: int
    last: int

    @classmethod
    def of(cls, total_gpus: int, gpus_each: int) -> Nodes:
        full, rest = divmod(total_gpus, gpus_each)
        return cls(full + (rest > 0), gpus_each, rest or gpus_each)

    def sizes(self) -> list[int]:
        return [self.gpus_each] * (self.count - 1) + [self.last]

    def worker_sizes(self, max_gpus: int) -> frozenset[int]:
        """Instance sizes that can be placed at all: within one node, or whole nodes."""
        out = {g for g in range(1, min(max_gpus, self.gpus_each) + 1)}
        whole = [self.gpus_each * k for k in range(2, self.count + 1)
                 if self.gpus_each * k <= max_gpus and (k < self.count or self.last
                                                        == self.gpus_each)]
        return frozenset(out | set(whole))


def packs(nodes: Nodes, workers: list[int]) -> bool:
    """Whether workers of these sizes fit: larger than a node takes whole nodes, the
    rest first fit in decreasing size (as the cluster places them, largest pools first)."""
    counts: dict[int, int] = {}
    for g in workers:
        counts[g] = counts.get(g, 0) + 1
    return packs_counts(nodes, counts)


def packs_counts(nodes: Nodes, counts: dict[int, int]) -> bool:
    """`packs` of `counts[g]` workers of each size `g`, in O(distinct sizes x nodes).

    Placing workers one at a time in decreasing size, a worker larger than a node takes
    the first run of whole free nodes: the larger ones before it took runs from the
    first node on, so that run starts where they ended and must end among the full
    nodes. A worker within a node goes to the first node with room for it: for workers
    of one size that node stays first until it has no room left, so each node in turn
    takes as many as it holds."""
    free = nodes.sizes()
    full_nodes = nodes.count if nodes.last == nodes.gpus_each else nodes.count - 1
    taken = 0  # whole nodes taken from the first one on
    for g in sorted(counts, reverse=True):
        n = counts[g]
        if n <= 0:
            continue
        if g > nodes.gpus_each:
            taken += (g // nodes.gpus_each) * n
            if taken > full_nodes:
                return False
            continue
        for j in range(taken, nodes.count):
            fit = free[j] // g
            if fit:
                put = fit if fit < n else n
                free[j] -= put * g
                n -= put
                if not n:
                    break
        if n:
            return False
    return True


@dataclass(frozen=True)
class Sizing:
    choice: tuple[Candidate, ...]  # one per pool, in the pools' order
    workers: tuple[int, ...]
    calls_per_s: float  # the rate the smallest pool sustains

    @property
    def gpus(self) -> int:
        return sum(c.gpus * n for c, n in zip(self.choice, self.workers, strict=True))

    def pool_rate(self, i: int) -> float:
        c = self.choice[i]
        return math.inf if c.gpu_s_per_call <= 0 else self.workers[i] * c.gpus / c.gpu_s_per_call

    @property
    def movable(self) -> bool:
        """Decode and the fill pool with the most work share a worker size."""
        fills = [i for i, c in enumerate(self.choice) if c.phase is not Phase.DECODE]
        decode = [c.gpus for c in self.choice if c.phase is Phase.DECODE]
        main = max(fills, key=lambda i: (self.choice[i].gpu_s_per_call, -i))
        return self.choice[main].gpus in decode

    @property
    def donors(self) -> int:
        """Pools with a worker to give."""
        return sum(n >= 2 for n in self.workers)


def _size(choice: tuple[Candidate, ...], nodes: Nodes) -> Sizing | None:
    workers = [1] * len(choice)

    def fits(extra: int) -> bool:
        counts = {extra: 1}
        for c, n in zip(choice, workers, strict=True):
            counts[c.gpus] = counts.get(c.gpus, 0) + n
        return packs_counts(nodes, counts)

    if not packs(nodes, [c.gpus for c in choice]):
        return None
    # On many GPUs, start the growth below where it ends: each pool at 99% (else 95%,
    # else 80%) of its share of the GPUs by work per call (every pool then limits the
    # rate alike), the first whose workers pack; the greedy steps below then place the
    # rest one worker at a time.
    work = [max(c.gpu_s_per_call, 0.0) for c in choice]
    total_gpus = sum(nodes.sizes())
    if sum(work) > 0 and total_gpus >= BULK_START_GPUS:
        for share in BULK_START_SHARES:
            start = [max(1, math.floor(share * total_gpus * w / sum(work) / c.gpus))
                     for c, w in zip(choice, work, strict=True)]
            counts: dict[int, int] = {}
            for c, n in zip(choice, start, strict=True):
                counts[c.gpus] = counts.get(c.gpus, 0) + n
            if packs_counts(nodes, counts):
                workers = start
                break

    def rate(i: int) -> float:
        c = choice[i]
        return math.inf if c.gpu_s_per_call <= 0 else workers[i] * c.gpus / c.gpu_s_per_call

    # Grow the limiting pool while it fits; then spend what is left on the next-lowest.
    while True:
        order = sorted(range(len(choice)), key=lambda i: (rate(i), i))
        bottleneck = order[0]
        if fits(choice[bottleneck].gpus):
            workers[bottleneck] += 1
            continue
        for i in order[1:]:
            if fits(choice[i].gpus):
                workers[i] += 1
                break
        else:
            break
    limited = min(rate(i) for i in range(len(choice)))
    s = Sizing(choice, tuple(workers), limited)
    return s


def size_pools(candidates: list[list[Candidate]], nodes: Nodes) -> Sizing | None:
    """The chosen combination (see the module doc); None when no combination packs."""
    sized = [s for combo in itertools.product(*candidates)
             if (s := _size(tuple(combo), nodes)) is not None]
    if not sized:
        return None
    best = max(s.calls_per_s for s in sized)
    near = [s for s in sized if s.calls_per_s >= (1.0 - RATE_TOLERANCE) * best]
    # Deterministic: ties go to fewer GPUs per worker, then the candidate order.
    return max(near, key=lambda s: (s.donors, s.movable, s.calls_per_s,
                                    -max(c.gpus for c in s.choice)))


def workers_that_pack(nodes: Nodes, gpus_each: int) -> int:
    """How many workers of `gpus_each` GPUs the nodes hold: within a node, as many as
    each node fits; wider, whole nodes of the full ones."""
    if gpus_each > nodes.gpus_each:
        full = nodes.count if nodes.last == nodes.gpus_each else nodes.count - 1
        return full // (gpus_each // nodes.gpus_each)
    return sum(size // gpus_each for size in nodes.sizes())


def size_single(candidates: list[Candidate], nodes: Nodes) -> Sizing | None:
    """One pool (aggregated workers): per candidate, as many workers as pack; the one
    that sustains the most calls a second (ties: the smaller worker). None when none
    packs."""
    sized = [Sizing((c,), (n,), math.inf if c.gpu_s_per_call <= 0
                    else n * c.gpus / c.gpu_s_per_call)
             for c in candidates if (n := workers_that_pack(nodes, c.gpus)) >= 1]
    if not sized:
        return None
    return max(sized, key=lambda s: (s.calls_per_s, -s.choice[0].gpus))
