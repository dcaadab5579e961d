import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
# The full development traces live beside the repository, not in it (the bundled sample
# is in traces/sample): tests that need them skip in a clone without ../shared.
needs_shared = pytest.mark.skipif(not (SHARED / "traces").is_dir(),
                                  reason="needs the shared traces in ../shared/traces")

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
