"""The project's own stability properties, written with the public kit (docs/plugins.md):
one line per property, as a user's test file would read."""

import pytest

from orchestrator.kit import properties as kit

test_buffered_keeps_buffers_bounded = kit.bounded_buffers("buffered")
test_buffered_loses_nothing = kit.no_loss("buffered", max_examples=30)
test_retire_loses_nothing = kit.no_loss("retire", max_examples=15)
test_predictive_loses_nothing = kit.no_loss("predictive", max_examples=15)
test_buffered_holds_decode_steady = kit.oscillation_below("buffered", 0.25, max_examples=15)
test_buffered_does_not_starve_decode = kit.starvation_below("buffered", 0.05, max_examples=15)
test_slow_loop_does_not_flap = kit.no_flapping("buffered", max_examples=10)

# The overload properties at scale (the default run keeps the 15 examples above).
test_buffered_holds_decode_steady_200 = pytest.mark.slow(seconds=35)(
    kit.oscillation_below("buffered", 0.25, max_examples=200))
# At 200 examples the starvation property draws the scope's known start-up failure
# (docs/plugins.md): 50 calls, a 5 s lag, decode at 0 and 2 of 8 slots at 5 and 6 s
# while calls wait, 0.054; pinned in tests/property/test_kit_scope.py.
test_buffered_does_not_starve_decode_200 = pytest.mark.slow(seconds=25)(pytest.mark.xfail(
    strict=True, reason="start-up at a 5 s lag: 0.054 (test_kit_scope pins it)")(
    kit.starvation_below("buffered", 0.05, max_examples=200)))

# The lull scope (docs/plugins.md): decode drains and idles, then traffic returns;
# buffered restarts it without starving it (its oscillation there is the lull's dip, as
# admit-all's: tests/property/test_kit_builtins.py).
test_buffered_does_not_starve_decode_after_lulls = kit.starvation_below(
    "buffered", 0.05, max_examples=5, scope="lulls")
