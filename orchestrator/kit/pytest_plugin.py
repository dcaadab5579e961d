"""pytest plugin of the stability kit (registered as `tokenfactory` in `pytest11`).

- `--kit-examples N` runs every kit property with N Hypothesis examples;
- a failing kit property reports its one paragraph (`checks.PropertyFailed`: the
  property, the measured figure, the scope, the counterexample file), no traceback;
- the `stability` fixture gives tests the kit in one object:
  `stability.run(Scenario(...))`, then `stability.no_loss(result)` and the other checks.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser) -> None:
    group = parser.getgroup("tokenfactory")
    group.addoption("--kit-examples", type=int, default=None, metavar="N",
                    help="Hypothesis examples per tokenfactory kit property")


def pytest_configure(config) -> None:
    n = config.getoption("--kit-examples", default=None)
    if n is not None:
        from orchestrator.kit import properties

        properties.EXAMPLES_OVERRIDE = n


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None:
        from orchestrator.kit.checks import PropertyFailed

        if call.excinfo.errisinstance(PropertyFailed):
            report.longrepr = str(call.excinfo.value)


class _Kit:
    from orchestrator.kit.checks import (
        bounded_buffers,
        no_faster_than_dwell,
        no_loss,
        no_reconfiguration_in_dead_band,
        oscillation_below,
        starvation_below,
    )
    from orchestrator.kit.scenario import Scenario
    from orchestrator.kit.scenario import run_scenario as run

    bounded_buffers = staticmethod(bounded_buffers)
    no_faster_than_dwell = staticmethod(no_faster_than_dwell)
    no_loss = staticmethod(no_loss)
    no_reconfiguration_in_dead_band = staticmethod(no_reconfiguration_in_dead_band)
    oscillation_below = staticmethod(oscillation_below)
    starvation_below = staticmethod(starvation_below)
    run = staticmethod(run)


@pytest.fixture
def stability() -> _Kit:
    return _Kit()
