"""The links of a cluster, and the path a KV copy takes between two places.

Every link is one direction of one piece of hardware, sized from the hardware
presets (costmodel/data/hardware/*.toml):

| link | per | bandwidth | what crosses it |
|---|---|---|---|
| `nvlink-out:W`, `nvlink-in:W` | worker | scale-up per GPU per direction x GPUs | HBM to HBM inside one scale-up domain |
| `nic-out:W`, `nic-in:W` | worker | scale-out NIC per GPU x GPUs | HBM to anything outside the domain (GPUDirect RDMA) |
| `host-out:W`, `host-in:W` | worker | host link per GPU x GPUs (PCIe Gen5 x16, or NVLink-C2C on Grace) | HBM to and from its node's DRAM |
| `dram:N` | node | the node's DRAM bandwidth, reads and writes together | every copy to or from that DRAM |
| `node-nic-out:N`, `node-nic-in:N` | node | NIC per GPU x the node's GPUs | DRAM of one node to or from another place off the node |
| `rack-read:R`, `rack-write:R` | rack | the rack cache's port | reads from and writes to the rack cache |
| `pfs-read`, `pfs-write` | cluster | the parallel file system's aggregate | reads from and writes to the PFS |

A worker's links aggregate its GPUs: a copy to a worker is striped over its
ranks, each receiving its share over its own port, the way NIXL and Mooncake's
transfer engine move KV (https://github.com/ai-dynamo/nixl,
https://github.com/kvcache-ai/Mooncake). A node's DRAM is reached from off the
node through the node's NICs, which are the same NICs its GPUs use: both
bounds hold. Two workers share a scale-up domain when they sit on one node no
larger than the hardware's domain (an NVL72 rack is one node of 72 GPUs; an
HGX server one of 8).
"""

from __future__ import annotations

from storage.links import Link
from storage.tiers import Location, Tier
from workers.cluster import BoundCluster, WorkerSpec


def worker_links(w: WorkerSpec) -> tuple[Link, ...]:
    """A worker's ports: NVLink, NIC and host link, each way, over its GPUs."""
    gpus = w.layout.instance_gpus
    hw = w.hardware
    return tuple(Link(f"{kind}-{way}:{w.name}", per_gpu * gpus)
                 for kind, per_gpu in (("nvlink", hw.scale_up_bytes_per_s),
                                       ("nic", hw.scale_out_bytes_per_s),
                                       ("host", hw.host_bytes_per_s))
                 for way in ("out", "in"))


def fabric_links(bound: BoundCluster) -> tuple[Link, ...]:
    """One `Link` per direction of every port, DRAM, rack cache and the PFS."""
    links: list[Link] = []
    for w in bound.workers:
        links.extend(worker_links(w))
    for n in bound.spec.nodes:
        links.append(Link(f"dram:{n.name}", n.dram_bytes_per_s))
        nic = n.hardware.scale_out_bytes_per_s * n.gpus
        links.append(Link(f"node-nic-out:{n.name}", nic))
        links.append(Link(f"node-nic-in:{n.name}", nic))
    for r in bound.spec.racks:
        if r.cache_bytes:
            links.append(Link(f"rack-read:{r.name}", r.cache_bytes_per_s))
            links.append(Link(f"rack-write:{r.name}", r.cache_bytes_per_s))
    links.append(Link("pfs-read", bound.spec.pfs.read_bytes_per_s))
    links.append(Link("pfs-write", bound.spec.pfs.write_bytes_per_s))
    return tuple(links)


def same_domain(bound: BoundCluster, a: WorkerSpec, b: WorkerSpec) -> bool:
    if a.node != b.node:
        return False
    node = next(n for n in bound.spec.nodes if n.name == a.node)
    return node.gpus <= node.hardware.scale_up_domain_gpus


class Topology:
    """Who sits where: the path of a copy between two places (`path`), kept once
    worked out. A place's HBM is named by its worker, or by the name its GPUs
    served under before (`add_worker(spec, holder)`)."""

    def __init__(self, bound: BoundCluster) -> None:
        self.bound = bound
        self._workers: dict[str, WorkerSpec] = {w.name: w for w in bound.workers}
        self._paths: dict[tuple[Location, Location], tuple[str, ...]] = {}

    def add_worker(self, spec: WorkerSpec, holder: str | None = None) -> None:
        self._workers[holder or spec.name] = spec
        self._paths.clear()

    def port(self, holder: str) -> str:
        """The worker whose ports a place's HBM uses (its links' names)."""
        return self._workers[holder].name

    def path(self, src: Location, dst: Location) -> tuple[str, ...]:
        """The links a copy from `src` to `dst` crosses, in order."""
        key = (src, dst)
        path = self._paths.get(key)
        if path is None:
            if src == dst:
                raise ValueError(f"copy_path: {src} to itself")
            path = self._paths[key] = (*self._leave(src, dst), *self._enter(dst, src))
        return path

    def _node_of(self, place: Location) -> str | None:
        if place.tier is Tier.HBM:
            return self._workers[place.holder].node
        return place.holder if place.tier is Tier.DRAM else None

    def _same_domain(self, a: Location, b: Location) -> bool:
        return same_domain(self.bound, self._workers[a.holder], self._workers[b.holder])

    def _leave(self, src: Location, dst: Location) -> tuple[str, ...]:
        """Links on the sending side."""
        if src.tier is Tier.HBM:
            w = self._workers[src.holder]
            if dst.tier is Tier.HBM and self._same_domain(src, dst):
                return (f"nvlink-out:{w.name}",)
            if dst.tier is Tier.DRAM and dst.holder == w.node:
                return (f"host-out:{w.name}",)
            return (f"nic-out:{w.name}",)
        if src.tier is Tier.DRAM:
            if self._node_of(dst) == src.holder:
                return (f"dram:{src.holder}",)
            return (f"dram:{src.holder}", f"node-nic-out:{src.holder}")
        if src.tier is Tier.RACK:
            return (f"rack-read:{src.holder}",)
        return ("pfs-read",)

    def _enter(self, dst: Location, src: Location) -> tuple[str, ...]:
        """Links on the receiving side."""
        if dst.tier is Tier.HBM:
            w = self._workers[dst.holder]
            if src.tier is Tier.HBM and self._same_domain(src, dst):
                return (f"nvlink-in:{w.name}",)
            if src.tier is Tier.DRAM and src.holder == w.node:
                return (f"host-in:{w.name}",)
            return (f"nic-in:{w.name}",)
        if dst.tier is Tier.DRAM:
            if self._node_of(src) == dst.holder:
                return (f"dram:{dst.holder}",)
            return (f"node-nic-in:{dst.holder}", f"dram:{dst.holder}")
        if dst.tier is Tier.RACK:
            return (f"rack-write:{dst.holder}",)
        return ("pfs-write",)


def copy_path(bound: BoundCluster, src: Location, dst: Location) -> tuple[str, ...]:
    """The links a copy from `src` to `dst` crosses, in order."""
    return Topology(bound).path(src, dst)


def steady_load(bound: BoundCluster, demands) -> dict[str, float]:
    """Bytes per second each link carries when copies run at steady rates:
    `demands` is an iterable of `(src, dst, bytes_per_s)`."""
    load = {link.name: 0.0 for link in fabric_links(bound)}
    topology = Topology(bound)
    for src, dst, bytes_per_s in demands:
        for name in topology.path(src, dst):
            load[name] += bytes_per_s
    return load


def migration_demands(bound: BoundCluster, sessions: int, bytes_per_move: float,
                      every_s: float, source: str, pool: str = "decode"):
    """Every session's KV moved into a worker of `pool` once every `every_s` seconds,
    sessions spread evenly over the pool's workers, from `source`: "pfs", "dram" (each
    worker's own node) or "peer" (the HBM of another worker, round robin over the
    cluster's other workers)."""
    workers = [w for w in bound.workers if w.pool == pool]
    if not workers:
        raise ValueError(f"cluster {bound.spec.name!r} has no pool {pool!r}")
    per_worker = sessions * bytes_per_move / every_s / len(workers)
    for i, w in enumerate(workers):
        dst = Location(Tier.HBM, w.name)
        if source == "pfs":
            yield Location(Tier.PFS, "pfs"), dst, per_worker
        elif source == "dram":
            yield Location(Tier.DRAM, w.node), dst, per_worker
        elif source == "peer":
            peers = [p for p in bound.workers if p.name != w.name]
            if not peers:
                raise ValueError(f"cluster {bound.spec.name!r} has one worker: no peer")
            yield Location(Tier.HBM, peers[i % len(peers)].name), dst, per_worker
        else:
            raise ValueError(f"source must be pfs, dram or peer, got {source!r}")
