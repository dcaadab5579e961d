"""`local`: today's engines' admission, at every event, with decode slots reserved.

What SGLang's prefill-decode disaggregation and vLLM's scheduler do, seen from the
orchestrator: the scheduler decides with its own state, not with scraped metrics (no
observation lag), at every event rather than on a period (a call arriving, a call
finishing), and admits a call only when a decode slot can be reserved for it: every
call admitted and not yet decoding holds one. SGLang's decode server preallocates a
request's KV before its prefill is sent (`DecodePreallocQueue` in
https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/disaggregation/decode.py;
https://docs.sglang.io/advanced_features/pd_disaggregation.html); vLLM's scheduler
admits a waiting request when its KV blocks can be allocated
(https://docs.vllm.ai/en/latest/design/architecture.html). Here the KV half of that
reservation is the decode workers' own: a call joins a decode batch only when its
input KV plus a reserve for the tokens it will generate fits (workers.kv_budget), else
it waits in the ready buffer.

The shell calls `decide` on every arrival and completion with a fresh observation
(`event_driven`), as well as once per fast-loop period.
"""

from __future__ import annotations

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason

_HOLD = AdmissionDecision(0, AdmissionReason.HOLD)


class LocalAdmission:
    name = "local"
    event_driven = True  # decide on every arrival and completion, on the cluster as it is

    def __init__(self, config: ControlConfig) -> None:
        self.config = config

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(0, AdmissionReason.NO_OBSERVATION)
        reserved = obs.decode_running + obs.backlog  # decoding, or admitted and on its way
        free = obs.decode_slots - reserved
        if free <= 0:
            return _HOLD
        return AdmissionDecision(free, AdmissionReason.RESERVED)

    def skip_idle(self, obs: Observation, first_s: float, ticks: int) -> AdmissionDecision:
        """Exact: no state, so the decision on an unchanged observation repeats."""
        return self.decide(obs, first_s)

    def loop_model(self, config: ControlConfig) -> None:
        """None: it decides at every event on the cluster as it is, with no periodic
        loop or lag to linearise."""
        return None
