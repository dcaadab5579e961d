"""Errors of the cost core. All are the user's: a bad name, file, field or layout."""


class CostModelError(ValueError):
    """Bad input to the cost core: reported in one line naming the field and value."""


class LayoutError(CostModelError):
    """A parallel layout that cannot run: names the rule it broke and by how much."""
