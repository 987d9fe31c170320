"""Every relative link in README.md and docs/*.md resolves: the file it names exists,
and an anchor (``#...``) names a heading of the page it points to, as GitHub spells
heading anchors. Links inside code (fenced blocks, backtick spans) are not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def prose(text: str) -> list[str]:
    """The page's lines outside fenced blocks, with backtick spans removed."""
    lines, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        heading = re.match(r"#{1,6} (.+)", line)
        if inside or not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    return [
        target
        for line in prose(page.read_text(encoding="utf-8"))
        for target in LINK.findall(line)
        if not re.match(r"[a-z][a-z+.-]*:", target)  # http:, https:, mailto: ...
    ]


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Catalogs: tools, prompts and templates", "catalogs-tools-prompts-and-templates"),
        ("A fleet of workers on Valkey / Redis", "a-fleet-of-workers-on-valkey--redis"),
        ("`read`, `status`, `list`, `select`", "read-status-list-select"),
        ("Round 3, the bytes per URI", "round-3-the-bytes-per-uri"),
    ],
)
def test_headings_get_githubs_anchors(heading, expected):
    assert slug(heading) == expected


def test_the_pages_link_to_each_other():
    """The check below has something to check: the README links into docs/."""
    assert any(target.startswith("docs/") for target in links(ROOT / "README.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(
                f"{target}: no {where.relative_to(ROOT) if where.is_relative_to(ROOT) else where}"
            )
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading with that anchor in {where.name}")
    assert broken == []
