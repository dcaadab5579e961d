"""No import circles among the source packages: every import (at module level or inside
a function, under TYPE_CHECKING or not) is an edge from its module to the module it
names, and the graph must have no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("costmodel", "orchestrator", "storage", "traces", "workers", "tokenfactory",
            "native")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[module_name(path)] = path
    return out


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The source modules `name` imports: `import a.b`, `from a.b import c` (module a.b.c
    when c is one, else a.b), relative imports resolved against the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        for target in targets:
            # The module itself, or the nearest enclosing package that is a source module.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as the modules along it (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def import_graph() -> dict[str, set[str]]:
    modules = source_modules()
    graph = {name: imported(name, path, modules) for name, path in modules.items()}
    # A package's __init__ is imported on the way to any of its modules; an edge from a
    # module to its own package would be a cycle through that implicit import, which
    # Python resolves (the package is initialised first): left out.
    return {name: {t for t in targets if not name.startswith(t + ".")}
            for name, targets in graph.items()}


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_walker_sees_imports_inside_functions_and_type_checking():
    modules = source_modules()
    # costmodel.phase imports costmodel.layout inside `evaluate`.
    assert "costmodel.layout" in imported("costmodel.phase", modules["costmodel.phase"], modules)


def test_no_import_cycles_among_the_source_packages():
    graph = import_graph()
    assert len(graph) > 100
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
