"""Live mode with worker processes: the same calls as virtual time, kill -9 survived,
bad peers shrugged off. Each test runs a few seconds of wall time: marked slow.

What is compared is what live mode controls: which calls complete, in which order within a
session (a session's calls follow one another), the ledger's account, and the steps the
worker processes run (none answered before its priced time). Latency measured on the wall
clock (TTFT, ITL against virtual time, and their spread on a loaded machine) is printed by
`benchmarks/bench_live.py --against-virtual`, not asserted: every wall millisecond a call
waits on the machine is `speed` simulated milliseconds that virtual time does not have.

Kills land on events of the run, not on wall-clock moments: the nth step sent, the moment
its worker holds the step's calls and its process has not seen it.
"""

import collections
import os

import numpy as np
import pytest

from orchestrator.live.options import LiveOptions
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

SPEED = 100.0
LOAD = LoadOptions(max_sessions=2, think_scale=0.01)


def replay(listeners=(), **changes):
    settings = RunSettings(load=LOAD, **changes)
    prepared = prepare([sample_path()], "auto", settings)
    return run_replay(prepared, settings, listeners=list(listeners))


def watched(settings, listeners, wall_s=120.0):
    """A live run that fails its test, rather than hanging the suite, if it never ends."""
    watchdog = Watchdog(wall_s)
    out = run_replay(prepare([sample_path()], "auto", settings), settings,
                     listeners=[*listeners, watchdog])
    assert not watchdog.fired, f"the run was still going after {wall_s:g} wall seconds"
    return out


# Losses are counted here and none is found by silence: a heartbeat timeout no busy
# machine reaches (only a hang would), so that none but the kills lose a process.
HEARTBEAT_TIMEOUT_S = 30.0


def live(listeners=(), cluster=None, **options):
    changes = {} if cluster is None else {"cluster": str(cluster)}
    options.setdefault("heartbeat_timeout_s", HEARTBEAT_TIMEOUT_S)
    settings = RunSettings(load=LOAD, clock="live", speed=SPEED, live=LiveOptions(**options),
                           **changes)
    return watched(settings, listeners)


def call_key(req):
    return (req.session_id, req.input_tokens, req.output_tokens)


def by_session(result):
    """Each session's calls in the order they completed."""
    out = collections.defaultdict(list)
    for req in result.requests:
        out[req.session_id].append((req.input_tokens, req.output_tokens))
    return dict(out)


class Steps:
    """Each step the worker processes ran: its priced duration and the loop time from its
    send to its answer (the executor's `run` wrapped once the first process connects)."""

    def __init__(self):
        self.backend, self.done = None, []  # (worker, duration_s, answered after s)

    def on_process_connected(self, backend, handle, reader, writer):
        if self.backend is not None:
            return
        self.backend = backend
        run_step = backend.executor.run

        async def timed(worker, duration_s, call_ids):
            import asyncio

            loop = asyncio.get_running_loop()
            sent = loop.time()
            await run_step(worker, duration_s, call_ids)
            self.done.append((worker, duration_s, loop.time() - sent))

        backend.executor.run = timed


def test_live_run_completes_the_same_calls_as_virtual_in_the_same_order():
    virtual, vs = replay()
    steps = Steps()
    result, ls = live([steps], workers_per_process=3)
    assert ls["live"]["worker_processes"] == 3  # 7 workers of the default preset, 3 a process
    assert collections.Counter(map(call_key, result.requests)) == collections.Counter(
        map(call_key, virtual.requests))
    assert by_session(result) == by_session(virtual)  # a session's calls, in their order
    assert ls["requests"] == {**vs["requests"]}
    ledger = ls["live"]["ledger"]
    assert ledger["issued"] == ledger["completed"] == vs["requests"]["completed"]
    assert ledger["in_flight"] == ledger["lost"] == ledger["final_twice"] == 0
    # Every step the processes ran took at least its priced time on their clocks: a worker
    # process answers no step early, whatever the load (a busy machine only delays). A
    # uvloop timer fires on a 1 ms wall tick, which may round a wait down by up to 1 ms.
    tick_s = 1e-3 * SPEED
    early = [(w, d, took) for w, d, took in steps.done if took < d - tick_s]
    assert steps.done and not early, early[:5]
    assert sum(1 for w, _, _ in steps.done if w.startswith("decode")) > 0
    assert not no_process_left(steps.backend.pids)


def step_kills(seed, kills, first=50, last=400, at_once=1):
    """SIGKILL of the process of the worker whose step is about to be sent, at `kills`
    seeded step counts; with `at_once`, of that many processes, each at the next step to
    a process not hit yet (steps to a process already hit do not count)."""
    bases = sorted(np.random.default_rng(seed).choice(np.arange(first, last, at_once),
                                                      kills, replace=False))
    return [Fault(Kind.SIGKILL, Moment.STEP, nth=int(n) + i)
            for n in bases for i in range(at_once)]


def check_kills(faults, summary):
    """Every kill applied and losing its process; each call of the killed steps moved by
    that loss or final by then (a fill step's: all moved); the failover's count of moved
    calls equal to the ledger's own."""
    assert not faults.problems(), faults.problems()
    req, live_ = summary["requests"], summary["live"]
    assert req["redispatched"] == live_["ledger_moved"] >= sum(
        len(f.applied.moved) for f in faults.faults)
    assert live_["ledger_bad_moves"] == 0
    assert not no_process_left(faults.backend.pids)
    return [(f.applied.process, f.applied.worker, len(f.applied.calls), len(f.applied.moved))
            for f in faults.faults]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_of_worker_processes_loses_no_call(seed):
    faults = FaultInjector(step_kills(seed, 3))
    result, summary = live([faults])
    req = summary["requests"]
    assert req["lost"] == 0 and req["in_flight"] == 0 and req["rejected"] == 0
    assert req["completed"] == req["submitted"] == 406
    ids = [r.call_id for r in result.requests]
    assert len(ids) == len(set(ids))  # each call completed exactly once
    killed = check_kills(faults, summary)
    assert summary["live"]["processes_lost"] == 3
    assert summary["live"]["processes_restarted"] == 3
    print(f"seed {seed}: killed (process, worker, step calls, moved) {killed}, "
          f"redispatched {req['redispatched']}")


@pytest.mark.parametrize("seed", [11, 12])
def test_kill_9_of_two_processes_at_once_under_heavier_load_loses_no_call(seed):
    # 8 sessions arriving within seconds, 4 processes of 2 workers: two kills in a row,
    # three times: the process of the nth step, then that of the next step sent to a
    # process not hit yet (another process, or the first one's restart).
    load = LoadOptions(max_sessions=8, sessions_per_hour=36000, think_scale=0.01)
    faults = FaultInjector(step_kills(seed, 3, first=50, last=600, at_once=2))
    settings = RunSettings(load=load, clock="live", speed=200.0,
                           live=LiveOptions(workers_per_process=2,
                                            heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S))
    result, summary = watched(settings, [faults])
    req = summary["requests"]
    assert req["lost"] == 0 and req["in_flight"] == 0
    assert req["completed"] == req["submitted"] == 962
    assert len({r.call_id for r in result.requests}) == 962
    killed = check_kills(faults, summary)
    assert summary["live"]["processes_lost"] == 6
    print(f"seed {seed}: killed (process, worker, step calls, moved) {killed}, "
          f"redispatched {req['redispatched']}")


# The default preset has two decode workers: two kills may take both, and with no decode
# worker left for good the run stops. Without restarts, a run survives any two kills only if
# each phase keeps a worker: three decode workers of 24 GPUs, two prefill and three
# midfill workers, each in its own process.
THREE_DECODE_CLUSTER = """
name = "three-decode"
[pfs]
capacity_gb = 2000000
read_gb_per_s = 400
write_gb_per_s = 200
[[racks]]
name = "r0"
cache_gb = 8000
cache_gb_per_s = 200
[[nodes]]
name = "n0"
rack = "r0"
hardware = "gb200"
gpus = 72
dram_gb = 17280
dram_gb_per_s = 18432
[[nodes]]
name = "n1"
rack = "r0"
hardware = "gb200"
gpus = 72
dram_gb = 17280
dram_gb_per_s = 18432
[[pools]]
name = "decode"
phase = "decode"
nodes = ["n0"]
gpus = 72
tp = 1
ep = 24
precision = "fp4"
kv_precision = "bf16"
target_batch = 12
max_batch_sequences = 288
mtp = 0
[[pools]]
name = "prefill"
phase = "prefill"
nodes = ["n1"]
gpus = 32
pp = 2
tp = 8
precision = "fp4"
kv_precision = "bf16"
max_batch_tokens = 97280
max_batch_sequences = 1
target_batch = 1
[[pools]]
name = "midfill"
phase = "midfill"
nodes = ["n1"]
gpus = 36
tp = 1
ep = 12
precision = "fp4"
kv_precision = "bf16"
max_batch_tokens = 105472
max_batch_sequences = 36
"""


def test_without_restarts_the_run_goes_on_with_fewer_workers(tmp_path):
    cluster = tmp_path / "three-decode.toml"
    cluster.write_text(THREE_DECODE_CLUSTER)
    faults = FaultInjector(step_kills(7, 2))
    _, summary = live([faults], cluster=cluster, restart=False)
    req = summary["requests"]
    assert summary["live"]["worker_processes"] == 8  # 3 decode + 2 prefill + 3 midfill
    assert summary["live"]["processes_lost"] == 2
    assert req["lost"] == 0 and req["completed"] == req["submitted"] == 406
    assert summary["live"]["processes_restarted"] == 0
    assert summary["live"]["interrupted"] is False and summary["live"]["stop_reason"] is None
    check_kills(faults, summary)


class BadPeers:
    """Connects at one moment of the run and sends garbage, an oversized frame and a
    message of unknown type."""

    def __init__(self):
        self.sent = False
        self.tasks = []  # referenced until the run ends: a collected task stops the run

    def on_sample(self, orch, obs, now_s):
        if self.sent or now_s < 10.0:
            return
        import asyncio
        import struct

        import msgspec

        self.sent = True
        kind, _, where = orch.backend.address.partition(":")

        async def peer(data):
            if kind == "unix":
                reader, writer = await asyncio.open_unix_connection(where)
            else:
                host, _, port = where.rpartition(":")
                reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(data)
            await writer.drain()
            await reader.read()
            writer.close()

        unknown = msgspec.msgpack.encode({"type": "launch", "x": 1})
        for data in (os.urandom(256), struct.pack(">I", 1 << 30),
                     struct.pack(">I", len(unknown)) + unknown):
            self.tasks.append(asyncio.get_running_loop().create_task(peer(data)))


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_bad_peers_during_a_run_do_not_stop_it(transport):
    peers = BadPeers()
    port = free_port() if transport == "tcp" else None
    _, summary = live([peers], port=port, workers_per_process=4)
    assert peers.sent
    assert summary["requests"]["completed"] == summary["requests"]["submitted"] == 406
    assert summary["live"]["bad_connections"] == 3
    assert summary["live"]["processes_lost"] == 0


def test_losing_every_worker_for_good_stops_the_run_with_calls_in_flight():
    # One process hosts every worker and is not started again: killed as its 20th midfill
    # step is about to be sent, the run cannot end. The stop is the declared outcome, and
    # every call is accounted for: the killed step's calls among those in flight.
    kill = Fault(Kind.SIGKILL, Moment.STEP, nth=20, phase="midfill")
    faults = FaultInjector([kill])
    _, summary = live([faults], restart=False, workers_per_process=8)
    live_, req = summary["live"], summary["requests"]
    assert live_["interrupted"] is True
    assert live_["stop_reason"].startswith("worker process 1 given up after 1 starts")
    assert live_["processes_lost"] == 1
    check_kills(faults, summary)
    ledger = live_["ledger"]
    assert kill.applied.moved == kill.applied.calls
    assert ledger["lost"] == 0 and ledger["in_flight"] >= len(kill.applied.calls) > 0
    assert ledger["completed"] + ledger["rejected"] + ledger["in_flight"] == \
        ledger["issued"] == req["submitted"]
    assert req["completed"] < 406
