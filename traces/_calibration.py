"""Quantile tables of the `weka-cc-dev` agent collection, for the synthetic generator.

Regenerate with `python -m traces._calibration traces/data/weka-cc-dev`
and paste the output over the tables below. Each table holds the quantiles
at `QUANTILE_LEVELS` of one marginal; the generator draws from them by
inverse CDF, interpolating in log(1 + x) so heavy tails stay heavy.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

QUANTILE_LEVELS = tuple(np.linspace(0.0, 1.0, 41).round(4).tolist())

# --- generated tables (113 sessions, 6,817 calls) ---
# fmt: off
TABLES: dict[str, tuple[float, ...]] = {
    "main_calls": (
        3, 3.8, 4, 5, 5.2, 6, 8, 9, 12, 15, 17, 17, 19.6, 21.4, 23, 24, 26.8, 29.6, 31.8, 33.4,
        36, 41.8, 45.8, 48.8, 53, 55, 59, 64, 67, 70.2, 74, 78.4, 84, 88.8, 104.6, 122, 134.4,
        166, 229.2, 252, 306
    ),
    "first_input_tokens": (
        9925, 13031, 13835.4, 15431.4, 15708.2, 16591, 16789.4, 17592.4, 17980.2, 18513, 18638,
        18971.2, 19402.4, 19557.6, 19866.2, 20245, 20682.8, 21089, 21379.2, 22548.2, 24282,
        27006, 45432.6, 57544.4, 66134.6, 84685, 88029.8, 89509, 93595.4, 102235, 103296,
        127513, 146088, 156086, 211009, 252230, 291731, 304995, 418672, 497777, 798868
    ),
    "turn_new_tokens": (
        31, 167, 194, 213, 240, 271, 297, 321, 345, 369.65, 392, 420, 449, 474, 507, 542, 572,
        606, 652, 697, 741, 787, 858, 912.55, 998, 1093, 1194.1, 1304, 1461.8, 1628, 1792, 1956,
        2209.8, 2512.2, 2868.5, 3276, 4036.4, 5157.25, 7539, 11882.1, 311103
    ),
    "reset_input_tokens": (
        15549, 19198.4, 20005.5, 21123.4, 21544, 21999.2, 22511.2, 23329.4, 23587.6, 24592.6,
        25644.2, 26145.8, 26602.3, 27554.5, 29271.1, 32717.1, 34913.8, 35527.3, 36059.8,
        36687.6, 37157, 39220.1, 41356.3, 42741.6, 45687.6, 49337.6, 53449.8, 55273.3, 57277.7,
        61055.5, 62742, 67140.2, 69683.6, 70090.2, 71295.7, 78587.6, 87982.1, 89421.3, 90581.6,
        92110, 98664
    ),
    "reset_at_tokens": (
        45100, 70449, 79362.1, 91969.1, 105612, 107131, 114357, 127301, 135073, 136619, 142356,
        144351, 145147, 145570, 145650, 146025, 146488, 147122, 147936, 148341, 148604, 148941,
        149199, 149419, 149692, 150142, 150337, 150423, 151186, 152707, 153028, 153654, 155034,
        155112, 155780, 157855, 158603, 159634, 163532, 163906, 164928
    ),
    "output_tokens": (
        0, 66, 87, 97, 106, 111, 117, 122, 128, 133, 139, 144, 150, 157, 163, 171, 178, 188,
        197, 207, 217, 228, 242, 256.2, 271, 285, 301, 323, 343, 373, 407, 444, 491.8, 544.2,
        608, 699, 874.4, 1138.8, 1597, 2577.6, 13736
    ),
    "think_s": (
        0, 3, 3, 4, 4, 4, 5, 5, 5, 5, 5, 6, 6, 6, 7, 7, 8, 8, 9, 9, 10, 11, 12, 13, 14, 15, 17,
        19, 22, 26, 32, 40, 54, 67, 94, 124, 156, 204, 330.85, 784, 77589
    ),
    "subagent_calls": (
        2, 2.6, 3.2, 3.8, 4, 4, 4, 4.1, 4.4, 4.7, 5, 5.3, 5.6, 5.9, 6.2, 6.5, 6.8, 7, 7, 7, 7,
        7.9, 8.8, 9.7, 10.2, 10.5, 10.8, 11, 11, 11, 11, 11.3, 11.6, 11.9, 12.2, 12.5, 12.8,
        13.4, 14.6, 15.8, 17
    ),
    "subagent_first_input_tokens": (
        8868, 9609.9, 10351.8, 11093.7, 11343.4, 11347, 11350.6, 11382.8, 11472.2, 11561.6,
        11651, 11660.9, 11670.8, 11680.7, 11684.6, 11685.5, 11686.4, 11688.6, 11693.4, 11698.2,
        11703, 11705.1, 11707.2, 11709.3, 11710.8, 11712, 11713.2, 11714.3, 11715.2, 11716.1,
        11717, 11718.5, 11720, 11721.5, 11833, 11999.5, 12166, 12737.8, 14120.2, 15502.6, 16885
    ),
    "subagent_turn_new_tokens": (
        191, 234.5, 293, 380.25, 492.5, 556.375, 576.75, 632.625, 739, 925.5, 942, 1027.75,
        1095, 1197.62, 1505.75, 1824.25, 1975, 2076.75, 2129.5, 2256.25, 2459.5, 2568.12, 2616,
        2720.5, 2898, 3330.12, 3582.75, 3687.25, 4193, 4997.75, 5993.5, 6538.12, 7180, 7766.88,
        10273, 13936.6, 19027.5, 41521.8, 52303.2, 65104.4, 72309
    ),
}
# fmt: on
# --- end of generated tables ---


def compute_tables(path: str) -> dict[str, tuple[float, ...]]:
    from traces.reader import read_sessions

    values: dict[str, list[float]] = {
        name: []
        for name in (
            "main_calls",
            "first_input_tokens",
            "turn_new_tokens",
            "reset_input_tokens",
            "reset_at_tokens",
            "output_tokens",
            "think_s",
            "subagent_calls",
            "subagent_first_input_tokens",
            "subagent_turn_new_tokens",
        )
    }
    for session in read_sessions(path):
        main = [c for c in session.calls if not c.is_subagent]
        values["main_calls"].append(len(main))
        values["first_input_tokens"].append(main[0].input_tokens)
        for prev, call in itertools.pairwise(main):
            if call.reset_before:
                values["reset_input_tokens"].append(call.input_tokens)
                values["reset_at_tokens"].append(prev.input_tokens)
            else:
                values["turn_new_tokens"].append(call.new_tokens)
        subagents: dict[str, list] = {}
        for call in session.calls:
            values["output_tokens"].append(call.output_tokens)
            if call.index > 0:
                values["think_s"].append(call.think_s)
            if call.is_subagent:
                subagents.setdefault(call.agent_id, []).append(call)
        for calls in subagents.values():
            values["subagent_calls"].append(len(calls))
            values["subagent_first_input_tokens"].append(calls[0].input_tokens)
            values["subagent_turn_new_tokens"].extend(c.new_tokens for c in calls[1:])
    return {
        name: tuple(float(x) for x in np.quantile(np.asarray(v, dtype=float), QUANTILE_LEVELS))
        for name, v in values.items()
    }


def main(argv: list[str]) -> None:
    tables = compute_tables(argv[0])
    import textwrap

    print("# fmt: off")
    print("TABLES: dict[str, tuple[float, ...]] = {")
    for name, qs in tables.items():
        body = ", ".join(f"{q:.6g}" for q in qs)
        print(f'    "{name}": (')
        print(textwrap.fill(body, 96, initial_indent=" " * 8, subsequent_indent=" " * 8))
        print("    ),")
    print("}")
    print("# fmt: on")


if __name__ == "__main__":
    main(sys.argv[1:])
