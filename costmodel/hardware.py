"""Hardware specs: data files in `data/hardware/`, converted to SI units once, here.

A user adds a GPU by writing a TOML file in the same shape and passing its path
(`--hardware my_gpu.toml`) or putting it in the directory named by
`TOKENFACTORY_HARDWARE_DIR`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path

from costmodel.errors import CostModelError
from costmodel.files import read_toml
from costmodel.precision import Precision

DATA_DIR = Path(__file__).parent / "data" / "hardware"

# (section, key, required) -> attribute; units converted in `_from_table`.
_FIELDS = (
    ("compute", "bf16_tflops", True),
    ("compute", "fp8_tflops", True),
    ("compute", "fp4_tflops", False),
    ("memory", "hbm_gb", True),
    ("memory", "hbm_tb_per_s", True),
    ("scale_up", "gb_per_s_bidir", True),
    ("scale_up", "domain_gpus", True),
    ("scale_out", "gbit_per_s", True),
    ("host", "gb_per_s", True),
    ("power", "tdp_w", True),
)


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator and its links, in base units (FLOP/s, bytes, bytes/s, W)."""

    name: str
    description: str
    source: str
    bf16_flops_per_s: float
    fp8_flops_per_s: float
    fp4_flops_per_s: float  # equals the FP8 rate where there are no FP4 tensor cores
    hbm_bytes: float
    hbm_bytes_per_s: float
    scale_up_bytes_per_s: float  # per GPU, per direction
    scale_up_domain_gpus: int
    scale_out_bytes_per_s: float  # per GPU, per direction
    host_bytes_per_s: float  # GPU <-> host memory, per direction
    tdp_w: float

    def flops_per_s(self, precision: Precision) -> float:
        return {
            Precision.BF16: self.bf16_flops_per_s,
            Precision.FP8: self.fp8_flops_per_s,
            Precision.FP4: self.fp4_flops_per_s,
        }[precision]


def _number(table: dict, section: str, key: str, where: str, required: bool) -> float | None:
    block = table.get(section)
    if block is None or key not in block:
        if required:
            raise CostModelError(f"{where}: field {section}.{key} is missing")
        return None
    value = block[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CostModelError(f"{where}: field {section}.{key}: expected a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise CostModelError(f"{where}: field {section}.{key}: expected > 0, got {value!r}")
    return float(value)


_TOP_FIELDS = ("name", "description", "source")


def _check_known(table: dict, where: str) -> None:
    """Refuse a field this format does not take: a typo of an optional one
    (`fp4_tflop`) would otherwise leave its default in place silently."""
    sections = {s: {k for s2, k, _ in _FIELDS if s2 == s} for s, _, _ in _FIELDS}
    for key, value in table.items():
        if key in _TOP_FIELDS:
            continue
        if key not in sections:
            raise CostModelError(f"{where}: field {key}: unknown (known: "
                                 f"{', '.join((*_TOP_FIELDS, *sections))})")
        if not isinstance(value, dict):
            raise CostModelError(f"{where}: field {key}: expected a table, got {value!r}")
        for sub in value:
            if sub not in sections[key]:
                raise CostModelError(f"{where}: field {key}.{sub}: unknown (known: "
                                     f"{', '.join(sorted(sections[key]))})")


def _from_table(table: dict, where: str) -> HardwareSpec:
    _check_known(table, where)
    values = {(s, k): _number(table, s, k, where, req) for s, k, req in _FIELDS}
    domain = values["scale_up", "domain_gpus"]
    if domain != int(domain):
        raise CostModelError(f"{where}: field scale_up.domain_gpus: expected an integer, got {domain}")
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise CostModelError(f"{where}: field name is missing or not a string")
    fp8 = values["compute", "fp8_tflops"] * 1e12
    fp4 = values["compute", "fp4_tflops"]
    return HardwareSpec(
        name=name,
        description=str(table.get("description", name)),
        source=str(table.get("source", "")),
        bf16_flops_per_s=values["compute", "bf16_tflops"] * 1e12,
        fp8_flops_per_s=fp8,
        fp4_flops_per_s=fp4 * 1e12 if fp4 is not None else fp8,
        hbm_bytes=values["memory", "hbm_gb"] * 1e9,
        hbm_bytes_per_s=values["memory", "hbm_tb_per_s"] * 1e12,
        scale_up_bytes_per_s=values["scale_up", "gb_per_s_bidir"] * 1e9 / 2,
        scale_up_domain_gpus=int(domain),
        scale_out_bytes_per_s=values["scale_out", "gbit_per_s"] * 1e9 / 8,
        host_bytes_per_s=values["host", "gb_per_s"] * 1e9,
        tdp_w=values["power", "tdp_w"],
    )


def _search_dirs() -> list[Path]:
    extra = os.environ.get("TOKENFACTORY_HARDWARE_DIR")
    return ([Path(extra)] if extra else []) + [DATA_DIR]


def hardware_names() -> list[str]:
    names = {p.stem for d in _search_dirs() if d.is_dir() for p in d.glob("*.toml")}
    return sorted(names)


def load_hardware_file(path: Path) -> HardwareSpec:
    return _from_table(read_toml(path), str(path))


@cache
def _preset(name: str) -> HardwareSpec:
    for d in _search_dirs():
        path = d / f"{name}.toml"
        if path.is_file():
            return load_hardware_file(path)
    raise CostModelError(f"unknown hardware {name!r}; known: {', '.join(hardware_names())}")


def load_hardware(name_or_path: str) -> HardwareSpec:
    """A preset by name (`h100`, `gb200`, ...) or a TOML file by path."""
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        return load_hardware_file(Path(name_or_path))
    return _preset(name_or_path.lower())


@dataclass(frozen=True)
class HardwareTable:
    """Several HardwareSpecs as columns, so a config array can index them by number."""

    specs: tuple[HardwareSpec, ...]

    def column(self, attr: str):
        return self.columns()[attr]

    def columns(self) -> dict:
        """Every numeric field as an array over the specs (built once per table)."""
        return _columns(self.specs)

    def flops_column(self):
        """Shape (n_hardware, n_precisions): peak dense FLOP/s."""
        return _flops(self.specs)

    def index(self, name: str) -> int:
        for i, s in enumerate(self.specs):
            if s.name == name:
                return i
        raise CostModelError(f"hardware {name!r} is not in this table")


@cache
def _columns(specs: tuple[HardwareSpec, ...]) -> dict:
    import numpy as np

    names = [f.name for f in fields(HardwareSpec) if f.type in ("float", "int")]
    return {n: np.array([getattr(s, n) for s in specs], dtype=np.float64) for n in names}


@cache
def _flops(specs: tuple[HardwareSpec, ...]):
    import numpy as np

    return np.array([[s.flops_per_s(p) for p in Precision] for s in specs])
