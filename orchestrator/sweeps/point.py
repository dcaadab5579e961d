"""One sweep point: its option values resolved into what a replay needs, and the
replay itself as a pure top-level function any worker process can import.

Everything that can fail on bad input (model and cluster files, pool overrides,
control configurations the loops refuse, unknown controllers) is resolved in
the parent, before anything runs, so a point ships as data: a worker on
another machine needs neither the grid's files nor the trace files.
"""

from __future__ import annotations

import contextlib
import io
import os
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costmodel.errors import CostModelError
from costmodel.model import ModelSpec, load_model
from orchestrator.control.config import ControlConfig, ControlConfigError, TimeScales
from orchestrator.control.policies import UnknownPolicyError, make_policy
from orchestrator.control.predictor import PredictorSettings
from orchestrator.plugins import PluginError
from orchestrator.plugins import load as load_plugin
from orchestrator.run.capacity import planned_capacity, sessions_for_load
from orchestrator.run.settings import (
    DEFAULT_CLUSTER,
    DEFAULT_CONTROLLER,
    DEFAULT_MODEL,
    RunSettings,
)
from orchestrator.sweeps.grid import GAIN_KEYS, Grid, GridError, point_id
from traces.model import Session
from traces.replay import LoadOptions
from workers.cluster import ClusterSpec
from workers.cluster_toml import DATA_DIR, cluster_from_dict, load_cluster, with_decode_mtp


@dataclass(frozen=True)
class PointTask:
    """A point ready to run: its id, its option values (as the grid wrote them) and
    the resolved settings, model and cluster."""

    point_id: str
    values: tuple[tuple[str, Any], ...]
    settings: RunSettings
    model: ModelSpec
    cluster: ClusterSpec


def run_point(sessions: tuple[Session, ...], task: PointTask) -> dict[str, Any]:
    """Replay one point. A failure is a value: the record carries its error instead
    of a summary, so one bad point never stops a sweep."""
    from orchestrator.run.settings import Prepared, run_replay

    record: dict[str, Any] = {"point_id": task.point_id, "values": dict(task.values)}
    warnings = io.StringIO()
    try:
        with contextlib.redirect_stderr(warnings):
            _, summary = run_replay(Prepared(task.model, task.cluster, sessions), task.settings)
        record |= {"summary": summary, "error": None}
    except Exception as exc:
        record |= {"summary": None, "error": f"{type(exc).__name__}: {exc}"}
    record["warnings"] = warnings.getvalue().strip()
    return record


def _resolve(value: str, base_dir: Path, suffix: str) -> str:
    """Paths in a grid are relative to the grid file; preset names are left alone."""
    if value.endswith(suffix) or "/" in value or os.sep in value:
        path = Path(value)
        return str(path if path.is_absolute() else base_dir / path)
    return value


def _cluster_data(name_or_path: str) -> tuple[dict[str, Any], str]:
    path = Path(name_or_path) if name_or_path.endswith(".toml") or "/" in name_or_path \
        else DATA_DIR / f"{name_or_path}.toml"
    load_cluster(name_or_path)  # the usual one-line errors for unknown names and bad files
    return tomllib.loads(path.read_text()), str(path)


def build_cluster(name_or_path: str, overrides: dict[str, Any]) -> ClusterSpec:
    """The base cluster, with `pool.<name>.<field>` overrides applied to its pools."""
    if not overrides:
        return load_cluster(name_or_path)
    data, where = _cluster_data(name_or_path)
    pools = {p.get("name"): p for p in data.get("pools", [])}
    for key, value in overrides.items():
        _, pool, field = key.split(".")
        if pool not in pools:
            raise GridError(f"key {key!r}: cluster {name_or_path} has no pool {pool!r}; "
                            f"pools: {', '.join(map(str, pools))}")
        pools[pool][field] = value
    label = ", ".join(f"{k}={v}" for k, v in overrides.items())
    return cluster_from_dict(data, f"{where} with {label}")


def build_settings(v: dict[str, Any]) -> RunSettings:
    """A point's replay settings. A `load` key must already be resolved into
    `sessions_per_hour` (and `repeat`) by `resolve_load`."""
    load = LoadOptions(sessions_per_hour=v.get("sessions_per_hour"),
                       max_sessions=v.get("max_sessions"), think_scale=v.get("think_scale", 1.0),
                       duration_s=v.get("duration"), repeat=v.get("repeat", 1),
                       shared_prefix_tokens=v.get("shared_prefix_tokens"))
    fast = v.get("fast_period", TimeScales.admission_s)
    lag = v.get("observation_lag", ControlConfig.observation_lag_s)
    gains = {k: v[k] for k in GAIN_KEYS if k in v}
    # As `replay` does: batch changes no faster than the loop's feedback time constant.
    gains.setdefault("batch_change_interval_s",
                     max(ControlConfig.batch_change_interval_s, lag + fast))
    control = ControlConfig(
        scales=TimeScales(admission_s=fast,
                          reconfiguration_s=v.get("slow_period", TimeScales.reconfiguration_s)),
        observation_lag_s=lag, realloc_enabled=not v.get("no_realloc", False),
        hysteresis=not v.get("no_hysteresis", False),
        ttft_target_s=v.get("ttft_target", ControlConfig.ttft_target_s),
        tpot_target_s=v.get("tpot_target", ControlConfig.tpot_target_s), **gains)
    predictor = PredictorSettings(error=v.get("predictor_error", PredictorSettings.error),
                                  learn=v.get("predictor_learning", PredictorSettings.learn))
    return RunSettings(model=v.get("model", DEFAULT_MODEL), cluster=v.get("cluster", DEFAULT_CLUSTER),
                       controller=v.get("controller", DEFAULT_CONTROLLER), seed=v.get("seed", 0),
                       load=load, control=control, predictor=predictor,
                       kv_policy=v.get("kv_policy", RunSettings.kv_policy),
                       router=v.get("router", RunSettings.router),
                       reallocator=v.get("reallocator", RunSettings.reallocator))


def resolve_load(values: dict[str, Any], model: ModelSpec, cluster: ClusterSpec,
                 sessions: Sequence[Session]) -> dict[str, Any]:
    """The point's options with `load` turned into the session starts an hour it
    stands for on this cluster and these sessions (`orchestrator.run.capacity`), and
    `repeat` enough copies for the window unless the grid sets it."""
    if "load" not in values:
        return values
    if "sessions_per_hour" in values:
        raise GridError("keys 'load' and 'sessions_per_hour' both set the session starts: "
                        "give one")
    if "duration" not in values:
        raise GridError("key 'load' needs 'duration' (the window sessions start in)")
    capacity = planned_capacity(model, cluster, sessions)
    rate, repeat = sessions_for_load(capacity, values["load"], values["duration"])
    return values | {"sessions_per_hour": rate, "repeat": values.get("repeat", repeat)}


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items())


def _check_names(grid: Grid) -> None:
    """Names and files one at a time first, so the error names the key and the value."""
    checks = {"model": lambda v: load_model(_resolve(v, grid.base_dir, ".json")),
              "cluster": lambda v: load_cluster(_resolve(v, grid.base_dir, ".toml")),
              "controller": lambda v: make_policy(v, ControlConfig()),
              "router": lambda v: load_plugin("router", v, ControlConfig()),
              "reallocator": lambda v: load_plugin("reallocator", v, ControlConfig())}
    for key, values in grid.axes:
        for value in values if key in checks else ():
            try:
                checks[key](value)
            except (ValueError, CostModelError, PluginError) as exc:
                raise GridError(f"key {key!r}: bad value {value!r}: {exc}") from None
    keys = set(grid.keys)
    if "mtp" in keys and any(k.startswith("pool.") and k.endswith(".mtp") for k in keys):
        raise GridError("keys 'mtp' and 'pool.NAME.mtp' both set a decode pool's MTP: give one")


def build_tasks(grid: Grid, sessions: Sequence[Session] = ()) -> list[PointTask]:
    """Every point of the grid, resolved; the first that cannot be built is a GridError.
    `sessions` (the sweep's traces) resolve a `load` key; a grid with one needs them."""
    _check_names(grid)
    models: dict[str, ModelSpec] = {}
    clusters: dict[tuple, ClusterSpec] = {}
    bound: set[tuple] = set()
    tasks = []
    for values in grid.points():
        try:
            model_ref = _resolve(values.get("model", DEFAULT_MODEL), grid.base_dir, ".json")
            cluster_ref = _resolve(values.get("cluster", DEFAULT_CLUSTER), grid.base_dir,
                                   ".toml")
            overrides = {k: v for k, v in values.items() if k.startswith("pool.")}
            if model_ref not in models:
                models[model_ref] = load_model(model_ref)
            mtp = values.get("mtp")
            ckey = (cluster_ref, tuple(overrides.items()), mtp)
            if ckey not in clusters:
                cluster = build_cluster(cluster_ref, overrides)
                clusters[ckey] = cluster if mtp is None else with_decode_mtp(cluster, mtp)
            if (model_ref, ckey) not in bound:
                clusters[ckey].bind(models[model_ref])  # refuses layouts the model cannot run
                bound.add((model_ref, ckey))
            settings = build_settings(resolve_load(values, models[model_ref],
                                                   clusters[ckey], sessions))
            make_policy(settings.controller, settings.control)
        except (ValueError, ControlConfigError, CostModelError, UnknownPolicyError) as exc:
            if isinstance(exc, GridError):
                raise
            raise GridError(f"point {_describe(values)}: {exc}") from None
        tasks.append(PointTask(point_id(values), tuple(values.items()), settings,
                               models[model_ref], clusters[ckey]))
    return tasks
