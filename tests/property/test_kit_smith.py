"""The kit's properties against the delay-compensated controllers (`smith`; `smith-pools`,
its fill bound per fill pool; and `predictive`, which admits as `smith` does and refuses
calls predicted to miss), over the
kit's perturbations: observation lag 0-5 s and predictor error 0.7-1.3x in the overload
scenarios (`strategies.overload_scenarios`), traffic up to 1.5x capacity for no loss.

Named by import path, not by its entry point, so it runs before the package is installed
again with the new entry point (pyproject.toml)."""

import pytest

from orchestrator.kit import properties as kit

SMITH = "orchestrator.control.policies.smith:SmithAdmission"
SMITH_POOLS = "orchestrator.control.policies.smith:SmithPoolsAdmission"
PREDICTIVE = "predictive"

test_smith_keeps_buffers_bounded = kit.bounded_buffers(SMITH, max_examples=15)
test_smith_loses_nothing = kit.no_loss(SMITH, max_examples=15)
test_smith_holds_decode_steady = kit.oscillation_below(SMITH, 0.25, max_examples=15)
test_smith_does_not_starve_decode = kit.starvation_below(SMITH, 0.05, max_examples=15)

test_smith_holds_decode_steady_100 = pytest.mark.slow(
    kit.oscillation_below(SMITH, 0.25, max_examples=100))
test_smith_does_not_starve_decode_100 = pytest.mark.slow(
    kit.starvation_below(SMITH, 0.05, max_examples=100))

test_smith_pools_keeps_buffers_bounded = kit.bounded_buffers(SMITH_POOLS, max_examples=15)
test_smith_pools_loses_nothing = kit.no_loss(SMITH_POOLS, max_examples=15)
test_smith_pools_holds_decode_steady = kit.oscillation_below(SMITH_POOLS, 0.25,
                                                             max_examples=15)
test_smith_pools_does_not_starve_decode = kit.starvation_below(SMITH_POOLS, 0.05,
                                                               max_examples=15)

test_predictive_keeps_buffers_bounded = kit.bounded_buffers(PREDICTIVE, max_examples=15)
test_predictive_loses_nothing = kit.no_loss(PREDICTIVE, max_examples=15)
# Fails: 0.295 on 206 open-loop calls of 256-token outputs at lag 0 s, where its refusals
# (18 calls) thin the queue and decode dips; smith, admitting the same way without them,
# holds it, and predictive as buffered plus the refusals scored 0.071 there.
test_predictive_holds_decode_steady = pytest.mark.xfail(strict=True, reason="0.295 > 0.25")(
    kit.oscillation_below(PREDICTIVE, 0.25, max_examples=15))
test_predictive_does_not_starve_decode = kit.starvation_below(PREDICTIVE, 0.05,
                                                              max_examples=15)
