"""`smith-pools` with a 6 s cushion instead of `smith`'s 8 s (docs/control.md, "The
compensated controllers where admission binds": tried where admission per pool alone
left `local`'s p99 TTFT unmet). Use it as `--controller examples.smith_cushion:SmithPools6`
from a checkout's root. `SmithPools7_9` and `SmithPools8_1`, 0.1 s either side of the
8 s, measure how far a change that should not matter moves a point's figures ("The map
at f882903"); `Smith7_9` and `Smith8_1` do the same for `smith`."""

from orchestrator.control.config import ControlConfig
from orchestrator.control.policies.smith import SmithAdmission, SmithPoolsAdmission

CUSHION_S = 6.0


class _DefaultCushion:
    """A `smith` policy built with the class's `default_cushion_s` unless one is given."""

    default_cushion_s: float

    def __init__(self, config: ControlConfig, cushion_s: float | None = None) -> None:
        super().__init__(config, self.default_cushion_s if cushion_s is None else cushion_s)


class SmithPools6(_DefaultCushion, SmithPoolsAdmission):
    name = "smith-pools-6s"
    default_cushion_s = CUSHION_S


class SmithPools7_9(SmithPools6):
    """`smith-pools` with a 7.9 s cushion: how far a change that should not matter moves
    the preset's figures (docs/control.md, "The map at f882903")."""

    name = "smith-pools-7.9s"
    default_cushion_s = 7.9


class SmithPools8_1(SmithPools6):
    """`smith-pools` with an 8.1 s cushion (as `SmithPools7_9`)."""

    name = "smith-pools-8.1s"
    default_cushion_s = 8.1


class Smith7_9(_DefaultCushion, SmithAdmission):
    """`smith` with a 7.9 s cushion: how far a change that should not matter moves its
    figures (docs/control.md, "The fills split as the router should")."""

    name = "smith-7.9s"
    default_cushion_s = 7.9


class Smith8_1(Smith7_9):
    """`smith` with an 8.1 s cushion (as `Smith7_9`)."""

    name = "smith-8.1s"
    default_cushion_s = 8.1


class Smith4(Smith7_9):
    """`smith` with a 4 s cushion: the cushion's trade at 32 slots, 4x (docs/control.md,
    "The fills split as the router should"); `Smith6` and `Smith12` likewise."""

    name = "smith-4s"
    default_cushion_s = 4.0


class Smith6(Smith7_9):
    name = "smith-6s"
    default_cushion_s = 6.0


class Smith12(Smith7_9):
    name = "smith-12s"
    default_cushion_s = 12.0
