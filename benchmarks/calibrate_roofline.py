"""Fit the roofline's efficiencies per operation class on the measured kernel tables.

Needs the `measured` extra (aiconfigurator-core). Prints the fitted factors (the
shipped defaults of `costmodel/efficiency.py` are this output), then per class
and regime the ratio roofline/measured at the factors shipped before this
calibration and at the fitted ones (median and 10th-90th percentile over the
samples), then leave-one-GPU-out: factors fitted without one GPU's tables,
that GPU's samples predicted; last, whole steps on issue 33's layouts, roofline
(no host gap) against the tables' composition (`costmodel/calibration_steps.py`).
Method: `costmodel/calibration.py`.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

from costmodel import calibration as cal
from costmodel.calibration_steps import PRE_CALIBRATION_EFFICIENCY, step_ratios
from costmodel.efficiency import DEFAULT_EFFICIENCY


def _span(r: np.ndarray) -> str:
    lo, med, hi = np.percentile(r, [10, 50, 90])
    return f"{med:.2f} ({lo:.2f}-{hi:.2f})"


def main() -> None:
    console = Console(width=200)
    samples = cal.collect()
    fit = cal.fit(samples)
    table = Table(title="Fitted factors (costmodel/calibration.py) against the shipped ones")
    for col in ("factor", "fitted", "shipped"):
        table.add_column(col, justify="right")
    for name in fit.__dataclass_fields__:
        shipped_name = {"compute_attn_prefill_gqa": "compute_attn_gqa",
                        "compute_attn_prefill_mla": "compute_attn_mla"}.get(name, name)
        got = getattr(fit, name)
        shipped = getattr(DEFAULT_EFFICIENCY, shipped_name, float("nan"))
        unit = 1e6 if name.endswith("_s") else 1.0
        table.add_row(name + (" (us)" if unit != 1 else ""), f"{got * unit:.2f}",
                      f"{shipped * unit:.2f}")
    console.print(table)
    table = Table(title="Roofline / measured table time per class and regime: "
                        "median (10th-90th percentile)")
    for col in ("class", "regime", "samples", "before", "fitted", "shipped"):
        table.add_column(col, justify="left" if col in ("class", "regime") else "right")
    for cls, s in samples.items():
        for regime in cal.Regime:
            part = s.take(s.regime == regime.value)
            if len(part.measured_s):
                table.add_row(cls, regime.value, str(len(part.measured_s)),
                              _span(cal.ratios(part, cls, cal.PRE_CALIBRATION)),
                              _span(cal.ratios(part, cls, fit)),
                              _span(cal.ratios(part, cls, DEFAULT_EFFICIENCY)))
    console.print(table)
    table = Table(title="Leave one GPU out: fitted without it, predicted/measured on it "
                        "(median, min-max)")
    for col in ("held out", "class", "regime", "median", "range"):
        table.add_column(col, justify="left" if col in ("held out", "class", "regime")
                         else "right")
    for h in cal.leave_one_gpu_out(samples):
        table.add_row(h.gpu, h.cls, h.regime, f"{h.median:.2f}", f"{h.lo:.2f}-{h.hi:.2f}")
    console.print(table)
    for gpu in sorted({g for s in samples.values() for g in s.gpu}):
        f = cal.fit({c: s.take(s.gpu != gpu) for c, s in samples.items()})
        console.print(f"without {gpu}: " + ", ".join(
            f"{k}={getattr(f, k) * (1e6 if k.endswith('_s') else 1):.2f}"
            for k in f.__dataclass_fields__))
    table = Table(title="Whole steps, TensorRT-LLM tables: roofline (no host gap) / table step")
    for col in ("system", "regime", "case", "table ms", "before", "shipped"):
        table.add_column(col, justify="left" if col in ("system", "regime", "case") else "right")
    for r in step_ratios((PRE_CALIBRATION_EFFICIENCY, DEFAULT_EFFICIENCY)):
        table.add_row(r.system, r.case.regime.value, r.case.label, f"{r.table_s * 1e3:.2f}",
                      f"{r.ratios[0]:.2f}", f"{r.ratios[1]:.2f}")
    console.print(table)


if __name__ == "__main__":
    main()
