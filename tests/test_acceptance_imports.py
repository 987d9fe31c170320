"""The grader stands on the public API (issue 35, item 6).

The acceptance equipment (the table runner, the worlds, the wire servers, the client
drivers, ``freshcache serve``) imports `freshcache`'s public names and
`freshcache.testing`, never a private module of the library: a change inside the
library then cannot break the grader unseen, and what the grader needs of the library
is written down in one place (`freshcache.testing.__all__`)."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

import freshcache
import freshcache.testing

PACKAGE = Path(freshcache.__file__).parent
ALLOWED = {
    "freshcache": {*freshcache.__all__, "__version__"},
    "freshcache.testing": set(freshcache.testing.__all__),
}
_PRIVATE_STRING = re.compile(r"^(freshcache\._|\.\.+_)")
"""A module named in a string (``importlib.import_module``) that is a private one."""


def _absolute(module: str | None, level: int, where: tuple[str, ...]) -> str:
    if level == 0:
        return module or ""
    base = where[: len(where) - level]
    return ".".join([*base, *([module] if module else [])])


def _library(module: str) -> bool:
    """Whether ``module`` is the library's, not the equipment's own."""
    return module.split(".")[0] == "freshcache" and not module.startswith("freshcache.acceptance")


def private_imports(root: Path) -> list[str]:
    """Every import under ``root`` (a copy of ``freshcache/acceptance``) that reaches
    the library elsewhere than through `freshcache`'s and `freshcache.testing`'s public
    names, as ``file:line: what``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        package = ("freshcache", *parts[:-1])
        where = f"{path.relative_to(root.parent)}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _library(alias.name) and alias.name not in ALLOWED:
                        found.append(f"{where}:{node.lineno}: import {alias.name}")
            elif isinstance(node, ast.ImportFrom):
                module = _absolute(node.module, node.level, (*package, "_"))
                allowed = ALLOWED.get(module, set())
                for alias in node.names:
                    if _library(module) and alias.name not in allowed:
                        found.append(f"{where}:{node.lineno}: from {module} import {alias.name}")
            elif isinstance(node, ast.Constant) and _PRIVATE_STRING.match(str(node.value)):
                found.append(f"{where}:{node.lineno}: {node.value!r}")
    return found


def test_the_acceptance_equipment_imports_only_public_names():
    assert private_imports(PACKAGE / "acceptance") == []


def test_the_check_sees_a_private_import(tmp_path: Path):
    # The check itself can fail: each way of reaching a private module is seen.
    equipment = tmp_path / "acceptance"
    (equipment / "drivers").mkdir(parents=True)
    (equipment / "_world.py").write_text(
        textwrap.dedent(
            """
            from .._core import FreshnessEngine
            from freshcache._middleware._cache import FreshCache
            from freshcache import FreshCache, _startup
            from ._format import Case
            import freshcache._errors
            import freshcache.testing._reference
            import freshcache.testing, freshcache.acceptance._steps
            WHERE = {"TableError": ".._errors"}
            """
        )
    )
    (equipment / "drivers" / "_driver.py").write_text("from ..._sources import _http\n")
    assert [line.split(": ", 1)[1] for line in private_imports(equipment)] == [
        "from freshcache._core import FreshnessEngine",
        "from freshcache._middleware._cache import FreshCache",
        "from freshcache import _startup",
        "import freshcache._errors",
        "import freshcache.testing._reference",
        "'.._errors'",
        "from freshcache._sources import _http",
    ]


def test_the_testing_module_names_are_sorted_and_importable():
    names = freshcache.testing.__all__
    assert names == sorted(names)
    for name in names:
        assert getattr(freshcache.testing, name) is not None, name
    with pytest.raises(AttributeError):
        freshcache.testing.Nothing  # noqa: B018


def test_the_documented_paths_of_the_doubles_still_work():
    import freshcache.acceptance

    assert freshcache.acceptance.ReferenceServer is freshcache.testing.ReferenceServer
    assert freshcache.acceptance.InMemorySource is freshcache.testing.InMemorySource


def test_the_example_in_the_testing_docstring_runs():
    doc = freshcache.testing.__doc__
    assert doc is not None
    example = doc.split("::\n", 1)[1].split("\n\n", 1)[0]
    body = textwrap.dedent(example)
    code = "async def main():\n" + textwrap.indent(body, "    ")
    namespace: dict[str, object] = {}
    exec(compile(code, "freshcache.testing example", "exec"), namespace)
    import anyio

    anyio.run(namespace["main"])  # type: ignore[arg-type]
