"""Live mode under load (benchmarks/bench_live.py): 1,000 concurrent sessions on the
two-rack preset's workers in four worker processes for 60 wall seconds. The fast
loop's period jitter stays under 5 ms at p99 and the orchestrator's memory is flat
over the second half. Marked slow: it runs a minute."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_live.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_live", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_minute_of_1000_live_sessions_keeps_the_fast_loop_on_time_and_memory_flat():
    out = load_bench().run_load(wall_s=60.0, sessions=1000, speed=10.0, workers_per_process=2)
    print(out)
    assert out["sessions"] == 1000 and out["processes"] == 4
    assert out["lost"] == 0 and out["calls_completed"] > 0
    assert out["jitter_ms"]["p99"] < 5.0
    # Flat: under 2% growth of the orchestrator's resident memory over the second half.
    assert out["orchestrator_rss_growth_second_half_mb"] < 0.02 * out["orchestrator_rss_mb"][-1]
    assert out["control_events_per_s"] > 0
