"""No import circle among freshcache's modules (issue 23: a layout that shows the architecture).

A static scan of every ``import`` and ``from ... import`` in the package, at module
level and inside functions alike (a lazy import is still a dependency), and inside
``if TYPE_CHECKING:`` blocks too: a back-reference kept only for the type checker is
still one module knowing the one that uses it, the circle this test exists to keep out.
``from pkg import name`` counts as an import of ``pkg.name`` when that is a module, else
of ``pkg``; importing ``pkg.mod`` does not count as importing ``pkg/__init__.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import freshcache

PACKAGE = Path(freshcache.__file__).parent


def module_name(path: Path) -> str:
    parts = ["freshcache", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for path in sorted(PACKAGE.rglob("*.py"))
        if "node_modules" not in path.parts
    }


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` (at ``path``) imports."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
                for alias in node.names
            ]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_among_freshcache_modules() -> None:
    graph = import_graph()
    assert len(graph) > 60 and "freshcache._core._engine" in graph
    assert circles(graph) == []


def test_the_scan_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_scan_sees_relative_lazy_and_type_checking_imports() -> None:
    graph = import_graph()
    cache = graph["freshcache._middleware._cache"]
    assert "freshcache._sources._source" in cache  # relative, module level
    assert "freshcache.fleet" in cache  # inside a function and under TYPE_CHECKING
    assert "freshcache._fleet._worker" in cache  # under TYPE_CHECKING
