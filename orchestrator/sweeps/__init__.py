"""Scenario sweeps: many replays over a grid of options, on local cores or a Ray cluster.

`grid` reads and checks the grid file, `point` turns a point into a replay and
runs it, `store` keeps the --out directory (manifest, journal, table),
`frontier` writes the Pareto frontiers and `runner` ties them together.
"""

from orchestrator.sweeps.grid import Grid, GridError, load_grid, parse_grid, point_id
from orchestrator.sweeps.runner import SweepOptions, SweepReport, run_sweep_replay

__all__ = ["Grid", "GridError", "SweepOptions", "SweepReport", "load_grid", "parse_grid",
           "point_id", "run_sweep_replay"]
