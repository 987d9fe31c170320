"""No class in freshcache over 400 lines (issue 23: a layout that shows the architecture).

A class's size is from its ``class`` line to its last line, docstrings, comments and
blank lines included, as an editor shows it. A class that grows past the limit has
become more than one thing: give the other thing its own home.
"""

from __future__ import annotations

import ast
from pathlib import Path

import freshcache

PACKAGE = Path(freshcache.__file__).parent
LIMIT = 400


def class_sizes(source: str) -> list[tuple[str, int]]:
    return [
        (node.name, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    ]


def test_no_class_over_400_lines() -> None:
    sizes = [
        (f"{path.relative_to(PACKAGE)}:{name}", size)
        for path in sorted(PACKAGE.rglob("*.py"))
        if "node_modules" not in path.parts
        for name, size in class_sizes(path.read_text())
    ]
    assert len(sizes) > 100
    assert [(name, size) for name, size in sizes if size > LIMIT] == []


def test_the_count_covers_the_whole_class() -> None:
    source = "class A:\n    '''doc'''\n\n    def f(self):\n        return 1\n\n\nx = 1\n"
    assert class_sizes(source) == [("A", 5)]
