"""The essay's central claim on the development traces, at the load orchestrator.demo
documents: admission on decode retirements rings, buffered admission holds decode steady."""

import pytest

from orchestrator.demo import DEV_CLUSTER, DEV_LOAD
from orchestrator.run import RunSettings, prepare, run_replay
from tests.conftest import SHARED

DEV = SHARED / "traces" / "weka-cc-dev"


@pytest.mark.slow
def test_retire_rings_and_buffered_holds_steady_on_the_dev_traces():
    base = RunSettings(cluster=DEV_CLUSTER, load=DEV_LOAD, seed=1)
    prepared = prepare([DEV], "weka", base)
    runs = {}
    for name in ("retire", "buffered"):
        settings = RunSettings(cluster=DEV_CLUSTER, load=DEV_LOAD, seed=1, controller=name)
        runs[name] = run_replay(prepared, settings)[1]
    r, b = runs["retire"], runs["buffered"]
    assert r["requests"]["lost"] == 0 and b["requests"]["lost"] == 0
    assert r["requests"]["completed"] == b["requests"]["completed"] == r["requests"]["submitted"]
    ratio = r["control"]["oscillation_index"] / b["control"]["oscillation_index"]
    assert ratio >= 3.0, f"oscillation index ratio {ratio:.2f}"
    assert b["control"]["decode_starvation_fraction"] < r["control"]["decode_starvation_fraction"]
    assert b["goodput"]["output_tokens_per_s"] >= r["goodput"]["output_tokens_per_s"]
    assert b["ttft_s"]["p99"] <= r["ttft_s"]["p99"]
