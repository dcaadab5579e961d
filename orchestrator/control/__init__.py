"""The control core: admission policies, reallocation, routing, observation, the
predictor, stability.

Pure decisions over facts; nothing here awaits, and nothing imports the workers'
runtime or the run shell (tests/unit/test_control_core_pure.py). The run shell
(`orchestrator.run`) samples the cluster, hands these their lagged observations
and the predictor its facts, and applies what they decide.
"""
