"""Measured kernel tables (aiconfigurator-core) as a second cost source.

Optional: ``pip install 'tokenfactory[measured]'``. ``available()`` says whether
the extra is importable; everything else here needs it.
"""

from costmodel.measured.catalog import Engine, available

__all__ = ["Engine", "available"]
