"""`tokenfactory demo`, as the README's first command runs it.

The demo runs at a point of the control experiment (docs/control.md): the rack-scale
preset with 32 decode slots, observation lag 5 s, think gaps x0.02, at the load its rule
finds for the traces given (`DEMO_RULE`: the smallest of 1-8x the planned capacity at
which retire's admission binds in at least half its periods). What it claims there, and
the slow test checks: the load is the rule's, `retire` rings (its oscillation index at
least 3x `buffered`'s), `buffered`'s goodput and p99 TTFT are no worse than `retire`'s,
`smith`'s (lagged, compensated) no worse than `local`'s with 3x less oscillation than
`retire`, and no call is lost. `smith` is an entry point: the package must be installed
again for the demo to find it.
"""

import json

import pytest

from orchestrator.cli import main
from orchestrator.run.demo import (
    DEMO_CONTROLLERS,
    DEMO_RULE_LOADS,
    DEMO_RULE_SHARE,
    binding_decisions,
    choose_load,
    demo_claims,
    oscillation_ratio,
)


def test_the_rule_takes_the_smallest_load_that_binds_probing_in_increasing_order():
    shares = {1.0: 0.0, 1.5: 0.1, 2.0: None, 3.0: 0.49, 4.0: 0.5, 6.0: 0.9, 8.0: 0.2}
    asked = []

    def at(load):
        asked.append(load)
        return shares[load]

    load, probes, found = choose_load(at)
    assert (load, found) == (4.0, True)
    assert asked == [1.0, 1.5, 2.0, 3.0, 4.0]  # stops at the first that binds
    assert [p.bound_fraction for p in probes] == [0.0, 0.1, None, 0.49, 0.5]
    # Nowhere binding: the largest load, and it says it did not find one.
    load, probes, found = choose_load(lambda _load: 0.2)
    assert (load, found, len(probes)) == (max(DEMO_RULE_LOADS), False, len(DEMO_RULE_LOADS))


def test_binding_decisions_counts_decisions_that_admitted_fewer_than_were_queued():
    queued = [1, 5, 3, 0, 2]
    admits = [0, 5, 1, 0, 2]
    reasons = ["no_observation", "rate_match", "backlog_high", "hold", "retirements"]
    # The third decision admitted 1 of the 3 queued; the first admitted nothing before any
    # observation arrived, as every controller does, and is not counted.
    assert binding_decisions(queued, admits, reasons) == 1
    assert binding_decisions(queued, [1, 5, 3, 0, 2], reasons) == 0
    assert binding_decisions(queued, [0, 4, 1, 0, 0], reasons) == 3


@pytest.mark.slow(seconds=180)
def test_demo_at_its_point_retire_rings_buffered_holds_and_nothing_is_lost(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--json", "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    load, runs = printed["load"], printed["controllers"]
    # The load is the rule's: the smallest probed at which retire binds in at least half
    # its periods (6x on the bundled sample: 55% there, 28% at 4x), every smaller one below.
    search = load["search"]
    assert load["rule_found"] and load["load"] == search[-1]["load"]
    assert search[-1]["retire_bound_fraction"] >= DEMO_RULE_SHARE
    assert all(p["retire_bound_fraction"] is None or p["retire_bound_fraction"] < DEMO_RULE_SHARE
               for p in search[:-1])
    assert [p["load"] for p in search] == sorted(p["load"] for p in search)
    assert load["binding_pool"] == "decode"
    # The probe was the demo's own retire run: the same figure.
    assert runs["retire"]["control"]["admission_bound_fraction"] == pytest.approx(
        search[-1]["retire_bound_fraction"])
    assert list(runs) == list(DEMO_CONTROLLERS)
    for name, s in runs.items():
        req = s["requests"]
        assert req["lost"] == 0 and req["ledger"]["lost"] == 0, name
        assert req["completed"] == req["submitted"] > 0, name
        assert (out / f"{name}-summary.json").exists() and (out / f"{name}-series.csv").exists()
        # Decode is loaded at the rule's point.
        assert s["control"]["decode_occupancy_mean"] >= 0.6, name
    r, b = runs["retire"], runs["buffered"]
    # retire rings: its oscillation index at least 3x buffered's, at the period its
    # linearised loop predicts (within 30%).
    assert oscillation_ratio(r, b) >= 3.0
    ring = r["control"]["ringing_period_s"]
    assert 0.7 * ring["predicted"] <= ring["measured"] <= 1.3 * ring["predicted"]
    # buffered no worse than retire on goodput and p99 TTFT.
    assert b["goodput"]["output_tokens_per_s"] >= r["goodput"]["output_tokens_per_s"]
    assert b["ttft_s"]["p99"] <= r["ttft_s"]["p99"]
    # Delay compensation (issue 37): smith, lagged 5 s, no worse than local (unlagged) on
    # goodput and p99 TTFT, and at least 3x less oscillation than retire. Measured on the
    # sample at 6x: 1,032 against 925 tokens/s, 21.52 against 23.17 s, 3.35x (docs/demo.md).
    sm, lo = runs["smith"], runs["local"]
    assert sm["goodput"]["output_tokens_per_s"] >= lo["goodput"]["output_tokens_per_s"]
    assert sm["ttft_s"]["p99"] <= lo["ttft_s"]["p99"]
    assert oscillation_ratio(r, sm) >= 3.0
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


def test_without_load_the_demo_searches_and_says_so_when_nothing_binds(tmp_path, capsys):
    """One session: retire's admission never binds, so every load of the rule is probed
    and the largest taken, the JSON saying it was not found."""
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--json", "--no-progress", "--duration", "60",
                 "--max-sessions", "1"]) == 0
    captured = capsys.readouterr()
    load = json.loads(captured.out)["load"]
    assert [p["load"] for p in load["search"]] == list(DEMO_RULE_LOADS)
    assert load["load"] == max(DEMO_RULE_LOADS) and load["rule_found"] is False
    assert load["rule"].startswith("the smallest of 1, 1.5, 2, 3, 4, 6 and 8 times")
    assert load["why"]["load"].startswith("the demo's rule")
    assert captured.err.count("demo: searching the load: retire at") == len(DEMO_RULE_LOADS)


def test_demo_refuses_bad_options_in_one_line(capsys, tmp_path, monkeypatch):
    # The default --out is ./demo-out, which `make demo` leaves in the checkout: run where
    # it is not, so the error said is the missing trace's.
    monkeypatch.chdir(tmp_path)
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


def _summary(osc, predicted=None, measured=None, goodput=1000.0, p99=10.0, lost=0):
    return {"control": {"oscillation_index": osc,
                        "ringing_period_s": {"predicted": predicted, "measured": measured}},
            "goodput": {"output_tokens_per_s": goodput}, "ttft_s": {"p99": p99},
            "requests": {"lost": lost}}


def test_the_demos_claims_are_judged_at_their_stated_bounds():
    """Each claim holds at its bound and not past it: the ringing within 30% of the
    prediction, the oscillation ratios at 3x, no worse service, nothing lost."""
    def runs(measured=26.0, retire_osc=0.375, buffered=None, smith=None, lost=0):
        return {"retire": _summary(retire_osc, 20.0, measured, 900.0, 20.0, lost),
                "buffered": buffered or _summary(0.125, goodput=1000.0, p99=15.0),
                "local": _summary(0.125, goodput=1000.0, p99=12.0),
                "smith": smith or _summary(0.125, goodput=1000.0, p99=12.0)}

    def verdicts(**kw):
        return [c.holds for c in demo_claims(runs(**kw))]

    assert verdicts() == [True] * 6  # ringing 26 s against 20 s (+30%), both ratios 3x
    assert verdicts(measured=26.2) == [False, True, True, True, True, True]
    assert verdicts(measured=None)[0] is False  # no peak: no ringing
    assert verdicts(retire_osc=0.37)[1:5:3] == [False, False]  # both ratios under 3x
    worse_p99 = _summary(0.125, goodput=1000.0, p99=20.5)
    assert verdicts(buffered=worse_p99)[2] is False
    less_goodput = _summary(0.125, goodput=999.0, p99=12.0)
    assert verdicts(smith=less_goodput)[3] is False
    assert verdicts(lost=1)[5] is False
    claims = demo_claims(runs(lost=1))
    assert claims[5].figures == "retire 1, buffered 0, local 0, smith 0"
    assert claims[0].figures == "measured 26.0 s, predicted 20.0 s"
    none_done = _summary(0.125, goodput=1000.0, p99=None)  # no call completed: no p99
    assert demo_claims(runs(buffered=none_done))[2].holds is False
    idle = demo_claims(runs(retire_osc=None))  # decode almost idle: no index, no ratio
    assert [idle[1].holds, idle[4].holds] == [False, False]
    assert idle[1].figures == "none: an index null, or both 0"


def test_the_demo_prints_which_of_its_claims_hold_on_the_traces_given(tmp_path, capsys):
    """A tiny load (one session): the text output ends its figures with the claims, each
    said to hold or not."""
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--no-progress", "--load", "1.0",
                 "--duration", "60", "--max-sessions", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines)
                if line.startswith("the demo's claims on these traces: "))
    claims = lines[head + 1:head + 7]
    assert len(claims) == 6
    assert all(c.startswith(("  holds: ", "  does NOT hold: ")) for c in claims)
    held = sum(c.startswith("  holds: ") for c in claims)
    assert lines[head] == (f"the demo's claims on these traces: {held} of 6 hold "
                           "(docs/demo.md)")
    # The report says the same, first.
    html = (out / "report.html").read_text()
    assert f"<h2>Claims on these traces: {held} of 6 hold</h2>" in html
    assert html.count("<td>yes</td>") + html.count("<td>NO</td>") == 6
    assert html.index("Claims on these traces") < html.index("<h2>Summary</h2>")
