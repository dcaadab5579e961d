"""Stability properties as ready-made tests: one line per property in a user's test file.

    from orchestrator.kit import properties as kit
    from mypkg.policies import MyAdmission

    test_bounded = kit.bounded_buffers(MyAdmission)
    test_no_loss = kit.no_loss(MyAdmission)
    test_steady = kit.oscillation_below(MyAdmission, 0.2)

Each is a Hypothesis test over the kit's scenarios (the overload properties over
`strategies.overload_scenarios`, whose bounds are their stated scope). On failure Hypothesis shrinks the
scenario; the smallest failing one is saved under `.tokenfactory/counterexamples/` and
the message names the file and the command that replays it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from orchestrator.kit import checks
from orchestrator.kit.scenario import Scenario, run_scenario
from orchestrator.kit.strategies import overload_scenarios, scenarios

COUNTEREXAMPLE_DIR = Path(".tokenfactory") / "counterexamples"


def controller_spec(controller) -> str:
    """A registered name or module:Class for what the user passed."""
    if isinstance(controller, str):
        return controller
    return f"{controller.__module__}:{controller.__qualname__}"


EXAMPLES_OVERRIDE: int | None = None  # set by the pytest plugin's --kit-examples


def _property(name: str, controller, strategy, check: Callable, max_examples: int):
    spec = controller_spec(controller)
    max_examples = EXAMPLES_OVERRIDE or max_examples
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{name}-{spec}")

    # No example database: every property shares this function's source, hence its
    # database key, so one property's saved failures (retire's, which the kit expects)
    # would be replayed by the next and a run's outcome would depend on the order the
    # tests ran in. The kit keeps counterexamples in its own files instead.
    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def test(scenario: Scenario) -> None:
        result = run_scenario(scenario)
        try:
            check(result)
        except checks.StabilityViolation as exc:
            path = scenario.save(COUNTEREXAMPLE_DIR / f"{slug}.json")
            raise checks.StabilityViolation(
                f"{spec}: {exc}; counterexample: {path} (replay it: tokenfactory replay "
                f"--from-counterexample {path})") from None

    test.__name__ = f"test_{name}"
    return test


def bounded_buffers(controller, max_examples: int = 50):
    """Below 90% of capacity, buffers stay under the derived bound (docs/metrics.md)."""
    return _property("bounded_buffers", controller,
                     scenarios(controller_spec(controller), load=(0.1, 0.9), perturb=False),
                     checks.bounded_buffers, max_examples)


def no_loss(controller, max_examples: int = 50):
    """Whatever the traffic and perturbation, every call completes or is rejected, once."""
    return _property("no_loss", controller,
                     scenarios(controller_spec(controller), load=(0.1, 1.5)),
                     checks.no_loss, max_examples)


def no_flapping(controller, max_examples: int = 25):
    """The slow loop: no move inside the dead band, none faster than the dwell time."""

    def both(result):
        checks.no_reconfiguration_in_dead_band(result)
        checks.no_faster_than_dwell(result)

    return _property("no_flapping", controller,
                     scenarios(controller_spec(controller), load=(0.1, 2.0), realloc=True),
                     both, max_examples)


def oscillation_below(controller, max_index: float = 0.25, max_examples: int = 25):
    """In sustained overload on decode, decode occupancy's oscillation index stays low.

    Scope: `strategies.overload_scenarios` (docs/plugins.md, "Scope of the overload
    properties"): bursts, varied outputs, agent sessions, an observation lag up to 5 s,
    slower storage, a biased predictor, a decode worker lost (occupancy is over the
    slots still serving: a lost worker's draining sequences are not counted)."""
    scenarios_ = overload_scenarios(controller_spec(controller))
    return _property("oscillation_below", controller, scenarios_,
                     lambda r: checks.oscillation_below(r, max_index), max_examples)


def starvation_below(controller, max_fraction: float = 0.05, max_examples: int = 25):
    """In sustained overload on decode, decode never idles below half its slots while
    work waits for it. Scope: `strategies.overload_scenarios`, a decode worker lost too."""
    return _property("starvation_below", controller,
                     overload_scenarios(controller_spec(controller)),
                     lambda r: checks.starvation_below(r, max_fraction), max_examples)
