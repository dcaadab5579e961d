"""How fast the stability kit runs: examples per second of each built-in property.

Target: one example well under a second, so a 200-example property runs in under a
couple of minutes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import settings

settings.register_profile("bench", database=None, derandomize=True)
settings.load_profile("bench")

from orchestrator.kit import properties as kit  # noqa: E402

EXAMPLES = 40


def main() -> None:
    for name, make in (("bounded_buffers", kit.bounded_buffers), ("no_loss", kit.no_loss),
                       ("oscillation_below", kit.oscillation_below),
                       ("starvation_below", kit.starvation_below),
                       ("no_flapping", kit.no_flapping)):
        test = make("buffered", max_examples=EXAMPLES)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        test()
        wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
        per = wall_s / EXAMPLES
        print(f"{name:>18}: {EXAMPLES} examples in {wall_s:5.1f} s, {EXAMPLES / wall_s:5.1f} "
              f"examples/s, {per * 1e3:5.0f} ms each ({cpu_s / EXAMPLES * 1e3:4.0f} ms CPU), "
              f"200 examples ~{200 * per:5.1f} s")


if __name__ == "__main__":
    main()
