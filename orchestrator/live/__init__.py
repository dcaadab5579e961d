"""Live mode with worker processes: the orchestrator and its workers as separate OS
processes on uvloop, steps sent over a framed local transport, lost workers survived.

`messages` (typed messages), `transport` (framing), `worker_proc` (a worker process's
main), `backend` (the orchestrator's side: processes, connections, heartbeats, the
remote executor, re-dispatch). docs/live.md describes the whole.
"""
