"""Sweeps as array programs: hardware x PP x TP x EP x batch, for a list of workloads.

The grid is built with broadcasting (one Python iteration per workload, never
per configuration), impossible layouts are masked with the same rules as
`costmodel.layout.check_layout`, the phase cost is evaluated once over all
remaining rows, and the Pareto frontier of tokens/s/GPU against latency (TTFT
for fills, TPOT for decode) is marked per workload and hardware.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.errors import CostModelError
from costmodel.hardware import HardwareTable
from costmodel.memory import weight_bytes_per_gpu
from costmodel.model import ModelSpec
from costmodel.pareto import pareto_mask_grouped
from costmodel.phase import Bound, Configs, Phase, phase_cost
from costmodel.precision import Precision


@dataclass(frozen=True)
class Workload:
    """One phase at one shape. `new_tokens` per sequence (decode: ignored by the cost,
    one token per step); `context` the cached tokens; `query_tokens` the tokens one
    query costs in this phase (decode: the output length; fills: `new_tokens`)."""

    name: str
    phase: Phase
    new_tokens: int
    context: int
    query_tokens: int

    def __post_init__(self) -> None:
        for field in ("new_tokens", "query_tokens"):
            if getattr(self, field) < 1:
                raise CostModelError(f"workload {self.name}: {field} must be >= 1")
        if self.context < 0:
            raise CostModelError(f"workload {self.name}: context must be >= 0")


@dataclass(frozen=True)
class Grid:
    """The layout and batch axes of a sweep. `batch` is sequences per attention rank
    per micro-batch (Configs' meaning); decode and fills get separate batch axes."""

    pp: tuple[int, ...] = (1, 2, 4, 8)
    tp: tuple[int, ...] = (1, 2, 4, 8)
    ep: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    decode_batch: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    fill_batch: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    min_gpus: int = 16
    max_gpus: int = 64
    precision: Precision = Precision.FP4  # routed experts
    kv_precision: Precision = Precision.FP8
    mtp: int = 0
    attention_precision: Precision | None = None  # the rest; None: FP8 or wider


def build_configs(workloads: tuple[Workload, ...], n_hardware: int,
                  grid: Grid) -> tuple[Configs, np.ndarray]:
    """All grid points of every workload within the instance-size window, and each
    row's workload index. Layout rules are not applied here: see `valid_mask`."""
    blocks, owner = [], []
    for w_index, w in enumerate(workloads):
        batch = grid.decode_batch if w.phase == Phase.DECODE else grid.fill_batch
        hw, pp, tp, ep, b = (a.ravel() for a in np.meshgrid(
            np.arange(n_hardware), grid.pp, grid.tp, grid.ep, batch, indexing="ij"))
        gpus = pp * np.maximum(tp, ep)
        keep = (gpus >= grid.min_gpus) & (gpus <= grid.max_gpus)
        blocks.append((hw[keep], pp[keep], tp[keep], ep[keep], b[keep],
                       int(w.phase), w.new_tokens, w.context))
        owner.append(np.full(int(keep.sum()), w_index))
    cols = [np.concatenate([np.broadcast_to(blk[i], blk[0].shape) for blk in blocks])
            for i in range(8)]
    hw, pp, tp, ep, batch, phase, new_tokens, context = cols
    cfg = Configs.make(phase=phase, batch=batch, new_tokens=new_tokens, context=context,
                       pp=pp, tp=tp, ep=ep, precision=int(grid.precision), hardware=hw,
                       kv_precision=int(grid.kv_precision), mtp=grid.mtp,
                       attention_precision=None if grid.attention_precision is None
                       else int(grid.attention_precision))
    return cfg, np.concatenate(owner)


def valid_mask(model: ModelSpec, hardware: HardwareTable, cfg: Configs) -> np.ndarray:
    """The rules of `check_layout`, as one bool per configuration."""
    pp, tp, ep = cfg.pp, cfg.tp, cfg.ep
    experts = model.moe.routed_experts if model.moe else 1
    domain = hardware.column("scale_up_domain_gpus")[cfg.hardware]
    hbm = hardware.column("hbm_bytes")[cfg.hardware]
    whole = (pp >= 1) & (tp >= 1) & (ep >= 1) & (pp % 1 == 0) & (tp % 1 == 0) & (ep % 1 == 0)
    ok = whole & (model.tp_head_limit % np.maximum(tp, 1) == 0)
    ok &= ep <= experts
    ok &= np.maximum(tp, ep) % np.maximum(np.minimum(tp, ep), 1) == 0
    ok &= pp <= model.n_layer_groups
    ok &= tp <= domain
    weights = weight_bytes_per_gpu(model, pp=np.maximum(pp, 1), tp=np.maximum(tp, 1),
                                   ep=np.maximum(ep, 1), precision=cfg.precision,
                                   attention_precision=cfg.attention_precision)
    return ok & (weights <= hbm)


@dataclass(frozen=True)
class SweepResult:
    """One row per valid configuration, as numpy columns (see docs/sweeps.md)."""

    columns: dict[str, np.ndarray]
    workloads: tuple[Workload, ...]
    hardware_names: tuple[str, ...]
    configs_evaluated: int  # grid points before the validity mask

    def __len__(self) -> int:
        return int(self.columns["pp"].shape[0])

    def select(self, rows) -> dict[str, np.ndarray]:
        return {k: v[rows] for k, v in self.columns.items()}

    def frontier(self) -> dict[str, np.ndarray]:
        return self.select(self.columns["on_frontier"])


def run_sweep(model: ModelSpec, hardware: HardwareTable, workloads: tuple[Workload, ...],
              grid: Grid = Grid(), eff: Efficiency = DEFAULT_EFFICIENCY) -> SweepResult:
    if not workloads:
        raise CostModelError("no workloads to sweep")
    cfg_all, owner_all = build_configs(workloads, len(hardware.specs), grid)
    valid = valid_mask(model, hardware, cfg_all)
    cfg = cfg_all.select(valid)
    owner = owner_all[valid]
    cost = phase_cost(model, hardware, cfg, eff)
    decode = cfg.phase == Phase.DECODE
    query_tokens = np.array([w.query_tokens for w in workloads], dtype=np.float64)[owner]
    latency = np.where(decode, cost.tpot_s, cost.step_time_s)
    columns = {
        "workload": owner, "phase": cfg.phase, "hardware": cfg.hardware,
        "pp": cfg.pp.astype(np.int64), "tp": cfg.tp.astype(np.int64),
        "ep": cfg.ep.astype(np.int64), "batch": cfg.batch.astype(np.int64),
        "gpus": cost.gpus.astype(np.int64), "new_tokens": cfg.new_tokens.astype(np.int64),
        "context": cfg.context.astype(np.int64),
        "ttft_or_tpot_s": latency, "step_time_s": cost.step_time_s,
        "tokens_per_s_per_gpu": cost.tokens_per_s_per_gpu,
        "energy_per_token_j": cost.energy_per_token_j,
        # One query: decode pays energy per output token for every one of its tokens;
        # a fill pays it for each new token it processes.
        "energy_per_query_j": cost.energy_per_token_j * query_tokens,
        "hbm_bytes_per_gpu": cost.hbm_bytes_per_gpu,
        "hbm_bytes_per_gpu_double_buffered": cost.hbm_bytes_per_gpu_double_buffered,
        "weight_bytes_per_gpu": cost.weight_bytes_per_gpu,
        "kv_bytes_per_gpu": cost.kv_bytes_per_gpu,
        "scale_up_bytes_per_s_per_gpu": cost.scale_up_bytes_per_s_per_gpu,
        "scale_out_bytes_per_s_per_gpu": cost.scale_out_bytes_per_s_per_gpu,
        "bound": cost.bound, "fits": cost.fits,
    }
    # Frontiers only among configurations that fit: a layout that runs out of HBM
    # is not a point an operator can pick.
    group = np.where(cost.fits, owner * len(hardware.specs) + cfg.hardware, -1)
    lat_fit = np.where(cost.fits, latency, np.nan)
    columns["on_frontier"] = pareto_mask_grouped(group, lat_fit, cost.tokens_per_s_per_gpu)
    columns["on_frontier"] &= cost.fits
    # Across hardware: which machine owns each stretch of the latency range.
    columns["on_combined_frontier"] = pareto_mask_grouped(
        np.where(cost.fits, owner, -1), lat_fit, cost.tokens_per_s_per_gpu) & cost.fits
    return SweepResult(columns=columns, workloads=tuple(workloads),
                       hardware_names=tuple(s.name for s in hardware.specs),
                       configs_evaluated=len(cfg_all))


def merge_results(parts: list[SweepResult]) -> SweepResult:
    """Sweeps of disjoint workload lists over the same hardware, as one sweep of all
    their workloads in order. Frontiers are marked within a workload (per hardware and
    across it), so the merge is the sweep that would have run in one piece."""
    if not parts:
        raise CostModelError("no sweeps to merge")
    names = parts[0].hardware_names
    if any(p.hardware_names != names for p in parts):
        raise CostModelError("sweeps over different hardware cannot be merged")
    columns: dict[str, list[np.ndarray]] = {k: [] for k in parts[0].columns}
    offset = 0
    for part in parts:
        for key, values in part.columns.items():
            columns[key].append(values + offset if key == "workload" else values)
        offset += len(part.workloads)
    return SweepResult(columns={k: np.concatenate(v) for k, v in columns.items()},
                       workloads=tuple(w for p in parts for w in p.workloads),
                       hardware_names=names,
                       configs_evaluated=sum(p.configs_evaluated for p in parts))


# Columns written as names rather than codes.
def _labels(result: SweepResult) -> dict[str, np.ndarray]:
    c = result.columns
    return {
        "workload": np.array([w.name for w in result.workloads])[c["workload"]],
        "phase": np.array([p.name.lower() for p in Phase])[c["phase"]],
        "hardware": np.array(result.hardware_names)[c["hardware"]],
        "bound": np.array([b.name.lower() for b in Bound])[c["bound"]],
    }


CSV_COLUMNS = (
    "workload", "phase", "hardware", "pp", "tp", "ep", "batch", "gpus", "new_tokens",
    "context", "ttft_or_tpot_s", "step_time_s", "tokens_per_s_per_gpu", "energy_per_token_j",
    "energy_per_query_j", "hbm_bytes_per_gpu", "hbm_bytes_per_gpu_double_buffered",
    "weight_bytes_per_gpu", "kv_bytes_per_gpu", "scale_up_bytes_per_s_per_gpu",
    "scale_out_bytes_per_s_per_gpu", "bound", "fits", "on_frontier", "on_combined_frontier",
)


def write_csv(result: SweepResult, path: Path, rows=None) -> int:
    """Write the chosen rows (default: all) to `path`; return how many."""
    labels = _labels(result)
    cols = {k: labels.get(k, result.columns[k]) for k in CSV_COLUMNS}
    if rows is not None:
        cols = {k: v[rows] for k, v in cols.items()}
    text_cols = []
    for k in CSV_COLUMNS:
        v = cols[k]
        if v.dtype == bool:
            text_cols.append(np.where(v, "1", "0"))
        elif v.dtype.kind == "f":
            text_cols.append([repr(x) for x in v.tolist()])  # shortest round-trip form
        else:
            text_cols.append([str(x) for x in v.tolist()])
    n = len(cols["pp"])
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(zip(*text_cols, strict=True) if n else ())
    return n
