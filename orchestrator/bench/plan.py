"""A benchmark's points, resolved before anything runs: the layouts (searched, or the
cluster files given) and, per layout and concurrency, the cluster to replay.

Everything that can fail on bad input fails here, as a `BenchError` naming the option
and the value: unknown hardware, a cluster file that does not bind to the model, GPUs
too few for any layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.errors import CostModelError
from costmodel.model import ModelSpec
from costmodel.mtp import default_mtp
from costmodel.precision import Precision
from orchestrator.bench.clusters import cluster_spec, layout_of_cluster
from orchestrator.bench.layouts import LayoutRequest, LayoutSource, SweepLayouts
from orchestrator.bench.load import BenchLoad
from orchestrator.bench.run import BenchTask


class BenchError(ValueError):
    """Bad input to a benchmark: names the option and the value."""


@dataclass(frozen=True)
class BenchPlan:
    tasks: tuple[BenchTask, ...]  # layout-major, concurrencies in the order given
    title: str


def plan_points(model: ModelSpec, load: BenchLoad, concurrencies: Sequence[int], *,
                hardware: str | None, gpus: int | None, precision: Precision | None,
                kv_precision: Precision, mtp: int | None, clusters: Sequence[str] = (),
                source: LayoutSource | None = None) -> BenchPlan:
    """The points to run. `precision` None: the model's shipped routed-expert format,
    else FP8; `mtp` None: off, and on with the model's drafts where it ships a head."""
    lengths = f"ISL {load.isl:,} / OSL {load.osl:,}" + (
        f", range ratio {load.range_ratio:g}" if load.range_ratio < 1 else "")
    if clusters:
        tasks = []
        for path in clusters:
            spec, layout = _cluster_file(path, model, hardware, gpus, mtp)
            tasks += [BenchTask(layout, spec, c) for c in concurrencies]
        return BenchPlan(tuple(tasks), f"{model.name}, {', '.join(clusters)}, {lengths}")
    hw = _hardware(hardware)
    weights = precision or model.routed_expert_precision or Precision.FP8
    shipped = default_mtp(model)
    mtps = (mtp,) if mtp is not None else ((0, shipped) if shipped else (0,))
    inputs, outputs = load.lengths(max(concurrencies))
    request = LayoutRequest(model=model, hardware=hw, gpus=gpus, inputs=inputs.ravel(),
                            outputs=outputs.ravel(), precision=weights,
                            kv_precision=kv_precision, mtps=mtps)
    layouts = (source or SweepLayouts()).layouts(request)
    if not layouts:
        longest = int(np.max(inputs + outputs))
        raise BenchError(f"--gpus {gpus}: no layout of {model.name} runs on {gpus} {hw.name} "
                         f"GPUs ({weights.name.lower()} weights and one sequence of "
                         f"{longest:,} tokens on every attention rank)")
    shortest = int(np.min(inputs))
    tasks = []
    for layout in layouts:
        for c in concurrencies:
            spec = cluster_spec(layout, hw, hardware, weights, kv_precision, c, shortest)
            if not tasks or tasks[-1].layout != layout:
                spec.bind(model)  # the search's layouts place and bind (else a bug: raises)
            tasks.append(BenchTask(layout, spec, c))
    return BenchPlan(tuple(tasks), f"{model.name} on {gpus} x {hw.name}, {lengths}")


def _hardware(name: str):
    from costmodel.hardware import load_hardware

    try:
        return load_hardware(name)
    except CostModelError as exc:
        raise BenchError(f"--hardware {name}: {exc}") from None


def _cluster_file(path: str, model: ModelSpec, hardware: str | None, gpus: int | None,
                  mtp: int | None):
    from workers.cluster import ClusterError
    from workers.cluster_toml import load_cluster, with_decode_mtp

    try:
        spec = load_cluster(path)
        if mtp is not None:
            spec = with_decode_mtp(spec, mtp)
        bound = spec.bind(model)
    except ClusterError as exc:
        raise BenchError(f"--cluster {path}: {exc}") from None
    if gpus is not None and gpus != spec.gpus:
        raise BenchError(f"--gpus {gpus}: --cluster {path} has {spec.gpus} GPUs")
    names = {p.hardware.name for p in spec.pools}
    if hardware is not None and names != {_hardware(hardware).name}:
        raise BenchError(f"--hardware {hardware}: --cluster {path} runs on "
                         f"{', '.join(sorted(names))}")
    drafts = max((w.layout.mtp for w in bound.workers if w.phase.name in ("DECODE", "MIXED")),
                 default=0)
    return spec, layout_of_cluster(spec, int(drafts))
