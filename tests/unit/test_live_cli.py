"""Live mode's command line: bad input is one line and exit status 2, and every worker
process started before the error is stopped."""

import asyncio
import os
import socket

import pytest

from orchestrator.cli import main
from orchestrator.run.settings import DEFAULT_CLUSTER
from workers.cluster_toml import load_cluster

# The default preset's workers, one process each at --workers-per-process 1.
WORKERS = sum(p.workers for p in load_cluster(DEFAULT_CLUSTER).pools)
BASE = ["replay", "--clock", "live", "--max-sessions", "1", "--think-scale", "0.01",
        "--no-progress", "--json"]


def one_error_line(capsys, code, *needles):
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("speed", ["0", "-2", "nan", "fast"])
def test_speed_must_be_positive(capsys, speed):
    with pytest.raises(SystemExit) as exc:
        main([*BASE, "--speed", speed])
    one_error_line(capsys, exc.value.code, "--speed", "positive")


@pytest.mark.parametrize("args, most", [(["--speed", "1e8"], "at most 1000 "),
                                        (["--speed", "1001"], "at most 1000 "),
                                        (["--speed", "3000", "--fast-period", "2"],
                                         "at most 2000 ")])
def test_speed_whose_timer_tick_passes_the_fast_period_is_refused(capsys, tmp_path, args,
                                                                    most):
    """Faster, a live timer's 1 ms wall tick spans more than a fast period of loop time
    (at 1e8 a run never ended); nothing is started."""
    code = main([*BASE, *args, "--out", str(tmp_path / "never")])
    one_error_line(capsys, code, "--speed", "fast period", most)
    assert not (tmp_path / "never").exists()


def test_serve_refuses_the_same_speeds(capsys):
    code = main(["serve", "--speed", "1e5", "--max-sessions", "1", "--no-progress"])
    one_error_line(capsys, code, "--speed 100000", "at most 1000 ")


def test_workers_per_process_must_be_positive(capsys):
    with pytest.raises(SystemExit) as exc:
        main([*BASE, "--workers-per-process", "0"])
    one_error_line(capsys, exc.value.code, "--workers-per-process")


def test_more_worker_processes_than_allowed_is_refused(capsys):
    code = main([*BASE, "--max-worker-procs", "3"])
    assert WORKERS > 3
    one_error_line(capsys, code, f"{WORKERS} workers need {WORKERS} worker processes",
                   "--max-worker-procs 3")


def test_a_live_port_in_use_is_refused(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main([*BASE, "--live-port", str(port)])
    one_error_line(capsys, code, f"--live-port {port}", "already in use")


def test_a_non_loopback_live_host_needs_an_explicit_option(capsys):
    code = main([*BASE, "--live-port", "1234", "--live-host", "0.0.0.0"])
    one_error_line(capsys, code, "not loopback", "--live-allow-remote")


def test_serve_refuses_the_virtual_clock(capsys):
    code = main(["serve", "--clock", "virtual"])
    one_error_line(capsys, code, "serve runs on the live clock only")


def test_a_process_that_cannot_start_stops_those_already_started(capsys, monkeypatch):
    real = asyncio.create_subprocess_exec
    started = []

    async def spawn(*args, **kwargs):
        if len(started) == 2:
            raise OSError(11, "Resource temporarily unavailable")
        proc = await real(*args, **kwargs)
        started.append(proc.pid)
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
    code = main([*BASE, "--speed", "10"])
    one_error_line(capsys, code, f"cannot start worker process 3 of {WORKERS}",
                   "temporarily unavailable")
    assert len(started) == 2
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
