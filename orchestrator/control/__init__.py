"""The control core: admission policies, reallocation, routing, observation, stability.

Pure decisions over observations; nothing here awaits. The run shell
(`orchestrator.run`) samples the cluster, hands these their lagged observations
and applies what they decide.
"""
