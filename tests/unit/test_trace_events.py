"""--trace-events: valid Chrome trace events, each call's phases end to end, the cap."""

import itertools
import json
from types import SimpleNamespace

import pytest

from costmodel.phase import Phase
from orchestrator.run.trace_events import SessionSample, TraceRecorder, check_path, write
from tests.conftest import run_cli
from workers.events import EventLog
from workers.request import Request


def check_trace(trace: dict) -> dict:
    """The Trace Event Format's rules this file relies on; returns X events per thread."""
    events = trace["traceEvents"]
    named_threads, named_processes, threads = set(), set(), {}
    for e in events:
        for key in ("name", "ph", "ts", "pid", "tid"):
            assert key in e, (key, e)
        assert e["ph"] in {"M", "X", "i"}, e  # no B/E pairs to balance
        if e["ph"] == "M":
            if e["name"] == "thread_name":
                named_threads.add((e["pid"], e["tid"]))
            if e["name"] == "process_name":
                named_processes.add(e["pid"])
            continue
        assert (e["pid"], e["tid"]) in named_threads, e  # metadata comes first
        assert e["pid"] in named_processes
        if e["ph"] == "X":
            assert e["dur"] >= 0
            start = round(e["ts"] * 1000)
            threads.setdefault((e["pid"], e["tid"]), []).append((start, start
                                                                 + round(e["dur"] * 1000), e))
    for slices in threads.values():  # slices of one thread must not overlap
        slices.sort(key=lambda s: s[0])
        for (_, end, _), (start, _, _) in itertools.pairwise(slices):
            assert start >= end
    return threads


def by_call(trace: dict) -> dict[int, list[dict]]:
    calls: dict[int, list[dict]] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            calls.setdefault(e["args"]["call"], []).append(e)
    for slices in calls.values():
        slices.sort(key=lambda e: e["ts"])
    return calls


def assert_end_to_end(slices: list[dict], arrival_s: float, done_s: float) -> None:
    assert round(slices[0]["ts"] * 1000) == round(arrival_s * 1e9)
    for a, b in itertools.pairwise(slices):
        assert round((a["ts"] + a["dur"]) * 1000) == round(b["ts"] * 1000)
    assert round((slices[-1]["ts"] + slices[-1]["dur"]) * 1000) == round(done_s * 1e9)


# -- a recorder fed by hand ---------------------------------------------------------------
def fake_orchestrator():
    def worker(pool, phase):
        return SimpleNamespace(spec=SimpleNamespace(pool=pool, phase=phase))

    runtime = SimpleNamespace(
        log=EventLog(), fill_workers={"prefill-0": worker("prefill", Phase.PREFILL)},
        decode_workers={"decode-0": worker("decode", Phase.DECODE)})
    pools = [SimpleNamespace(name="prefill", phase=Phase.PREFILL),
             SimpleNamespace(name="decode", phase=Phase.DECODE)]
    return SimpleNamespace(runtime=runtime, cluster=SimpleNamespace(spec=SimpleNamespace(
        pools=pools)))


def request(call_id, session="s0"):
    return Request(call_id=call_id, session_id=session, input_tokens=1000, output_tokens=10)


def test_a_batch_of_calls_gets_one_lane_each_and_phases_in_order():
    orch, rec = fake_orchestrator(), TraceRecorder(seed=1)
    log = orch.runtime.log
    a, b = request(1, "s0"), request(2, "s1")
    rec.on_submit(orch, a, 0.0)
    rec.on_submit(orch, b, 0.5)
    log.add(1.0, "prefill-0", "queued", 1)
    log.add(1.0, "prefill-0", "queued", 2)
    log.add(1.5, "prefill-0", "fill_start", 1, 2)
    log.add(2.0, "prefill-0", "fill_done", 1)
    log.add(2.0, "decode-0", "load", 1)
    log.add(2.0, "prefill-0", "fill_done", 2)
    log.add(3.0, "decode-0", "load", 2)  # waited a second in the ready buffer
    log.add(3.1, "decode-0", "join", 1, 2)
    log.add(4.0, "decode-0", "preempt", 2)  # back to the ready buffer
    log.add(4.5, "decode-0", "load", 2)
    log.add(4.6, "decode-0", "join", 2)
    log.add(5.0, "decode-0", "done", 1)
    rec.on_done(orch, a, 5.0)
    trace = rec.render(end_s=6.0)
    threads = check_trace(trace)
    calls = by_call(trace)
    assert [e["name"] for e in calls[1]] == ["admission wait", "fill queue", "prefill", "KV load",
                                             "decode"]
    assert [e["name"] for e in calls[2]] == ["admission wait", "fill queue", "prefill",
                                             "ready wait", "KV load", "decode", "preempted",
                                             "KV load", "decode"]
    where = {e["name"]: e["pid"] for e in calls[2]}
    assert where["preempted"] == where["ready wait"] == where["admission wait"] == 1
    assert_end_to_end(calls[1], 0.0, 5.0)
    assert_end_to_end(calls[2], 0.5, 6.0)  # still decoding when the run ended
    assert calls[2][-1]["args"]["unfinished"] and "unfinished" not in calls[1][-1]["args"]
    assert calls[1][2]["args"] == {"call": 1, "session": "s0", "input_tokens": 1000,
                                   "cached_tokens": 0, "output_tokens": 10, "interactive": True,
                                   "outcome": "done"}
    # The two overlapping fills sit on two lanes of prefill-0, as do the decodes.
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "thread_name"}
    fill_lanes = {names[(e["pid"], e["tid"])] for c in (1, 2) for e in calls[c]
                  if e["name"] == "prefill"}
    assert fill_lanes == {"prefill-0 #0", "prefill-0 #1"}
    assert {e["name"] for e in trace["traceEvents"] if e["ph"] == "i"} == {"preempt"}
    processes = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert processes == ["orchestrator", "prefill pool", "decode pool"]
    assert len(threads) == len(names)


def test_a_mixed_worker_keeps_its_calls_waits_on_its_own_track():
    orch, rec = fake_orchestrator(), TraceRecorder()
    mixed = SimpleNamespace(name="MIXED")  # workers.cluster_toml.MIXED's name
    orch.runtime.decode_workers["mixed-0"] = SimpleNamespace(
        spec=SimpleNamespace(pool="agg", phase=mixed))
    orch.cluster.spec.pools.append(SimpleNamespace(name="agg", phase=mixed))
    req = request(3)
    rec.on_submit(orch, req, 0.0)
    for t, event in [(1, "queued"), (2, "fill_start"), (3, "fill_done"), (4, "join"),
                     (5, "preempt"), (6, "load"), (7, "join"), (8, "done")]:
        orch.runtime.log.add(float(t), "mixed-0", event, 3)
    trace = rec.render(end_s=9.0)
    check_trace(trace)
    slices = by_call(trace)[3]
    assert [e["name"] for e in slices] == ["admission wait", "fill queue", "prefill", "ready wait",
                                           "decode", "preempted", "KV load", "decode"]
    assert {e["pid"] for e in slices[1:]} == {4}  # the agg pool, after prefill and decode
    assert_end_to_end(slices, 0.0, 8.0)
    processes = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert processes[-1] == "agg pool (mixed)"


def test_a_rejected_call_ends_with_an_instant_on_its_admission_lane():
    orch, rec = fake_orchestrator(), TraceRecorder()
    req = request(7)
    rec.on_submit(orch, req, 1.0)
    rec.on_reject(orch, req, 3.0)
    trace = rec.render(end_s=10.0)
    check_trace(trace)
    (wait,) = by_call(trace)[7]
    assert (wait["name"], wait["ts"], wait["dur"], wait["args"]["outcome"]) == (
        "admission wait", 1_000_000, 2_000_000, "rejected")
    (mark,) = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert (mark["name"], mark["ts"], mark["tid"]) == ("rejected", 3_000_000, wait["tid"])


# -- the sample ------------------------------------------------------------------------------
def test_the_sample_keeps_whole_sessions_below_a_hash_threshold_within_the_cap():
    sample = SessionSample(max_calls=50, seed=3)
    dropped: set[int] = set()
    call_id = 0
    for _ in range(8):  # 40 sessions issuing calls in turn, closed-loop style
        for s in range(40):
            call_id += 1
            dropped |= set(sample.offer(f"s{s}", call_id))
            assert sample.kept_calls <= 50
    kept = {sid for sid in sample.calls}
    assert kept and all(len(ids) == 8 for ids in sample.calls.values())
    assert kept == {f"s{s}" for s in range(40) if sample.hash(f"s{s}") < sample.threshold}
    assert sample.kept_calls == 8 * len(kept) and sample.seen_calls == 320
    again = SessionSample(max_calls=50, seed=3)
    for i in range(320):
        again.offer(f"s{i % 40}", i + 1)
    assert set(again.calls) == kept
    other = SessionSample(max_calls=50, seed=4)
    for i in range(320):
        other.offer(f"s{i % 40}", i + 1)
    assert set(other.calls) != kept


def test_one_session_longer_than_the_cap_keeps_its_first_calls():
    sample = SessionSample(max_calls=3, seed=0)
    for i in range(1, 6):
        sample.offer("only", i)
    assert sample.calls == {"only": [1, 2, 3]} and sample.truncated == {"only"}


# -- whole runs --------------------------------------------------------------------------------
def replay(recorder, seed=1, sessions=None):
    from costmodel.model import load_model
    from orchestrator.control.config import ControlConfig
    from orchestrator.control.policies import make_policy
    from orchestrator.run.replay import Orchestrator
    from tests.factories import short_agent_sessions, small_cluster
    from traces.replay import LoadOptions
    from workers.clock import VirtualClock

    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")),
                        sessions or short_agent_sessions(6, 5, seed=3),
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), seed,
                        listeners=[recorder])
    return VirtualClock().run(orch.run())


def test_every_completed_call_is_traced_end_to_end_and_the_file_loads(tmp_path):
    rec = TraceRecorder(seed=1)
    result = replay(rec)
    path = tmp_path / "t.json"
    write(path, rec.render(result.simulated_s, run="test"))
    trace = json.loads(path.read_text())
    check_trace(trace)
    calls = by_call(trace)
    assert len(calls) == len(result.requests) == result.counters["submitted"]
    for req in result.requests:
        slices = calls[req.call_id]
        assert_end_to_end(slices, req.arrival_s, req.done_s)
        assert slices[0]["name"] == "admission wait"
        assert {"prefill", "midfill"} & {e["name"] for e in slices}
        if req.decode_worker is not None:
            assert slices[-1]["name"] == "decode"
    assert trace["otherData"]["calls_traced"] == len(result.requests)
    assert not trace["otherData"]["sampled"] and rec.cut_note() is None


def test_same_seed_same_trace():
    a, b = TraceRecorder(seed=2), TraceRecorder(seed=2)
    ra, rb = replay(a, seed=2), replay(b, seed=2)
    assert a.render(ra.simulated_s) == b.render(rb.simulated_s)


def test_the_cap_keeps_whole_sessions_and_says_so():
    from tests.factories import short_agent_sessions

    sessions = short_agent_sessions(8, 4, seed=5)
    rec = TraceRecorder(max_calls=10, seed=1)
    result = replay(rec, sessions=sessions)
    trace = rec.render(result.simulated_s)
    check_trace(trace)
    calls = by_call(trace)
    assert 0 < len(calls) <= 10
    traced = {e[0]["args"]["session"] for e in calls.values()}
    per_session = {}
    for req in result.requests:
        per_session.setdefault(req.session_id, []).append(req.call_id)
    for sid in traced:  # every call of a traced session
        assert set(per_session[sid]) <= set(calls)
    meta = trace["otherData"]
    assert meta["sampled"] and meta["calls_traced"] == len(calls) <= meta["max_calls"] == 10
    assert meta["calls_submitted"] == result.counters["submitted"]
    assert "traced" in rec.cut_note() and "--trace-events-max-calls 10" in rec.cut_note()


# -- the command line --------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["missing/t.json", "."])
def test_a_bad_path_is_one_line_exit_2_before_the_run(tmp_path, capsys, where):
    target = tmp_path / where
    code, out, err = run_cli(["replay", "--max-sessions", "1", "--no-progress",
                              "--trace-events", str(target), "--cluster", "nope"], capsys)
    # Refused before the cluster is even read (an unknown cluster would say so).
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"--trace-events {target}: " in err and "nope" not in err
    assert "does not exist" in err or "is a directory" in err


def test_check_path_names_the_problem(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        check_path(tmp_path / "no" / "t.json")
    with pytest.raises(ValueError, match="is a directory"):
        check_path(tmp_path)
    check_path(tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_max_calls_must_be_positive(capsys):
    code, _, err = run_cli(["replay", "--trace-events-max-calls", "0"], capsys)
    assert code == 2 and "--trace-events-max-calls" in err and len(err.splitlines()) == 1


def test_write_leaves_nothing_when_it_fails(tmp_path):
    with pytest.raises(TypeError):
        write(tmp_path / "t.json", {"traceEvents": [{"ts": object()}], "otherData": {}})
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def traffic(tmp_path):
    from tests.factories import short_agent_sessions
    from traces.native import write_native_file

    path = tmp_path / "calls.jsonl"
    write_native_file(short_agent_sessions(3, 2, seed=3), path)
    return [str(path), "--think-scale", "0.01", "--no-progress", "--json"]


def test_replay_writes_the_file(tmp_path, capsys, traffic):
    path = tmp_path / "run.json"
    code, out, err = run_cli(["replay", *traffic, "--trace-events", str(path)], capsys)
    assert code == 0
    trace = json.loads(path.read_text())
    check_trace(trace)
    assert trace["otherData"]["calls_traced"] == json.loads(out)["requests"]["submitted"] == 6
    assert "trace events" not in err  # nothing was left out


@pytest.mark.slow  # compare's HTML report takes seconds
def test_compare_writes_a_file_per_controller_and_reports_the_cut(tmp_path, capsys, traffic):
    path = tmp_path / "run.json"
    code, _, err = run_cli(["compare", *traffic, "--controllers", "retire,buffered", "--out",
                            str(tmp_path / "cmp"), "--trace-events", str(path),
                            "--trace-events-max-calls", "3"], capsys)
    assert code == 0 and not path.exists()
    for name in ("retire", "buffered"):
        trace = json.loads((tmp_path / f"{name}-run.json").read_text())
        check_trace(trace)
        assert trace["otherData"]["run"] == f"{name}-seed0"
        assert 0 < trace["otherData"]["calls_traced"] <= 3 and trace["otherData"]["sampled"]
    notes = [line for line in err.splitlines() if line.startswith("trace events:")]
    assert len(notes) == 2 and notes[0].endswith("retire-run.json")
