"""How far two check_identical.py recordings are apart, when they are not identical.

`check_identical.py compare` names the first fields that differ; a change that is not
meant to be value for value (a named change: the same model, different rounding) needs
the size of the difference instead. For every run recorded in both folders this prints
the events and calls of each, the relative difference of the summary's TTFT p50 / p99,
TPOT p99, throughput and goodput, and over the calls (matched by call id): how many have
a different time to first token or end, and the largest and the p99 absolute difference
of their TTFT and end-to-end latency.

    python benchmarks/result_drift.py REFERENCE_DIR NEW_DIR [--only NAME,...]
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

CALL_ID, ARRIVAL, FIRST_TOKEN, DONE = 0, 5, 12, 13  # check_identical.CALL_FIELDS' places


def _rel(a: str, b: str) -> str:
    x, y = float(a), float(b)
    if x == y:
        return "0"
    return f"{(y - x) / abs(x):+.2e}" if x else f"{y!r} (ref 0)"


def _p99(values: list[float]) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(0.99 * len(values)))]


def drift(ref: dict, new: dict) -> str:
    rs, ns = ref["summary"], new["summary"]
    parts = [f"events {ref['events']:,} -> {new['events']:,}",
             f"calls {len(ref['calls']):,} -> {len(new['calls']):,}"]
    for label, keys in (("TTFT p50", ("ttft_s", "p50")), ("TTFT p99", ("ttft_s", "p99")),
                        ("TPOT p99", ("tpot_s", "p99")),
                        ("throughput", ("throughput", "output_tokens_per_s")),
                        ("goodput", ("goodput", "output_tokens_per_s"))):
        a, b = rs, ns
        for k in keys:
            a, b = a.get(k, {}), b.get(k, {})
        if isinstance(a, str) and isinstance(b, str):
            parts.append(f"{label} {_rel(a, b)}")
    old_calls = {c[CALL_ID]: c for c in ref["calls"]}
    changed, d_ttft, d_e2e = 0, [], []
    for c in new["calls"]:
        o = old_calls.get(c[CALL_ID])
        if o is None:
            continue
        if o[FIRST_TOKEN] != c[FIRST_TOKEN] or o[DONE] != c[DONE]:
            changed += 1
        if None in (o[FIRST_TOKEN], c[FIRST_TOKEN], o[DONE], c[DONE]):
            continue  # a call not served (the counts above say how many)
        arrive_o, arrive_n = float(o[ARRIVAL]), float(c[ARRIVAL])
        d_ttft.append(abs((float(c[FIRST_TOKEN]) - arrive_n) - (float(o[FIRST_TOKEN]) - arrive_o)))
        d_e2e.append(abs((float(c[DONE]) - arrive_n) - (float(o[DONE]) - arrive_o)))
    parts.append(f"calls with other times {changed:,}")
    if d_ttft:
        parts.append(f"|dTTFT| max {max(d_ttft):.3g} s, p99 {_p99(d_ttft):.3g} s")
        parts.append(f"|d latency| max {max(d_e2e):.3g} s, p99 {_p99(d_e2e):.3g} s")
    return "; ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reference", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--only", default=None, help="run names, comma-separated")
    args = ap.parse_args()
    for folder in (args.reference, args.new):
        if not folder.is_dir():
            print(f"result_drift: {folder} is not a folder", file=sys.stderr)
            return 2
    names = sorted(p.stem for p in args.new.glob("*.pkl")
                   if (args.reference / p.name).exists())
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    for name in names:
        ref = pickle.loads((args.reference / f"{name}.pkl").read_bytes())
        new = pickle.loads((args.new / f"{name}.pkl").read_bytes())
        print(f"{name:>16}: {drift(ref, new)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
