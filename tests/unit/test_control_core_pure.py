"""The control core (orchestrator/control/) is pure: it imports nothing of the workers'
runtime (workers/, storage/) or of the run shell (orchestrator/run/). The shell walks
the runtime and hands the core facts (orchestrator.run.sampler)."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTROL = ROOT / "orchestrator" / "control"
FORBIDDEN = ("workers", "storage", "orchestrator.run")


def _imported(path: Path) -> list[tuple[int, str]]:
    """Every module `path` imports, anywhere in it (a function's lazy import too)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module))
    return out


def test_no_module_of_the_control_core_imports_the_runtime_or_the_shell():
    found = [f"{path.relative_to(ROOT)}:{line}: {name}"
             for path in sorted(CONTROL.rglob("*.py")) for line, name in _imported(path)
             if name == FORBIDDEN[0] or name.startswith(tuple(f"{f}." for f in FORBIDDEN))
             or name in FORBIDDEN]
    assert not found, found


def test_importing_the_control_core_loads_neither():
    code = ("import importlib, pkgutil, sys, orchestrator.control as c\n"
            "for m in pkgutil.walk_packages(c.__path__, 'orchestrator.control.'):\n"
            "    if not m.name.endswith('.snapshot'):  # the deprecated path's shim\n"
            "        importlib.import_module(m.name)\n"
            f"print(sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN[:2]!r}\n"
            "             or n.startswith('orchestrator.run')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
