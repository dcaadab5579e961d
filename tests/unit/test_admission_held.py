"""What an admission decision leaves queued: decode starvation counts only held-back work,
and the admission bound fraction says how often the decision bound (docs/metrics.md)."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from orchestrator.kit import strategies as kit_st
from orchestrator.kit.scenario import Scenario, run_scenario
from orchestrator.run.metrics import Metrics
from orchestrator.run.metrics_listener import MetricsListener
from orchestrator.run.summary import admission_bound, starvation, window_mask


def light(controller: str) -> object:
    """Poisson arrivals at 30% of the kit cluster's capacity: each period's arrivals fit
    what either controller admits, so nothing should stay queued after a decision."""
    rate = 0.3 * kit_st.capacity_calls_per_s(2048, 64)
    arrivals = kit_st.arrival_times("poisson", rate, 120, np.random.default_rng(3))
    return run_scenario(Scenario(controller=controller, arrivals_s=arrivals))


def heavy(controller: str) -> object:
    """Twice the kit cluster's capacity for 60 s: decode binds, admission holds calls."""
    rate = 2.0 * kit_st.capacity_calls_per_s(2048, 256)
    arrivals = kit_st.arrival_times("poisson", rate, round(rate * 60), np.random.default_rng(4))
    return run_scenario(Scenario(controller=controller, arrivals_s=arrivals, output_tokens=256))


@pytest.mark.parametrize("controller", ["retire", "buffered"])
def test_calls_admitted_at_once_are_not_held_back(controller):
    result = light(controller)
    s, w = result.series, window_mask(result)
    # Calls arrived between samples (the queue each decision faced) ...
    assert (s.array("admission_queue")[w] > 0).mean() > 0.3
    # ... and the decisions admitted them (retire, seeing decode 2 s late, held calls
    # once): decode runs at ~16% of its slots, yet it is not counted as starved while
    # nothing is held back (sampled before the decisions, the queue read 0.69).
    assert admission_bound(result) < 0.05
    assert starvation(result) <= admission_bound(result)
    if controller == "buffered":
        assert (s.array("held")[w] == 0).all()


@pytest.mark.parametrize("controller", ["retire", "buffered"])
def test_under_overload_admission_binds(controller):
    result = heavy(controller)
    s = result.series
    held, faced = s.array("held"), s.array("admission_queue")
    assert (held <= faced).all()  # a decision only takes calls out of the queue
    assert admission_bound(result) > 0.5
    # upstream_waiting is what was held plus the ready buffer, sample by sample
    assert (s.array("upstream_waiting") == held + s.array("ready_depth")).all()


def test_the_starved_gauge_follows_the_summarys_condition():
    """The counter of starved seconds adds a period for every sample the summary's
    condition counts (the first sample ends no period; the last has no decision)."""
    registry = CollectorRegistry()
    listener = MetricsListener(Metrics(registry), "retire-seed0", "retire")
    rate = 2.0 * kit_st.capacity_calls_per_s(2048, 256)
    arrivals = kit_st.arrival_times("poisson", rate, round(rate * 60), np.random.default_rng(4))
    result = run_scenario(Scenario(controller="retire", arrivals_s=arrivals, output_tokens=256),
                          listeners=[listener])
    s = result.series
    starved = ((s.array("decode_running") < 0.5 * s.array("decode_slots"))
               & (s.array("upstream_waiting") > 0))[1:-1]
    seconds = registry.get_sample_value("tokenfactory_decode_starved_seconds_total",
                                        {"run": "retire-seed0", "controller": "retire"})
    assert starved.sum() > 0
    assert seconds == pytest.approx(starved.sum() * result.control.fast_period_s)
