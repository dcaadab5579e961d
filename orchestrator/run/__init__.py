"""The run shell: one replay from settings to results.

`settings` (RunSettings, prepare, run_replay) is the entry; `replay` the async
orchestrator, composed of the `feeder` (sessions in), the `fast_loop` (with its
`idle_spans`) and the slow loop; `sampler` walks the workers into the facts the
control core receives (observations, with `quotes` pricing the predictor's
shapes); `reconfig` moves workers; `series`,
`summary`, `output`, `report`, `tables` record and present a run; `metrics*`,
`openmetrics` and `trace_events` are its observers.
"""

from costmodel.moved_names import moved_names as _moved_names

# orchestrator/run.py became this package (ef2cb09); what it defined lives in
# `orchestrator.run.settings`. A module and a package cannot share a name, so its
# names are served here, with a DeprecationWarning naming the new module.
_SETTINGS_NAMES = frozenset({"DEFAULT_MODEL", "DEFAULT_CLUSTER", "DEFAULT_CONTROLLER",
                             "RunSettings", "Prepared", "prepare", "run_replay",
                             "progress_bar"})
__getattr__ = _moved_names(__name__, dict.fromkeys(_SETTINGS_NAMES, "orchestrator.run.settings"))
