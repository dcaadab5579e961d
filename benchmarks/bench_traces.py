"""Trace reading speed and memory: prints measured figures, asserts nothing.

Run: .venv/bin/python benchmarks/bench_traces.py [TRACE_DATA_DIR]  (default: traces/data)
"""

from __future__ import annotations

import gzip
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traces import read_sessions  # noqa: E402
from traces.stats import compute_stats  # noqa: E402


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def count(path) -> tuple[int, int, int]:
    sessions = calls = blocks = 0
    for session in read_sessions(path):
        sessions += 1
        calls += len(session.calls)
        blocks += sum(len(c.block_ids) for c in session.calls)
    return sessions, calls, blocks


def write_generated(path: Path, n_requests: int) -> None:
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{"format":"tokenfactory-trace","version":1,"block_size":64}\n')
        for i in range(n_requests):
            s, k = divmod(i, 10)
            ids = ",".join(str(s * 100 + j) for j in range(k + 1))
            f.write(
                f'{{"session":"s{s}","input_tokens":{64 * (k + 1)},"output_tokens":5,'
                f'"think_s":1.0,"block_ids":[{ids}]}}\n'
            )


def peak_traced_bytes(path: Path) -> int:
    tracemalloc.start()
    try:
        for _ in read_sessions(path):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "traces" / "data"
    weka = shared / "weka-cc-dev"
    if not weka.is_dir():
        print(f"skipped: {weka} not found (the data sets ship in traces/data)")
        return
    seconds, (sessions, calls, blocks) = timed(lambda: count(weka))
    print(
        f"weka-cc-dev read: {seconds:.3f} s for {sessions} sessions, {calls:,} calls, "
        f"{blocks:,} block ids ({calls / seconds:,.0f} calls/s, {blocks / seconds:,.0f} ids/s)"
    )
    seconds, _ = timed(lambda: compute_stats(read_sessions(weka)))
    print(f"weka-cc-dev stats: {seconds:.3f} s")
    for name in ("mooncake/synthetic_trace.jsonl", "azure-2023/AzureLLMInferenceTrace_conv.csv"):
        seconds, (sessions, calls, _) = timed(lambda name=name: count(shared / name))
        print(
            f"{name} read: {seconds:.3f} s for {sessions:,} sessions, {calls:,} calls "
            f"({calls / seconds:,.0f} calls/s)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        sizes = (20_000, 200_000)
        peaks = []
        for n in sizes:
            path = Path(tmp) / f"gen{n}.jsonl.gz"
            write_generated(path, n)
            seconds, _ = timed(lambda path=path: count(path), repeat=1)
            peaks.append(peak_traced_bytes(path))
            print(
                f"generated native trace, {n:,} requests: read in {seconds:.2f} s "
                f"({n / seconds:,.0f} calls/s), peak traced memory {peaks[-1] / 1e6:.2f} MB"
            )
        print(
            f"flat memory: {sizes[1] // sizes[0]}x the requests, "
            f"{peaks[1] / peaks[0]:.2f}x the peak memory"
        )


if __name__ == "__main__":
    main()
