"""Deprecated: moved to `orchestrator.run.sampler`; importing this path warns (orchestrator._moved)."""

from orchestrator import _moved

__getattr__, __dir__ = _moved.forward(__name__, "orchestrator.run.sampler")
