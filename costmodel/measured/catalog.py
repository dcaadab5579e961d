"""Where aiconfigurator-core keeps its measured tables, and what they cover.

The package ships ``systems/<system>.yaml`` (the GPU's bandwidth and peak
FLOPs, which the tables' speed-of-light extrapolation needs),
``systems/query_versions.yaml`` (the engine version each system is queried at
by default) and ``systems/data/<system>/<family>/<engine>/<version>/*.parquet``
(the measurements). Collective tables live under the pseudo-engine ``nccl``
at the NCCL version the system's YAML names.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

PACKAGE = "aiconfigurator_core"


class Engine(Enum):
    """Serving engines the tables were measured under."""

    TRTLLM = "trtllm"
    SGLANG = "sglang"
    VLLM = "vllm"


def available() -> bool:
    """Whether the optional extra (aiconfigurator-core) is importable."""
    return importlib.util.find_spec(PACKAGE) is not None


def systems_dir() -> Path:
    """The package's ``systems`` folder; raises ImportError without the extra."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("aiconfigurator-core is not installed (pip install 'tokenfactory[measured]')")
    return Path(next(iter(spec.submodule_search_locations))) / "systems"


def _yaml(path: Path) -> dict:
    import yaml  # a dependency of aiconfigurator-core, so present with the extra

    with path.open() as f:
        return yaml.safe_load(f)


@dataclass(frozen=True)
class SystemSpec:
    """The figures of one system YAML that table extrapolation uses (SI units)."""

    name: str
    mem_bw_bytes_per_s: float
    mem_bw_empirical_scale: float  # the package's correction for memory-bound ops
    mem_constant_latency_s: float
    bf16_flops: float
    fp8_flops: float
    fp4_flops: float | None
    sm_version: int
    gpus_per_node: int
    gpus_per_rack: int | None  # the NVLink domain of a rack-scale system (GB200/GB300 NVL72)
    intra_node_bw_bytes_per_s: float
    inter_node_bw_bytes_per_s: float
    inter_rack_bw_bytes_per_s: float | None
    nccl_version: str | None

    @property
    def nvlink_domain(self) -> int:
        """GPUs one NVLink fabric joins: the rack on GB200/GB300 NVL72, else the node."""
        return self.gpus_per_rack or self.gpus_per_node

    def p2p_bw_bytes_per_s(self, gpus: int) -> float:
        """Per-GPU link bandwidth of a group of ``gpus``, by the package's three tiers:
        within a node, within a rack (the NVLink domain), across racks."""
        if gpus <= self.gpus_per_node:
            return self.intra_node_bw_bytes_per_s
        if self.gpus_per_rack is None or gpus <= self.gpus_per_rack:
            return self.inter_node_bw_bytes_per_s
        return self.inter_rack_bw_bytes_per_s or self.inter_node_bw_bytes_per_s

    def tc_flops(self, dtype: str) -> float:
        """Tensor-core peak for a table dtype name."""
        if dtype in ("bfloat16", "float16", "half"):
            return self.bf16_flops
        if dtype.startswith("fp8"):
            return self.fp8_flops
        if dtype.startswith("nvfp4") and self.fp4_flops:
            return self.fp4_flops
        raise ValueError(f"no tensor-core peak for dtype {dtype!r} on {self.name}")


def system_names() -> list[str]:
    """Systems that ship at least one table."""
    data = systems_dir() / "data"
    return sorted(p.name for p in data.iterdir() if any(p.rglob("*.parquet")))


def load_system(name: str) -> SystemSpec:
    path = systems_dir() / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"aiconfigurator-core has no system {name!r}; have {system_names()}")
    raw = _yaml(path)
    gpu, node, misc = raw["gpu"], raw.get("node", {}), raw.get("misc", {})
    return SystemSpec(
        name=name,
        mem_bw_bytes_per_s=float(gpu["mem_bw"]),
        mem_bw_empirical_scale=float(gpu.get("mem_bw_empirical_scaling_factor", 1.0)),
        mem_constant_latency_s=float(gpu.get("mem_empirical_constant_latency", 0.0)),
        bf16_flops=float(gpu["bfloat16_tc_flops"]),
        fp8_flops=float(gpu.get("fp8_tc_flops") or gpu["bfloat16_tc_flops"]),
        fp4_flops=float(gpu["fp4_tc_flops"]) if gpu.get("fp4_tc_flops") else None,
        sm_version=int(gpu.get("sm_version", -1)),
        gpus_per_node=int(node.get("num_gpus_per_node", 8)),
        gpus_per_rack=int(node["num_gpus_per_rack"]) if node.get("num_gpus_per_rack") else None,
        intra_node_bw_bytes_per_s=float(node.get("intra_node_bw", 0.0)),
        inter_node_bw_bytes_per_s=float(node.get("inter_node_bw", 0.0)),
        inter_rack_bw_bytes_per_s=(float(node["inter_rack_bw"]) if node.get("inter_rack_bw")
                                   else None),
        nccl_version=str(misc["nccl_version"]) if misc.get("nccl_version") else None,
    )


def default_version(system: str, engine: Engine) -> str:
    """The version the package queries by default ("current" slot)."""
    raw = _yaml(systems_dir() / "query_versions.yaml")
    slot = raw.get("overrides", {}).get(system, {}).get(engine.value) or raw["defaults"][engine.value]
    return str(slot["current"])


def _version_key(v: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(v))
    except InvalidVersion:
        return (-1, v)


def table_path(system: str, family: str, engine: str, version: str, file: str) -> tuple[Path, str] | None:
    """Path of ``file`` at ``version``, else at the newest older version that has it.

    Filling backward from older data (never forward) is how the package serves
    an op its current version did not re-measure. None: no version has it.
    """
    base = systems_dir() / "data" / system / family / engine
    if not base.is_dir():
        return None
    want = _version_key(version)
    candidates = sorted(
        (p.name for p in base.iterdir() if (p / file).exists() and _version_key(p.name) <= want),
        key=_version_key,
    )
    if not candidates:
        return None
    return base / candidates[-1] / file, candidates[-1]


def coverage() -> list[tuple[str, str, str, str, str]]:
    """Every shipped table as (system, family, engine, version, file)."""
    data = systems_dir() / "data"
    rows = []
    for path in sorted(data.rglob("*.parquet")):
        system, family, engine, version, file = path.relative_to(data).parts
        rows.append((system, family, engine, version, file))
    return rows
