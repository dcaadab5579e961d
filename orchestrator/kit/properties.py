"""Stability properties as ready-made tests: one line per property in a user's test file.

    from orchestrator.kit import properties as kit
    from mypkg.policies import MyAdmission

    test_bounded = kit.bounded_buffers(MyAdmission)
    test_no_loss = kit.no_loss(MyAdmission)
    test_steady = kit.oscillation_below(MyAdmission, 0.2)

Each is a Hypothesis test over the kit's scenarios (the overload properties over
`scopes.scoped_scenarios` in the scope they are given: decode-bound by default,
fill-bound, or with lulls). On failure Hypothesis shrinks the scenario; the smallest
failing one is saved under `.tokenfactory/counterexamples/` and the test fails with one
short paragraph (`checks.PropertyFailed`): the property, the measured figure against
its bound, the scope, the counterexample file and the command that replays it. The
drawn scenario itself (hundreds of arrival times and output lengths) is not printed:
it is in the file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings

from orchestrator.kit import checks
from orchestrator.kit.scenario import Scenario, run_scenario
from orchestrator.kit.scopes import OverloadScope, scoped_scenarios
from orchestrator.kit.strategies import scenarios

COUNTEREXAMPLE_DIR = Path(".tokenfactory") / "counterexamples"


def controller_spec(controller) -> str:
    """A registered name or module:Class for what the user passed."""
    if isinstance(controller, str):
        return controller
    return f"{controller.__module__}:{controller.__qualname__}"


EXAMPLES_OVERRIDE: int | None = None  # set by the pytest plugin's --kit-examples


def _property(name: str, controller, strategy, check: Callable, max_examples: int,
              scope: str, variant: str = ""):
    """`scope`: the scenarios' scope in words; `variant`: in the counterexample file's
    name after the property's (a scope other than the default)."""
    spec = controller_spec(controller)
    max_examples = EXAMPLES_OVERRIDE or max_examples
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(filter(None, (name, variant, spec))))

    # No example database: every property shares this function's source, hence its
    # database key, so one property's saved failures (retire's, which the kit expects)
    # would be replayed by the next and a run's outcome would depend on the order the
    # tests ran in. The kit keeps counterexamples in its own files instead. One bug
    # reported (the smallest), and no "explain" phase: the failure is one paragraph.
    @settings(max_examples=max_examples, deadline=None, database=None,
              report_multiple_bugs=False,
              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def explore(scenario: Scenario) -> None:
        result = run_scenario(scenario)
        try:
            check(result)
        except checks.StabilityViolation as exc:
            path = scenario.save(COUNTEREXAMPLE_DIR / f"{slug}.json")
            raise checks.PropertyFailed.of(exc, name, spec, scope, str(path),
                                           f"{path.stat().st_size:,} bytes: "
                                           f"{scenario.brief()}") from None

    def test() -> None:
        __tracebackhide__ = True  # pytest: the paragraph, not this frame
        try:
            explore()
        except checks.PropertyFailed as exc:
            # A fresh exception: Hypothesis notes the drawn scenario on the one it raises
            # (every arrival time and output length, hundreds of lines); the file has it.
            raise checks.PropertyFailed(str(exc), exc.prop, exc.controller, exc.scope,
                                        exc.path, exc) from None

    test.__name__ = f"test_{name}"
    return test


def bounded_buffers(controller, max_examples: int = 50):
    """Below 90% of capacity, buffers stay under the derived bound (docs/metrics.md).

    It bounds from above: the admission queue, admitted backlog and ready buffer never
    hold more than ceil(B*) plus the arrivals of any window of L + 2T. It does not catch
    a policy that admits too little (one call a period, say): its queue, of at most 40
    calls a scenario, stays under that bound. `starvation_below` fails such a policy."""
    return _property("bounded_buffers", controller,
                     scenarios(controller_spec(controller), load=(0.1, 0.9), perturb=False),
                     checks.bounded_buffers, max_examples,
                     "10-90% of capacity, open-loop or agent sessions, unperturbed")


def no_loss(controller, max_examples: int = 50):
    """Whatever the traffic and perturbation, every call completes or is rejected, once."""
    return _property("no_loss", controller,
                     scenarios(controller_spec(controller), load=(0.1, 1.5)),
                     checks.no_loss, max_examples,
                     "10-150% of capacity, open-loop or agent sessions, perturbed")


def no_flapping(controller, max_examples: int = 25):
    """The slow loop: no move inside the dead band, none faster than the dwell time."""

    def both(result):
        checks.no_reconfiguration_in_dead_band(result)
        checks.no_faster_than_dwell(result)

    return _property("no_flapping", controller,
                     scenarios(controller_spec(controller), load=(0.1, 2.0), realloc=True),
                     both, max_examples, "10-200% of capacity, slow loop on, perturbed")


def oscillation_below(controller, max_index: float = 0.25, max_examples: int = 25,
                      scope: OverloadScope | str = OverloadScope.DECODE_BOUND):
    """In sustained overload, decode occupancy's oscillation index stays low.

    Scope (`scopes.OverloadScope`; docs/plugins.md, "Scope of the overload properties"):
    decode-bound by default (`strategies.overload_scenarios`: bursts, varied outputs,
    agent sessions, an observation lag up to 5 s, slower storage, a biased predictor, a
    decode worker lost), or fill-bound, or with lulls. docs/plugins.md has which
    built-in controllers hold it in which scope."""
    scope = OverloadScope(scope)
    return _property("oscillation_below", controller,
                     scoped_scenarios(controller_spec(controller), scope),
                     lambda r: checks.oscillation_below(r, max_index), max_examples,
                     scope.describe(), _variant(scope))


def starvation_below(controller, max_fraction: float = 0.05, max_examples: int = 25,
                     scope: OverloadScope | str = OverloadScope.DECODE_BOUND):
    """In sustained overload, decode never idles below half its slots while work waits
    for it. Scope: as `oscillation_below`'s."""
    scope = OverloadScope(scope)
    return _property("starvation_below", controller,
                     scoped_scenarios(controller_spec(controller), scope),
                     lambda r: checks.starvation_below(r, max_fraction), max_examples,
                     scope.describe(), _variant(scope))


def _variant(scope: OverloadScope) -> str:
    return "" if scope is OverloadScope.DECODE_BOUND else scope.value
