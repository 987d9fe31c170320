"""`benchmarks/matrix.py`: replaying some clients keeps the others' columns as measured,
and the committed matrix is the one its JSON says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import matrix
from freshcache.acceptance._verdicts import classify, hands_out_text

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


def test_replaying_some_wires_of_a_client_keeps_its_other_wires():
    old = report(
        "2026-11-01",
        {"mcp": "mcp 2.3.0 (played 2026-10-01)"},
        {"seed-1": {"mcp http": "fail", "mcp http-2025": "skip"}, "seed-2": {"mcp http": "pass"}},
    )
    new = report("2026-12-01", {"mcp": "mcp 2.3.0"}, {"seed-1": {"mcp http-2025": "pass"}})

    data = matrix.merged(old, new, ["http-2025"])

    assert data["rows"] == {
        "seed-1": {"mcp http": "fail", "mcp http-2025": "pass"},
        "seed-2": {"mcp http": "pass"},
    }
    assert data["columns"] == ["mcp http", "mcp http-2025"]
    assert (
        data["clients"]["mcp"] == "mcp 2.3.0 (http-2025 played 2026-12-01; http played 2026-10-01)"
    )


def test_an_older_matrix_json_without_columns_is_merged_by_its_summary():
    old = report(
        "2026-11-01", {"freshcache": "freshcache 0.1.0"}, {"seed-1": {"freshcache http": "pass"}}
    )
    old["summary"] = {"freshcache http": {"pass": 1, "fail": 0, "skip": 0}}
    del old["columns"]
    new = report("2026-12-01", {"mcp": "mcp 2.3.0"}, {"seed-1": {"mcp http": "fail"}})
    assert matrix.merged(old, new)["columns"] == ["freshcache http", "mcp http"]


def test_two_runs_are_compared_cell_by_cell_verdict_and_class():
    one = report("2026-12-07", {"mcp": "mcp 2.3.0"}, {"seed-1": {"mcp http": "fail"}})
    other = report(
        "2026-12-07", {"mcp": "mcp 2.3.0"}, {"seed-1": {"mcp http": "fail"}, "seed-2": {}}
    )
    one["classes"] = {"seed-1": {"mcp http": "old text"}}
    other["classes"] = {"seed-1": {"mcp http": "extra reads"}}

    assert matrix.differences(one, one) == []
    assert matrix.differences(one, other) == [
        "seed-1 | mcp http: FAIL (old text) / FAIL (extra reads)",
        "    why fail",
        "    why fail",
    ]
    other["rows"]["seed-2"] = {"mcp http": "unplayed"}
    assert "seed-2 | mcp http: - / n/p" in matrix.differences(one, other)


def test_the_committed_matrix_is_drawn_from_its_json():
    data = json.loads((RESULTS / "matrix.json").read_text())
    columns, _ = matrix.played_columns(data)
    classes = matrix.classified(data)
    md = (RESULTS / "matrix.md").read_text()
    assert columns, "the matrix has no column"
    for row in data["rows"]:
        line = next(line for line in md.splitlines() if line.startswith(f"| {row} |"))
        marks = [cell.strip() for cell in line.strip().strip("|").split("|")][1:]
        assert marks == [matrix.mark(row, c, data, classes) for c in columns], row


def test_every_failed_cell_of_the_committed_matrix_has_a_class():
    data = json.loads((RESULTS / "matrix.json").read_text())
    classes = matrix.classified(data)
    unclassified = [
        (row, column, data["why"][row][column])
        for row, cells in data["rows"].items()
        for column, value in cells.items()
        if value == "fail" and column not in classes.get(row, {})
    ]
    assert unclassified == []


def test_newer_text_than_the_row_expects_is_a_cost_never_old_text():
    data = json.loads((RESULTS / "matrix.json").read_text())
    classes = matrix.classified(data)
    newer = ("ack-omits-only-that-uri", "no-listen-unselected-ttl", "select-dropped-uri-ttl-only")
    failed = [(row, c) for row in newer for c, v in data["rows"][row].items() if v == "fail"]
    assert failed, "the rows no longer fail anywhere: pick others"
    assert {classes[row][c] for row, c in failed} == {"extra reads"}


@pytest.mark.parametrize(
    ("failures", "observed", "malformed", "verdict"),
    [
        (["cited v1, expected fresh v2"], "cited v1", False, "old text"),
        (
            ["cited v2, expected fresh v1", "server_read is True, expected False"],
            "cited v2",
            False,
            "extra reads",
        ),
        (["cited v1 where the row expects denied"], "cited v1", False, "old text"),
        (["cited v1 as current, expected stale v1"], "cited v1", False, "old text"),
        (["state is fresh, expected awaiting_fresh_source"], "fresh v1", False, "old text"),
        (["text is 'guide://x @ v1', expected version v2"], "fresh v1", False, "old text"),
        (["text is 'guide://x @ v3', expected version v2"], "fresh v3", False, "extra reads"),
        (["the server answered 1 reads, expected 2"], "cited v1", False, "unproven"),
        (["server_read is False, expected True"], "cited v1", False, "unproven"),
        (["server_read is False, expected True"], "withheld (down)", False, "no state"),
        (
            ["server_read is True, expected False", "the server answered 1 reads, expected 2"],
            "cited v2",
            False,
            "extra reads",
        ),
        (["the server answered 3 reads, expected 1"], "cited v1", False, "extra reads"),
        (["the server answered 2 reads, expected at most 1"], "cited v1", False, "extra reads"),
        (["cited v1 where the row expects awaiting_fresh_source"], "cited v1", True, "strictness"),
        (["0 untrusted messages counted, expected at least 1"], "fresh v1", False, "strictness"),
        (["withheld, expected fresh v2"], "withheld (error)", False, "no state"),
        (
            ["state is awaiting_fresh_source, expected fresh"],
            "awaiting_fresh_source",
            False,
            "no state",
        ),
        (["reason is timeout, expected unreachable"], "awaiting_fresh_source", False, "no state"),
        (["crashed: DriverError: boom"], "-", False, "no state"),
        (["the driver gave no answer to 'open' within 40 s"], "-", False, "no state"),
        (["the case did not finish within 40s"], "-", False, "no state"),
        (["guide://shipping/rates present in the list"], "list of 2", False, "old text"),
        (["the engine tracks 9 URIs, expected at most 4"], "fresh v1", False, "extra reads"),
        (
            ["the server answered 3 reads, expected 1", "cited v1, expected fresh v2"],
            "cited v1",
            False,
            "old text",
        ),
    ],
    ids=[
        "older-text",
        "newer-text",
        "text-where-denied",
        "stale-as-current",
        "fresh-where-awaiting",
        "state-older-text",
        "state-newer-text",
        "fewer-reads",
        "no-read-with-text",
        "no-read-no-text",
        "own-read-after-every-change",
        "more-reads",
        "at-most",
        "malformed-accepted",
        "untrusted-not-counted",
        "withheld-where-fresh",
        "wrong-state",
        "wrong-reason",
        "crash",
        "driver-hang",
        "case-timeout",
        "old-list",
        "bookkeeping",
        "worst-wins",
    ],
)
def test_each_failure_is_classed_as_a_broken_promise_or_a_cost(
    failures, observed, malformed, verdict
):
    got = classify(failures, malformed_answer=malformed, handed_text=hands_out_text(observed))
    assert got == verdict


def _rows(*lines: str) -> dict[str, Any]:
    from freshcache.acceptance._format import parse_text

    cases, problems = parse_text(
        "| id | source | steps | expect |\n|---|---|---|---|\n" + "\n".join(lines) + "\n",
        "inline.md",
    )
    assert problems == []
    return {case.id: case for case in cases}


def test_old_text_is_strictness_only_when_a_malformed_answer_carried_it():
    from freshcache.acceptance._verdicts import malformed_text

    cases = _rows(
        "| own | t | given not cached; next read of other has ttl as string; read other "
        "| awaiting_fresh_source (server_error) |",
        "| elsewhere | t | next read of other has ttl as string; read other; "
        "server sets selected v2 and notifies; read selected | fresh v2 |",
        "| newer | t | next read of selected has no contents; server sets selected v2; "
        "read selected | awaiting_fresh_source (server_error) |",
        "| frame | t | send malformed frame; read selected | fresh v1; untrusted messages 1 |",
    )
    carried = {name: malformed_text(case) for name, case in cases.items()}
    assert carried == {
        "own": {"v1"},
        "elsewhere": set(),  # the malformed answer was other's; selected is observed
        "newer": {"v1", "v2"},  # due until the next read of selected, whenever it runs
        "frame": set(),  # a broken frame carries no text
    }
    where = "cited v1 where the row expects awaiting_fresh_source"
    assert classify([where], malformed_answer=carried["own"]) == "strictness"
    assert classify(["cited v1, expected fresh v2"], malformed_answer=carried["elsewhere"]) == (
        "old text"
    )
    assert classify(["state is fresh, expected awaiting_fresh_source"], malformed_answer=set()) == (
        "old text"
    )
    assert classify(["cited v1, expected fresh v2"], malformed_answer={"v2"}) == "old text"
    assert classify(["cited v2, expected fresh v3"], malformed_answer={"v2"}) == "strictness"


def test_an_own_server_read_excuses_fewer_reads_only_without_an_earlier_observation():
    from freshcache.acceptance._verdicts import observed_before

    cases = _rows(
        "| once | t | stream drops; server sets selected v2 and notifies; read selected "
        "| fresh v2; no server read; server reads 2 |",
        "| twice | t | read selected; stream drops; server sets selected v2 and notifies; "
        "read selected | fresh v2; no server read; server reads 3 |",
    )
    assert not observed_before(cases["once"]) and observed_before(cases["twice"])
    lines = ["server_read is True, expected False", "the server answered 2 reads, expected 3"]
    assert classify(lines, observed_earlier=False) == "extra reads"
    # The earlier read handed out text the missing read would have proven.
    assert classify(lines, observed_earlier=True) == "unproven"
    assert classify(lines, observed_earlier=True, handed_text=False) == "no state"


def test_a_run_stopped_part_way_keeps_the_clients_it_played(tmp_path, monkeypatch):
    first, second = list(matrix.SHIPPED)[:2]
    case = {"id": "seed-1", "skipped": "", "passed": True, "failures": [], "actual": "fresh v1"}

    def play(name: str, wires: list[str] | None = None) -> dict[str, Any]:
        if name != first:
            raise KeyboardInterrupt  # the user's Ctrl-C while the second client plays
        return {"client": name, "cases": [{**case, "wire": "http"}]}

    monkeypatch.setattr(matrix, "play", play)
    with pytest.raises(KeyboardInterrupt):
        matrix.play_all(None, None, tmp_path)
    kept = json.loads((tmp_path / "matrix.json").read_text())
    assert kept["columns"] == [f"{first} http"]
    assert kept["rows"] == {"seed-1": {f"{first} http": "pass"}}

    monkeypatch.setattr(
        matrix,
        "play",
        lambda name, wires=None: {"client": name, "cases": [{**case, "wire": "stdio"}]},
    )
    matrix.play_all([second], None, tmp_path)  # the rest, played into it
    again = json.loads((tmp_path / "matrix.json").read_text())
    assert again["columns"] == [f"{first} http", f"{second} stdio"]
