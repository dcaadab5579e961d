"""A plan as a cluster description (docs/cluster-format.md): the text `replay --cluster`
reads. Pure: the plan and the command line in, TOML text out.

Nodes are the hardware's scale-up domains; host memory, rack caches and the parallel
file system take the figures the bundled presets use for that kind of machine.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from costmodel.phase import Phase
from costmodel.plan_values import Plan, PoolPlan


@dataclass(frozen=True)
class Site:
    """Host memory per node, nodes per rack, rack cache and parallel file system."""

    dram_gb: int
    dram_gb_per_s: int
    dram_note: str
    nodes_per_rack: int
    cache_gb: int
    cache_gb_per_s: int
    pfs_gb: int
    pfs_read_gb_per_s: int
    pfs_write_gb_per_s: int


# NVL72 racks: 36 Grace CPUs, each 480 GB LPDDR5X at 512 GB/s (NVIDIA Grace CPU
# datasheet; GB200 NVL72 spec "up to 17 TB LPDDR5X"), one rack per scale-up domain.
_NVL72 = Site(17_280, 18_432, "36 Grace x 480 GB LPDDR5X, 36 x 512 GB/s", 1,
              8_000, 200, 2_000_000, 400, 200)
# HGX nodes: 2 TB DDR5 (DGX B200 datasheet: 2 TB system memory), four nodes a rack.
_HGX = Site(2_000, 400, "2 TB DDR5 per HGX host", 4, 4_000, 100, 1_000_000, 200, 100)
SITES = {
    "gb200": _NVL72,
    "gb300": _NVL72,
    # HGX B300 hosts ship with 4 TB (DGX B300 datasheet: 4 TB system memory).
    "b300": Site(4_000, 400, "4 TB DDR5 per HGX B300 host", 4, 4_000, 100, 1_000_000, 200, 100),
}


def site_of(hardware_name: str) -> Site:
    return SITES.get(hardware_name, _HGX)


def _pool_lines(p: PoolPlan, node_names: list[str]) -> list[str]:
    c = p.choice
    lines = ["[[pools]]", f'name = "{p.name}"', f'phase = "{"mixed" if c.mixed else p.name}"',
             "nodes = [" + ", ".join(f'"{n}"' for n in node_names) + "]",
             f"gpus = {p.gpus}", f"pp = {c.pp}", f"tp = {c.tp}", f"ep = {c.ep}",
             f'precision = "{c.precision.name.lower()}"',
             f'kv_precision = "{c.kv_precision.name.lower()}"']
    if c.mixed:
        lines += [f"# {c.ranks} attention ranks x {c.batch} = {c.slots} sequences a worker; "
                  f"TPOT {c.latency_s * 1e3:.1f} ms at {p.shape.check_context:,.0f} tokens "
                  f"with a {c.chunk_tokens:,}-token prefill chunk a step, TTFT "
                  f"{c.ttft_s:.2f} s for a queued typical prompt",
                  f"target_batch = {c.batch}", f"max_batch_sequences = {c.batch}",
                  # The step's budget counts each decode's tokens (workers/mixed.py):
                  # the planned chunk comes on top of a full decode batch.
                  f"max_batch_tokens = {c.chunk_tokens + c.slots * (1 + c.mtp)}",
                  f"mtp = {c.mtp}                        # as planned: the model's shipped head"]
    elif c.phase is Phase.DECODE:
        # Both per attention rank (docs/cluster-format.md): the cap is the planned batch,
        # which a controller's target may not exceed.
        lines += [f"# {c.ranks} attention ranks x {c.batch} x pp {c.pp} = {c.slots} "
                  f"sequences a worker; TPOT {c.latency_s * 1e3:.1f} ms at "
                  f"{p.shape.check_context:,.0f} tokens",
                  f"target_batch = {c.batch}", f"max_batch_sequences = {c.batch}",
                  f"mtp = {c.mtp}                        # as planned: the model's shipped head"]
    else:
        tokens = max(1024, math.ceil(c.slots * p.shape.typical_new_tokens / 1024) * 1024)
        lines += [f"# {c.slots} sequences of ~{p.shape.typical_new_tokens:,.0f} new tokens a "
                  f"batch; step {c.latency_s:.2f} s",
                  f"max_batch_tokens = {tokens}", f"max_batch_sequences = {c.slots}"]
        if c.slots < 4:  # the format's default decode target (4) may not exceed the cap
            lines.append(f"target_batch = {c.slots}")
    return lines


def _string(text: str) -> str:
    """`text` as a TOML basic string: quotes, backslashes and control characters escaped
    (a JSON string is one, but for DEL, which TOML also wants escaped)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _comment(text: str) -> str:
    """`text` on one comment line: control characters (line breaks among them), which
    TOML refuses in a comment, written as `\\xNN`."""
    return "".join(c if c == "\t" or " " <= c != "\x7f" else f"\\x{ord(c):02x}" for c in text)


def render_cluster_toml(plan: Plan, name: str, command: str, hardware_ref: str = "",
                        engine: str | None = None) -> str:
    """The cluster description of `plan`, headed by how it was generated. Pools are
    listed largest worker first: the cluster places them in this order, first fit.
    `hardware_ref` is how nodes name the hardware (default: its preset name); `engine`,
    the serving engine it was planned for (costmodel/data/engines.toml)."""
    hw, site, nodes = plan.hardware, site_of(plan.hardware.name), plan.nodes
    node_names = [f"n{i}" for i in range(nodes.count)]
    racks = math.ceil(nodes.count / site.nodes_per_rack)
    pools = ", ".join(f"{p.name} {p.gpus}" for p in plan.pools)
    spare = plan.gpus - plan.used_gpus
    out = [_comment(f"# Generated by: {command}"),
           _comment(f"# {plan.model} on {plan.gpus} {hw.name} GPUs, {plan.arrangement}; sized for "
                    f"{plan.calls_per_s:.2f} calls/s of the trace's mix "
                    f"({plan.decode_slots} decode slots)."),
           _comment(f"# Nodes: {hw.description}, {nodes.gpus_each} GPUs per scale-up domain; "
                    f"{site.nodes_per_rack} node(s) per rack."),
           f"name = {_string(name)}",
           "description = " + _string(f"{plan.gpus} x {hw.name}: {pools} GPUs"
                                      + (f" ({spare} spare)" if spare else "")),
           *([f"engine = {_string(engine)}"] if engine else []), "",
           "[pfs]", f"capacity_gb = {site.pfs_gb}", f"read_gb_per_s = {site.pfs_read_gb_per_s}",
           f"write_gb_per_s = {site.pfs_write_gb_per_s}", ""]
    for r in range(racks):
        out += ["[[racks]]", f'name = "r{r}"', f"cache_gb = {site.cache_gb}",
                f"cache_gb_per_s = {site.cache_gb_per_s}", ""]
    for i, size in enumerate(nodes.sizes()):
        out += ["[[nodes]]", f'name = "{node_names[i]}"', f'rack = "r{i // site.nodes_per_rack}"',
                f"hardware = {_string(hardware_ref or hw.name)}", f"gpus = {size}",
                f"dram_gb = {site.dram_gb}               # {site.dram_note}",
                f"dram_gb_per_s = {site.dram_gb_per_s}", ""]
    for p in sorted(plan.pools, key=lambda p: -p.choice.gpus):
        out += [*_pool_lines(p, node_names), ""]
    return "\n".join(out).rstrip() + "\n"
