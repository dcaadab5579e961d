"""The admission interface: what a fast-loop policy observes, decides and may say why.

A policy is a small state machine with no I/O and no clock of its own:
`decide(observation, now_s) -> AdmissionDecision`. The shell calls it once per
fast-loop period with the (lagged) observation and releases that many calls
from the admission queue. Built-in and user policies use exactly this.

Idle spans. When nothing is queued or in flight the shell stops sampling until the
next arrival; the observations it would have taken differ only in their time. On
waking it brings the policy up to date for the periods it skipped: through the
policy's optional `skip_idle(obs, first_s, ticks)` when it has one (advance the state
in closed form as if `decide` had been called at `first_s`, `first_s + period`, ...,
`ticks` times, seeing `obs` restamped with each lagged sample time, and return the
last decision, or None to be ticked instead), else by calling `decide` once per
skipped period (exact, cheap next to sampling, unless a decision changes the
decode batch target: the held observation keeps the old slots until the span
ends). The skipped decisions' admissions
release nothing (the queue was empty); a decode batch target they set is applied.

The loop model. A policy may declare its linearised open loop,
`loop_model(config) -> LoopModel | None` (orchestrator.control.stability): the summary
reports its phase margin and predicted ringing period from it. A policy without the
method, or whose method returns None, has no model; a model of the wrong shape raises.

The facts that cost a walk. Two of an observation's facts are gathered by walking every
queued call or every link at each sample: each fill pool's backlog in tokens
(`PoolObservation.backlog_tokens`) and the busiest KV link's utilisation
(`Observation.kv_link_utilisation`). The shell gathers them only for a policy that
names them in its optional `observes` (`OPTIONAL_FACTS`); for any other they read 0.

Admission per fill pool. A policy that names `queue_pools` in `observes` may cap, per
fill pool, the calls of a decision's `admit` that the router would send there
(`AdmissionDecision.pool_limits`, by the pool's phase: "prefill", "midfill", "mixed"): the
shell releases the queue in order, passing over a call whose pool's cap is spent, so a
call for an idle pool does not wait behind a binding pool's. A queued call's pool is the
router's choice for it on the orchestrator's prefix cache as it is (no oracle): asked
when the call arrives, and again when it is about to be released unless its arrival's
pool had no cap left (a prefix only grows while its call waits, as earlier calls write
back, but for evictions). For any other policy the shell asks nothing and
`pool_limits` must be None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from numbers import Integral, Real
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from orchestrator.control.observe import Observation

if TYPE_CHECKING:
    from orchestrator.control.config import ControlConfig
    from orchestrator.control.stability import LoopModel


class AdmissionReason(Enum):
    """Why a policy admitted what it did (closed list; exported as a label)."""

    NO_OBSERVATION = "no_observation"  # nothing seen yet: admit nothing
    RETIREMENTS = "retirements"  # as many as decode retired
    RETALIATION = "retaliation"  # decode seen starving: fill its free slots
    RATE_MATCH = "rate_match"  # at the predicted service rate, backlog on target
    BACKLOG_HIGH = "backlog_high"  # below the service rate to drain the backlog
    BACKLOG_LOW = "backlog_low"  # above the service rate to refill the buffer
    PREDICTED_MISS = "predicted_miss"  # calls predicted to miss their target are refused
    RESERVED = "reserved"  # as many as decode slots can be reserved for (local)
    PREDICTED_ROOM = "predicted_room"  # the room the predicted present leaves (smith)
    FILL_BACKLOG = "fill_backlog"  # at the fill pools' rate, on their backlog in tokens (binding)
    KV_LINK = "kv_link"  # held to what the busiest KV link carries (binding)
    HOLD = "hold"  # nothing to admit
    ADMIT_ALL = "admit_all"  # every queued call, no admission control (admit-all)


class DecisionError(ValueError):
    """A decision of the wrong shape: names the field, the value and what was expected."""


def _integer(field: str, value: object, least: int) -> int:
    """`value` as an int if it is an integer (not a bool) >= `least`, else DecisionError.
    numpy integers are integers: a policy may compute its figures with numpy."""
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise DecisionError(f"{field}: expected an integer >= {least}, got {value!r}")
        value = int(value)
    if value < least:
        raise DecisionError(f"{field}: expected an integer >= {least}, got {value!r}")
    return value


@dataclass(frozen=True)
class AdmissionDecision:
    admit: int  # calls to release from the admission queue this period
    reason: AdmissionReason
    # Decode sequences per attention rank the decode workers should aim for; None keeps it.
    decode_target_batch: int | None = None
    # Refuse queued calls whose predicted time to first token exceeds this; None: refuse none.
    reject_ttft_above_s: float | None = None
    # Of `admit`, at most this many may be background (non-interactive) calls.
    background_limit: int | None = None
    # Calls a second the admission queue is expected to be released at, for the wait a
    # refused call is predicted (`reject_ttft_above_s`); None: this decision's `admit`
    # over the fast period.
    release_rate_per_s: float | None = None
    # Of `admit`, at most this many for each fill pool named (by phase; a pool not named:
    # no cap of its own), the queue released in order (module docstring); None: no caps.
    pool_limits: dict[str, int] | None = None

    def __post_init__(self) -> None:
        # A decision that exists is valid: the run applies it without looking again, so a
        # wrong one stops the run where the policy made it (orchestrator.run.plugin_checks).
        set_ = object.__setattr__  # numpy integers are stored as ints (`_integer`)
        admit = self.admit
        if type(admit) is not int or admit < 0:
            set_(self, "admit", _integer("admit", admit, 0))
        if not isinstance(self.reason, AdmissionReason):
            raise DecisionError(f"reason: expected an AdmissionReason, got {self.reason!r}")
        if self.decode_target_batch is not None:
            set_(self, "decode_target_batch",
                 _integer("decode_target_batch", self.decode_target_batch, 1))
        if self.background_limit is not None:
            set_(self, "background_limit", _integer("background_limit", self.background_limit, 0))
        ttft = self.reject_ttft_above_s
        if ttft is not None and (isinstance(ttft, bool) or not isinstance(ttft, Real)
                                 or math.isnan(ttft) or ttft < 0):
            raise DecisionError(f"reject_ttft_above_s: expected a number of seconds >= 0 "
                                f"(or None), got {ttft!r}")
        rate = self.release_rate_per_s
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, Real)
                                 or not math.isfinite(rate) or rate <= 0):
            raise DecisionError(f"release_rate_per_s: expected calls a second > 0 "
                                f"(or None), got {rate!r}")
        limits = self.pool_limits
        if limits is not None:
            if not isinstance(limits, dict):
                raise DecisionError(f"pool_limits: expected a dict of pool phase to calls "
                                    f"(or None), got {limits!r}")
            checked = {}
            for phase, n in limits.items():
                if not isinstance(phase, str):
                    raise DecisionError(f"pool_limits: expected pool phases as keys, "
                                        f"got {phase!r}")
                checked[phase] = _integer(f"pool_limits[{phase!r}]", n, 0)
            set_(self, "pool_limits", checked)


class PluginError(ValueError):
    """A controller that cannot be loaded or used: names it and says why, in one line."""


@runtime_checkable
class AdmissionPolicy(Protocol):
    name: str

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision: ...


@runtime_checkable
class SkipsIdle(Protocol):
    """The optional closed-form catch-up over an idle span (module docstring)."""

    def skip_idle(self, obs: Observation, first_s: float, ticks: int,
                  ) -> AdmissionDecision | None: ...


# The facts a policy reads only when it names them in `observes` (module docstring).
FILL_BACKLOG = "fill_backlog"
KV_LINKS = "kv_links"
QUEUE_POOLS = "queue_pools"  # each queued call's fill pool: `pool_limits` (module docstring)
OPTIONAL_FACTS = frozenset({FILL_BACKLOG, KV_LINKS, QUEUE_POOLS})


def observed_facts(policy: object, label: str | None = None) -> frozenset[str]:
    """The optional facts `policy` declares it reads (`observes`), checked; an error
    names `label` (the policy as the user gave it), else the policy's own `name`."""
    facts = frozenset(getattr(policy, "observes", ()))
    unknown = facts - OPTIONAL_FACTS
    if unknown:
        who = label or str(getattr(policy, "name", policy))
        raise PluginError(f"{who}: {type(policy).__name__}.observes names unknown facts "
                          f"{sorted(unknown)}; known: {sorted(OPTIONAL_FACTS)}")
    return facts


@runtime_checkable
class HasLoopModel(Protocol):
    """The optional linearised loop of a policy (module docstring)."""

    def loop_model(self, config: ControlConfig) -> LoopModel | None: ...


def loop_model_of(policy: object, config: ControlConfig) -> LoopModel | None:
    """`policy`'s linearised loop under `config`; None when it declares none. A method
    that returns anything else but None or a LoopModel is a mistake (DecisionError)."""
    from orchestrator.control.stability import LoopModel

    declare = getattr(policy, "loop_model", None)
    model = None if declare is None else declare(config)
    if model is not None and not isinstance(model, LoopModel):
        raise DecisionError(f"loop_model: expected a LoopModel or None, got {model!r}")
    return model
