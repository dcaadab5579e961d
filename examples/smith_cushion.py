"""`smith-pools` with a 6 s cushion instead of `smith`'s 8 s (docs/control.md, "The
compensated controllers where admission binds": tried where admission per pool alone
left `local`'s p99 TTFT unmet). Use it as `--controller examples.smith_cushion:SmithPools6`
from a checkout's root."""

from orchestrator.control.config import ControlConfig
from orchestrator.control.policies.smith import SmithPoolsAdmission

CUSHION_S = 6.0


class SmithPools6(SmithPoolsAdmission):
    name = "smith-pools-6s"

    def __init__(self, config: ControlConfig, cushion_s: float = CUSHION_S) -> None:
        super().__init__(config, cushion_s)
