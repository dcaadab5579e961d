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
    (docs/plan.md): per pool, the calls/s the plan printed for it (38.18, 48.24, 32.90;
    1,963 sessions an hour), repriced since by the per-class calibration of issue 33
    (costmodel/calibration.py; 34.71, 43.60, 27.74), and its fills split since as the
    router splits them, a call with more new tokens than cached ones on prefill
    (costmodel/fill_phase.py): the same preset now plans these, and its prefill binds."""
    cap = planned_capacity(load_model("kimi-k3-like"), load_cluster("gb200-nvl72x1"),
                           dev_sessions)
    assert cap.pools == pytest.approx({"prefill": 23.22, "midfill": 70.00, "decode": 27.74},
                                      abs=0.01)
    assert cap.binding_pool == "prefill" and cap.calls_per_s == cap.pools["prefill"]
    assert cap.sessions_per_hour == pytest.approx(1386, abs=1)


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


@pytest.mark.parametrize("arrangement", ["two-pool", "mixed"])
def test_a_planned_cluster_of_fewer_pools_gives_the_plans_own_rate(dev_sessions, arrangement):
    """Without a midfill pool every fill is prefill work; a mixed pool fills and decodes
    every call: the capacity of the written file is the plan's figure."""
    import tomllib

    from costmodel.hardware import load_hardware
    from costmodel.plan import plan_cluster
    from costmodel.plan_toml import render_cluster_toml
    from costmodel.plan_values import Targets
    from costmodel.precision import Precision
    from orchestrator.run.capacity import workload_of
    from workers.cluster_toml import cluster_from_dict

    model = load_model("gpt-oss-120b")
    plan = plan_cluster(model, load_hardware("h100"), 16, workload_of(dev_sessions),
                        Targets(4.0, 0.05), Precision.FP4, Precision.BF16,
                        arrangement=arrangement)
    cluster = cluster_from_dict(tomllib.loads(render_cluster_toml(plan, "x", "test")), "x")
    cluster.bind(model)  # it runs as written
    cap = planned_capacity(model, cluster, dev_sessions)
    assert set(cap.pools) == {"mixed" if p.choice.mixed else p.name for p in plan.pools}
    assert cap.calls_per_s == pytest.approx(plan.calls_per_s, rel=1e-9)
