"""The embedded default run: retire vs buffered on the bundled sample, and what it shows.

On the rack-scale preset (`gb200-nvl72x1`: one decode worker of 384 slots, pools
sized by `tokenfactory plan` from the development traces' work mix) an agent
session has at most one call in flight, so decode fills only with more
concurrent sessions than it has slots, and a replay of that many whole sessions
takes several minutes per controller on two cores. At a load the demo can run
in about three minutes, the admission decision of neither controller binds:
`retire` offers the free decode slots (hundreds), `buffered` about the predicted
decode service rate, both more than the calls that arrive in a fast-loop period,
so every queued call is released at the next period and the two runs are the
same run. The demo runs at the heaviest such load (the sample x12, all sessions
started within two minutes, think gaps x0.05: decode occupancy 0.22), and says
so; docs/demo.md has the sweep behind this choice. The control experiment that
shows the controllers apart is being rebuilt on the rack-scale presets.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from orchestrator.control.policies.base import AdmissionReason
from traces.replay import LoadOptions

DEMO_CLUSTER = "gb200-nvl72x1"
DEMO_MODEL = "kimi-k3-like"
DEMO_CONTROLLERS = ("retire", "buffered")
DEMO_LOAD = LoadOptions(sessions_per_hour=7200.0, think_scale=0.05, repeat=12, duration_s=900.0)
DEMO_SEED = 1

# The development traces (113 weka-cc-dev sessions) at the load the slow test runs
# (tests/scenario/test_controllers_dev_traces.py): sessions started at 360 an hour (all
# 113 within about 19 minutes), think/tool gaps x0.05, one NVL72 rack. Decode is nearly
# idle there; the test holds what the two controllers measurably do at that load.
DEV_CLUSTER = "gb200-nvl72x1"
DEV_LOAD = LoadOptions(sessions_per_hour=360.0, think_scale=0.05)


def binding_decisions(queued: Sequence[int], admits: Sequence[int],
                      reasons: Sequence[str]) -> int:
    """Admission decisions that left queued calls waiting: `admits[i]` below `queued[i]`,
    the admission queue the decision faced. Decisions taken before any observation
    arrived (the first observation lag, when every controller admits nothing) are not
    counted: they say nothing about the controller."""
    return sum(1 for q, a, why in zip(queued, admits, reasons, strict=False)
               if a < q and why != AdmissionReason.NO_OBSERVATION.value)


def run_binding_decisions(out: Path, name: str) -> int:
    """`binding_decisions` of one controller's run written by `compare` into `out`, from
    its series: the admission queue each decision faced (sampled just before it), what
    it admitted and why. A skipped idle span's record faced an empty queue; the run's
    last sample, taken as it ends, has no decision after it (its `admit` is empty)."""
    with (out / f"{name}-series.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["admit"] != ""]
    return binding_decisions([int(float(r["admission_queue"])) for r in rows],
                             [int(r["admit"]) for r in rows], [r["reason"] for r in rows])


class DecisionRecorder:
    """A replay listener keeping, per admission decision, the queue it faced, what it
    admitted and why (for `binding_decisions` on a run made with `run_replay`)."""

    def __init__(self) -> None:
        self.queued: list[int] = []
        self.admits: list[int] = []
        self.reasons: list[str] = []

    def on_sample(self, _orch, obs, _now_s: float) -> None:
        self.queued.append(obs.admission_queue)

    def on_decision(self, _orch, decision, _now_s: float) -> None:
        self.admits.append(decision.admit)
        self.reasons.append(decision.reason.value)

    def binding(self) -> int:
        return binding_decisions(self.queued, self.admits, self.reasons)
