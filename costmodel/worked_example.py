"""The worked example (docs/sources.md): a Kimi K3-like model on GB200 NVL72,
B200 and B300, 16-64 GPUs per instance, seven workloads; and a check of the
essay's findings against what our cost model says.

Choices the essay leaves open, fixed here:
- Weights FP4: the K3-like preset's routed experts are MXFP4; dense and attention
  weights stay FP8 (`Grid.attention_precision` None: the default rule of
  costmodel.precision.default_attention_precision).
- KV cache FP8: MLA latents in FP8 are what FlashMLA serves on Blackwell; it halves
  the resident KV that the "under 80 GB" check is about.
- Decode context is the stated prompt length (8k/32k/128k); a query's energy counts
  1,000 output tokens at that context.
- 16-64 GPUs only: the K3-like weights (~1.5 TB) do not fit one 8-GPU B200/B300 node.
- "k" means 1,024 tokens, so 31k + 1k = 32k exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel import findings_why
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.phase import Phase
from costmodel.sweep import Grid, SweepResult, Workload, merge_results, run_sweep

MODEL = "kimi-k3-like"
HARDWARE = ("gb200", "b200", "b300")
OUTPUT_TOKENS = 1000
K = 1024
HBM_LINE_BYTES = 80e9  # the essay's "under 80 GB per GPU"

WORKLOADS = (
    Workload("prefill-8k", Phase.PREFILL, 8 * K, 0, 8 * K),
    Workload("prefill-32k", Phase.PREFILL, 32 * K, 0, 32 * K),
    Workload("midfill-31k+1k", Phase.MIDFILL, K, 31 * K, K),
    Workload("midfill-127k+1k", Phase.MIDFILL, K, 127 * K, K),
    Workload("decode-8k", Phase.DECODE, 1, 8 * K, OUTPUT_TOKENS),
    Workload("decode-32k", Phase.DECODE, 1, 32 * K, OUTPUT_TOKENS),
    Workload("decode-128k", Phase.DECODE, 1, 128 * K, OUTPUT_TOKENS),
)
GRID = Grid()


def workload_names() -> list[str]:
    return [w.name for w in WORKLOADS]


def select_workloads(phase: str = "all", names: list[str] | None = None) -> tuple[Workload, ...]:
    from costmodel.errors import CostModelError

    chosen = list(WORKLOADS)
    if phase != "all":
        chosen = [w for w in chosen if w.phase.name.lower() == phase]
    if names:
        unknown = [n for n in names if n not in workload_names()]
        if unknown:
            raise CostModelError(f"unknown workload {unknown[0]!r}; known: "
                                 f"{', '.join(workload_names())}")
        chosen = [w for w in chosen if w.name in names]
    if not chosen:
        raise CostModelError(f"no workload of phase {phase} among {', '.join(names or [])}")
    return tuple(chosen)


def run_worked_example(model_name: str = MODEL, hardware: tuple[str, ...] = HARDWARE,
                       workloads: tuple[Workload, ...] = WORKLOADS,
                       grid: Grid = GRID, map_parts=None) -> SweepResult:
    """The sweep in one piece or, given `map_parts(fn, shared, items) -> results in
    order` (an executor's map), one part per workload, merged: the same result."""
    if map_parts is not None:
        parts = map_parts(sweep_part, (model_name, hardware, grid),
                          [(w,) for w in workloads])
        return merge_results(parts)
    from costmodel.model import load_model

    table = HardwareTable(tuple(load_hardware(h) for h in hardware))
    return run_sweep(load_model(model_name), table, workloads, grid)


def sweep_part(shared: tuple[str, tuple[str, ...], Grid],
               workloads: tuple[Workload, ...]) -> SweepResult:
    """One part of a split sweep: every layout of the shared model and hardware for
    these workloads (a top-level function, so a worker process can import it)."""
    model_name, hardware, grid = shared
    return run_worked_example(model_name, hardware, workloads, grid)


def summary_rows(result: SweepResult) -> list[dict]:
    """Per workload and hardware: best tok/s/GPU, lowest latency, frontier size and the
    share of frontier points under 80 GB of resident HBM per GPU."""
    c, rows = result.columns, []
    for wi, w in enumerate(result.workloads):
        for hi, hw in enumerate(result.hardware_names):
            front = np.flatnonzero((c["workload"] == wi) & (c["hardware"] == hi) & c["on_frontier"])
            row = {"workload": w.name, "phase": w.phase.name.lower(), "hardware": hw,
                   "frontier_points": int(front.size)}
            if front.size:
                best = front[np.argmax(c["tokens_per_s_per_gpu"][front])]
                fast = front[np.argmin(c["ttft_or_tpot_s"][front])]
                row |= {
                    "best_tokens_per_s_per_gpu": float(c["tokens_per_s_per_gpu"][best]),
                    "best_layout": _layout(c, best),
                    "lowest_latency_s": float(c["ttft_or_tpot_s"][fast]),
                    "lowest_latency_layout": _layout(c, fast),
                    "share_under_80gb": float(np.mean(
                        c["hbm_bytes_per_gpu"][front] < HBM_LINE_BYTES)),
                }
            rows.append(row)
    return rows


def _layout(c: dict, i: int) -> str:
    return f"PP{c['pp'][i]} TP{c['tp'][i]} EP{c['ep'][i]} b{c['batch'][i]}"


@dataclass(frozen=True)
class Finding:
    claim: str
    holds: bool
    detail: str
    why: str = ""  # a "no": what the model finds instead, in figures (costmodel.findings_why)


def check_findings(result: SweepResult, line_bytes: float = HBM_LINE_BYTES) -> list[Finding]:
    """The essay's findings, each judged on our model's frontiers. Nothing is tuned to
    make them hold: this reports agreement and disagreement alike."""
    c = result.columns
    front = c["on_frontier"]
    by_phase = {p: [i for i, w in enumerate(result.workloads) if w.phase == p] for p in Phase}
    out = _layout_findings(result, by_phase)
    for finding in (_gb200_finding(result), _energy_finding(c, front, by_phase),
                    _hbm_finding(c, front, line_bytes)):
        if finding is not None:
            out.append(finding)
    return out


def _layout_findings(result: SweepResult, by_phase: dict[Phase, list[int]]) -> list[Finding]:
    """The findings on the layout of each workload's frontier point that is fastest or
    yields the most tokens per second per GPU: held when most frontiers agree."""
    c = result.columns
    names = result.hardware_names
    front = c["on_frontier"]
    out: list[Finding] = []

    def groups(phase: Phase, only: str | None):
        for wi in by_phase[phase]:
            for hi in range(len(names)):
                if only is not None and names[hi] != only:
                    continue
                rows = np.flatnonzero((c["workload"] == wi) & (c["hardware"] == hi) & front)
                if rows.size:
                    yield result.workloads[wi].name, names[hi], rows

    def judge(claim: str, phase: Phase, pick, test, only: str | None = None) -> None:
        seen = [(w, h, r[pick(r)]) for w, h, r in groups(phase, only)]
        if not seen:
            return
        good = [s for s in seen if test(s[2], s[1])]
        misses = [f"{w}/{h}: {_layout(c, i)}" for w, h, i in seen if (w, h, i) not in good]
        detail = f"{len(good)} of {len(seen)} frontiers"
        holds = len(good) > len(seen) / 2
        why = "" if holds else findings_why.layout_why(
            c, [(w, h, int(i), [x.name for x in result.workloads].index(w), names.index(h))
                for w, h, i in seen if (w, h, i) not in good],
            fastest=pick is fastest, test=test)
        out.append(Finding(claim, holds, detail + ("; e.g. " + misses[0] if misses else ""),
                           why))

    def fastest(rows):
        return np.argmin(c["ttft_or_tpot_s"][rows])

    def best(rows):
        return np.argmax(c["tokens_per_s_per_gpu"][rows])

    widest_ep = {hi: c["ep"][c["hardware"] == hi].max() for hi in range(len(names))}
    judge("decode: lowest latency uses PP+TP", Phase.DECODE, fastest,
          lambda i, h: c["pp"][i] > 1 and c["tp"][i] > 1)
    judge("decode: highest tok/s/GPU uses TP=1, PP=1, EP widest", Phase.DECODE, best,
          lambda i, h: c["pp"][i] == 1 and c["tp"][i] == 1
          and c["ep"][i] == widest_ep[int(c["hardware"][i])])
    judge("prefill: best tok/s/GPU at PP=4 with TP 4 or 2", Phase.PREFILL, best,
          lambda i, h: c["pp"][i] == 4 and c["tp"][i] in (2, 4))
    judge("midfill: GB200 lowest TTFT with no PP, TP 4 or 2", Phase.MIDFILL, fastest,
          lambda i, h: c["pp"][i] == 1 and c["tp"][i] in (2, 4), only="gb200")
    return out


def _gb200_finding(result: SweepResult) -> Finding | None:
    """Whether GB200 holds most of the combined decode frontier (None without GB200 or
    without such a frontier)."""
    c, names = result.columns, result.hardware_names
    if "gb200" not in names:
        return None
    gb = names.index("gb200")
    combined = c["on_combined_frontier"] & (c["phase"] == Phase.DECODE)
    if not combined.any():
        return None
    share = float(np.mean(c["hardware"][combined] == gb))
    return Finding("decode: GB200 leads most of the range", share > 0.5,
                   f"{share:.0%} of the combined decode frontier is GB200",
                   "" if share > 0.5 else findings_why.gb200_why(c, names, combined))


def _energy_finding(c, front, by_phase: dict[Phase, list[int]]) -> Finding | None:
    """The phases ordered by the cheapest query each one's frontier offers (None unless
    all three have a frontier)."""
    energy = {}
    for p in Phase:
        rows = front & np.isin(c["workload"], by_phase[p])
        if rows.any():  # the cheapest query each phase's frontier offers
            energy[p] = float(np.min(c["energy_per_query_j"][rows]))
    if len(energy) != 3:
        return None
    order = sorted(energy, key=energy.get)
    holds = order[0] == Phase.MIDFILL and order[-1] == Phase.DECODE
    return Finding(
        "energy per query: decode highest, midfill lowest", holds,
        ", ".join(f"{p.name.lower()} {energy[p]:,.0f} J" for p in order)
        + " (cheapest frontier query)",
        "" if holds else findings_why.energy_why(c, front, by_phase, energy))


def _hbm_finding(c, front, line_bytes: float) -> Finding | None:
    """Whether most frontier points need less HBM per GPU than `line_bytes`."""
    if not front.any():
        return None
    share = float(np.mean(c["hbm_bytes_per_gpu"][front] < line_bytes))
    return Finding("most frontier points under 80 GB HBM per GPU", share > 0.5,
                   f"{share:.0%} of {int(front.sum())} frontier points",
                   "" if share > 0.5 else findings_why.hbm_why(c, front, line_bytes))


def print_worked_example(console=None, result: SweepResult | None = None) -> SweepResult:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    result = result if result is not None else run_worked_example()
    table = Table(title=f"Worked example: {MODEL} frontiers (tok/s/GPU vs TTFT or TPOT)")
    for name, justify in (("workload", "left"), ("hw", "left"), ("best tok/s/GPU", "right"),
                          ("at layout", "left"), ("lowest latency", "right"),
                          ("at layout", "left"), ("front", "right"), ("<80 GB", "right")):
        # Names and layouts stay on one line; rich shrinks the other columns first.
        table.add_column(name, justify=justify, no_wrap=name in ("workload", "hw"))
    for row in summary_rows(result):
        if not row["frontier_points"]:
            table.add_row(row["workload"], row["hardware"], "-", "nothing fits", "-", "-",
                          "0", "-")
            continue
        table.add_row(row["workload"], row["hardware"],
                      f"{row['best_tokens_per_s_per_gpu']:,.0f}", row["best_layout"],
                      _ms(row["lowest_latency_s"]), row["lowest_latency_layout"],
                      str(row["frontier_points"]), f"{row['share_under_80gb']:.0%}")
    console.print(table)
    findings = Table(title="The essay's findings, checked against this model")
    findings.add_column("finding")
    findings.add_column("holds")
    findings.add_column("what the model says")
    checked = check_findings(result)
    for f in checked:
        findings.add_row(f.claim, "[green]yes[/]" if f.holds else "[red]no[/]", f.detail)
    console.print(findings)
    for f in checked:
        if not f.holds:  # each "no" explained by the figures behind it
            console.print(f"why not, {f.claim}: {f.why}", highlight=False)
    return result


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"
