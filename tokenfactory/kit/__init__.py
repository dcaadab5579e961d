"""The stability kit (docs/plugins.md): ready-made properties for your controller.

    from tokenfactory.kit import properties as kit
    test_no_loss = kit.no_loss(MyAdmission)

`properties` (one line per test), `scopes` (the overload properties' scopes), `checks`
(the assertions behind them, raising `StabilityViolation`), `strategies` (the Hypothesis strategies) and `scenario`
(`Scenario`, `run_scenario`) are the modules of `orchestrator.kit` themselves,
not copies, importable as `tokenfactory.kit.properties` and so on.
"""

import sys

from orchestrator.kit import checks, properties, scenario, scopes, strategies

# `import tokenfactory.kit.properties` finds the same module object, as `import os.path`
# does (the import system looks in sys.modules once the parent package is imported).
for _module in (checks, properties, scenario, scopes, strategies):
    sys.modules[f"{__name__}.{_module.__name__.rpartition('.')[2]}"] = _module
del _module

__all__ = ["checks", "properties", "scenario", "scopes", "strategies"]
