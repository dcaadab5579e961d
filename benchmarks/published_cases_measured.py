"""The published cases (costmodel/validation.py) priced by the roofline and by the tables.

Needs the `measured` extra (aiconfigurator-core). For each case: the published figure,
the default roofline's predicted/measured ratio (`costmodel.validation.predict`, the
figure docs/costmodel.md pins), and, where the tables cover the case's layout, the same
prediction with the step's kernels priced from the tables (`workers.cost_sources`,
TensorRT-LLM tables at each system's default version, the only engine whose DeepSeek
composition exists) at the batch the roofline chose, around them what the measured
source keeps from the roofline: MTP draft passes, the 1.5 ms host gap of the shipped
efficiency. A case the tables do not cover says why. Run:

    python benchmarks/published_cases_measured.py
"""

from __future__ import annotations

from costmodel.configs import Phase
from costmodel.efficiency import DEFAULT_EFFICIENCY
from costmodel.hardware import load_hardware
from costmodel.measured.source import Uncovered
from costmodel.model import load_model
from costmodel.validation import CASES, Case, predict
from workers.cost_sources import measured_layout
from workers.measured_pricing import MeasuredPricer
from workers.pricing import StepPricer

ENGINE = "trtllm"


def steps_s(case: Case, batch: int) -> tuple[float, float] | str:
    """(roofline step, tables step) at `batch` per attention rank, host gap and MTP drafts
    included (the case's metric goes as 1 / step), or why the tables do not cover it."""
    model, hw = load_model(case.model), load_hardware(case.hardware)
    got = measured_layout(model, hw, case.layout, ENGINE)
    if isinstance(got, Uncovered):
        return got.line()
    pricer = MeasuredPricer(StepPricer(model, hw, case.layout, DEFAULT_EFFICIENCY), got)
    sequences = batch * pricer.attention_ranks
    if case.phase is Phase.DECODE:
        tables_s = float(pricer.decode_step_times_s(sequences, [float(case.context)])[0])
        roof_s = float(pricer.roofline.decode_step_times_s(sequences, [float(case.context)])[0])
    else:
        tables_s = pricer.fill_once_s(case.phase, sequences, case.new_tokens, case.context)
        roof_s = pricer.roofline.fill_once_s(case.phase, sequences, case.new_tokens,
                                             case.context)
    return roof_s, tables_s


def main() -> None:
    print("| case | published | roofline | measured tables | step ms, roofline -> tables |")
    print("|---|---|---|---|---|")
    for case in CASES:
        p = predict(case)
        got = steps_s(case, p.batch)
        if isinstance(got, str):
            cell, step = f"not covered: {got}", "-"
        else:
            cell, step = f"{p.ratio * got[0] / got[1]:.2f}", f"{got[0] * 1e3:.2f} -> {got[1] * 1e3:.2f}"
        print(f"| {case.name} (batch {p.batch}) | {case.measured:g} {case.metric.value} | "
              f"{p.ratio:.2f} | {cell} | {step} |", flush=True)


if __name__ == "__main__":
    main()
