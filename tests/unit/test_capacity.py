"""A cluster's planned capacity on a set of sessions (orchestrator/run/capacity.py)."""

from __future__ import annotations

import pytest

from costmodel.model import load_model
from orchestrator.run.capacity import planned_capacity, sessions_for_load
from tests.conftest import TRACE_DATA
from traces import read_sessions
from workers.cluster_toml import load_cluster


@pytest.fixture(scope="module")
def dev_sessions():
    return tuple(read_sessions([TRACE_DATA / "weka-cc-dev"], "auto"))


def test_the_planned_preset_gives_the_plans_own_figures(dev_sessions):
    """gb200-nvl72x1 was written by `tokenfactory plan` from the development traces
    (docs/plan.md): per pool, the calls/s the plan printed for it."""
    cap = planned_capacity(load_model("kimi-k3-like"), load_cluster("gb200-nvl72x1"),
                           dev_sessions)
    assert cap.pools == pytest.approx({"prefill": 38.18, "midfill": 48.24, "decode": 32.90},
                                      abs=0.01)
    assert cap.binding_pool == "decode" and cap.calls_per_s == cap.pools["decode"]
    # ~1,963 sessions an hour, as `tokenfactory plan` prints.
    assert cap.sessions_per_hour == pytest.approx(1963, abs=1)


def test_fewer_decode_slots_lower_decode_capacity(dev_sessions, tmp_path):
    from workers.cluster_toml import DATA_DIR

    text = (DATA_DIR / "gb200-nvl72x1.toml").read_text()
    small = tmp_path / "small.toml"
    small.write_text(text.replace("target_batch = 12", "target_batch = 1"))
    model = load_model("kimi-k3-like")
    full = planned_capacity(model, load_cluster("gb200-nvl72x1"), dev_sessions)
    cut = planned_capacity(model, load_cluster(str(small)), dev_sessions)
    assert cut.pools["decode"] < full.pools["decode"] / 4
    assert cut.pools["prefill"] == full.pools["prefill"]


def test_sessions_for_load_scales_the_rate_and_covers_the_window(dev_sessions):
    cap = planned_capacity(load_model("kimi-k3-like"), load_cluster("gb200-nvl72x1"),
                           dev_sessions)
    rate, repeat = sessions_for_load(cap, 2.0, 3600.0)
    assert rate == pytest.approx(2 * cap.sessions_per_hour)
    assert repeat * cap.sessions > rate  # an hour's expected starts, with room
    assert sessions_for_load(cap, 0.01, 60.0)[1] == 1
