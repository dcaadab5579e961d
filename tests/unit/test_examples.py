"""examples/: every controller there loads as a user gives it (`--controller
examples/file.py:Class`), and every router (a class with `choose`) as `--router` loads
it, so the examples docs/control.md and docs/plugins.md point to keep working as the
code under them changes."""

import ast
from pathlib import Path

import pytest

from orchestrator.control.config import ControlConfig
from orchestrator.plugins import load as load_plugin
from orchestrator.plugins import load_policy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _classes(routers: bool = False) -> list[tuple[str, str]]:
    """The examples' public classes: the controllers, or with `routers` the routers (the
    classes that define `choose`); a private class (`_Name`) is a helper of theirs."""
    found = []
    for path in sorted(EXAMPLES.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                chooses = any(isinstance(f, ast.FunctionDef) and f.name == "choose"
                              for f in node.body)
                if chooses == routers:
                    found.append((path.name, node.name))
    return found


def test_the_examples_define_controllers():
    names = {file for file, _ in _classes()}
    assert {"pi_admission.py", "smith_cushion.py", "smith_fill_end.py"} <= names


@pytest.mark.parametrize(("file", "cls"), _classes())
def test_an_example_controller_loads_from_its_file(file, cls):
    policy = load_policy(f"{EXAMPLES / file}:{cls}", ControlConfig())
    assert isinstance(policy.name, str) and policy.name
    assert callable(policy.decide)


@pytest.mark.parametrize(("file", "cls"), _classes(routers=True))
def test_an_example_router_loads_from_its_file(file, cls):
    router = load_plugin("router", f"{EXAMPLES / file}:{cls}", ControlConfig())
    assert isinstance(router.name, str) and router.name
    assert callable(router.choose)
