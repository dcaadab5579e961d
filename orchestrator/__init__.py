"""The control plane: admission, routing, reallocation, replay and the command line."""

import native  # noqa: F401 (its guard, before any compiled module is imported)
