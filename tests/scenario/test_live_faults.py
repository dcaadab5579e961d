"""Live mode: faults at any moment, start-up and shutdown included. A worker process lost
before it connects is started again like any other; one that cannot be started within its
restarts stops the start (one line) or the run (every call accounted for by the ledger);
a kill at shutdown loses nothing completed and leaves no process; a result arriving from a
process already declared lost is dropped; a process lost just after a fill step's result
fills no call twice. Each runs seconds of wall time: marked slow."""

import asyncio
import collections
import os
import signal

import pytest

from orchestrator.live.messages import StepDone
from orchestrator.live.options import LiveError, LiveOptions
from orchestrator.live.transport import encode
from orchestrator.run.settings import RunSettings, prepare, run_replay
from tests.scenario.live_faults import (
    Fault,
    FaultInjector,
    Kind,
    Moment,
    Watchdog,
    no_process_left,
)
from traces import sample_path
from traces.replay import LoadOptions

pytestmark = pytest.mark.slow

SPEED = 200.0
LOAD = LoadOptions(max_sessions=1, think_scale=0.01)
# Losses are counted here: a heartbeat timeout no busy machine reaches (only a hang
# would), so that none but the injected faults lose a process. The test of a late result
# finds its stopped process by silence, with a shorter one.
OPTIONS = {"workers_per_process": 4, "restart_delay_s": 0.2, "startup_timeout_s": 3.0,
           "shutdown_grace_s": 1.0, "heartbeat_timeout_s": 30.0}


def run(listeners=(), load=LOAD, **options):
    settings = RunSettings(load=load, clock="live", speed=SPEED,
                           live=LiveOptions(**{**OPTIONS, **options}))
    watchdog = Watchdog(60.0)
    result, summary = run_replay(prepare([sample_path()], "auto", settings), settings,
                                 listeners=[*listeners, watchdog])
    assert not watchdog.fired, "the run hung"
    return result, summary


@pytest.fixture(scope="module")
def virtual():
    settings = RunSettings(load=LOAD)
    result, summary = run_replay(prepare([sample_path()], "auto", settings), settings)
    return collections.Counter((r.session_id, r.input_tokens, r.output_tokens)
                               for r in result.requests), summary["requests"]["completed"]


def assert_every_call_completed_once(result, summary, virtual):
    keys, completed = virtual
    req = summary["requests"]
    assert req["completed"] == req["submitted"] == completed, req
    assert req["lost"] == 0 and req["in_flight"] == 0
    assert len({r.call_id for r in result.requests}) == completed
    assert collections.Counter((r.session_id, r.input_tokens, r.output_tokens)
                               for r in result.requests) == keys
    ledger = summary["live"]["ledger"]
    assert ledger["lost"] == ledger["final_twice"] == ledger["in_flight"] == 0
    assert ledger["completed"] == ledger["issued"] == completed


def test_a_process_killed_right_after_spawn_is_started_again_and_serves(virtual):
    kill = Fault(Kind.SIGKILL, Moment.SPAWN, process=1)
    faults = FaultInjector([kill])
    result, summary = run([faults])
    assert kill.applied.process == 1 and kill.applied.lost and not faults.problems()
    assert_every_call_completed_once(result, summary, virtual)
    assert summary["live"]["processes_lost"] == 1
    assert summary["live"]["processes_restarted"] == 1
    lost = [f for e, f in faults.backend.events if e == "worker_process_lost"]
    assert lost[0]["connected"] is False and "status -9" in lost[0]["reason"]
    assert not no_process_left(faults.backend.pids)


def test_a_process_silent_before_it_connects_is_started_again(virtual):
    # SIGSTOP at spawn, until the process is lost: no Hello within the start-up timeout.
    stop = Fault(Kind.STOP, Moment.SPAWN, process=0)
    faults = FaultInjector([stop])
    try:
        result, summary = run([faults], startup_timeout_s=1.0)
    finally:
        faults.resume_all()
    assert stop.applied.lost and not faults.problems()
    assert_every_call_completed_once(result, summary, virtual)
    reasons = [f["reason"] for e, f in faults.backend.events if e == "worker_process_lost"]
    assert reasons == ["no hello within 1 s"]
    assert not no_process_left(faults.backend.pids)


class KillEverySpawn:
    def __init__(self, process):
        self.process, self.pids = process, []

    def on_process_started(self, backend, handle):
        if handle.index == self.process:
            self.pids.append(handle.proc.pid)
            os.kill(handle.proc.pid, signal.SIGKILL)


def test_a_process_that_cannot_start_within_its_restarts_stops_the_start_with_one_line():
    killer = KillEverySpawn(1)
    with pytest.raises(LiveError) as exc:
        run([killer], max_restarts=2)
    assert str(exc.value) == ("worker process 2 of 2 could not be started (3 starts): "
                              "process exited with status -9")
    assert len(killer.pids) == 3


class KillAgainAtRestart:
    """Kill process 0 as the `nth` step of its workers is about to be sent (they hold that
    step's calls), then `restarts_killed` of its restarts, each as it is spawned."""

    def __init__(self, nth, restarts_killed):
        self.nth, self.left = nth, restarts_killed
        self.seen, self.killed = 0, False

    def on_step(self, backend, handle, worker, duration_s, call_ids):
        self.backend = backend
        if handle.index == 0 and not self.killed:
            self.seen += 1
            if self.seen == self.nth:
                self.killed = True
                os.kill(handle.proc.pid, signal.SIGKILL)

    def on_process_started(self, backend, handle):
        if self.killed and self.left:
            self.left -= 1
            os.kill(handle.proc.pid, signal.SIGKILL)


def test_a_kill_during_a_restart_is_the_same_restarts_concern(virtual):
    # The restarted process is killed before it connects: one supervisor starts it again
    # (no second restart racing the first), and the run completes.
    faults = KillAgainAtRestart(20, restarts_killed=1)
    result, summary = run([faults])
    assert_every_call_completed_once(result, summary, virtual)
    assert summary["live"]["processes_lost"] == 2
    assert summary["live"]["processes_restarted"] == 1
    assert not no_process_left(faults.backend.pids)


def test_a_process_given_up_mid_run_stops_it_with_every_call_accounted_for():
    faults = KillAgainAtRestart(20, restarts_killed=5)
    _, summary = run([faults], workers_per_process=8, max_restarts=2)
    live, req = summary["live"], summary["requests"]
    assert live["interrupted"] is True
    assert live["stop_reason"].startswith("worker process 1 given up after 3 starts")
    ledger = live["ledger"]
    assert ledger["lost"] == 0 and ledger["in_flight"] > 0
    assert ledger["completed"] + ledger["rejected"] + ledger["in_flight"] == ledger["issued"]
    assert req["in_flight"] == ledger["in_flight"] and req["lost"] == 0
    assert not no_process_left(faults.backend.pids)


def test_a_kill_of_every_process_during_shutdown_loses_nothing_completed(virtual):
    kills = [Fault(Kind.SIGKILL, Moment.SHUTDOWN, process=p) for p in (0, 1)]
    faults = FaultInjector(kills)
    result, summary = run([faults])
    assert not faults.problems() and [k.applied.process for k in kills] == [0, 1]
    assert_every_call_completed_once(result, summary, virtual)
    assert summary["live"]["processes_lost"] == 0  # a process stopping is not lost
    assert not no_process_left(faults.backend.pids)


class LateResult:
    """SIGSTOP the midfill workers' process as its 20th midfill step is about to be sent.
    Once the process is declared lost (silent), the frame of a StepDone for that step
    arrives on its old connection (fed to the orchestrator's reader of it, as bytes in the
    socket at the moment of the loss would be), and the process gets SIGCONT."""

    def __init__(self, nth=20):
        self.nth, self.seen = nth, 0
        self.conns, self.stopped, self.step_calls, self.late_step = {}, None, (), None

    def on_process_connected(self, backend, handle, reader, writer):
        self.conns[handle.index] = reader

    def on_step(self, backend, handle, worker, duration_s, call_ids):
        self.backend = backend
        if worker.startswith("midfill") and self.stopped is None:
            self.seen += 1
            if self.seen == self.nth:
                self.stopped, self.step_calls = handle, tuple(call_ids)
                os.kill(handle.proc.pid, signal.SIGSTOP)

    def on_process_lost(self, backend, handle):
        if handle is self.stopped and self.late_step is None and handle.pending:
            self.late_step = min(handle.pending)
            self.conns[handle.index].feed_data(encode(StepDone(self.late_step)))
            os.kill(handle.proc.pid, signal.SIGCONT)


def test_a_result_arriving_after_its_process_was_declared_lost_is_dropped(virtual):
    late = LateResult()
    result, summary = run([late], heartbeat_timeout_s=3.0)
    assert late.late_step is not None
    dropped = [f for e, f in late.backend.events if e == "late_result_dropped"]
    assert dropped == [{"process": late.stopped.index, "step": late.late_step}]
    assert summary["live"]["late_results_dropped"] == 1
    assert_every_call_completed_once(result, summary, virtual)
    # The stopped step's calls, held by its fill worker, were moved: the failover's count
    # against the ledger's own walk of the lost workers.
    req, live = summary["requests"], summary["live"]
    assert req["redispatched"] == live["ledger_moved"] >= len(late.step_calls) > 0
    assert all(late.backend.ledger.ledger.times_moved(c) == 1 for c in late.step_calls)
    assert live["ledger_bad_moves"] == 0
    assert not no_process_left(late.backend.pids)


class Dropper:
    """Drops the tenth call on purpose as it arrives (out of the admission queue), then
    stops the run 20 simulated seconds later."""

    def __init__(self):
        self.submitted, self.dropped, self.stop_at_s = 0, None, None

    def on_submit(self, orch, req, now_s):
        self.submitted += 1
        if self.submitted == 10:
            assert orch.queue[-1].request is req
            orch.queue.pop()
            self.dropped, self.stop_at_s = req.call_id, now_s + 20.0

    def on_sample(self, orch, obs, now_s):
        if self.stop_at_s is not None and now_s >= self.stop_at_s:
            orch.interrupt()


def test_a_call_dropped_on_purpose_is_lost_by_the_ledger():
    dropper = Dropper()
    _, summary = run([dropper])
    assert dropper.dropped is not None
    ledger = summary["live"]["ledger"]
    assert ledger["lost"] == 1 and ledger["lost_call_ids"] == [dropper.dropped]
    assert summary["requests"]["lost"] == 1
    assert ledger["completed"] + ledger["in_flight"] + ledger["lost"] == ledger["issued"]


class LossAfterFillResult:
    """Loses the midfill process right after one of its steps' results arrived and the
    step completed, before the step task's done callbacks run: the loss is scheduled from
    inside the step (the executor's `run` returning), so it runs first. Done after the
    `at`-th and the `again`-th midfill results (the second hits workers restored after the
    first). The process of the decode workers is lost first, plainly, after the `early`-th:
    the decode workers that take the filled calls are then ones started during the run."""

    def __init__(self, early=5, at=10, again=40):
        self.early, self.at, self.again = early, at, again
        self.results, self.losses = 0, 0
        self.backend = None

    def on_process_connected(self, backend, handle, reader, writer):
        if self.backend is not None:
            return
        self.backend = backend
        run_step = backend.executor.run

        async def run_then_lose(worker, duration_s, call_ids):
            await run_step(worker, duration_s, call_ids)
            if worker.startswith("midfill"):
                self.results += 1
                lose = {self.early: "decode-0", self.at: worker, self.again: worker}
                if self.results in lose:
                    self.losses += 1
                    asyncio.get_running_loop().call_soon(
                        backend.lose, backend.host_of(lose[self.results]), "lost on purpose")

        backend.executor.run = run_then_lose


def test_a_process_lost_just_after_a_fill_result_fills_no_call_twice(virtual):
    """Before 9cf60b4 the step's calls, already filled and handed on, were handed back as
    fill work too: filled twice, in the ready buffer twice, and a decode worker admitted
    one twice (KeyError in DecodeWorker._retire). Before 2386a31 that decode worker, one
    started during the run, died silently with its calls and the run hung."""
    loser = LossAfterFillResult()
    result, summary = run([loser])
    assert loser.losses == 3
    assert summary["live"]["processes_lost"] == 3
    assert_every_call_completed_once(result, summary, virtual)
    assert summary["requests"]["redispatched"] == summary["live"]["ledger_moved"]
    assert summary["live"]["ledger_bad_moves"] == 0
    assert not no_process_left(loser.backend.pids)
