"""The KV store's CPU per call against the length of the session's chain.

A call's store work should not grow with its context (issue 36). This builds sessions
whose chains hold 10, 50 and 200 blobs, then makes each session's next calls as a
disaggregated call under the default `offload` policy makes them (`workers.kv_io`: the
fill worker fetches the prefix from host memory, releases its fetch and writes its KV
pinned for the hand-off; the decode worker fetches from the fill worker's HBM, releases
the hand-off, and at its end writes its output's blocks and offloads the chain), on a
store without links and with room everywhere (no evictions: the common case). It prints
the process CPU time (`time.process_time()`, the collector off) of one such call, the
least of `--repeat` rounds, and its ratio to the shortest chain's: flat is the target.

    python benchmarks/bench_kv_chain.py [--lengths 10,50,200] [--sessions 40] [--calls 6]
                                        [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import positive_ints

GB = 1 << 30
NEW_BLOCKS = 4  # a turn's new input blocks
OUT_BLOCKS = 2  # its output's full blocks


def _store():
    from storage.store import BlobStore
    from storage.tiers import Location, StoreLayout, Tier, TierSpec

    fill, decode = Location(Tier.HBM, "fill-0"), Location(Tier.HBM, "decode-0")
    host, pfs = Location(Tier.DRAM, "n0"), Location(Tier.PFS, "pfs")
    layout = StoreLayout.build([
        (fill, TierSpec(Tier.HBM, 10_000 * GB, 3000 * GB, 3000 * GB), host),
        (decode, TierSpec(Tier.HBM, 10_000 * GB, 3000 * GB, 3000 * GB), host),
        (host, TierSpec(Tier.DRAM, 100_000 * GB, 50 * GB, 50 * GB), pfs),
        (pfs, TierSpec(Tier.PFS, 1_000_000 * GB, 5 * GB, 5 * GB), None),
    ])
    return BlobStore(layout, block_tokens=16, kv_bytes_per_token=1000), fill, decode, host


def _session(index: int, calls: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """A session's calls: (input ids, write-back ids), each input resending the last
    call's write-back (its input and output) and adding a turn, as `KnownIds` say."""
    from storage.blobs import KnownIds

    base = (index + 1) * 1_000_000
    inputs = []
    ids: tuple[int, ...] = ()
    for _ in range(calls + 1):
        ids = ids + tuple(range(base + len(ids), base + len(ids) + NEW_BLOCKS))
        inputs.append(ids)
        ids = ids + tuple(range(base + len(ids), base + len(ids) + OUT_BLOCKS))
    out = []
    for k in range(calls):
        back = inputs[k] + tuple(range(base + len(inputs[k]),
                                       base + len(inputs[k]) + OUT_BLOCKS))
        out.append((inputs[k], KnownIds.of(back, inputs[k], inputs[k + 1])))
    return out


def _call(store, sid, input_ids, back_ids, fill, decode, host, now_s) -> None:
    from workers import kv_io

    got = kv_io.fetch(store, input_ids, fill, now_s, None)
    if hasattr(kv_io, "handoff_fetched"):
        _, handoff = kv_io.handoff_fetched(store, got, sid, input_ids, fill, host, now_s)
    else:  # (a tree before it: the same calls, one by one)
        kv_io.release_fetch(store, fill, got)
        _, handoff = kv_io.write_for_handoff(store, sid, input_ids, fill, host, now_s)
    got = kv_io.fetch(store, input_ids, decode, now_s + 0.5, None)
    kv_io.release_handoff(store, handoff, now_s + 0.5)
    kv_io.release_fetch(store, decode, got)
    kv_io.write_and_offload(store, sid, back_ids, decode, host, now_s + 1.0)


def per_call_us(length: int, sessions: int, calls: int) -> tuple[float, int]:
    """CPU microseconds of one call once each session's chain holds ``length`` blobs
    (each call adds two: its turn and its output), and the chain's length after."""
    store, fill, decode, host = _store()
    warm = length // 2
    plans = [_session(s, warm + calls) for s in range(sessions)]
    now = 0.0
    for k in range(warm):
        for s, plan in enumerate(plans):
            now += 1.0
            _call(store, f"s{s}", *plan[k], fill, decode, host, now)
    clock = time.process_time
    gc.collect()
    gc.disable()
    try:
        t0 = clock()
        for k in range(warm, warm + calls):
            for s, plan in enumerate(plans):
                now += 1.0
                _call(store, f"s{s}", *plan[k], fill, decode, host, now)
        seconds = clock() - t0
    finally:
        gc.enable()
    chain = store.index.match(plans[0][-1][1]).blob_ids
    return seconds / (sessions * calls) * 1e6, len(chain)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="10,50,200")
    ap.add_argument("--sessions", default="40")
    ap.add_argument("--calls", default="6")
    ap.add_argument("--repeat", default="3")
    args = ap.parse_args()
    lengths = positive_ints("--lengths", args.lengths)
    sessions = positive_ints("--sessions", args.sessions)[0]
    calls = positive_ints("--calls", args.calls)[0]
    repeat = positive_ints("--repeat", args.repeat)[0]
    first = None
    for length in lengths:
        runs = [per_call_us(length, sessions, calls) for _ in range(repeat)]
        best = min(us for us, _ in runs)
        first = first or best
        print(f"chain {length:>4} blobs (to {runs[0][1]}): {best:7.1f} us per call "
              f"(least of {repeat}: {', '.join(f'{us:.1f}' for us, _ in runs)}), "
              f"x{best / first:.2f} the first")
    return 0


if __name__ == "__main__":
    sys.exit(main())
