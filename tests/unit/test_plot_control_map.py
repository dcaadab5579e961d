"""examples/sweeps: the control map's grids parse, and its plot script reduces seeds and
places points by decode slots as docs/control.md says."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from orchestrator.sweeps.grid import load_grid

SWEEPS = Path(__file__).resolve().parents[2] / "examples" / "sweeps"


def _script():
    spec = importlib.util.spec_from_file_location("plot_control_map",
                                                  SWEEPS / "plot_control_map.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


pcm = _script()


def row(controller: str, seed: int, osc: float, goodput: float, *, load: float = 1.0,
        slots: int = 32, **extra: str) -> dict[str, str]:
    r = {"controller": controller, "seed": str(seed), "think_scale": "1.0",
         "observation_lag": "5.0", "load": str(load), "resources.decode_slots": str(slots),
         "control.oscillation_index": str(osc), "goodput.output_tokens_per_s": str(goodput),
         "requests.submitted": "100", "requests.lost": "0"}
    r.update(extra)
    return r


@pytest.mark.parametrize("grid", sorted(SWEEPS.glob("*.toml")), ids=lambda p: p.name)
def test_every_example_grid_parses(grid):
    assert len(load_grid(grid)) >= 2


def test_seeds_are_one_point_mean_and_range():
    rows = [row("retire", 1, 0.4, 100), row("retire", 2, 0.2, 140),
            row("buffered", 1, 0.1, 120), row("buffered", 2, 0.2, 120)]
    m = pcm.group(rows, "load")
    (per,) = m.points.values()
    s = pcm.figure(per["retire"][1.0], "goodput.output_tokens_per_s")
    assert (s.mean, s.low, s.high, s.n) == (120, 100, 140, 2)
    # The ratio is taken seed by seed (4.0 and 1.0), not of the means (0.3 / 0.15 = 2).
    r = pcm.ratio(per, 1.0)
    assert (r.mean, r.low, r.high) == (2.5, 1.0, 4.0)
    table = pcm.markdown("t", rows, "load")
    assert "| 1 | retire | 2 | 100 | " in table and "2.50 (1.00-4.00)" in table
    assert "seeds 1, 2" in table


def test_a_ratio_needs_both_controllers_at_the_same_seed():
    rows = [row("retire", 1, 0.4, 1), row("retire", 2, 0.2, 1), row("buffered", 1, 0.1, 1)]
    (per,) = pcm.group(rows, "load").points.values()
    r = pcm.ratio(per, 1.0)
    assert (r.mean, r.n) == (4.0, 1)


def test_slots_axis_and_cells_without_both_controllers():
    rows = [row(c, 1, 0.3, 1, slots=s) for s in (32, 64) for c in ("retire", "buffered")]
    rows.append(row("retire", 1, 0.3, 1, load=2.0))  # no buffered at load 2: left out
    m = pcm.group(rows, "slots")
    assert list(m.points) == [(("think", 1.0), ("lag", 5.0), ("load", 1.0), ("error", 1.0))]
    (per,) = m.points.values()
    assert sorted(per["retire"]) == [32, 64]
    assert m.varying == () and m.constant["load"] == 1.0


def test_select_keeps_the_named_values():
    rows = [row("retire", s, 0.3, 1, load=x) for s in (1, 2) for x in (1.0, 2.0)]
    kept = pcm.select(rows, ["seed=2", "load=2"])
    assert [(r["seed"], r["load"]) for r in kept] == [("2", "2.0")]
    assert math.isnan(pcm.figure([], "x").mean)
