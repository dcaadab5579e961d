"""The cluster description: pools of workers on nodes and racks, and the storage tiers.

One validated, frozen description, read from a TOML file (format in
`docs/cluster-format.md`). A description that exists is valid: every field is
checked at construction and an error names the file, the field and the value.
Layouts are checked against a model when the cluster is bound to one
(`bind(model)`), since heads, experts and weight sizes are the model's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from costmodel.capacity import KV_SHARE_OF_FREE_HBM, KVCapacity, kv_capacity
from costmodel.disagg import (
    AFLayout,
    attention_weight_bytes_per_gpu,
    check_af_layout,
    expert_slice_bytes_per_gpu,
)
from costmodel.errors import CostModelError
from costmodel.hardware import HardwareSpec
from costmodel.layout import Layout, check_layout
from costmodel.memory import weight_bytes_per_gpu
from costmodel.model import ModelSpec
from costmodel.phase import Phase
from costmodel.precision import BYTES_PER_ELEMENT, Precision
from storage.tiers import Location, StoreLayout, Tier, TierSpec

GB = 1e9


class ClusterError(CostModelError):
    """A cluster description that cannot be: names the file, field and value."""


@dataclass(frozen=True)
class BatchPolicySpec:
    max_batch_tokens: int  # fills: new tokens per step, summed over sequences
    max_batch_sequences: int  # fills: sequences per step; decode, mixed: cap per attention rank
    # decode, mixed: sequences decoding together per attention rank (small: the source
    # essay's batching); a worker holds this x ranks x pp
    target_batch: int


@dataclass(frozen=True)
class PoolSpec:
    name: str
    phase: Phase
    hardware: HardwareSpec
    gpus: int
    layout: Layout
    nodes: tuple[str, ...]
    batch: BatchPolicySpec
    experts_pool: str | None = None  # decode only: routed experts on that pool's GPUs

    @property
    def workers(self) -> int:
        return self.gpus // self.layout.instance_gpus


@dataclass(frozen=True)
class ExpertPoolSpec:
    """`phase = "decode-experts"`: GPUs holding only routed experts for a decode pool
    (attention-FFN disaggregation). Its workers have no queue: each serves a fixed
    group of the decode pool's workers, which price their steps with it."""

    name: str
    hardware: HardwareSpec
    gpus: int
    ep: int
    weights: Precision
    nodes: tuple[str, ...]

    @property
    def workers(self) -> int:
        return self.gpus // self.ep


@dataclass(frozen=True)
class NodeSpec:
    name: str
    rack: str
    hardware: HardwareSpec
    gpus: int
    dram_bytes: int
    dram_bytes_per_s: float


@dataclass(frozen=True)
class RackSpec:
    name: str
    cache_bytes: int  # 0: no rack cache
    cache_bytes_per_s: float


@dataclass(frozen=True)
class PfsSpec:
    capacity_bytes: int
    read_bytes_per_s: float
    write_bytes_per_s: float


@dataclass(frozen=True)
class WorkerSpec:
    """One model instance: a pool's slice of GPUs on a home node."""

    name: str
    pool: str
    phase: Phase
    node: str
    rack: str
    hardware: HardwareSpec
    layout: Layout
    batch: BatchPolicySpec
    # What the instance holds, replication across TP ranks counted (costmodel.capacity):
    # decode admits against `kv.instance_bytes` with `kv.sequence_bytes_per_gpu(context)`
    # per sequence.
    kv: KVCapacity
    # The store's HBM tier at this worker: the logical bytes (blobs count the model's
    # unsharded KV per token) of the `kv.kv_capacity_tokens` tokens the instance holds.
    kv_capacity_bytes: int
    experts_worker: str | None = None  # the expert worker this decode worker pairs with

    def blob_bytes_per_gpu(self, logical_bytes: float) -> float:
        """HBM per GPU that `logical_bytes` of blobs at this worker take: as many tokens,
        each costing `kv.kv_bytes_per_token_per_gpu` on the GPUs of one rank group."""
        if self.kv.kv_capacity_tokens <= 0:
            return logical_bytes / self.layout.instance_gpus
        tokens = logical_bytes * self.kv.kv_capacity_tokens / self.kv_capacity_bytes
        return tokens * self.kv.kv_bytes_per_token_per_gpu / self.kv.ranks


@dataclass(frozen=True)
class ExpertWorkerSpec:
    name: str
    pool: str
    node: str
    hardware: HardwareSpec
    ep: int
    attention_workers: tuple[str, ...]


HANDOFFS = ("direct", "host")


@dataclass(frozen=True)
class KvSpec:
    """How KV moves (the cluster file's `[kv]`, docs/cluster-format.md).

    `handoff`: a filled call's KV goes to its decode worker `direct` (GPU to GPU,
    over NVLink inside a scale-up domain, else the NICs) or through the fill node's
    `host` memory. `promote_min_sessions`: a blob referenced by at least this many
    live sessions is copied to its reader's rack cache when fetched (0: never)."""

    handoff: str = "direct"
    promote_min_sessions: int = 2


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    description: str
    racks: tuple[RackSpec, ...]
    nodes: tuple[NodeSpec, ...]
    pools: tuple[PoolSpec, ...]
    pfs: PfsSpec
    expert_pools: tuple[ExpertPoolSpec, ...] = ()
    kv: KvSpec = KvSpec()
    # The serving engine whose host cost the workers pay (costmodel/data/engines.toml;
    # None: costmodel.engines.DEFAULT_ENGINE) and the MTP acceptance by draft position
    # on this cluster's traffic (None: the model's, costmodel.mtp.model_acceptance).
    engine: str | None = None
    mtp_acceptance: tuple[float, ...] | None = None
    # What prices the steps: "roofline", "measured" or "auto"
    # (costmodel.measured.source.CostSourceKind; None: the default, the roofline).
    cost_source: str | None = None

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools) + sum(p.gpus for p in self.expert_pools)

    def pool(self, name: str) -> PoolSpec:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    def bind(self, model: ModelSpec) -> BoundCluster:
        return BoundCluster.build(self, model)


@dataclass(frozen=True)
class BoundCluster:
    """A cluster whose layouts were checked against a model: its workers and store layout."""

    spec: ClusterSpec
    model: ModelSpec
    workers: tuple[WorkerSpec, ...]
    store_layout: StoreLayout
    expert_workers: tuple[ExpertWorkerSpec, ...] = ()

    @classmethod
    def build(cls, spec: ClusterSpec, model: ModelSpec) -> BoundCluster:
        nodes = {n.name: n for n in spec.nodes}
        free = {n.name: n.gpus for n in spec.nodes}
        size = dict(free)
        homes: dict[str, list[str]] = {}
        for pool in spec.pools:
            if pool.experts_pool is None:  # a split pool is checked with its experts below
                try:
                    check_layout(model, pool.hardware, pool.layout)
                except CostModelError as exc:
                    raise ClusterError(f"pool {pool.name}: {exc}") from None
            homes[pool.name] = _place(pool.name, pool.nodes, pool.layout.instance_gpus,
                                      pool.workers, free, size)
        for e in spec.expert_pools:
            homes[e.name] = _place(e.name, e.nodes, e.ep, e.workers, free, size)
        workers: list[WorkerSpec] = []
        expert_workers: list[ExpertWorkerSpec] = []
        for pool in spec.pools:
            # A decode pool that did not choose `mtp` runs the model's shipped default.
            pool = replace(pool, layout=pool.layout.with_model_defaults(model))
            layout, pairs = pool.layout, {}
            weights = float(weight_bytes_per_gpu(model, layout))
            if pool.experts_pool is not None:
                e = next(x for x in spec.expert_pools if x.name == pool.experts_pool)
                layout, pairs, paired = _split(pool, e, model, homes)
                expert_workers += paired
                weights = float(attention_weight_bytes_per_gpu(
                    model, layout.tp, int(layout.weights), int(layout.attention_precision)))
            kv = kv_capacity(model, pool.hardware, layout, weight_bytes=weights)
            for i, home in enumerate(homes[pool.name]):
                name = f"{pool.name}-{i}"
                workers.append(WorkerSpec(
                    name=name, pool=pool.name, phase=pool.phase, node=home,
                    rack=nodes[home].rack, hardware=pool.hardware, layout=layout,
                    batch=pool.batch, kv=kv, kv_capacity_bytes=_logical_bytes(model, layout, kv),
                    experts_worker=pairs.get(name),
                ))
        return cls(spec, model, tuple(workers), _store_layout(spec, workers),
                   tuple(expert_workers))


def reshaped_worker(bound: BoundCluster, template: WorkerSpec, gpus: int,
                    hardware: HardwareSpec) -> WorkerSpec | None:
    """`template`'s pool at `gpus` GPUs of `hardware`: the pool's precisions, MTP and batch
    policy; its pp where it divides `gpus`, else 1; for a MoE model its tp where it divides
    the stage, else 1, with ep filling the stage; for a dense one tp filling it. Its KV
    capacity, store bytes and weights as `BoundCluster.build` computes them. None when no
    such layout runs or its weights do not fit (`check_layout`), or the pool's experts
    live on an expert pool (a split pool's pairing is fixed at build)."""
    if template.experts_worker is not None or isinstance(template.layout, AFLayout):
        return None
    base = template.layout
    for pp in dict.fromkeys(p for p in (base.pp, 1) if gpus % p == 0):
        stage = gpus // pp
        shapes = ([(t, stage) for t in dict.fromkeys((base.tp, 1)) if stage % t == 0]
                  if bound.model.moe else [(stage, 1)])
        for tp, ep in shapes:
            layout = replace(base, pp=pp, tp=tp, ep=ep, dp=1)
            try:
                check_layout(bound.model, hardware, layout)
            except CostModelError:
                continue
            kv = kv_capacity(bound.model, hardware, layout,
                             weight_bytes=float(weight_bytes_per_gpu(bound.model, layout)))
            return replace(template, hardware=hardware, layout=layout, kv=kv,
                           kv_capacity_bytes=_logical_bytes(bound.model, layout, kv))
    return None


def _logical_bytes(model: ModelSpec, layout: Layout, kv: KVCapacity) -> int:
    """The store's view of an instance's KV room: blobs count the model's whole KV per
    token, however many TP ranks hold a copy. At least one byte (a tier has room)."""
    per_token = model.kv_bytes_per_token(BYTES_PER_ELEMENT[layout.kv])
    return max(1, int(kv.kv_capacity_tokens * per_token))


def _place(pool: str, candidates: tuple[str, ...], need: int, count: int,
           free: dict[str, int], size: dict[str, int]) -> list[str]:
    """Home nodes of a pool's workers, first fit; takes their GPUs from `free`. A worker
    larger than a node takes whole consecutive nodes of its list (its all-to-all then
    crosses the scale-out network, which the cost core prices); its home is the first."""
    homes = []
    for i in range(count):
        home = next((n for n in candidates if free[n] >= need), None)
        if home is not None:
            free[home] -= need
            homes.append(home)
            continue
        span = _whole_nodes(candidates, need, free, size)
        if span is None:
            raise ClusterError(
                f"pool {pool}: worker {i} needs {need} GPUs on one node or on whole "
                f"consecutive nodes; nodes {', '.join(candidates)} have "
                f"{', '.join(str(free[n]) for n in candidates)} free"
            )
        for n in span:
            free[n] = 0
        homes.append(span[0])
    return homes


def _whole_nodes(candidates: tuple[str, ...], need: int, free: dict[str, int],
                 size: dict[str, int]) -> list[str] | None:
    for start in range(len(candidates)):
        span, gpus = [], 0
        for n in candidates[start:]:
            if free[n] != size[n]:
                break
            span.append(n)
            gpus += size[n]
            if gpus >= need:
                return span if gpus == need else None
    return None


def _split(pool: PoolSpec, e: ExpertPoolSpec, model: ModelSpec, homes: dict[str, list[str]]
           ) -> tuple[AFLayout, dict[str, str], list[ExpertWorkerSpec]]:
    """A decode pool's layout with its experts on `e`: expert worker g serves attention
    workers g*n .. g*n+n-1. One scale-up domain when every such group shares a node
    that the hardware's domain covers (a pool shares one pricer, so all groups or none)."""
    slice_bytes = float(expert_slice_bytes_per_gpu(model, e.ep, int(e.weights)))
    if slice_bytes > e.hardware.hbm_bytes:
        raise ClusterError(
            f"pool {e.name}.ep: ep={e.ep} puts {slice_bytes / GB:.1f} GB of routed experts on "
            f"each GPU > {e.hardware.hbm_bytes / GB:.1f} GB HBM of {e.hardware.name}; raise ep")
    n = pool.workers // e.workers
    base = {f.name: getattr(pool.layout, f.name) for f in fields(Layout)}
    layout = AFLayout(**base, experts_hardware=e.hardware, experts_ep=e.ep,
                      experts_weights=e.weights, attention_per_expert=n)
    att, exp = homes[pool.name], homes[e.name]
    together = all(set(att[g * n:(g + 1) * n]) == {exp[g]} for g in range(e.workers))
    domain = min(pool.hardware.scale_up_domain_gpus, e.hardware.scale_up_domain_gpus)
    layout = replace(layout, same_domain=together and layout.split_gpus <= domain)
    try:
        check_af_layout(model, pool.hardware, layout)
    except CostModelError as exc:
        raise ClusterError(f"pool {pool.name} (experts_pool {e.name}): {exc}") from None
    pairs = {f"{pool.name}-{g * n + j}": f"{e.name}-{g}"
             for g in range(e.workers) for j in range(n)}
    paired = [ExpertWorkerSpec(f"{e.name}-{g}", e.name, exp[g], e.hardware, e.ep,
                               tuple(f"{pool.name}-{g * n + j}" for j in range(n)))
              for g in range(e.workers)]
    return layout, pairs, paired


def _store_layout(spec: ClusterSpec, workers: list[WorkerSpec]) -> StoreLayout:
    pfs = Location(Tier.PFS, "pfs")
    entries: list[tuple[Location, TierSpec, Location | None]] = [
        (pfs, TierSpec(Tier.PFS, spec.pfs.capacity_bytes, spec.pfs.read_bytes_per_s,
                       spec.pfs.write_bytes_per_s), None)]
    for rack in spec.racks:
        if rack.cache_bytes:
            entries.append((Location(Tier.RACK, rack.name), TierSpec(
                Tier.RACK, rack.cache_bytes, rack.cache_bytes_per_s, rack.cache_bytes_per_s), pfs))
    for node in spec.nodes:
        entries.append((Location(Tier.DRAM, node.name), TierSpec(
            Tier.DRAM, node.dram_bytes, node.dram_bytes_per_s, node.dram_bytes_per_s), pfs))
    for w in workers:
        # KV enters and leaves HBM over the host link of each GPU of the instance.
        link = w.hardware.host_bytes_per_s * w.layout.instance_gpus
        entries.append((Location(Tier.HBM, w.name), TierSpec(
            Tier.HBM, w.kv_capacity_bytes, link, link), Location(Tier.DRAM, w.node)))
    return StoreLayout.build(entries)


# Reading TOML (presets by name, files, dicts) is workers.cluster_toml, which imports this
# module.
__all__ = ["KV_SHARE_OF_FREE_HBM", "BoundCluster", "ClusterError", "ClusterSpec",
           "reshaped_worker"]
