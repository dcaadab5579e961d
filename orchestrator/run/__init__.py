"""The run shell: one replay from settings to results.

`settings` (RunSettings, prepare, run_replay) is the entry; `replay` the async
orchestrator driving the two loops; `reconfig` moves workers; `series`,
`summary`, `output`, `report`, `tables` record and present a run; `metrics*`,
`openmetrics` and `trace_events` are its observers.
"""
