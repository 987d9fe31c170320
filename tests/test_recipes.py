"""The recipes of the README and docs/ (blocks after a ``<!-- recipe: NAME -->`` line)
run as written.

Each runs against the official-SDK fixture server, with only the URL replaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SdkServer, start_sdk_server, stop_process

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RECIPE = re.compile(r"<!-- recipe: ([\w-]+) -->\n```python\n(.*?)```", re.S)
V1 = "Shipping approval v1: orders over $500 need a manager."
TOOL_RECIPES = {
    "pydantic-ai-tools": "('set_resource', 'delete_resource'",
    "openai-agents-tools": "['set_resource', 'delete_resource'",
    "langchain-tools": "fresh ['set_resource', 'delete_resource'",
}
"""The tool recipes, and what each prints of the fixture's tools (issue 26 part 4)."""


def recipes() -> dict[str, str]:
    found = [hit for page in PAGES for hit in RECIPE.findall(page.read_text(encoding="utf-8"))]
    assert len({name for name, _ in found}) == len(found), "two recipes share a name"
    return dict(found)


def test_every_framework_has_a_short_recipe():
    found = recipes()
    assert set(found) == {"agent-step", "pydantic-ai", "openai-agents", "langchain", *TOOL_RECIPES}
    for name, code in found.items():
        lines = [line for line in code.splitlines() if line.strip()]
        assert len(lines) <= 10, f"recipe {name} has {len(lines)} lines"
        assert "http://127.0.0.1:8000/mcp" in code, name


@pytest.fixture(scope="module")
def recipe_server() -> Iterator[SdkServer]:
    """One fixture server for every recipe (they only read)."""
    server = start_sdk_server()
    try:
        yield server
    finally:
        stop_process(server.process)


@pytest.mark.wire
@pytest.mark.parametrize("name", ["agent-step", "pydantic-ai", "openai-agents", "langchain"])
def test_the_recipe_runs_as_written(name: str, recipe_server: SdkServer, capsys):
    code = recipes()[name].replace("http://127.0.0.1:8000/mcp", recipe_server.url)
    # In this interpreter (the frameworks are imported once for the whole suite); the
    # recipe calls anyio.run itself, as a script would.
    exec(compile(code, f"recipe {name}", "exec"), {"__name__": "__recipe__"})
    out = capsys.readouterr().out
    assert V1 in out, f"recipe {name} printed {out!r}"
    if name == "langchain":
        assert "Returns v1: 30 days." in out
    if name == "agent-step":
        assert out.rstrip().endswith("[]")  # nothing withheld


@pytest.mark.wire
@pytest.mark.parametrize("name", sorted(TOOL_RECIPES))
def test_the_tool_recipe_runs_as_written(name: str, recipe_server: SdkServer, capsys):
    code = recipes()[name].replace("http://127.0.0.1:8000/mcp", recipe_server.url)
    exec(compile(code, f"recipe {name}", "exec"), {"__name__": "__recipe__"})
    out = capsys.readouterr().out
    assert TOOL_RECIPES[name] in out, f"recipe {name} printed {out!r}"
