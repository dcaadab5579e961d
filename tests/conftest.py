import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
# The public data sets the tests read ship in the repository (traces/data/README.md has
# their sources and licences), so every test runs from a fresh clone.
TRACE_DATA = ROOT / "traces" / "data"

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("ci", parent=settings.get_profile("default"))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _no_local_constants() -> None:
    """Derandomised examples that depend on the test alone. Hypothesis also draws numbers
    found in the source of every project module imported so far (its "local constants"),
    so a test's examples changed with the tests run before it and with any constant added
    anywhere in the code: a property held in the whole suite and failed run alone. This
    keeps that pool empty (Hypothesis 6.x keeps it in a private module; if it moves, the
    examples simply depend on imports again)."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        return
    if hasattr(providers, "_get_local_constants") and hasattr(providers, "_local_constants"):
        providers._get_local_constants = lambda: providers._local_constants


_no_local_constants()

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def run_cli(argv, capsys):
    """`tokenfactory ARGV` in this process: (exit code, stdout, stderr)."""
    from orchestrator.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _expected_seconds(item) -> float:
    """How long a slow test takes, as its marker says (`@pytest.mark.slow(seconds=N)`, about
    N seconds on a quiet 2-core machine; the order is what counts), 0 when it does not."""
    marker = item.get_closest_marker("slow")
    return marker.kwargs.get("seconds", 0) if marker is not None else 0


def pytest_collection_modifyitems(config, items):
    """The tests marked slow run first, the longest first (then in their collected order),
    then the rest: `make test` spreads the suite over two processes by work stealing, and
    a long test started late (the demo's, ~3 minutes) ran alone at the end while the other
    process idled (a fresh clone on a quiet machine: pytest 485 s, the last ~2 minutes on
    one process). Longest first keeps the tail to the shortest tests."""
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None,
                                 -_expected_seconds(item)))
