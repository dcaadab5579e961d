import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("ci", parent=settings.get_profile("default"))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
