"""Randomized fault injection in live mode, seeded: each example draws one to three faults
(SIGKILL, SIGSTOP for a while, the connection closed, a corrupted frame), the worker
process each hits and the moment (at spawn, before it can connect; during the run; during
shutdown). Whatever is drawn: every call completes exactly once, or the run stops with
every call accounted for by the ledger; no worker process outlives the run; the summary's
re-dispatch count equals the calls the losses moved.

Two examples run in the default suite (a few seconds each), thirty more with `-m slow`.
A live run mostly waits on the wall clock (~1 s of CPU in its ~6 s), so the thirty run
three at a time, each in its own process (its own event loop, signal handlers and
worker processes), and each seed's test reports its own run.
"""

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np
import pytest

from orchestrator.live.options import LiveOptions
from orchestrator.run.settings import RunSettings, prepare, run_replay
from tests.scenario.live_faults import (
    FaultInjector,
    Watchdog,
    draw_faults,
    moved_by_losses,
    no_process_left,
)
from traces import sample_path
from traces.replay import LoadOptions

SPEED = 200.0
LOAD = LoadOptions(max_sessions=3, sessions_per_hour=36000, think_scale=0.01)
PROCESSES = 2  # 7 workers of the default preset, 4 a process
SPAN_S = 1000.0  # about the simulated span of this load
OPTIONS = LiveOptions(workers_per_process=4, restart_delay_s=0.2, startup_timeout_s=1.5,
                      heartbeat_timeout_s=0.5, shutdown_grace_s=1.0)
SETTINGS = RunSettings(load=LOAD, clock="live", speed=SPEED, live=OPTIONS)


@pytest.fixture(scope="module")
def calls():
    settings = RunSettings(load=LOAD)
    _, summary = run_replay(prepare([sample_path()], "auto", settings), settings)
    return summary["requests"]["completed"]


def check_seed(seed, calls):
    faults = FaultInjector(draw_faults(np.random.default_rng(seed), PROCESSES, SPAN_S))
    watchdog = Watchdog(60.0)
    try:
        result, summary = run_replay(prepare([sample_path()], "auto", SETTINGS), SETTINGS,
                                     listeners=[faults, watchdog])
    finally:
        faults.resume_all()
    drawn = [(f.kind, f.process, f.moment, round(f.at_s), round(f.hold_s, 1))
             for f in faults.faults]
    assert not watchdog.fired, f"seed {seed}: the run hung; faults {drawn}"
    live, req = summary["live"], summary["requests"]
    ledger = live["ledger"]
    assert ledger["lost"] == ledger["final_twice"] == ledger["unknown_final"] == 0, drawn
    ids = [r.call_id for r in result.requests]
    assert len(ids) == len(set(ids)) == ledger["completed"], drawn  # each at most once
    if live["stop_reason"] is None:
        assert req["completed"] == req["submitted"] == calls, (drawn, req)
    else:  # stopped: every call completed, rejected or held in flight
        assert ledger["completed"] + ledger["rejected"] + ledger["in_flight"] == \
            ledger["issued"], (drawn, ledger)
    assert req["redispatched"] == moved_by_losses(faults.backend), drawn
    assert not no_process_left(faults.backend.pids), drawn
    print(f"seed {seed}: faults {drawn} applied {faults.log}; lost "
          f"{live['processes_lost']}, restarted {live['processes_restarted']}, "
          f"redispatched {req['redispatched']}, late dropped {live['late_results_dropped']}")


@pytest.mark.parametrize("seed", [0, 1])
def test_random_faults_lose_no_call_and_leave_no_process(seed, calls):
    check_seed(seed, calls)


MANY_SEEDS = range(100, 130)
AT_ONCE = 3


@pytest.fixture(scope="module")
def many_runs(request, calls):
    """The selected seeds of the test below, submitted at once to a pool of AT_ONCE
    processes: a seed's future by seed."""
    name = test_random_faults_lose_no_call_and_leave_no_process_many.__name__
    seeds = [item.callspec.params["seed"] for item in request.session.items
             if getattr(item, "originalname", None) == name and hasattr(item, "callspec")]
    with ProcessPoolExecutor(AT_ONCE, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield {seed: pool.submit(check_seed, seed, calls) for seed in seeds}


@pytest.mark.slow
@pytest.mark.parametrize("seed", MANY_SEEDS)
def test_random_faults_lose_no_call_and_leave_no_process_many(seed, many_runs):
    run: Future = many_runs[seed]
    run.result()  # check_seed's assertion, raised here
