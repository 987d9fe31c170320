"""`benchmarks/matrix.py`: replaying some clients keeps the others' columns as measured,
and the committed matrix is the one its JSON says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import matrix

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def report(date: str, clients: dict[str, str], cells: dict[str, dict[str, str]]) -> dict[str, Any]:
    columns = sorted({c for row in cells.values() for c in row})
    why = {row: {c: f"why {v}" for c, v in row_cells.items()} for row, row_cells in cells.items()}
    return {
        "date": date,
        "python": "3.11",
        "clients": clients,
        "columns": columns,
        "rows": cells,
        "why": why,
    }


def test_replaying_one_client_replaces_its_columns_and_keeps_the_others():
    old = report(
        "2026-11-01",
        {"freshcache": "freshcache 0.1.0", "mcp": "mcp 2.3.0"},
        {
            "seed-1": {"freshcache http": "pass", "mcp http": "fail"},
            "seed-2": {"freshcache http": "pass", "mcp http": "pass", "mcp stdio": "pass"},
        },
    )
    new = report("2026-12-01", {"mcp": "mcp 2.3.1"}, {"seed-1": {"mcp http": "pass"}})

    data = matrix.merged(old, new)

    assert data["date"] == "2026-12-01"
    assert data["clients"] == {
        "freshcache": "freshcache 0.1.0 (played 2026-11-01)",
        "mcp": "mcp 2.3.1",
    }
    assert data["columns"] == ["freshcache http", "mcp http"]
    # mcp's old verdicts are gone, its stdio column with them; freshcache's stay
    assert data["rows"] == {
        "seed-1": {"freshcache http": "pass", "mcp http": "pass"},
        "seed-2": {"freshcache http": "pass"},
    }
    assert data["why"]["seed-1"] == {"freshcache http": "why pass", "mcp http": "why pass"}


def test_an_older_matrix_json_without_columns_is_merged_by_its_summary():
    old = report(
        "2026-11-01", {"freshcache": "freshcache 0.1.0"}, {"seed-1": {"freshcache http": "pass"}}
    )
    old["summary"] = {"freshcache http": {"pass": 1, "fail": 0, "skip": 0}}
    del old["columns"]
    new = report("2026-12-01", {"mcp": "mcp 2.3.0"}, {"seed-1": {"mcp http": "fail"}})
    assert matrix.merged(old, new)["columns"] == ["freshcache http", "mcp http"]


def test_the_committed_matrix_is_drawn_from_its_json():
    data = json.loads((RESULTS / "matrix.json").read_text())
    columns, _ = matrix.played_columns(data)
    md = (RESULTS / "matrix.md").read_text()
    assert columns, "the matrix has no column"
    for row, cells in data["rows"].items():
        line = next(line for line in md.splitlines() if line.startswith(f"| {row} |"))
        marks = [cell.strip() for cell in line.strip().strip("|").split("|")][1:]
        assert marks == [matrix.MARK[cells.get(c, "skip")] for c in columns], row
