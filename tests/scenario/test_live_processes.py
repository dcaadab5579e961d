"""Live mode with worker processes: the same calls as virtual time, kill -9 survived,
bad peers shrugged off. Each test runs a few seconds of wall time: marked slow.

Latency tolerance. Live time is wall time x `speed`, so every wall millisecond a
call spends waiting on the machine (a uvloop timer's 1 ms tick, the orchestrator's
own work in the loop iteration ahead of it, a step's round trip to its worker
process and back, the scheduler of a busy machine) is `speed` ms of simulated
time that virtual time does not have. TTFT ends when the call joins a decode
batch, so its path holds six such waits: the admission tick, the fill worker's
wake, the fill step's round trip, the ready buffer to the decode worker (which
ends its jump early and starts a new step), the KV load's timer and the join.
Measured on a loaded 2-core machine, these add 8-9 ms of wall time per call
whatever the speed (TTFT p50 0.92 / 0.62 / 0.34 s above virtual at speed
100 / 50 / 25; the admission and fill parts carry it, in proportion to speed),
so a step's round trip is allowed 2 ms. The admission tick also quantises TTFT
to the fast period (1 s): timing drift moves some arrivals to the next tick,
which shifts TTFT percentiles by a fraction of a period. So a TTFT percentile
may differ by half a fast period plus six waits of 2 ms of wall time; ITL,
priced over whole decode jumps of many tokens, by a few per cent (10% allowed).
"""

import collections
import os
import signal

import numpy as np
import pytest

from orchestrator.live.options import LiveOptions
from orchestrator.run.settings import RunSettings, prepare, run_replay
from tests.scenario.live_faults import Watchdog
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


def live(listeners=(), cluster=None, **options):
    changes = {} if cluster is None else {"cluster": str(cluster)}
    settings = RunSettings(load=LOAD, clock="live", speed=SPEED, live=LiveOptions(**options),
                           **changes)
    return watched(settings, listeners)


def call_key(req):
    return (req.session_id, req.input_tokens, req.output_tokens)


def no_process_left(pids):
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


class Pids:
    """Records the worker processes' pids at every sample (restarts included)."""

    def __init__(self):
        self.pids = set()

    def on_sample(self, orch, obs, now_s):
        self.pids.update(orch.backend.pids)


def test_live_run_completes_the_same_calls_as_virtual_within_tolerance():
    virtual, vs = replay()
    pids = Pids()
    result, ls = live([pids], workers_per_process=3)
    assert ls["live"]["worker_processes"] == 3  # 7 workers of the default preset, 3 a process
    assert collections.Counter(map(call_key, result.requests)) == collections.Counter(
        map(call_key, virtual.requests))
    assert ls["requests"] == {**vs["requests"]}
    tol_s = RunSettings().control.fast_period_s / 2 + 6 * SPEED * 2e-3
    for q in ("p50", "p90", "p99"):
        assert abs(ls["ttft_s"][q] - vs["ttft_s"][q]) <= tol_s, (
            q, ls["ttft_s"], vs["ttft_s"], f"load average {os.getloadavg()}")
    # (A machine loaded by other work stretches every wall wait: its load is in the message.)
    assert ls["tpot_s"]["p50"] == pytest.approx(vs["tpot_s"]["p50"], rel=0.10), (
        ls["tpot_s"]["p50"], vs["tpot_s"]["p50"], f"load average {os.getloadavg()}")
    no_process_left(pids.pids)


class Killer:
    """kill -9 the process hosting a busy worker at seeded random simulated times (the
    first sample from then on at which some worker holds calls)."""

    def __init__(self, seed, kills=3, at_once=1, until_s=120.0):
        rng = np.random.default_rng(seed)
        self.times = sorted(rng.uniform(5.0, until_s, kills))
        self.at_once = at_once
        self.rng = rng
        self.killed = []
        self.pids = set()

    def on_sample(self, orch, obs, now_s):
        self.backend = orch.backend
        self.pids.update(orch.backend.pids)
        if not self.times or now_s < self.times[0]:
            return
        rt = orch.runtime
        busy = [w.name for w in rt.decode_workers.values() if w.running] + [
            w.name for w in rt.fill_workers.values() if w.queue or w._in_flight]
        if not busy:
            return
        self.times.pop(0)
        first = orch.backend.host_of(str(self.rng.choice(sorted(busy))))
        others = [h for h in orch.backend.handles if h.alive and h is not first]
        picked = [first, *(others[i] for i in self.rng.permutation(len(others)))]
        for handle in picked[:self.at_once]:
            if handle.alive and handle.proc is not None:
                os.kill(handle.proc.pid, signal.SIGKILL)
                self.killed.append((round(now_s, 1), handle.index, len(busy)))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_of_worker_processes_loses_no_call(seed):
    killer = Killer(seed)
    result, summary = live([killer])
    req = summary["requests"]
    assert len(killer.killed) == 3
    assert req["lost"] == 0 and req["in_flight"] == 0 and req["rejected"] == 0
    assert req["completed"] == req["submitted"] == 406
    ids = [r.call_id for r in result.requests]
    assert len(ids) == len(set(ids))  # each call completed exactly once
    # A busy worker's calls may finish in the instant before its death is seen: at least
    # one kill takes calls with it, and the summary counts exactly those moved.
    moved = [f["redispatched"] for e, f in killer.backend.events if e == "worker_process_lost"]
    assert req["redispatched"] == sum(moved) > 0
    assert summary["live"]["processes_lost"] == 3
    assert summary["live"]["processes_restarted"] == 3
    print(f"seed {seed}: killed {killer.killed}, redispatched {req['redispatched']}")
    no_process_left(killer.pids)


@pytest.mark.parametrize("seed", [11, 12])
def test_kill_9_of_two_processes_at_once_under_heavier_load_loses_no_call(seed):
    # 8 sessions arriving within seconds, 4 processes of 2 workers: each kill takes half
    # the cluster's processes, so both fill and decode work is in flight when it comes.
    load = LoadOptions(max_sessions=8, sessions_per_hour=36000, think_scale=0.01)
    killer = Killer(seed, kills=3, at_once=2, until_s=600.0)
    settings = RunSettings(load=load, clock="live", speed=200.0,
                           live=LiveOptions(workers_per_process=2))
    result, summary = watched(settings, [killer])
    req = summary["requests"]
    assert len(killer.killed) == 6
    assert req["lost"] == 0 and req["in_flight"] == 0
    assert req["completed"] == req["submitted"] == 962
    assert len({r.call_id for r in result.requests}) == 962
    moved = [f["redispatched"] for e, f in killer.backend.events if e == "worker_process_lost"]
    assert req["redispatched"] == sum(moved) > 0
    assert summary["live"]["processes_lost"] == 6
    print(f"seed {seed}: killed {killer.killed}, redispatched {req['redispatched']}")
    no_process_left(killer.pids)


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
    killer = Killer(7, kills=2)
    _, summary = live([killer], cluster=cluster, restart=False)
    req = summary["requests"]
    assert summary["live"]["worker_processes"] == 8  # 3 decode + 2 prefill + 3 midfill
    assert summary["live"]["processes_lost"] == 2 and len(killer.killed) == 2
    assert req["lost"] == 0 and req["completed"] == req["submitted"] == 406
    assert summary["live"]["processes_restarted"] == 0
    assert summary["live"]["interrupted"] is False
    no_process_left(killer.pids)


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
    killer = Killer(5, kills=1)
    _, summary = live([killer], restart=False, workers_per_process=8)
    req = summary["requests"]
    assert summary["live"]["interrupted"] is True
    assert summary["live"]["processes_lost"] == 1
    assert req["lost"] == 0 and req["in_flight"] >= 0
    assert req["completed"] < 406
    no_process_left(killer.pids)
