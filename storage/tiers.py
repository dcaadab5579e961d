"""Storage tiers, the places that hold them, and the bandwidth between places.

Hardware is data: the cluster description builds a ``StoreLayout`` from one
``LocationSpec`` per place (HBM of a worker, DRAM of a node, a rack cache, the
parallel file system). A layout that exists is valid.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple


class Tier(IntEnum):
    """Ordered fast to slow, so "down a tier" is a comparison."""

    HBM = 0
    DRAM = 1
    RACK = 2
    PFS = 3


# The members as module constants, for the hot paths to import: on Python 3.11 a member
# read off its enum class is an attribute lookup of ~0.1 us, a module constant ~15 ns.
HBM, DRAM, RACK, PFS = Tier.HBM, Tier.DRAM, Tier.RACK, Tier.PFS


def _positive_finite(owner: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{owner}.{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}.{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class TierSpec:
    """Capacity and bandwidth of one place of a tier."""

    tier: Tier
    capacity_bytes: int
    read_bytes_per_s: float
    write_bytes_per_s: float

    def __post_init__(self) -> None:
        if not isinstance(self.tier, Tier):
            raise TypeError(f"TierSpec.tier must be a Tier, got {self.tier!r}")
        for name in ("capacity_bytes", "read_bytes_per_s", "write_bytes_per_s"):
            _positive_finite("TierSpec", name, getattr(self, name))
        if not isinstance(self.capacity_bytes, int):
            raise TypeError(f"TierSpec.capacity_bytes must be an int, got {self.capacity_bytes!r}")


class _Place(NamedTuple):
    tier: Tier
    holder: str


class Location(_Place):
    """One place of a tier: HBM of worker "decode-3", DRAM of node "n1", ...

    A named tuple rather than a dataclass: every copy of every blob is keyed
    by its location, and a tuple hashes and compares in C (a dataclass's
    ``__hash__`` and ``__eq__`` are Python calls). Locations order by tier,
    then holder.
    """

    __slots__ = ()

    def __new__(cls, tier: Tier, holder: str) -> Location:
        if not isinstance(tier, Tier):
            raise TypeError(f"Location.tier must be a Tier, got {tier!r}")
        if not holder:
            raise ValueError("Location.holder must be a non-empty name, got ''")
        return super().__new__(cls, tier, holder)

    def __str__(self) -> str:
        return f"{self.tier.name}:{self.holder}"


@dataclass(frozen=True, slots=True)
class LocationSpec:
    """A place, its hardware, and where its blobs go when evicted.

    ``lower`` is the place one tier down (HBM of a worker -> DRAM of its node
    -> the PFS); ``None`` means eviction can only drop from here.
    """

    location: Location
    spec: TierSpec
    lower: Location | None = None

    def __post_init__(self) -> None:
        if self.spec.tier is not self.location.tier:
            raise ValueError(
                f"LocationSpec for {self.location}: spec.tier must be "
                f"{self.location.tier.name}, got {self.spec.tier.name}"
            )
        if self.lower is not None and self.lower.tier <= self.location.tier:
            raise ValueError(
                f"LocationSpec for {self.location}: lower must be a slower tier, got {self.lower}"
            )


@dataclass(frozen=True)
class StoreLayout:
    """All places of the store, and optional per-tier-pair path bandwidths.

    Path rule: a copy from ``src`` to ``dst`` runs at
    ``paths[(src.tier, dst.tier)]`` when given, else at
    min(src read bandwidth, dst write bandwidth).
    """

    locations: tuple[LocationSpec, ...]
    paths: Mapping[tuple[Tier, Tier], float] = field(default_factory=dict)
    _by_location: dict[Location, LocationSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_location: dict[Location, LocationSpec] = {}
        for entry in self.locations:
            if entry.location in by_location:
                raise ValueError(f"StoreLayout.locations: {entry.location} is listed twice")
            by_location[entry.location] = entry
        if not by_location:
            raise ValueError("StoreLayout.locations must not be empty")
        for entry in self.locations:
            if entry.lower is not None and entry.lower not in by_location:
                raise ValueError(
                    f"StoreLayout: {entry.location}.lower is {entry.lower}, "
                    "which is not a listed location"
                )
        for (src, dst), bytes_per_s in self.paths.items():
            _positive_finite("StoreLayout.paths", f"[{src.name}, {dst.name}]", bytes_per_s)
        object.__setattr__(self, "_by_location", by_location)

    @classmethod
    def build(
        cls,
        entries: Iterable[tuple[Location, TierSpec, Location | None]],
        paths: Mapping[tuple[Tier, Tier], float] | None = None,
    ) -> StoreLayout:
        """From ``(location, spec, lower)`` triples, as a cluster file lists them."""
        specs = tuple(LocationSpec(loc, spec, lower) for loc, spec, lower in entries)
        return cls(specs, dict(paths or {}))

    def spec(self, location: Location) -> TierSpec:
        try:
            return self._by_location[location].spec
        except KeyError:
            raise KeyError(f"unknown storage location {location}") from None

    def lower(self, location: Location) -> Location | None:
        return self._by_location[location].lower

    def __contains__(self, location: object) -> bool:
        return location in self._by_location

    def all_locations(self) -> tuple[Location, ...]:
        return tuple(entry.location for entry in self.locations)

    def path_bytes_per_s(self, src: Location, dst: Location) -> float:
        given = self.paths.get((src.tier, dst.tier))
        if given is not None:
            return given
        return min(self.spec(src).read_bytes_per_s, self.spec(dst).write_bytes_per_s)
