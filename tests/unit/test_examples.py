"""examples/: every controller there loads as a user gives it (`--controller
examples/file.py:Class`), so the examples docs/control.md and docs/plugins.md point to
keep working as the code under them changes."""

import ast
from pathlib import Path

import pytest

from orchestrator.control.config import ControlConfig
from orchestrator.plugins import load_policy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _classes() -> list[tuple[str, str]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.py")):
        tree = ast.parse(path.read_text())
        found += [(path.name, node.name) for node in tree.body if isinstance(node, ast.ClassDef)]
    return found


def test_the_examples_define_controllers():
    names = {file for file, _ in _classes()}
    assert {"pi_admission.py", "smith_cushion.py", "smith_fill_end.py"} <= names


@pytest.mark.parametrize(("file", "cls"), _classes())
def test_an_example_controller_loads_from_its_file(file, cls):
    policy = load_policy(f"{EXAMPLES / file}:{cls}", ControlConfig())
    assert isinstance(policy.name, str) and policy.name
    assert callable(policy.decide)
