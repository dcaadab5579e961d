"""Phase pools (prefill, midfill, decode) on modelled hardware, and the run's clock."""

import native  # noqa: F401 (its guard, before any compiled module is imported)
