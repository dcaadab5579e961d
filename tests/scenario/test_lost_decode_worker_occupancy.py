"""A lost decode worker: occupancy is over the slots still serving, and the sequences the
lost worker finishes are reported apart (`Observation.decode_draining`).

Occupancy used to count every decode worker's sequences against the accepting workers'
slots, so while a lost worker drained it read up to 2 and the oscillation property had to
leave that perturbation out of its scope. The counts here are checked against the decode
workers themselves, walked at each sample, not against the sampler's own figures.
"""

import numpy as np

from orchestrator.control.observe import Observation
from orchestrator.kit.scenario import Scenario, run_scenario

LOSS_S = 20.0


class _LoseAndCount:
    """At each sample: the sequences running on accepting and on draining decode workers,
    counted on the workers, beside what the observation says; then, at `loss_s`, one
    decode worker lost (drained as the kit's scenarios drain one: it stops accepting and
    finishes what it runs), after the sample that was taken before it."""

    def __init__(self, loss_s):
        self.loss_s, self.rows = loss_s, []

    def on_sample(self, orch, obs, now_s):
        workers = list(orch.runtime.decode_workers.values())
        serving = sum(w.sequences_running() for w in workers if w.accepting)
        draining = sum(w.sequences_running() for w in workers if not w.accepting)
        slots = sum(w.target_batch for w in workers if w.accepting)
        self.rows.append((now_s, serving, draining, slots, obs.decode_running,
                          obs.decode_draining, obs.decode_slots))
        if self.loss_s is not None and now_s >= self.loss_s:
            workers[-1].accepting = False
            self.loss_s = None


def test_occupancy_stays_within_the_serving_slots_while_a_lost_worker_drains():
    # 1,024-token outputs at about twice the kit cluster's decode capacity: both decode
    # workers full when one is lost at 20 s, its sequences then finish over ~20 s.
    arrivals = tuple(float(t) for t in np.round(np.arange(0.0, 40.0, 0.25), 3))
    scenario = Scenario(arrivals_s=arrivals, output_tokens=1024, observation_lag_s=0.0)
    seen = _LoseAndCount(LOSS_S)
    result = run_scenario(scenario, listeners=[seen])
    rows = np.asarray(seen.rows)
    time_s, serving, draining, slots = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    obs_running, obs_draining, obs_slots = rows[:, 4], rows[:, 5], rows[:, 6]
    # The observation's figures are the workers' own, split by accepting or not.
    assert np.array_equal(obs_running, serving)
    assert np.array_equal(obs_draining, draining)
    assert np.array_equal(obs_slots, slots)
    # The loss happened and left sequences draining: 4 slots of 8 still serve.
    assert draining[time_s <= LOSS_S].max() == 0
    assert draining.max() > 0
    assert slots[time_s <= LOSS_S].min() == 8 and slots[-1] == 4
    # Occupancy over the serving slots never reads above 1, and the series reports the
    # draining sequences.
    occupancy = result.series.array("decode_occupancy")
    assert occupancy.max() <= 1.0
    assert occupancy[result.series.array("time_s") > LOSS_S].max() == 1.0
    assert result.series.array("decode_draining").max() == draining.max()


def test_an_observation_built_without_the_draining_count_still_builds():
    """Observation is public (tokenfactory.Observation): the new field is last, with a
    default, so a controller's tests that build observations positionally still work."""
    obs = Observation(0.0, 0, 0, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0, 1.0, 2.0, ())
    assert obs.decode_draining == 0 and obs.decode_occupancy == 0.75
