"""`tokenfactory demo`, as the README's first command runs it.

The demo runs at a point of the control experiment (docs/control.md): the rack-scale
preset with 32 decode slots, four times its planned capacity, observation lag 5 s, think
gaps x0.02. What it claims there, and the slow test checks: admission binds (calls wait
after its decisions in a large share of the periods), `retire` rings (its oscillation
index at least 3x `buffered`'s, its measured ringing period within +-30% of the period its
linearised loop predicts), `buffered`'s goodput and p99 TTFT are no worse, and no call is
lost.
"""

import json

import pytest

from orchestrator.cli import main
from orchestrator.run.demo import DEMO_CONTROLLERS, binding_decisions, oscillation_ratio


def test_binding_decisions_counts_decisions_that_admitted_fewer_than_were_queued():
    queued = [1, 5, 3, 0, 2]
    admits = [0, 5, 1, 0, 2]
    reasons = ["no_observation", "rate_match", "backlog_high", "hold", "retirements"]
    # The third decision admitted 1 of the 3 queued; the first admitted nothing before any
    # observation arrived, as every controller does, and is not counted.
    assert binding_decisions(queued, admits, reasons) == 1
    assert binding_decisions(queued, [1, 5, 3, 0, 2], reasons) == 0
    assert binding_decisions(queued, [0, 4, 1, 0, 0], reasons) == 3


@pytest.mark.slow
def test_demo_at_its_point_retire_rings_buffered_holds_and_nothing_is_lost(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--json", "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    runs = printed["controllers"]
    assert list(runs) == list(DEMO_CONTROLLERS)
    for name, s in runs.items():
        req = s["requests"]
        assert req["lost"] == 0 and req["ledger"]["lost"] == 0, name
        assert req["completed"] == req["submitted"] > 0, name
        assert (out / f"{name}-summary.json").exists() and (out / f"{name}-series.csv").exists()
        # Decode is loaded: 0.73-0.82 of its slots on average measured.
        assert s["control"]["decode_occupancy_mean"] >= 0.6, name
    r, b = runs["retire"], runs["buffered"]
    # The loop is closed: retire's decisions left calls queued in 41% of the periods.
    assert r["control"]["admission_bound_fraction"] >= 0.3
    # retire rings: 3.07x buffered's oscillation index measured; its Welch peak 18.3 s
    # against 23.6 s predicted (-23%). (4.13x, 15.1 s against 21.0 s before DP attention
    # was priced per rank, issue 33; 1.57x with the placement but without each rank's
    # share of the step's chunk budget: docs/demo.md.)
    assert oscillation_ratio(r, b) >= 3.0
    ring = r["control"]["ringing_period_s"]
    assert 0.7 * ring["predicted"] <= ring["measured"] <= 1.3 * ring["predicted"]
    # buffered no worse: goodput 1,614 against 1,322 tokens/s, p99 TTFT 10.5 against 15.6 s.
    assert b["goodput"]["output_tokens_per_s"] >= r["goodput"]["output_tokens_per_s"]
    assert b["ttft_s"]["p99"] <= r["ttft_s"]["p99"]
    assert printed["load"]["load"] == 4.0 and printed["load"]["binding_pool"] == "decode"
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "oscillation index" in html


def test_demo_json_names_the_load_it_used_and_each_controllers_summary(tmp_path, capsys):
    """A tiny load (one session) on the bundled sample: the shape of `demo --json` and a
    load relative to the cluster's planned capacity."""
    from orchestrator.run.demo import DEMO_CLUSTER, DEMO_POINT

    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--json", "--no-progress", "--load", "1.0",
                 "--duration", "60", "--max-sessions", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"load", "controllers"}
    load = printed["load"]
    assert load["cluster"] == DEMO_CLUSTER and load["load"] == 1.0
    assert load["sessions_per_hour"] == pytest.approx(load["capacity_sessions_per_hour"])
    assert load["observation_lag_s"] == DEMO_POINT.observation_lag_s
    assert load["think_scale"] == DEMO_POINT.think_scale
    assert load["why"]["load"] == "set by --load"
    assert load["why"]["think_scale"] == DEMO_POINT.why_think
    assert list(printed["controllers"]) == list(DEMO_CONTROLLERS)
    for summary in printed["controllers"].values():
        assert summary["requests"]["sessions"] == 1 and summary["requests"]["lost"] == 0


def test_demo_refuses_bad_options_in_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "--load", "-1"])
    assert info.value.code == 2
    assert main(["demo", "/no/such/trace", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tokenfactory demo: error: /no/such/trace")


def test_binding_decisions_read_from_a_series_skip_the_final_sample(tmp_path):
    """The run's last sample is taken as it ends: no decision follows it, its admit is
    empty in series.csv."""
    from orchestrator.run.demo import run_binding_decisions

    (tmp_path / "x-series.csv").write_text(
        "time_s,admission_queue,admit,reason\n0,0,0,no_observation\n1,5,2,rate_match\n"
        "2,3,3,rate_match\n3,4,,\n")
    assert run_binding_decisions(tmp_path, "x") == 1


def test_a_load_that_starts_no_session_still_gives_a_summary(tmp_path, capsys):
    """60 sessions an hour for 60 s, seed 1: the Poisson process starts none. The summary
    has no energy per call (null, not NaN, which JSON cannot hold)."""
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--json", "--no-progress",
                 "--sessions-per-hour", "60", "--duration", "60", "--max-sessions", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["load"]["why"]["load"] == "set by --sessions-per-hour"
    for summary in printed["controllers"].values():
        assert summary["requests"]["sessions"] == 0
        assert summary["energy"]["joules_per_call"] is None
