"""Live mode under signals and silence: SIGTERM/SIGINT stop the run with a summary of
the calls in flight and leave no process behind; a stopped (silent) worker process is
found by its missing heartbeats. Marked slow: each runs seconds of wall time.

Each signal is sent on an event of the run (the worker processes started, a call
completed, read from the run's /metrics), never after a fixed sleep: on a busy machine
the run gets there later, and the test waits for it (up to a generous limit that only
guards against a hang)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from orchestrator.run.settings import DEFAULT_CLUSTER
from workers.cluster_toml import load_cluster

pytestmark = pytest.mark.slow

# The default preset's workers, one process each at the default --workers-per-process 1.
WORKERS = sum(p.workers for p in load_cluster(DEFAULT_CLUSTER).pools)

CLI = [sys.executable, "-m", "orchestrator.cli"]
# A heartbeat timeout no busy machine reaches (only a hang would): no process is lost but
# by the test's own doing. The silent process's test finds it with a shorter one.
# No wait for a last scrape after the run (--metrics-linger 0) but where a test scrapes.
LIVE = ["--clock", "live", "--speed", "100", "--think-scale", "0.01", "--no-progress",
        "--json", "--heartbeat-timeout", "30", "--metrics-linger", "0"]


def children(pid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def wait_for_children(proc, n, timeout_s=30.0, poll_s=0.1):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        kids = children(proc.pid)
        if len(kids) >= n:
            return kids
        time.sleep(poll_s)
    raise AssertionError(f"only {children(proc.pid)} started")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def completed_calls(port):
    """The run's completed calls from its /metrics; None before it serves them."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("tokenfactory_requests_completed_total")]
    return sum(values) if values else None


def wait_for_a_completed_call(proc, port, timeout_s=120.0, poll_s=0.05):
    """Returns once the run has completed a call: its processes connected and serving."""
    end = time.monotonic() + timeout_s  # wall-clock ok: a guard against a hang
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended first: {proc.communicate()[1][-2000:]}")
        if (completed_calls(port) or 0) > 0:
            return
        time.sleep(poll_s)
    raise AssertionError(f"no call completed within {timeout_s:g} s")


def gone(pids):
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize(("command", "sig", "status"), [
    (["replay", "--max-sessions", "4"], signal.SIGTERM, 143),
    (["replay", "--max-sessions", "4"], signal.SIGINT, 130),  # as a virtual run's Ctrl-C
    (["serve"], signal.SIGINT, 0),  # serve runs until a signal: that is its end
])
def test_a_signal_stops_the_run_reports_calls_in_flight_and_leaves_no_process(command, sig,
                                                                              status):
    port = free_port()
    proc = subprocess.Popen([*CLI, *command, *LIVE, "--metrics-port", str(port),
                             "--metrics-linger", "120"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids = wait_for_children(proc, WORKERS)
    wait_for_a_completed_call(proc, port)
    proc.send_signal(sig)
    last_scrape = None  # scrape until the command exits: it waits for one after the run
    while proc.poll() is None:
        value = completed_calls(port)
        last_scrape = value if value is not None else last_scrape
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    summary = json.loads(out)
    req = summary["requests"]
    assert summary["live"]["interrupted"] is True
    assert summary["live"]["signal"] == signal.Signals(sig).name
    assert last_scrape == req["completed"]  # the final count, served before the exit
    assert req["lost"] == 0 and req["completed"] > 0
    assert req["in_flight"] == req["submitted"] - req["completed"] - req["rejected"]
    assert f"signal={signal.Signals(sig).name!r}" in err
    gone(kids)


def test_a_silent_worker_process_is_lost_by_its_heartbeats_and_replaced():
    port = free_port()
    proc = subprocess.Popen([*CLI, "replay", "--max-sessions", "2", *LIVE,
                             "--heartbeat-timeout", "3", "--metrics-port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids = wait_for_children(proc, WORKERS)
    wait_for_a_completed_call(proc, port)  # every process connected: the run has begun
    os.kill(kids[-1], signal.SIGSTOP)  # alive, connected, silent
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["requests"]["completed"] == summary["requests"]["submitted"] == 406
    assert summary["live"]["processes_lost"] == 1 and summary["live"]["processes_restarted"] == 1
    assert "reason='silent for" in err
    gone(kids)


def test_six_sessions_with_a_worker_process_killed_right_after_spawn_complete_every_call():
    # The operator's run of issue 16: six agent sessions at speed 500, one worker process
    # killed with SIGKILL as soon as this test sees it spawned: it is started again and the
    # run completes as many calls as the virtual replay of the same sessions. Whether it
    # had connected by then depends on how soon this test saw it (printed, not asserted);
    # test_live_faults kills a process before it can connect, on the spawn event itself.
    args = ["replay", "--max-sessions", "6", "--think-scale", "0.01", "--no-progress",
            "--json"]
    virtual = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    assert virtual.returncode == 0, virtual.stderr
    calls = json.loads(virtual.stdout)["requests"]["completed"]
    proc = subprocess.Popen([*CLI, *args, "--clock", "live", "--speed", "500",
                             "--heartbeat-timeout", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = wait_for_children(proc, 1, poll_s=0.002)[0]
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    req, live = summary["requests"], summary["live"]
    assert req["completed"] == req["submitted"] == calls
    assert req["lost"] == 0 and live["ledger"]["lost"] == 0
    assert live["processes_lost"] == 1 and live["processes_restarted"] == 1
    [lost] = [line for line in err.splitlines() if "event='worker_process_lost'" in line]
    print(lost)
    gone([victim])


def test_a_run_left_without_workers_stops_with_every_call_accounted_for_and_exit_1():
    # One process hosts every worker and is not started again: killed, the run cannot end.
    port = free_port()
    proc = subprocess.Popen([*CLI, "replay", "--max-sessions", "2", *LIVE, "--no-restart",
                             "--workers-per-process", str(WORKERS), "--metrics-port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    [victim] = wait_for_children(proc, 1)
    wait_for_a_completed_call(proc, port)  # connected and serving
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    summary = json.loads(out)
    live, req = summary["live"], summary["requests"]
    assert live["stop_reason"].startswith("worker process 1 given up after 1 starts")
    assert "event='no_workers_left'" in err
    ledger = live["ledger"]
    assert ledger["lost"] == 0 and req["in_flight"] == ledger["in_flight"]
    assert ledger["completed"] + ledger["rejected"] + ledger["in_flight"] == \
        ledger["issued"] == req["submitted"]
    gone([victim])
