"""The run's peak HBM per GPU (`HbmPeak`, kept as each worker's largest figures) is the
largest `hbm_per_gpu` the cluster showed at any sample, under each KV policy."""

import pytest

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.sampler import hbm_per_gpu
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock
from workers.kv_policy import KVPolicy

LLAMA = load_model("llama-3.1-70b")


class _EverySample:
    """Prices the cluster's HBM per GPU at every sample, as the fast loop did."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def on_sample(self, orch, obs, now_s: float) -> None:
        self.values.append(hbm_per_gpu(orch.runtime, orch.weights_per_gpu))


@pytest.mark.parametrize("kv_policy", list(KVPolicy))
def test_peak_is_the_largest_sampled_value(kv_policy):
    control = ControlConfig(realloc_enabled=False)
    probe = _EverySample()
    orch = Orchestrator(small_cluster().bind(LLAMA), short_agent_sessions(6, 8, seed=5),
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1,
                        listeners=[probe], kv_policy=kv_policy)
    result = VirtualClock().run(orch.run())
    assert len(probe.values) > 10
    assert max(probe.values) > max(orch.weights_per_gpu.values())  # KV was held
    assert result.peak_hbm_bytes_per_gpu == max(probe.values)
