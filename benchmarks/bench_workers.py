"""Ten thousand requests through a small cluster in virtual time.

Prints wall time, simulated seconds per wall second and worker events per
second. Target: under 5 s of wall time on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from costmodel.model import load_model
from tests.factories import small_cluster
from workers.clock import VirtualClock
from workers.request import Request
from workers.runtime import ClusterRuntime

N_REQUESTS = int(__import__("os").environ.get("BENCH_N", 10_000))
RATE_PER_S = 4.0  # below the small cluster's capacity for these sizes


def requests(rng: np.random.Generator) -> list[tuple[float, Request]]:
    gaps = rng.exponential(1 / RATE_PER_S, N_REQUESTS)
    inputs = rng.integers(256, 8192, N_REQUESTS)
    outputs = rng.integers(16, 400, N_REQUESTS)
    out, t = [], 0.0
    for i in range(N_REQUESTS):
        t += float(gaps[i])
        blocks = tuple(range(i * 1000, i * 1000 + int(inputs[i]) // 64))
        out.append((t, Request(i, f"s{i}", int(inputs[i]), int(outputs[i]), blocks)))
    return out


async def drive(work: list[tuple[float, Request]]) -> ClusterRuntime:
    rt = ClusterRuntime(small_cluster().bind(load_model("llama-3.1-70b")), block_tokens=64)
    rt.start()
    loop = asyncio.get_running_loop()
    fills = list(rt.fill_workers)
    for i, (at_s, req) in enumerate(work):
        if at_s > loop.time():
            await asyncio.sleep(at_s - loop.time())
        req.arrival_s = loop.time()
        rt.submit_fill(fills[i % len(fills)], req, loop.time())
    while len(rt.done) < len(work):
        await asyncio.sleep(1.0)
    await rt.stop()
    return rt


def main() -> None:
    work = requests(np.random.default_rng(7))
    wall0 = time.perf_counter()
    clock = VirtualClock()
    rt = clock.run(drive(work))
    wall_s = time.perf_counter() - wall0
    sim_s = max(r.done_s for r in rt.done)
    ttft = np.array([r.ttft_s for r in rt.done])
    print(f"requests completed      {len(rt.done):,}")
    print(f"wall time               {wall_s:.2f} s   (target < 5 s)")
    print(f"simulated time          {sim_s:,.0f} s")
    print(f"simulated s per wall s  {sim_s / wall_s:,.0f}")
    print(f"worker events           {rt.log.count:,}   ({rt.log.count / wall_s:,.0f} per wall s)")
    print(f"TTFT p50/p99            {np.percentile(ttft, 50):.3f} / {np.percentile(ttft, 99):.3f} s")


if __name__ == "__main__":
    main()
