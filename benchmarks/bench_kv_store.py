"""The KV store's CPU per call: a replay's store calls, made again on a store alone.

Replays the 113 weka-cc-dev sessions once (real think times, 240 sessions an hour, the
default model and cluster, one controller), or with `--azure` the 10,000-request Azure
open loop (one HGX H100, Llama-3.1-70B), recording every call the workers, the
router and the runtime make into the KV store (`workers.kv_io`, `workers.kv_policy`,
`BlobStore`'s methods) with their arguments and what the worker's recompute estimate
answered. Then makes the same calls, in the same order, on a fresh store without links,
`--repeat` times, and prints the process CPU time (`time.process_time()`) of the store's
part of a replayed call (the collector off, as the recorded calls would have it
traverse them all): the median (and the least) over the repeats, per completed call of
the run, and per entry point with `--by-entry`. The replayed store must end as the run's did (counters,
every place's blobs in use order with their times, holders, pins, session references):
checked after every repeat, exit status 1 if not.

    python benchmarks/bench_kv_store.py [--controller buffered] [--repeat 5] [--by-entry]
                                        [--max-sessions N] [--azure]

The store's calls carry no wall-clock time of their own (`now_s` is an argument), so a
replayed stream measures only the store's CPU, with less noise from a shared machine than
the whole replay: A/B comparisons of storage/ and workers/kv_*.py use this figure.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.replay_runner import (
    AZURE_CONV,
    DEV_TRACES,
    H100_LLAMA_CLUSTER,
    positive_ints,
    shared_missing,
)

# The store's entry points as the workers import them: (module, names).
_ENTRIES = (
    ("workers.fill", ("fetch", "promote_hot", "release_fetch", "release_handoff",
                      "handoff_fetched", "finish_call")),
    ("workers.decode", ("fetch", "release_fetch", "release_handoff", "finish_call")),
    ("workers.decode_kv", ("release_fetch", "trim_retained")),
    ("workers.mixed", ("release_fetch", "finish_call", "write_through")),
    ("workers.executor", ("release_fetch",)),
    ("workers.runtime", ("resident_bytes",)),
)
_STORE_METHODS = ("match", "holders", "snapshot", "resize", "pin", "unpin", "pinned_bytes",
                  "ref", "release", "plan_fetch", "plan_write", "plan_offload", "plan_evict",
                  "plan_promote", "apply", "hot_blobs", "sessions_referencing")


class _Store:
    """Stands for the store in a recorded call's arguments."""


class _Ref:
    """Stands for an object an earlier recorded call returned (a fetch, a hand-off, a plan)."""

    def __init__(self, index: int) -> None:
        self.index = index


class _Answers:
    """Stands for a recompute estimate: the answers it gave, in order."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def recording(self, fn: Callable[[int], float]) -> Callable[[int], float]:
        def answer(tokens: int) -> float:
            out = fn(tokens)
            self.values.append(out)
            return out

        return answer

    def replaying(self) -> Callable[[int], float]:
        answers = iter(self.values)
        return lambda _tokens: next(answers)


class Recorder:
    """Wraps the entry points; records the calls made outside any other recorded call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Callable, tuple]] = []  # label, function, arguments
        self.store = None
        self._made: dict[int, int] = {}  # id of a returned object -> its call's index
        self._keep: list[object] = []  # keeps those objects alive (their ids stay theirs)
        self._depth = 0
        self._originals: list[tuple[object, str, object]] = []

    def install(self) -> None:
        import importlib

        from storage.plans import TransferPlan
        from storage.store import BlobStore
        from workers.kv_io import FetchResult, Handoff

        self._kinds = (FetchResult, Handoff, TransferPlan)
        init = BlobStore.__init__

        def store_init(store, *args, **kwargs):
            init(store, *args, **kwargs)
            self.store = store

        self._replace(BlobStore, "__init__", store_init)
        for name in _STORE_METHODS:
            self._replace(BlobStore, name, self._wrap(f"store.{name}", getattr(BlobStore, name)))
        for module_name, names in _ENTRIES:
            module = importlib.import_module(module_name)
            for name in names:
                self._replace(module, name, self._wrap(name, getattr(module, name)))

    def _replace(self, owner: object, name: str, value: object) -> None:
        self._originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def uninstall(self) -> None:
        """Put the entry points back (the replayed calls run unwrapped)."""
        for owner, name, value in reversed(self._originals):
            setattr(owner, name, value)
        self._originals.clear()

    def _wrap(self, label: str, fn: Callable) -> Callable:
        def recorded(*args):
            if self._depth:
                return fn(*args)
            kept, live = [], []
            for value in args:
                stand_in = self._stand_in(value)
                kept.append(stand_in)
                live.append(stand_in.recording(value) if isinstance(stand_in, _Answers)
                            else value)
            self._depth += 1
            try:
                out = fn(*live)
            finally:
                self._depth -= 1
            index = len(self.calls)
            self.calls.append((label, fn, tuple(kept)))
            for obj in (out, *(out if type(out) is tuple else ())):
                if isinstance(obj, self._kinds):
                    self._made[id(obj)] = index
                    self._keep.append(obj)
            return out

        return recorded

    def _stand_in(self, value):
        if value is self.store:
            return _Store()
        index = self._made.get(id(value))
        if index is not None:
            return _Ref(index)
        if callable(value) and not isinstance(value, type):
            return _Answers()
        return value


def replay_calls(calls, store, by_entry: dict[str, float] | None) -> float:
    """Make the recorded calls again on ``store``; the CPU seconds they took (one clock
    reading around them all, or around each call for ``by_entry``, which adds the clock's
    own cost to every call)."""
    prepared = []
    for fn, args in ((fn, args) for _, fn, args in calls):
        live, refs = [], []
        for position, value in enumerate(args):
            if isinstance(value, _Store):
                value = store
            elif isinstance(value, _Ref):
                refs.append((position, value.index))
            elif isinstance(value, _Answers):
                value = value.replaying()
            live.append(value)
        prepared.append((fn, live, refs))
    made: list[object] = [None] * len(calls)

    def run(index: int, fn: Callable, live: list, refs: list) -> None:
        for position, ref in refs:
            out = made[ref]
            # a hand-off comes back inside write_for_handoff's (chain, hand-off)
            live[position] = out[1] if type(out) is tuple else out
        made[index] = fn(*live)

    clock = time.process_time
    # The recorded calls are many: a full collection of them is no part of the store.
    gc.collect()
    gc.disable()
    try:
        if by_entry is None:
            t0 = clock()
            for index, (fn, live, refs) in enumerate(prepared):
                run(index, fn, live, refs)
            return clock() - t0
        total = 0.0
        for index, (fn, live, refs) in enumerate(prepared):
            t0 = clock()
            run(index, fn, live, refs)
            seconds = clock() - t0
            total += seconds
            label = calls[index][0]
            by_entry[label] = by_entry.get(label, 0.0) + seconds
        return total
    finally:
        gc.enable()


def state(store) -> tuple:
    """What a replayed store must end with."""
    placement = store.placement
    return (store.snapshot(),
            {loc: list(blobs.items()) for loc, blobs in placement.at.items()},
            dict(placement.copies), dict(placement.capacity_bytes),
            store.pin_counts(),
            {s: frozenset(b) for s, b in store._refs.items()}, len(store.index))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--controller", default="buffered")
    ap.add_argument("--repeat", default="5")
    ap.add_argument("--max-sessions", default=None)
    ap.add_argument("--by-entry", action="store_true")
    ap.add_argument("--azure", action="store_true",
                    help="the 10,000-request Azure open loop instead of the dev sessions")
    args = ap.parse_args()
    repeat = positive_ints("--repeat", args.repeat)[0]
    max_sessions = (positive_ints("--max-sessions", args.max_sessions)[0]
                    if args.max_sessions is not None else None)
    trace = AZURE_CONV if args.azure else DEV_TRACES
    missing = shared_missing(trace)
    if missing:
        print(missing)
        return 0
    recorder = Recorder()
    recorder.install()
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from storage.store import BlobStore
    from traces.replay import LoadOptions

    limit = {"max_sessions": max_sessions} if max_sessions else {}
    if args.azure:
        settings = RunSettings(model="llama-3.1-70b", cluster=str(H100_LLAMA_CLUSTER),
                               controller=args.controller, seed=1,
                               load=LoadOptions(**(limit or {"max_sessions": 10000})))
        prepared = prepare([str(trace)], "azure", settings)
    else:
        settings = RunSettings(controller=args.controller, seed=1,
                               load=LoadOptions(sessions_per_hour=240.0, **limit))
        prepared = prepare([str(trace)], "weka", settings)
    _, summary = run_replay(prepared, settings)
    recorder.uninstall()
    calls = summary["requests"]["completed"]
    run_store = recorder.store
    expected = state(run_store)
    layout = run_store.layout
    block_tokens = run_store.index.block_tokens
    per_token = run_store.index.kv_bytes_per_token
    # The calls again, on stores without links (unwrapped: the recorder recorded `fn`).
    cpu = []
    by_entry: dict[str, float] | None = {} if args.by_entry else None
    for _ in range(repeat):
        store = BlobStore(layout, block_tokens, per_token)
        seconds = replay_calls(recorder.calls, store, by_entry)
        if state(store) != expected:
            print("the replayed store does not end as the run's did", file=sys.stderr)
            return 1
        cpu.append(seconds)
    median = statistics.median(cpu)
    print(f"{'azure' if args.azure else 'dev'} {args.controller}: {calls:,} calls, {len(recorder.calls):,} store calls; store CPU "
          f"{median:.3f} s (median of {repeat}: {', '.join(f'{c:.3f}' for c in cpu)}), "
          f"{median / calls * 1e6:.1f} us per call (least {min(cpu) / calls * 1e6:.1f})")
    if by_entry is not None:
        for label, seconds in sorted(by_entry.items(), key=lambda kv: -kv[1]):
            print(f"  {label:>24}: {seconds / repeat / calls * 1e6:7.1f} us per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
