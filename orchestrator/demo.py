"""The embedded default run: retire vs buffered on the bundled sample, where it shows.

The load is chosen so that decode is the bottleneck for most of the run: the
bundled sessions replayed four times over (as new sessions), started as a
Poisson stream, with think/tool gaps shortened so each session keeps calls
coming. Under that load, admission on decode retirements rings and the
buffered controller holds decode steady (README, "The demonstration").
"""

from __future__ import annotations

from traces.replay import LoadOptions

DEMO_CLUSTER = "gb200-nvl72x1"
DEMO_MODEL = "kimi-k3-like"
DEMO_CONTROLLERS = ("retire", "buffered")
DEMO_LOAD = LoadOptions(sessions_per_hour=360.0, think_scale=0.05, repeat=4, duration_s=900.0)
DEMO_SEED = 1

# The development traces (113 weka-cc-dev sessions), at the load where the claim is
# checked (tests/scenario/test_controllers_dev_traces.py): sessions started at 360 an
# hour (all 113 within about 19 minutes), think/tool gaps x0.05, one NVL72 rack.
DEV_CLUSTER = "gb200-nvl72x1"
DEV_LOAD = LoadOptions(sessions_per_hour=360.0, think_scale=0.05)
