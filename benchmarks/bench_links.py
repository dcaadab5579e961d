"""The shared links' CPU per call: a replay's calls into the links, made again alone.

Replays the 113 weka-cc-dev sessions once (real think times, 240 sessions an hour, the
default model and cluster, one controller), or with `--azure` the 10,000-request Azure
open loop (one HGX H100, Llama-3.1-70B), recording every call the run makes into its
`workers.kv_links.KvLinks` (`applied` for each plan the store applies, `carried_bytes`
for each metrics period, `add_worker`, `utilisation` at the end) with the loop's time in
nanoseconds. Then makes the same calls at the same virtual times on a fresh `KvLinks` on
a `VirtualEventLoop` (each call schedules the next: the links' own timer fires in
between, as in the run), `--repeat` times, and prints the process CPU time of a repeat
less that of the same schedule with every call left out (the driver alone), per
completed call of the run. Every repeat must give the same results (each copy's end,
the readings, the utilisation, the bytes per path kind); their digest is printed, so
that two trees' digests can be compared.

    python benchmarks/bench_links.py [--controller buffered] [--repeat 5] [--azure]

The replayed stream measures the links alone (no workers wait on the copies here, so a
copy's end moves nothing else), with less noise than the whole replay: A/B comparisons
of storage/links.py and workers/kv_links.py use this figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import (
    AZURE_CONV,
    DEV_TRACES,
    H100_LLAMA_CLUSTER,
    positive_ints,
    shared_missing,
)


class Recorder:
    """Records (loop ns, method name, arguments) of every call into the run's `KvLinks`:
    the run makes a subclass of it whose entry points record and go on (KvLinks may be a
    compiled extension type, whose methods cannot be replaced)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str, tuple]] = []
        self.bound = None
        self.window_s = None
        self._original = None

    def install(self) -> None:
        import workers.runtime
        from workers.kv_links import KvLinks
        calls, recorder = self.calls, self

        def recorded(name: str):
            method = getattr(KvLinks, name)

            def record(links, *args):
                calls.append((asyncio.get_running_loop().time_ns(), name, args))
                return method(links, *args)
            return record

        class RecordedLinks(KvLinks):
            def __init__(self, bound, *args, **kwargs) -> None:
                super().__init__(bound, *args, **kwargs)
                recorder.bound, recorder.window_s = bound, self.window_s

            applied = recorded("applied")
            carried_bytes = recorded("carried_bytes")
            add_worker = recorded("add_worker")
            utilisation = recorded("utilisation")

        self._original = workers.runtime.KvLinks
        workers.runtime.KvLinks = RecordedLinks

    def uninstall(self) -> None:
        import workers.runtime
        workers.runtime.KvLinks = self._original


def replay(recorder: Recorder, drive: bool = True) -> tuple[float, str]:
    """The recorded calls again on a fresh `KvLinks` (with `drive` False, the schedule
    alone); the process CPU seconds and a digest of what the links gave."""
    from workers.kv_links import KvLinks
    from workers.virtual_loop import VirtualEventLoop

    loop = VirtualEventLoop()
    out: list = []
    calls = recorder.calls

    async def main() -> None:
        links = KvLinks(recorder.bound, recorder.window_s)
        done = loop.create_future()
        methods = {name: getattr(links, name) for name in
                   ("applied", "carried_bytes", "add_worker", "utilisation")}
        keep = out.append

        def step(i: int) -> None:
            _, name, args = calls[i]
            if drive:
                got = methods[name](*args)
                if name == "applied":
                    if got is not None:
                        got.add_done_callback(keep)
                elif name == "carried_bytes":
                    keep(sorted(got.items()))
                elif name == "utilisation":
                    keep(sorted((k, sorted(v.items())) for k, v in got.items()))
            i += 1
            if i == len(calls):
                done.set_result(None)
            else:
                loop._call_at_ns(calls[i][0], step, (i,), None)

        loop._call_at_ns(calls[0][0], step, (0,), None)
        await done
        if drive:
            keep(sorted(links.bytes_by_path.items()))

    gc.collect()  # the recorded plans are many: a full collection is no part of the links
    gc.disable()
    try:
        t0 = time.process_time()
        loop.run_until_complete(main())
        seconds = time.process_time() - t0
    finally:
        gc.enable()
    loop.close()
    return seconds, hashlib.sha256(repr(out).encode()).hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--controller", default="buffered")
    ap.add_argument("--repeat", default="5")
    ap.add_argument("--azure", action="store_true",
                    help="the 10,000-request Azure open loop instead of the dev sessions")
    args = ap.parse_args()
    repeat = positive_ints("--repeat", args.repeat)[0]
    trace = AZURE_CONV if args.azure else DEV_TRACES
    missing = shared_missing(trace)
    if missing:
        print(missing)
        return 0
    recorder = Recorder()
    recorder.install()
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from traces.replay import LoadOptions
    if args.azure:
        settings = RunSettings(model="llama-3.1-70b", cluster=str(H100_LLAMA_CLUSTER),
                               controller=args.controller, seed=1,
                               load=LoadOptions(max_sessions=10000))
        prepared = prepare([str(trace)], "azure", settings)
    else:
        settings = RunSettings(controller=args.controller, seed=1,
                               load=LoadOptions(sessions_per_hour=240.0))
        prepared = prepare([str(trace)], "weka", settings)
    _, summary = run_replay(prepared, settings)
    recorder.uninstall()
    calls = summary["requests"]["completed"]
    cpu, digests = [], set()
    for _ in range(repeat):
        base, _ = replay(recorder, drive=False)
        seconds, digest = replay(recorder)
        cpu.append(seconds - base)
        digests.add(digest)
    if len(digests) != 1:
        print(f"the repeats gave different results: {sorted(digests)}", file=sys.stderr)
        return 1
    median = statistics.median(cpu)
    print(f"{'azure' if args.azure else 'dev'} {args.controller}: {calls:,} calls, "
          f"{len(recorder.calls):,} links calls; links CPU {median:.3f} s (median of "
          f"{repeat}: {', '.join(f'{c:.3f}' for c in cpu)}), "
          f"{median / calls * 1e6:.1f} us per call; digest {digests.pop()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
