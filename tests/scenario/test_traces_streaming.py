"""Readers stream: memory stays flat however long the trace."""

import gzip
import subprocess
import sys
import tracemalloc

import pytest

from traces import read_sessions

CALLS_PER_SESSION = 10
# Peak traced memory while reading; a reader that kept what it read would
# need hundreds of bytes per call (over 100 MB at 1,000,000 calls).
FLAT_BYTES = 4_000_000


def write_generated_trace(path, n_requests: int) -> None:
    """A native trace of `n_requests` small calls, written line by line."""
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{"format":"tokenfactory-trace","version":1,"block_size":64}\n')
        for i in range(n_requests):
            s, k = divmod(i, CALLS_PER_SESSION)
            ids = ",".join(str(s * 100 + j) for j in range(k + 1))
            f.write(
                f'{{"session":"s{s}","input_tokens":{64 * (k + 1) + 10},"output_tokens":5,'
                f'"think_s":{1.5 if k else 0},"block_ids":[{ids}]}}\n'
            )


def peak_bytes_reading(path) -> tuple[int, int]:
    tracemalloc.start()
    try:
        calls = 0
        for session in read_sessions(path):
            calls += len(session.calls)
        return calls, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_flat_on_a_short_generated_trace(tmp_path):
    path = tmp_path / "short.jsonl.gz"
    write_generated_trace(path, 5_000)
    calls, peak = peak_bytes_reading(path)
    assert calls == 5_000
    assert peak < FLAT_BYTES


READ_AND_REPORT_RSS = """
import resource, sys
from traces import read_sessions
calls = sum(len(s.calls) for s in read_sessions(sys.argv[1]))
print(calls, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_rss_kib_reading(path) -> tuple[int, int]:
    """Calls read and peak resident memory of a fresh interpreter reading `path`."""
    out = subprocess.run(
        [sys.executable, "-c", READ_AND_REPORT_RSS, str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


@pytest.mark.slow
def test_memory_is_flat_on_a_generated_trace_of_a_million_requests(tmp_path):
    # tracemalloc would multiply the run time; peak RSS of a child is exact enough.
    short, long = tmp_path / "short.jsonl.gz", tmp_path / "long.jsonl.gz"
    write_generated_trace(short, 1_000)
    write_generated_trace(long, 1_000_000)
    short_calls, short_kib = peak_rss_kib_reading(short)
    long_calls, long_kib = peak_rss_kib_reading(long)
    assert (short_calls, long_calls) == (1_000, 1_000_000)
    assert long_kib - short_kib < FLAT_BYTES // 1024
