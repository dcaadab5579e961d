"""A stability-testing kit for admission policies: scenarios, strategies, checks, properties.

See docs/plugins.md. `properties` gives ready-made tests (one line each), `checks`
the assertions behind them, `strategies` the Hypothesis strategies, `scenario` the
serialisable scenario and `run_scenario`.
"""
