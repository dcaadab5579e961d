"""The numpy roofline core: hardware and model specs, parallel layouts, phase costs, sweeps."""

import native  # noqa: F401 (its guard, before any compiled module is imported)
