"""Serving engines' host cost: a per-step gap and a per-draft gap the kernels do not show.

`costmodel/data/engines.toml` holds one table per engine (`sglang`, `trtllm`, `vllm`),
each figure with its source. `engine_efficiency(eff, name)` is `eff` with the engine's
`step_overhead_s` and `draft_overhead_s`: the cost core, the workers and the planner
price with it. An unknown name is a `CostModelError` naming the known ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.errors import CostModelError
from costmodel.files import read_toml

ENGINES_FILE = Path(__file__).parent / "data" / "engines.toml"
DEFAULT_ENGINE = "sglang"


@dataclass(frozen=True)
class EngineSpec:
    name: str
    step_s: float  # host gap per step (scheduling, sampling, launch)
    draft_s: float  # host gap per MTP draft pass
    source: str

    def __post_init__(self) -> None:
        for field in ("step_s", "draft_s"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    0.0 <= value < 1.0):
                raise CostModelError(f"{ENGINES_FILE.name}: [{self.name}] {field}: expected "
                                     f"seconds in [0, 1), got {value!r}")


def load_engines(path: Path = ENGINES_FILE) -> dict[str, EngineSpec]:
    """Every engine of the file, by name."""
    data = read_toml(path)
    out = {}
    for name, table in data.items():
        if not isinstance(table, dict) or set(table) != {"step_s", "draft_s", "source"}:
            raise CostModelError(f"{path}: [{name}]: expected step_s, draft_s and source")
        out[name] = EngineSpec(name=name, step_s=table["step_s"], draft_s=table["draft_s"],
                               source=str(table["source"]))
    return out


def engine_names() -> tuple[str, ...]:
    return tuple(load_engines())


def load_engine(name: str) -> EngineSpec:
    engines = load_engines()
    if name not in engines:
        raise CostModelError(f"engine: unknown {name!r} (expected one of "
                             f"{', '.join(engines)})")
    return engines[name]


def serving_efficiency(model, engine: str | None = None,
                       mtp_acceptance: tuple[float, ...] | None = None,
                       eff: Efficiency = DEFAULT_EFFICIENCY) -> Efficiency:
    """`eff` as a service runs it: engine `engine`'s host gaps (None: DEFAULT_ENGINE) and
    the acceptance by draft position `mtp_acceptance` (None: the model's own,
    `costmodel.mtp.model_acceptance`)."""
    from costmodel.mtp import model_acceptance

    eff = engine_efficiency(eff, engine or DEFAULT_ENGINE)
    return replace(eff, mtp_acceptance=tuple(mtp_acceptance or model_acceptance(model)))


def engine_efficiency(eff: Efficiency, name: str) -> Efficiency:
    """`eff` with engine `name`'s host gaps per step and per draft pass."""
    spec = load_engine(name)
    return replace(eff, step_overhead_s=spec.step_s, draft_overhead_s=spec.draft_s)
