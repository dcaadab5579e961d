"""A replay collects its young garbage less often while it runs, and leaves the
collector's settings as they were."""

import gc

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.collector import GC_YOUNG_THRESHOLD
from orchestrator.run.replay import Orchestrator
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock


class _Thresholds:
    def __init__(self):
        self.seen = set()

    def on_sample(self, orch, obs, now_s):
        self.seen.add(gc.get_threshold())


def _replay(heard):
    control = ControlConfig()
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")),
                        short_agent_sessions(2, 3, seed=1), make_policy("retire", control, 4),
                        control, LoadOptions(sessions_per_hour=600, think_scale=0.2), 1,
                        listeners=[heard])
    return VirtualClock().run(orch.run())


def test_the_young_threshold_is_raised_for_the_run_and_restored():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        heard = _Thresholds()
        result = _replay(heard)
        assert len(result.requests) > 0
        assert heard.seen == {(GC_YOUNG_THRESHOLD, 10, 10)}
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(0, 10, 10)  # collection switched off stays off
        heard = _Thresholds()
        _replay(heard)
        assert heard.seen == {(0, 10, 10)}
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_what_the_run_keeps_goes_to_the_oldest_generation_and_a_freeze_stays():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        result = _replay(_Thresholds())
        # Promoted as it stood when the run ended, not left young for a collection to walk.
        assert any(o is result.series for o in gc.get_objects(generation=2))
        assert gc.get_freeze_count() == 0
        kept = [object()]
        gc.freeze()  # the caller's own frozen objects stay frozen through a replay
        _replay(_Thresholds())
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # not back in a generation
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
