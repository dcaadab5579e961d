"""Each pool's `CostSource` under the cluster's cost source (the shell's side).

`cost_source` (cluster file) or `--cost-source` picks `roofline` (default), `measured`
or `auto` (`costmodel.measured.source`). A pool whose layout the tables cover gets a
`MeasuredPricer`; any other the roofline's `StepPricer`, and one line on stderr says
which pools fell back and which terms the tables lack. `measured` without the extra is
one line and exit 2 (`CostModelError`); `auto` without it is the roofline, said in one
line too.

Tables and layout curves are memoised here, per process: reading one system's tables
takes 1-3 s and a layout's grids about as long again, and every pool of a run, every run
of a sweep and every quote asks for the same few (a profile of a sweep start-up).
"""

from __future__ import annotations

import sys

from costmodel.errors import CostModelError
from costmodel.measured.source import (
    DEFAULT_COST_SOURCE,
    CostSourceKind,
    MeasuredLayout,
    Uncovered,
    price_layout,
)
from workers.cost_source import CostSource
from workers.pricing import StepPricer

_TABLES: dict[tuple, object] = {}
_LAYOUTS: dict[tuple, MeasuredLayout | Uncovered] = {}
_SAID: set[str] = set()


def _load(system, engine, version, families):
    key = (system, engine, version, families)
    if key not in _TABLES:
        from costmodel.measured.tables import load_tables

        _TABLES[key] = load_tables(system, engine, version, families)
    return _TABLES[key]


def measured_layout(model, hardware, layout, engine: str) -> MeasuredLayout | Uncovered:
    """The layout's curves from the tables (memoised), or why there are none."""
    key = (model, hardware, layout, engine)
    if key not in _LAYOUTS:
        _LAYOUTS[key] = price_layout(model, hardware, layout, engine, _load)
    return _LAYOUTS[key]


def resolve(kind: CostSourceKind | str | None) -> CostSourceKind:
    """The kind in force: `auto` is `measured` with the extra installed, else roofline."""
    from costmodel.measured import available

    kind = DEFAULT_COST_SOURCE if kind is None else (
        kind if isinstance(kind, CostSourceKind) else CostSourceKind.parse(kind))
    if kind is CostSourceKind.MEASURED and not available():
        raise CostModelError("cost source 'measured' needs the measured tables: pip install "
                             "'tokenfactory[measured]' (or use --cost-source roofline)")
    if kind is CostSourceKind.AUTO:
        if available():
            return CostSourceKind.MEASURED
        say("cost source auto: the measured tables are not installed (pip install "
            "'tokenfactory[measured]'); the roofline prices every step")
        return CostSourceKind.ROOFLINE
    return kind


def say(line: str) -> None:
    """One line on stderr, once per process."""
    if line not in _SAID:
        _SAID.add(line)
        sys.stderr.write(f"warning: {line}\n")


class Pricers:
    """Builds the pricers of a run's pools under one cost source and records which
    source priced each pool (`record`)."""

    def __init__(self, model, eff, engine: str, kind: CostSourceKind | str | None):
        self.model, self.eff, self.engine = model, eff, engine
        self.kind = resolve(kind)
        self.requested = kind if isinstance(kind, CostSourceKind) else CostSourceKind(
            kind or DEFAULT_COST_SOURCE.value)
        self.pools: dict[str, dict] = {}
        self._fell_back: dict[str, str] = {}

    def pricer(self, pool: str, hardware, layout) -> CostSource:
        roofline = StepPricer(self.model, hardware, layout, self.eff)
        if self.kind is CostSourceKind.ROOFLINE:
            self.pools.setdefault(pool, {"source": "roofline"})
            return roofline
        from workers.measured_pricing import MeasuredPricer

        got = measured_layout(self.model, hardware, layout, self.engine)
        if isinstance(got, Uncovered):
            self.pools[pool] = {"source": "roofline", "fell_back": got.reasons}
            self._fell_back[pool] = got.line()
            return roofline
        self.pools[pool] = {"source": "measured", "tables": got.tables,
                            "versions": dict(got.versions)}
        return MeasuredPricer(roofline, got)

    def warn(self) -> None:
        """One line on stderr naming the pools that fell back to the roofline and why."""
        if self._fell_back:
            say(f"measured tables do not cover {len(self._fell_back)} pool(s) under engine "
                f"{self.engine}; the roofline prices them: " + " | ".join(
                    f"{pool}: {why}" for pool, why in self._fell_back.items()))

    def record(self) -> dict:
        """What a run records of its cost sources (`ReplayResult.service`)."""
        return {"requested": self.requested.value, "in_force": self.kind.value,
                "pools": self.pools}
