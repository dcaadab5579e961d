"""Why the model does not reproduce an essay finding: the figures behind a "no".

`costmodel.worked_example.check_findings` judges each finding; for one that does
not hold, these functions say, from the same sweep, what the model finds instead
and by how much: for a layout claim, what the best layout the claim allows gives
against the model's own pick; for the others, the figures the verdict rests on.
Nothing here judges: every sentence is a measurement of the sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from costmodel.phase import Phase


def _layout(c: dict, i: int) -> str:
    return f"PP{c['pp'][i]} TP{c['tp'][i]} EP{c['ep'][i]} b{c['batch'][i]}"


def _metric(c: dict, i: int, fastest: bool) -> str:
    if fastest:
        return f"{c['ttft_or_tpot_s'][i] * 1e3:,.2f} ms"
    return f"{c['tokens_per_s_per_gpu'][i]:,.0f} tok/s/GPU"


def layout_why(c: dict, misses: Sequence[tuple[str, str, int, int, int]], fastest: bool,
               test: Callable[[int, str], bool]) -> str:
    """For the frontiers whose pick breaks a layout claim ((workload, hardware, pick,
    workload index, hardware index) each): how the best layout the claim allows, among
    every configuration that fits, compares with the model's pick."""
    losses, example, unfit = [], "", []
    for w, h, pick, wi, hi in misses:
        rows = np.flatnonzero((c["workload"] == wi) & (c["hardware"] == hi)
                              & c["fits"].astype(bool))
        allowed = [int(i) for i in rows if test(int(i), h)]
        if not allowed:
            unfit.append(f"{w}/{h}")
            continue
        if fastest:
            best = min(allowed, key=lambda i: c["ttft_or_tpot_s"][i])
            loss = c["ttft_or_tpot_s"][best] / c["ttft_or_tpot_s"][pick] - 1.0
        else:
            best = max(allowed, key=lambda i: c["tokens_per_s_per_gpu"][i])
            loss = 1.0 - c["tokens_per_s_per_gpu"][best] / c["tokens_per_s_per_gpu"][pick]
        losses.append(loss)
        if not example:
            example = (f"{w}/{h}: the model's pick {_layout(c, pick)} gives "
                       f"{_metric(c, pick, fastest)}, the claim's best {_layout(c, best)} "
                       f"{_metric(c, best, fastest)}")
    parts = []
    if losses:
        what = "slower" if fastest else "fewer tok/s/GPU"
        span = (f"{min(losses):.0%}" if len(losses) == 1 or np.isclose(min(losses), max(losses))
                else f"{min(losses):.0%}-{max(losses):.0%}")
        parts.append(f"where it disagrees the layouts the claim allows are {span} {what} "
                     f"({example})")
    if unfit:
        parts.append(f"no layout the claim allows fits in HBM on {', '.join(unfit)}")
    return "; ".join(parts)


def gb200_why(c: dict, names: Sequence[str], combined: np.ndarray) -> str:
    """Who holds each end of the combined decode frontier."""
    rows = np.flatnonzero(combined)
    fast = rows[c["ttft_or_tpot_s"][rows] <= c["ttft_or_tpot_s"][rows].min() * (1 + 1e-6)]
    best = rows[np.argmax(c["tokens_per_s_per_gpu"][rows])]
    fast_hw = sorted({names[int(c["hardware"][i])] for i in fast})
    return (f"the highest-throughput end is {names[int(c['hardware'][best])]}'s "
            f"({c['tokens_per_s_per_gpu'][best]:,.0f} tok/s/GPU); at the lowest TPOT "
            f"({c['ttft_or_tpot_s'][fast[0]] * 1e3:.2f} ms) {', '.join(fast_hw)} "
            f"{'tie' if len(fast_hw) > 1 else 'leads'}")


def energy_why(c: dict, front: np.ndarray, by_phase: dict[Phase, list[int]],
               energy: dict[Phase, float]) -> str:
    """Each phase's cheapest frontier query, as energy per token x tokens per query."""
    out = []
    for p in sorted(energy, key=energy.get, reverse=True):
        rows = np.flatnonzero(front & np.isin(c["workload"], by_phase[p]))
        i = rows[np.argmin(c["energy_per_query_j"][rows])]
        tokens = c["energy_per_query_j"][i] / c["energy_per_token_j"][i]
        out.append(f"{p.name.lower()} {c['energy_per_token_j'][i]:.3f} J/token x "
                   f"{tokens:,.0f} tokens = {c['energy_per_query_j'][i]:,.0f} J")
    return "a query's energy is its tokens times the energy per token: " + "; ".join(out)


def hbm_why(c: dict, front: np.ndarray, line_bytes: float) -> str:
    """What the frontier's resident HBM is made of, at its smallest."""
    rows = np.flatnonzero(front)
    i = rows[np.argmin(c["weight_bytes_per_gpu"][rows])]
    over = rows[c["weight_bytes_per_gpu"][rows] >= line_bytes]
    return (f"weights alone take {c['weight_bytes_per_gpu'][i] / 1e9:,.0f} GB per GPU at the "
            f"least ({_layout(c, i)}, {int(c['gpus'][i])} GPUs), and "
            f"{len(over)} of {len(rows)} frontier points hold {line_bytes / 1e9:g} GB of "
            "weights per GPU or more before any KV")
