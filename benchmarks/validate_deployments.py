"""Reproduce published measurements with the cost core: ratios and leave-one-out calibration.

For each case: the batch the core used, its predicted bound, the predicted and
measured figures in the case's own unit, predicted/measured at the shipped
efficiency set, in-sample with the per-kernel floor `kernel_launch_s` fitted on
every case, and leave-one-out (fitted on every other case). Compute-bound cases first, then the
memory/latency-bound ones; every case with its source URL.
"""

from __future__ import annotations

from dataclasses import replace

from rich.console import Console
from rich.table import Table

from costmodel.efficiency import DEFAULT_EFFICIENCY
from costmodel.mtp import expected_tokens_per_step
from costmodel.validation import (
    CASES,
    Regime,
    fit_launch,
    leave_one_out,
    predict,
    predict_all,
    ratio_table,
)

# TensorRT-LLM's DeepSeek-R1 on 8xB200 at batch 1 with 0-5 autoregressive MTP drafts:
# tokens/s per user and mean tokens per step ("Autoregressive MTP Layers", the source of
# the B200 cases).
B200_MTP_LADDER = ((111, 1.00), (198, 1.92), (250, 2.58), (253, 2.82), (245, 2.99),
                   (239, 3.01))


def mtp_ladder(console: Console) -> None:
    """The measured step with 0-5 drafts against the core's (drafts priced as passes of
    the MTP module, costmodel/draft.py)."""
    base = next(c for c in CASES if c.hardware == "b200" and c.layout.mtp == 0)
    table = Table(title="8xB200 DeepSeek-R1 batch 1: step time by MTP drafts")
    for col in ("drafts", "measured step ms", "predicted step ms", "predicted/measured tok/s"):
        table.add_column(col, justify="right")
    for drafts, (tps, per_step) in enumerate(B200_MTP_LADDER):
        case = replace(base, layout=replace(base.layout, mtp=drafts), measured=tps)
        p = predict(case)
        step_ms = p.tpot_s * float(expected_tokens_per_step(drafts)) * 1e3
        table.add_row(str(drafts), f"{per_step / tps * 1e3:.2f}", f"{step_ms:.2f}",
                      f"{p.ratio:.2f}")
    console.print(table)


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def main() -> None:
    console = Console(width=200)
    all_fit, rows = leave_one_out()
    preds = predict_all()
    latency_only = [c for c in CASES if c.regime is Regime.MEMORY_LATENCY]
    fit_latency_bound = fit_launch(ratio_table(latency_only))
    table = Table(title="Cost core vs published measurements (ratio = predicted/measured)")
    for col in ("#", "regime", "case", "batch", "bound", "predicted", "measured", "unit",
                "shipped", "in-sample", "LOO launch us", "LOO"):
        table.add_column(col, justify="left" if col in ("case", "unit", "regime") else "right")
    order = sorted(range(len(CASES)), key=lambda i: CASES[i].regime is not Regime.COMPUTE)
    for n, i in enumerate(order, 1):
        p, r = preds[i], rows[i]
        c = p.case
        table.add_row(str(n), c.regime.value, c.name + (" [known miss]" if c.miss else ""),
                      str(p.batch), p.bound.name.lower(), _fmt(p.predicted), _fmt(c.measured),
                      c.metric.value, f"{r.shipped_ratio:.2f}", f"{r.in_sample_ratio:.2f}",
                      f"{r.loo_launch_s * 1e6:.2f}", f"{r.loo_ratio:.2f}")
    console.print(table)
    console.print(f"kernel_launch_s fitted on all {len(CASES)} cases: {all_fit * 1e6:.2f} us; "
                  f"on the {len(latency_only)} memory/latency-bound cases alone: "
                  f"{fit_latency_bound * 1e6:.2f} us; shipped: "
                  f"{DEFAULT_EFFICIENCY.kernel_launch_s * 1e6:.2f} us")
    mtp_ladder(console)
    for n, i in enumerate(order, 1):
        c = CASES[i]
        console.print(f"[{n}] {c.source}" + (f"\n    note: {c.note}" if c.note else "")
                      + (f"\n    miss: {c.miss}" if c.miss else ""), soft_wrap=True)


if __name__ == "__main__":
    main()
