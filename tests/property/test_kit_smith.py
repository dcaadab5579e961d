"""The kit's properties against the delay-compensated controller (`smith`), over the
kit's perturbations: observation lag 0-5 s and predictor error 0.7-1.3x in the overload
scenarios (`strategies.overload_scenarios`), traffic up to 1.5x capacity for no loss.

Named by import path, not by its entry point, so it runs before the package is installed
again with the new entry point (pyproject.toml)."""

import pytest

from orchestrator.kit import properties as kit

SMITH = "orchestrator.control.policies.smith:SmithAdmission"

test_smith_keeps_buffers_bounded = kit.bounded_buffers(SMITH, max_examples=15)
test_smith_loses_nothing = kit.no_loss(SMITH, max_examples=15)
test_smith_holds_decode_steady = kit.oscillation_below(SMITH, 0.25, max_examples=15)
test_smith_does_not_starve_decode = kit.starvation_below(SMITH, 0.05, max_examples=15)

test_smith_holds_decode_steady_100 = pytest.mark.slow(
    kit.oscillation_below(SMITH, 0.25, max_examples=100))
test_smith_does_not_starve_decode_100 = pytest.mark.slow(
    kit.starvation_below(SMITH, 0.05, max_examples=100))
