"""A sweep grid: a TOML file whose keys are replay options and whose values are lists.

Every key is a replay option spelled without its leading dashes and with
underscores (`sessions_per_hour`, `no_realloc`), a controller gain by its
`ControlConfig` field name (`backlog_gain`, `realloc_dwell_s`), or a pool
override `pool.<pool>.<field>` that derives a cluster from the point's base
cluster (`pool.decode.gpus`, `pool.decode.tp`). The sweep runs every
combination. Values are checked here, at the door, before anything runs: a
grid that exists is a grid whose every point can be built.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.kv_policy import KVPolicy


class GridError(ValueError):
    """A grid the sweep cannot run: one line naming the key and the value."""


def _number(minimum: float, strict: bool) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("expected a number")
        value = float(value)
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise ValueError(f"expected a number {'>' if strict else '>='} {minimum:g}")
        return value
    return check


def _integer(minimum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("expected an integer")
        if value < minimum:
            raise ValueError(f"expected an integer >= {minimum}")
        return value
    return check


def _number_in(low: float, high: float) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("expected a number")
        if not low <= float(value) <= high:
            raise ValueError(f"expected a number in [{low:g}, {high:g}]")
        return float(value)
    return check


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty string")
    return value


def _choice(*names: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in names:
            raise ValueError(f"expected one of {', '.join(names)}")
        return value
    return check


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


POSITIVE, NON_NEGATIVE = _number(0, strict=True), _number(0, strict=False)

# The replay options (`tokenfactory replay --help`), spelled without dashes.
RUN_KEYS: dict[str, Callable[[Any], Any]] = {
    "model": _text, "cluster": _text, "controller": _text, "seed": _integer(0),
    "sessions_per_hour": POSITIVE, "max_sessions": _integer(1), "think_scale": NON_NEGATIVE,
    "duration": POSITIVE, "repeat": _integer(1), "fast_period": POSITIVE,
    "slow_period": POSITIVE, "observation_lag": NON_NEGATIVE, "no_realloc": _flag,
    "no_hysteresis": _flag, "ttft_target": POSITIVE, "tpot_target": POSITIVE,
    "predictor_error": POSITIVE, "predictor_learning": _number_in(0.0, 1.0),
    "kv_policy": _choice(*(p.value for p in KVPolicy)),
    "router": _text, "reallocator": _text, "shared_prefix_tokens": _integer(0),
    # MTP drafts per step for every pool that decodes (`--mtp`); excludes `pool.NAME.mtp`.
    "mtp": _integer(0),
    # Session starts as a multiple of the point's cluster's planned capacity on the
    # sweep's traces (orchestrator/run/capacity.py); needs `duration`.
    "load": POSITIVE,
}
# Controller gains by their ControlConfig field names (those no option above sets).
GAIN_KEYS: dict[str, Callable[[Any], Any]] = {
    name: NON_NEGATIVE for name in (
        "backlog_ewma_s", "backlog_gain", "ready_buffer_s", "interactive_reserve",
        "batch_change_interval_s", "retire_starvation_occupancy", "reject_factor",
        "realloc_ewma_s", "realloc_threshold", "realloc_dwell_s")
}
# `pool.<name>.<field>`: fields of a cluster file's [[pools]] table.
POOL_FIELDS: dict[str, Callable[[Any], Any]] = {
    "gpus": _integer(1), "pp": _integer(1), "tp": _integer(1), "ep": _integer(1),
    "mtp": _integer(0), "target_batch": _integer(1), "max_batch_sequences": _integer(1),
    "max_batch_tokens": _integer(1), "precision": _text, "kv_precision": _text,
    "attention_precision": _text,
}
KNOWN_KEYS = (*RUN_KEYS, *GAIN_KEYS, *(f"pool.NAME.{f}" for f in POOL_FIELDS))


def _checker(key: str) -> Callable[[Any], Any]:
    if key in RUN_KEYS:
        return RUN_KEYS[key]
    if key in GAIN_KEYS:
        return GAIN_KEYS[key]
    parts = key.split(".")
    if len(parts) == 3 and parts[0] == "pool" and parts[1] and parts[2] in POOL_FIELDS:
        return POOL_FIELDS[parts[2]]
    raise GridError(f"unknown key {key!r}; known: {', '.join(KNOWN_KEYS)}")


@dataclass(frozen=True)
class Grid:
    """Keys in file order, each with its tuple of values; `base_dir` resolves cluster
    and model paths written relative to the grid file."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    base_dir: Path

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.axes)

    def __len__(self) -> int:
        return math.prod(len(v) for _, v in self.axes)

    def points(self) -> list[dict[str, Any]]:
        """Every combination, in the order of the file (last key varies fastest)."""
        return [dict(zip(self.keys, combo, strict=True))
                for combo in itertools.product(*(v for _, v in self.axes))]

    def normalised(self) -> dict[str, list[Any]]:
        return {k: list(v) for k, v in sorted(self.axes)}

    def digest(self) -> str:
        return _digest(self.normalised())


def point_id(values: dict[str, Any]) -> str:
    """A stable name for one point: a hash of its option values, whatever their order."""
    return _digest(dict(sorted(values.items())))[:16]


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """TOML tables (`[pool.decode]` or dotted keys) back into dotted names."""
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if not value:
                raise GridError(f"key {name!r}: empty table")
            out.extend(_flatten(value, f"{name}."))
        else:
            out.append((name, value))
    return out


def parse_grid(text: str, where: str, base_dir: Path) -> Grid:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GridError(f"{where}: invalid TOML: {exc}") from None
    axes = []
    for key, raw in _flatten(data):
        check = _checker(key)
        values = raw if isinstance(raw, list) else [raw]
        if not values:
            raise GridError(f"{where}: key {key!r}: empty list (a sweep needs at least one value)")
        checked = []
        for value in values:
            try:
                checked.append(check(value))
            except ValueError as exc:
                raise GridError(f"{where}: key {key!r}: bad value {value!r}: {exc}") from None
        if len(set(map(repr, checked))) != len(checked):
            raise GridError(f"{where}: key {key!r}: a value appears twice in {values!r}")
        axes.append((key, tuple(checked)))
    if not axes:
        raise GridError(f"{where}: empty grid: give at least one key, e.g. seed = [0, 1]")
    return Grid(tuple(axes), base_dir)


def load_grid(path: str | Path) -> Grid:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise GridError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise GridError(f"{path}: not a text file") from None
    return parse_grid(text, str(path), path.resolve().parent)
