"""`smith-pools` with each busy fill pool's queue held short: tried where the preset's p99
TTFT is the wait in its fill workers' queues, which `smith-pools`' cushion does not reach
(docs/control.md, "The map at fbfadad"). It fails there: the midfill pool fills more
calls over the 5 s lag than the bound lets queue, and runs last 7-8x longer. Use it as
`--controller examples.smith_fill_queue:SmithPoolsQueued` from a checkout's root.

A busy fill phase's calls (`smith-pools`' POOL_BINDS) are released while its pools'
queues, as last observed, plus every call admitted since (to any pool: the
orchestrator's own count, an upper bound on those that went there), stay under
QUEUED_PER_WORKER a serving worker; the rest wait in the orchestrator's queue and are
routed when released, on the queues as they stand then. Beside `smith-pools`' own decode
target and fill bound."""

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision
from orchestrator.control.policies.smith import CUSHION_S, SmithPoolsAdmission

QUEUED_PER_WORKER = 2


class SmithPoolsQueued(SmithPoolsAdmission):
    name = "smith-pools-queued"

    def __init__(self, config: ControlConfig, cushion_s: float = CUSHION_S) -> None:
        super().__init__(config, cushion_s)
        self.admitted_total = 0  # the orchestrator's admissions counter, as last told

    def on_admitted(self, admitted_total: int, now_s: float) -> None:
        super().on_admitted(admitted_total, now_s)
        self.admitted_total = admitted_total

    def queue_limits(self, obs: Observation) -> dict[str, int]:
        """Calls each fill phase may still take: QUEUED_PER_WORKER a serving worker, less
        those queued there when observed and every call admitted since."""
        since = max(0, self.admitted_total - obs.admitted_total)
        room: dict[str, int] = {}
        for pool in obs.pools:
            if pool.phase != "decode":
                room[pool.phase] = (room.get(pool.phase, 0)
                                    + QUEUED_PER_WORKER * pool.workers - pool.queue_depth)
        return {phase: max(0, left - since) for phase, left in room.items()}

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        decision = super().decide(obs, now_s)
        if obs is None or decision.admit <= 0:
            return decision
        # The busy phases only (all of them where `smith-pools` names none: every fill
        # pool busy): a call for an idle pool is filled as it comes.
        limits = dict(decision.pool_limits or {})
        for phase, left in self.queue_limits(obs).items():
            if phase in limits or not decision.pool_limits:
                limits[phase] = min(limits.get(phase, left), left)
        return AdmissionDecision(decision.admit, decision.reason, pool_limits=limits)
