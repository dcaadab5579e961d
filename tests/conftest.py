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
