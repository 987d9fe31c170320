"""The README's recipes (blocks after a ``<!-- recipe: NAME -->`` line) run as written.

Each runs in its own interpreter against one official-SDK fixture server, with only
the URL replaced; all run at once (they only read).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SdkServer

README = Path(__file__).resolve().parents[1] / "README.md"
RECIPE = re.compile(r"<!-- recipe: ([\w-]+) -->\n```python\n(.*?)```", re.S)
V1 = "Shipping approval v1: orders over $500 need a manager."


def recipes() -> dict[str, str]:
    return dict(RECIPE.findall(README.read_text(encoding="utf-8")))


def test_every_framework_has_a_short_recipe():
    found = recipes()
    assert set(found) == {"agent-step", "pydantic-ai", "openai-agents", "langchain"}
    for name, code in found.items():
        lines = [line for line in code.splitlines() if line.strip()]
        assert len(lines) <= 10, f"recipe {name} has {len(lines)} lines"
        assert "http://127.0.0.1:8000/mcp" in code, name


@pytest.mark.wire
def test_the_recipes_run_as_written(sdk_server: SdkServer):
    running = {
        name: subprocess.Popen(
            [sys.executable, "-c", code.replace("http://127.0.0.1:8000/mcp", sdk_server.url)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        for name, code in recipes().items()
    }
    outputs = {}
    try:
        for name, process in running.items():
            out, err = process.communicate(timeout=90)
            assert process.returncode == 0, f"recipe {name} failed:\n{err}"
            outputs[name] = out
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    for name, out in outputs.items():
        assert V1 in out, f"recipe {name} printed {out!r}"
    assert "Returns v1: 30 days." in outputs["langchain"]
    assert "[]" in outputs["agent-step"]  # nothing withheld
