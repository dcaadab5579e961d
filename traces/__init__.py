"""Trace readers, the native format, statistics, validation and a synthetic generator.

`traces` stands alone: it imports nothing from the project's other packages.
"""

from __future__ import annotations

from pathlib import Path

from traces.errors import TraceError
from traces.formats import Format
from traces.model import Call, Session
from traces.reader import read_sessions


def sample_path() -> Path:
    """The bundled slice of real agent sessions (a directory of weka-cc-dev files)."""
    return Path(__file__).resolve().parent / "sample"


__all__ = ["Call", "Format", "Session", "TraceError", "read_sessions", "sample_path"]
