"""Fault injection in live mode: faults that are applied, and shown to do what they claim.

A kill of the process of a worker holding calls moves those calls (the ledger sees each
moved), and each completes once. Randomized, seeded: each example draws one to three
faults (SIGKILL, SIGSTOP until the process is lost, a short pause, the connection closed,
a corrupted frame either way), mostly as a step is about to be sent (its worker holds the
step's calls), some at start-up, some at shutdown. Whatever is drawn: every fault is
applied; one that loses its process does lose it, and that loss moves the step's calls
not final by then; every call completes exactly once (the run, restarting its processes,
has no other declared outcome); `requests.redispatched` equals the ledger's own count of
the calls the losses took off their workers; no worker process outlives the run. Moments
are events of the run (the nth step), never wall-clock times.

The kill of a busy worker and one seed run in the default suite (a few seconds each),
thirty more seeds with `-m slow`. A live run mostly waits on the wall clock (~1 s of CPU
in its ~6 s), so the thirty run three at a time, each in its own process (its own event
loop, signal handlers and worker processes), and each seed's test reports its own run.
"""

import collections
import dataclasses
import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np
import pytest

from orchestrator.live.options import LiveOptions
from orchestrator.run.settings import Prepared, RunSettings, prepare, run_replay
from tests.scenario.live_faults import (
    Fault,
    FaultInjector,
    Kind,
    Moment,
    Watchdog,
    draw_faults,
    no_process_left,
)
from traces import sample_path
from traces.replay import LoadOptions

SPEED = 200.0
LOAD = LoadOptions(max_sessions=3, sessions_per_hour=36000, think_scale=0.01)
ONE_SESSION = LoadOptions(max_sessions=1, think_scale=0.01)
PROCESSES = 2  # 7 workers of the default preset, 4 a process: decode and prefill, midfill
# A fault-free run of LOAD sends 1,147 steps (691 decode, 452 midfill, 4 prefill); faults
# only add steps (work moved is done again). A STEP fault lands within the first 300.
MAX_NTH = 300
# STOP faults are found by silence: a short heartbeat timeout keeps them quick. A busy
# machine may delay a heartbeat past it and lose a healthy process too; nothing checked
# here counts losses, so such a loss only moves more calls.
OPTIONS = LiveOptions(workers_per_process=4, restart_delay_s=0.2, startup_timeout_s=1.5,
                      heartbeat_timeout_s=0.5, shutdown_grace_s=1.0)
# Where losses are counted, silence is not the subject: a heartbeat timeout no busy
# machine reaches (only a hang would).
COUNTED = dataclasses.replace(OPTIONS, heartbeat_timeout_s=30.0)


def sample(calls_per_session=None) -> Prepared:
    """The bundled sample, its sessions cut to their first calls if asked."""
    out = prepare([sample_path()], "auto", RunSettings())
    if calls_per_session is None:
        return out
    cut = tuple(dataclasses.replace(s, calls=s.calls[:calls_per_session])
                for s in out.sessions)
    return Prepared(out.model, out.cluster, cut)


def virtual_calls(prepared: Prepared, load) -> collections.Counter:
    result, _ = run_replay(prepared, RunSettings(load=load))
    return collections.Counter(map(call_key, result.requests))


def call_key(req):
    return (req.session_id, req.input_tokens, req.output_tokens)


@pytest.fixture(scope="module")
def calls():
    return virtual_calls(sample(), LOAD)


def run_faults(faults: FaultInjector, prepared: Prepared, load,
               virtual: collections.Counter, options: LiveOptions = OPTIONS) -> dict:
    """A live run under `faults`, checked: every fault applied with its effect, every call
    of the virtual run completed exactly once, re-dispatches as the ledger counts them."""
    settings = RunSettings(load=load, clock="live", speed=SPEED, live=options)
    watchdog = Watchdog(60.0)
    try:
        result, summary = run_replay(prepared, settings, listeners=[faults, watchdog])
    finally:
        faults.resume_all()
    drawn = [f.describe() for f in faults.faults]
    assert not watchdog.fired, f"the run hung; faults {drawn}"
    assert not faults.problems(), faults.problems()
    live, req = summary["live"], summary["requests"]
    ledger = live["ledger"]
    # Restarts are on: no fault stops the run, so a stop (even with every call accounted
    # for) fails here. Every call completed, none in flight, lost, or final twice.
    assert live["stop_reason"] is None and live["interrupted"] is False, (drawn, live)
    n = sum(virtual.values())
    assert ledger["issued"] == ledger["completed"] == n, (drawn, ledger)
    assert ledger["in_flight"] == ledger["lost"] == ledger["rejected"] == 0, (drawn, ledger)
    assert ledger["final_twice"] == ledger["unknown_final"] == 0, (drawn, ledger)
    assert req["submitted"] == req["completed"] == n, (drawn, req)
    assert len({r.call_id for r in result.requests}) == n, drawn
    assert collections.Counter(map(call_key, result.requests)) == virtual, drawn
    # The failover's count of the calls it re-dispatched, against the ledger's own walk of
    # the lost workers (each open call once; a call handed back twice, final, or held
    # elsewhere too is a bad move).
    assert req["redispatched"] == live["ledger_moved"], (drawn, req, live)
    assert live["ledger_bad_moves"] == 0, (drawn, live)
    assert not no_process_left(faults.backend.pids), drawn
    return summary


def test_a_kill_of_a_worker_holding_calls_moves_them_and_each_completes_once():
    # One session's first 80 calls (a fault-free run sends 79 midfill steps, 80 decode
    # steps). SIGKILL of the midfill workers' process as its 20th midfill step is about to
    # be sent, then of the decode workers' process at its 40th decode step: each worker
    # holds the step's calls, which the process never sees.
    fill = Fault(Kind.SIGKILL, Moment.STEP, nth=20, phase="midfill")
    decode = Fault(Kind.SIGKILL, Moment.STEP, nth=40, phase="decode")
    faults = FaultInjector([fill, decode])
    prepared = sample(calls_per_session=80)
    summary = run_faults(faults, prepared, ONE_SESSION, virtual_calls(prepared, ONE_SESSION),
                         COUNTED)
    # A fill step's calls are held until the loss: every one moved (a prefill restarts).
    assert fill.applied.calls and fill.applied.moved == fill.applied.calls
    # A decode step's calls are moved unless they ended in the instant before the loss.
    assert set(decode.applied.moved) | set(decode.applied.final) == set(decode.applied.calls)
    assert (fill.applied.process, decode.applied.process) == (1, 0)
    live = summary["live"]
    assert live["processes_lost"] == live["processes_restarted"] == 2
    assert summary["requests"]["redispatched"] >= len(fill.applied.calls) + len(
        decode.applied.moved)
    print(f"fill step calls {fill.applied.calls} moved {fill.applied.moved}; decode step "
          f"calls {decode.applied.calls} moved {decode.applied.moved}; redispatched "
          f"{summary['requests']['redispatched']}")


def check_seed(seed, calls):
    faults = FaultInjector(draw_faults(np.random.default_rng(seed), PROCESSES, MAX_NTH))
    summary = run_faults(faults, sample(), LOAD, calls)
    live, req = summary["live"], summary["requests"]
    applied = [(f.describe(), f.applied.process, len(f.applied.calls), len(f.applied.moved))
               for f in faults.faults]
    print(f"seed {seed}: faults (fault, process, step calls, moved) {applied}; lost "
          f"{live['processes_lost']}, restarted {live['processes_restarted']}, "
          f"redispatched {req['redispatched']}, late dropped {live['late_results_dropped']}")


@pytest.mark.parametrize("seed", [0])
def test_random_faults_are_applied_lose_no_call_and_leave_no_process(seed, calls):
    check_seed(seed, calls)


MANY_SEEDS = range(100, 130)
AT_ONCE = 3


@pytest.fixture(scope="module")
def many_runs(request, calls):
    """The selected seeds of the test below, submitted at once to a pool of AT_ONCE
    processes: a seed's future by seed."""
    name = test_random_faults_are_applied_lose_no_call_and_leave_no_process_many.__name__
    seeds = [item.callspec.params["seed"] for item in request.session.items
             if getattr(item, "originalname", None) == name and hasattr(item, "callspec")]
    with ProcessPoolExecutor(AT_ONCE, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield {seed: pool.submit(check_seed, seed, calls) for seed in seeds}


@pytest.mark.slow(seconds=60)  # all seeds at once, in a pool of processes
@pytest.mark.parametrize("seed", MANY_SEEDS)
def test_random_faults_are_applied_lose_no_call_and_leave_no_process_many(seed, many_runs):
    run: Future = many_runs[seed]
    run.result()  # check_seed's assertion, raised here
