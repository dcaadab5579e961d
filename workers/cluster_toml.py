"""Reading a cluster description from TOML (format in docs/cluster-format.md).

Every field is checked as it is read; an error names the file, the field and the
value. The description's types and its binding to a model live in `workers.cluster`.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import replace
from enum import IntEnum
from pathlib import Path
from typing import Any

from costmodel.errors import CostModelError
from costmodel.files import read_text
from costmodel.hardware import HardwareSpec, load_hardware
from costmodel.layout import Layout
from costmodel.phase import Phase
from costmodel.precision import Precision
from costmodel.toml_lines import with_field_line
from workers.cluster import (
    GB,
    HANDOFFS,
    BatchPolicySpec,
    ClusterError,
    ClusterSpec,
    ExpertPoolSpec,
    KvSpec,
    NodeSpec,
    PfsSpec,
    PoolSpec,
    RackSpec,
)


class _Table:
    def __init__(self, data: dict[str, Any], where: str):
        self.data, self.where = data, where

    def _raw(self, key: str, required: bool, default: Any) -> Any:
        if key not in self.data:
            if required:
                raise ClusterError(f"{self.where}.{key}: missing")
            return default
        return self.data[key]

    def known(self, *keys: str) -> None:
        """Refuse a field this table does not take: a typo must not pass silently."""
        unknown = sorted(set(self.data) - set(keys))
        if unknown:
            raise ClusterError(f"{self.where}.{unknown[0]}: unknown field (known: "
                               f"{', '.join(keys)})")

    def text(self, key: str, default: Any = None, required: bool = True) -> str:
        value = self._raw(key, required and default is None, default)
        if not isinstance(value, str) or not value:
            raise ClusterError(f"{self.where}.{key}: expected a non-empty string, got {value!r}")
        return value

    def number(self, key: str, default: Any = None, *, integer: bool = False,
               allow_zero: bool = False) -> float:
        value = self._raw(key, default is None, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                integer and not isinstance(value, int)):
            kind = "an integer" if integer else "a number"
            raise ClusterError(f"{self.where}.{key}: expected {kind}, got {value!r}")
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise ClusterError(f"{self.where}.{key}: expected {bound}, got {value!r}")
        return value


def _tables(data: dict, key: str, where: str) -> list[_Table]:
    items = data.get(key, [])
    if not isinstance(items, list) or not all(isinstance(t, dict) for t in items):
        raise ClusterError(f"{where}: [[{key}]] must be a list of tables")
    return [_Table(t, f"{where}: {key}[{i}]") for i, t in enumerate(items)]


def _hardware(t: _Table) -> HardwareSpec:
    name = t.text("hardware")
    try:
        return load_hardware(name)
    except CostModelError as exc:
        raise ClusterError(f"{t.where}.hardware: {exc}") from None


EXPERTS_PHASE = "decode-experts"  # a pool of routed experts serving a decode pool


class PoolPhase(IntEnum):
    """A pool kind beyond the cost core's phases (`costmodel.phase.Phase`, whose values
    it continues): `MIXED` workers both fill and decode (an aggregated pool)."""

    MIXED = 3


MIXED = PoolPhase.MIXED


def _node_names(t: _Table, nodes: dict[str, NodeSpec]) -> list[str]:
    names = t.data.get("nodes", [t.data["node"]] if "node" in t.data else None)
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ClusterError(f"{t.where}.nodes: expected a list of node names, got {names!r}")
    for n in names:
        if n not in nodes:
            raise ClusterError(f"{t.where}.nodes: unknown node {n!r}; known: {', '.join(nodes)}")
    return names


_POOL_FIELDS = ("name", "phase", "nodes", "node", "gpus", "pp", "tp", "ep", "precision",
                "attention_precision", "kv_precision", "mtp", "target_batch",
                "max_batch_sequences", "max_batch_tokens", "experts_pool")


def _pool(t: _Table, nodes: dict[str, NodeSpec]) -> PoolSpec:
    t.known(*_POOL_FIELDS)
    phase_name = t.text("phase")
    try:
        phase = MIXED if phase_name == "mixed" else Phase[phase_name.upper()]
    except KeyError:
        raise ClusterError(f"{t.where}.phase: expected prefill, midfill or decode (or "
                           f"{EXPERTS_PHASE}), or mixed, got {phase_name!r}") from None
    names = _node_names(t, nodes)
    precisions = {}
    for key, default in (("precision", "fp8"), ("kv_precision", "bf16")):
        try:
            precisions[key] = Precision.parse(t.text(key, default))
        except CostModelError as exc:
            raise ClusterError(f"{t.where}.{key}: {exc}") from None
    attention = None
    if "attention_precision" in t.data:
        attention = Precision.parse(t.text("attention_precision")) \
            if t.data["attention_precision"] in ("bf16", "fp8") else None
        if attention is None:
            raise ClusterError(f"{t.where}.attention_precision: expected bf16 or fp8, got "
                               f"{t.data['attention_precision']!r}")
    # A decode pool that leaves `mtp` out runs the model's shipped default, set at bind.
    mtp_from_model = "mtp" not in t.data and phase in (Phase.DECODE, MIXED)
    layout = Layout(pp=int(t.number("pp", 1, integer=True)), tp=int(t.number("tp", 1, integer=True)),
                    ep=int(t.number("ep", 1, integer=True)), weights=precisions["precision"],
                    kv=precisions["kv_precision"], mtp=int(t.number("mtp", 0, integer=True,
                                                                      allow_zero=True)),
                    attention_weights=attention, mtp_from_model=mtp_from_model)
    gpus = int(t.number("gpus", integer=True))
    if gpus % layout.instance_gpus:
        raise ClusterError(
            f"{t.where}.gpus: {gpus} is not a multiple of the layout's {layout.instance_gpus} GPUs "
            f"per worker (pp={layout.pp} x max(tp={layout.tp}, ep={layout.ep}))")
    hardware = nodes[names[0]].hardware
    batch = BatchPolicySpec(
        max_batch_tokens=int(t.number("max_batch_tokens", 16384, integer=True)),
        max_batch_sequences=int(t.number("max_batch_sequences", 64, integer=True)),
        target_batch=int(t.number("target_batch", 4, integer=True)),
    )
    if batch.target_batch > batch.max_batch_sequences:
        raise ClusterError(f"{t.where}.target_batch: {batch.target_batch} is more than "
                           f"max_batch_sequences={batch.max_batch_sequences}")
    experts = t.text("experts_pool") if "experts_pool" in t.data else None
    if experts is not None and phase is not Phase.DECODE:
        raise ClusterError(f"{t.where}.experts_pool: only a decode pool has one, not {phase_name}")
    if experts is not None and layout.pp != 1:
        raise ClusterError(f"{t.where}.pp: a decode pool with experts_pool has one stage, "
                           f"got {layout.pp}")
    return PoolSpec(t.text("name"), phase, hardware, gpus, layout, tuple(names), batch, experts)


def _expert_pool(t: _Table, nodes: dict[str, NodeSpec]) -> ExpertPoolSpec:
    for key in ("pp", "tp", "mtp", "experts_pool", "target_batch"):
        if key in t.data:
            raise ClusterError(f"{t.where}.{key}: a {EXPERTS_PHASE} pool has none (its experts "
                               f"spread over ep; batching is its decode pool's)")
    t.known("name", "phase", "nodes", "node", "gpus", "ep", "precision")
    names = _node_names(t, nodes)
    try:
        weights = Precision.parse(t.text("precision", "fp8"))
    except CostModelError as exc:
        raise ClusterError(f"{t.where}.precision: {exc}") from None
    ep, gpus = int(t.number("ep", integer=True)), int(t.number("gpus", integer=True))
    if gpus % ep:
        raise ClusterError(f"{t.where}.gpus: {gpus} is not a multiple of ep={ep} GPUs per worker")
    return ExpertPoolSpec(t.text("name"), nodes[names[0]].hardware, gpus, ep, weights,
                          tuple(names))


def _check_pairing(pools: list[PoolSpec], experts: list[ExpertPoolSpec],
                   where_of: dict[str, str]) -> None:
    """Each decode-experts pool serves exactly one decode pool, whose workers split evenly
    over the expert workers (N attention workers to one expert worker)."""
    by_name = {e.name: e for e in experts}
    served: dict[str, str] = {}
    for p in pools:
        if p.experts_pool is None:
            continue
        field = f"{where_of[p.name]}.experts_pool"
        e = by_name.get(p.experts_pool)
        if e is None:
            raise ClusterError(f"{field}: no {EXPERTS_PHASE} pool named {p.experts_pool!r}; "
                               f"known: {', '.join(by_name) or 'none'}")
        if e.name in served:
            raise ClusterError(f"{field}: pool {e.name} already serves pool {served[e.name]}")
        served[e.name] = p.name
        if p.workers % e.workers:
            raise ClusterError(
                f"{field}: the {p.workers} workers of pool {p.name} do not pair evenly with "
                f"the {e.workers} expert workers of pool {e.name}; expected a multiple")
    for e in experts:
        if e.name not in served:
            raise ClusterError(f"{where_of[e.name]}: {EXPERTS_PHASE} pool {e.name} is no "
                               f"decode pool's experts_pool")


def _check_phases(pools: list[PoolSpec], where_of: dict[str, str], where: str) -> None:
    """Disaggregated (prefill and decode pools, midfill optional) or aggregated (mixed
    pools alone): mixed workers take every call, so beside them the others would idle."""
    mixed = [p for p in pools if p.phase is MIXED]
    if mixed:
        other = next((p for p in pools if p.phase is not MIXED), None)
        if other is not None:
            raise ClusterError(
                f"{where_of[other.name]}.phase: {other.phase.name.lower()} beside mixed pool "
                f"{mixed[0].name}; mixed pools take every call, so a cluster has mixed pools "
                f"or prefill and decode pools, not both")
        return
    for phase in (Phase.PREFILL, Phase.DECODE):
        if not any(p.phase is phase for p in pools):
            raise ClusterError(f"{where}: needs at least one {phase.name.lower()} pool "
                               f"(or only mixed pools)")


def _optional_table(data: dict[str, Any], key: str, where: str) -> _Table:
    """The table `key` of the file (empty when absent)."""
    raw = data.get(key, {})
    if not isinstance(raw, dict):
        raise ClusterError(f"{where}: {key}: expected a table, got {raw!r}")
    return _Table(raw, f"{where}: {key}")


_TOP_FIELDS = ("name", "description", "engine", "mtp_acceptance", "cost_source", "pfs", "kv",
               "racks", "nodes", "pools")


def cluster_from_dict(data: dict[str, Any], where: str) -> ClusterSpec:
    top = _Table(data, where)
    unknown = sorted(set(data) - set(_TOP_FIELDS))
    if unknown:
        raise ClusterError(f"{where}: {unknown[0]}: unknown field (known: {', '.join(_TOP_FIELDS)})")
    rack_tables = _tables(data, "racks", where)
    for t in rack_tables:
        t.known("name", "cache_gb", "cache_gb_per_s")
    racks = tuple(RackSpec(t.text("name"), int(t.number("cache_gb", 0, allow_zero=True) * GB),
                           t.number("cache_gb_per_s", 100) * GB)
                  for t in rack_tables)
    rack_names = {r.name for r in racks}
    nodes_list = []
    for t in _tables(data, "nodes", where):
        t.known("name", "rack", "hardware", "gpus", "dram_gb", "dram_gb_per_s")
        rack = t.text("rack")
        if rack not in rack_names:
            raise ClusterError(f"{t.where}.rack: unknown rack {rack!r}")
        nodes_list.append(NodeSpec(t.text("name"), rack, _hardware(t),
                                   int(t.number("gpus", integer=True)),
                                   int(t.number("dram_gb") * GB), t.number("dram_gb_per_s") * GB))
    if not nodes_list:
        raise ClusterError(f"{where}: no [[nodes]]")
    nodes = {n.name: n for n in nodes_list}
    if len(nodes) != len(nodes_list):
        raise ClusterError(f"{where}: node names must be unique")
    pfs_t = _optional_table(data, "pfs", where)
    pfs_t.known("capacity_gb", "read_gb_per_s", "write_gb_per_s")
    pfs = PfsSpec(int(pfs_t.number("capacity_gb") * GB), pfs_t.number("read_gb_per_s") * GB,
                  pfs_t.number("write_gb_per_s") * GB)
    pools_list: list[PoolSpec] = []
    experts: list[ExpertPoolSpec] = []
    where_of: dict[str, str] = {}
    for t in _tables(data, "pools", where):
        if t.data.get("phase") == EXPERTS_PHASE:
            experts.append(_expert_pool(t, nodes))
            where_of.setdefault(experts[-1].name, t.where)
        else:
            pools_list.append(_pool(t, nodes))
            where_of.setdefault(pools_list[-1].name, t.where)
    pools = tuple(pools_list)
    if not pools:
        raise ClusterError(f"{where}: no [[pools]]")
    if len(where_of) != len(pools) + len(experts):
        raise ClusterError(f"{where}: pool names must be unique")
    _check_pairing(pools_list, experts, where_of)
    _check_phases(pools_list, where_of, where)
    total_free = sum(n.gpus for n in nodes_list)
    asked = sum(p.gpus for p in pools) + sum(e.gpus for e in experts)
    if asked > total_free:
        raise ClusterError(f"{where}: pools ask for {asked} GPUs, nodes have {total_free}")
    engine, acceptance, cost_source = _service(data, where)
    return ClusterSpec(top.text("name"), str(data.get("description", "")), racks,
                       tuple(nodes_list), pools, pfs, tuple(experts), _kv(data, where),
                       engine=engine, mtp_acceptance=acceptance, cost_source=cost_source)


def _service(data: dict[str, Any], where: str
             ) -> tuple[str | None, tuple[float, ...] | None, str | None]:
    """The optional top-level `engine`, `mtp_acceptance` and `cost_source`."""
    from costmodel.engines import load_engine
    from costmodel.measured.source import CostSourceKind
    from costmodel.mtp import check_acceptance

    engine = data.get("engine")
    try:
        if engine is not None:
            if not isinstance(engine, str):
                raise CostModelError(f"engine: expected a string, got {engine!r}")
            load_engine(engine)
        acceptance = data.get("mtp_acceptance")
        if acceptance is not None:
            acceptance = check_acceptance(acceptance, "mtp_acceptance")
        cost_source = data.get("cost_source")
        if cost_source is not None:
            cost_source = CostSourceKind.parse(str(cost_source)).value
    except CostModelError as exc:
        raise ClusterError(f"{where}: {exc}") from None
    return engine, acceptance, cost_source


def with_service(spec: ClusterSpec, engine: str | None = None,
                 mtp_acceptance: tuple[float, ...] | None = None,
                 cost_source: str | None = None) -> ClusterSpec:
    """`spec` with the engine, the MTP acceptance and the cost source given (None: as the
    cluster says)."""
    if engine is not None:
        from costmodel.engines import load_engine

        load_engine(engine)  # an unknown name: CostModelError, one line
        spec = replace(spec, engine=engine)
    if mtp_acceptance is not None:
        spec = replace(spec, mtp_acceptance=tuple(mtp_acceptance))
    if cost_source is not None:
        from costmodel.measured.source import CostSourceKind

        spec = replace(spec, cost_source=CostSourceKind.parse(cost_source, "--cost-source").value)
    return spec


def _kv(data: dict[str, Any], where: str) -> KvSpec:
    """The optional `[kv]` table: how KV moves between workers and tiers."""
    t = _optional_table(data, "kv", where)
    t.known("handoff", "promote_min_sessions")
    handoff = t.text("handoff", KvSpec.handoff)
    if handoff not in HANDOFFS:
        raise ClusterError(f"{t.where}.handoff: expected one of {', '.join(HANDOFFS)}, "
                           f"got {handoff!r}")
    promote = int(t.number("promote_min_sessions", KvSpec.promote_min_sessions, integer=True,
                           allow_zero=True))
    return KvSpec(handoff, promote)


DATA_DIR = Path(__file__).parent / "data" / "clusters"


def cluster_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.toml"))


def load_cluster(name_or_path: str) -> ClusterSpec:
    """A preset by name (`gb200-nvl72x2`, ...) or a TOML file by path."""
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        return load_cluster_file(Path(name_or_path))
    path = DATA_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise ClusterError(f"unknown cluster {name_or_path!r}; known: {', '.join(cluster_names())}")
    return load_cluster_file(path)


def load_cluster_file(path: Path) -> ClusterSpec:
    """The cluster a TOML file describes; an error names the file, the line and the field
    (`FILE:LINE: pools[1].gpus: ...`)."""
    path = Path(path)
    text = read_text(path, ClusterError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ClusterError(f"{path}: invalid TOML: {exc}") from None
    try:
        return cluster_from_dict(data, str(path))
    except ClusterError as exc:
        raise ClusterError(with_field_line(str(exc), str(path), text)) from None


def with_decode_mtp(spec: ClusterSpec, mtp: int) -> ClusterSpec:
    """`spec` with every pool that decodes drafting `mtp` tokens per step (0: MTP off)."""
    if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
        raise ClusterError(f"mtp: expected an integer >= 0, got {mtp!r}")
    pools = tuple(replace(p, layout=replace(p.layout, mtp=mtp, mtp_from_model=False))
                  if p.phase not in (Phase.PREFILL, Phase.MIDFILL) else p for p in spec.pools)
    return replace(spec, pools=pools)
