"""Reproduce the published DeepSeek-V3 deployments and print predicted/measured."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from costmodel.validation import predict_all


def main() -> None:
    table = Table(title="Cost core vs published deployments (tokens/s per 8-GPU node)")
    for col in ("case", "batch/GPU", "predicted", "measured", "predicted/measured"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for p in predict_all():
        table.add_row(p.case.name, str(p.batch), f"{p.predicted_tokens_per_s_per_node:,.0f}",
                      f"{p.case.measured_tokens_per_s_per_node:,.0f}", f"{p.ratio:.2f}")
    Console(width=130).print(table)


if __name__ == "__main__":
    main()
