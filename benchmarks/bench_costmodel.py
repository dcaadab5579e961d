"""Speed of the vectorised phase cost and of the worked-example sweep.

Prints configuration evaluations per second for ~2 million random configurations
(target >= 1,000,000/s), the same kind of configurations evaluated one at a time
in a plain Python loop (a sample, each a single-element `phase_cost` call), the
ratio, and the wall time of the full worked-example sweep (target < 5 s).
Exits 1 if a target is missed. Timings take the best of a few repeats, since
other processes share the machine.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from costmodel.hardware import HardwareTable, load_hardware
from costmodel.model import load_model
from costmodel.phase import Configs, phase_cost
from costmodel.plots import write_plots
from costmodel.sweep import write_csv
from costmodel.worked_example import HARDWARE, MODEL, run_worked_example

N_VECTOR = 2_000_000
N_LOOP = 2_000
REPEATS = 3
TARGET_PER_S = 1_000_000
TARGET_SWEEP_S = 5.0


def random_configs(n: int, seed: int = 0) -> Configs:
    rng = np.random.default_rng(seed)
    return Configs.make(
        phase=rng.integers(0, 3, n), batch=rng.integers(1, 257, n),
        new_tokens=rng.choice([1024, 8192, 32768], n),
        context=rng.choice([0, 8192, 32768, 131072], n),
        pp=rng.choice([1, 2, 4, 8], n), tp=rng.choice([1, 2, 4, 8], n),
        ep=rng.choice([1, 2, 4, 8, 16, 32, 64], n), precision=2,
        hardware=rng.integers(0, len(HARDWARE), n), kv_precision=1,
    )


def best_of(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    model = load_model(MODEL)
    table = HardwareTable(tuple(load_hardware(h) for h in HARDWARE))
    cfg = random_configs(N_VECTOR)
    vector_s = best_of(lambda: phase_cost(model, table, cfg))
    vector_per_s = N_VECTOR / vector_s

    names = [f.name for f in fields(Configs)]
    singles = [Configs(*(getattr(cfg, k)[i:i + 1] for k in names)) for i in range(N_LOOP)]

    def loop() -> None:
        for one in singles:
            phase_cost(model, table, one)

    loop_per_s = N_LOOP / best_of(loop, repeats=1)
    sweep_s = best_of(run_worked_example)
    result = run_worked_example()
    configs = result.configs_evaluated
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        write_csv(result, Path(tmp) / "sweep.csv")
        write_plots(result, Path(tmp))
        files_s = time.perf_counter() - start

    print(f"vectorised phase cost: {vector_per_s:,.0f} configurations/s "
          f"({N_VECTOR:,} in {vector_s:.3f} s; target >= {TARGET_PER_S:,}/s)")
    print(f"plain Python loop:     {loop_per_s:,.0f} configurations/s "
          f"({N_LOOP:,} single-configuration calls)")
    print(f"ratio:                 {vector_per_s / loop_per_s:,.0f}x")
    print(f"worked-example sweep:  {sweep_s:.3f} s for {configs:,} configurations, "
          f"3 GPUs x 7 workloads (target < {TARGET_SWEEP_S:g} s)")
    print(f"  + sweep.csv and 4 PNGs: {files_s:.2f} s (matplotlib; not part of the target)")
    ok = vector_per_s >= TARGET_PER_S and sweep_s < TARGET_SWEEP_S
    if not ok:
        print("a target was missed", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
