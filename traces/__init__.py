"""Trace readers, the native format, statistics, validation and a synthetic generator.

`traces` stands alone: it imports nothing from the project's other packages but
`native`, the guard of the compiled modules.
"""

from __future__ import annotations

from pathlib import Path

import native  # noqa: F401 (its guard, before any compiled module is imported)
from traces.errors import TraceError
from traces.formats import Format
from traces.model import Call, Session
from traces.reader import read_sessions


def sample_path() -> Path:
    """The bundled slice of real agent sessions (a directory of weka-cc-dev files)."""
    return Path(__file__).resolve().parent / "sample"


# The public data sets bundled in traces/data (README.md there: sources, licences).
DATA_SETS = ("weka-cc-dev", "mooncake", "azure-2023")


def data_path(name: str) -> Path:
    """The folder of a bundled public data set: one of `DATA_SETS`."""
    if name not in DATA_SETS:
        raise ValueError(f"data set {name!r}: expected one of {', '.join(DATA_SETS)}")
    return Path(__file__).resolve().parent / "data" / name


__all__ = ["DATA_SETS", "Call", "Format", "Session", "TraceError", "data_path", "read_sessions",
           "sample_path"]
