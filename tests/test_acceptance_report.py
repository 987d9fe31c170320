"""What `freshcache acceptance` tells a QA engineer: which tables it played (a
checkout's own before the installed copy), an actual column phrased like the expected
one, a failures list, a JUnit report CI reads, and a timeline recorded from the run.

The command runs as a subprocess (the installed entry point's module), as a QA
engineer would run it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from freshcache.acceptance._command import checkout_tables

ROOT = Path(__file__).resolve().parent.parent
HEADER = "| id | source | steps | expect |\n|---|---|---|---|\n"
PASSING = (
    "| mine-passes | test | server sets selected v2 and notifies; read selected | fresh v2 |\n"
)
FAILING = "| mine-fails | test | server sets selected v2 and notifies; read selected | fresh v1; no server read |\n"
# Plays only on a wire (a result's schema is checked on the wire): skipped on core/engine.
WIRE_ONLY = (
    "| mine-wire-only | test | given not cached; next read of other has no contents; "
    "read other | awaiting_fresh_source (server_error) |\n"
)
WIRES = ["core", "engine", "http", "stdio", "http-2025", "stdio-2025"]
"""What ``--wire all`` plays a table without fleet rows on, in order."""
UNNOTIFIED = "| mine-unnotified | test | server sets selected v2; read selected | fresh v1; no server read |\n"


def acceptance(
    *args: str, cwd: Path = ROOT, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "freshcache._cli", "acceptance", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def checkout(tmp_path: Path, project: str, rows: str) -> Path:
    """A folder laid out as a checkout of ``project`` with one table of ``rows``."""
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "{project}"\nversion = "1"\n')
    (tmp_path / "acceptance_tables").mkdir()
    (tmp_path / "acceptance_tables" / "01-mine.md").write_text("# Mine\n\n" + HEADER + rows)
    (tmp_path / "deep" / "er").mkdir(parents=True)
    return tmp_path


# ---------------------------------------------------------------------- which tables


def test_inside_a_checkout_its_own_tables_are_played_and_named(tmp_path):
    root = checkout(tmp_path, "freshcache", PASSING)
    done = acceptance("--wire", "engine", cwd=root / "deep" / "er")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "tables: this checkout's ../../acceptance_tables (pass PATH to play others)"
    assert lines[1].split() == ["../../acceptance_tables/01-mine.md", "(1", "case)"]
    assert "mine-passes" in done.stdout
    assert "seed-1" not in done.stdout  # the installed copy was not played
    assert "1 passed, 0 failed" in done.stdout


def test_a_folder_of_another_project_is_not_taken_for_a_checkout(tmp_path):
    root = checkout(tmp_path, "not-freshcache", PASSING)
    assert checkout_tables(root / "deep") is None
    assert checkout_tables(ROOT / "tests") == ROOT / "acceptance_tables"
    done = acceptance("--wire", "core", "--json", cwd=root / "deep")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["tables"]["origin"] == "installed"
    assert "mine-passes" not in {c["id"] for c in report["cases"]}
    assert all(Path(f).name != "01-mine.md" for f in report["tables"]["files"])


def test_paths_given_win_over_the_checkout(tmp_path):
    root = checkout(tmp_path, "freshcache", PASSING)
    own = tmp_path / "elsewhere.md"
    own.write_text(HEADER + UNNOTIFIED)
    done = acceptance("--wire", "engine", str(own), cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[:2] == [f"tables: {own}", f"  {own}  (1 case)"]
    assert "mine-unnotified" in done.stdout
    assert "mine-passes" not in done.stdout


# ---------------------------------------------------------------------- columns, failures


def test_every_passing_row_reads_the_same_in_both_columns():
    done = acceptance("--wire", "engine", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    cases = json.loads(done.stdout)["cases"]
    played = [c for c in cases if c["skipped"] is None]
    assert len(played) > 50
    for case in played:
        expected, actual = case["expected"].split("; "), case["actual"].split("; ")
        assert len(expected) == len(actual), case
        for want, got in zip(expected, actual, strict=True):
            # A bound ("at most N", "at least N") is compared with the count seen.
            bound = re.fullmatch(r"(.+) at (most|least) (\d+)", want)
            if bound is None:
                assert want == got, case
                continue
            seen = re.fullmatch(rf"{re.escape(bound[1])} (\d+)", got)
            assert seen is not None, case
            if bound[2] == "most":
                assert int(seen[1]) <= int(bound[3]), case
            else:
                assert int(seen[1]) >= int(bound[3]), case


def test_a_failing_row_shows_what_differs_and_is_listed_at_the_end(tmp_path):
    table = tmp_path / "mixed.md"
    table.write_text("# Mixed\n\n" + HEADER + PASSING + FAILING)
    done = acceptance("--wire", "engine", str(table))
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    row = next(line for line in out.splitlines() if line.split()[:2] == ["engine", "mine-fails"])
    assert "fresh v1; no server read" in row  # expected
    assert "fresh v2; no server read" in row  # actual: what was compared
    tail = out[out.index("1 failed:") :].splitlines()
    assert tail[1] == f"  mine-fails on engine, {table}:6"
    assert tail[2] == "    expected  fresh v1; no server read"
    assert tail[3] == "    actual    fresh v2; no server read"
    assert tail[4].startswith("    - text is ")
    assert "mine-passes on" not in out[out.index("1 failed:") :]


# ---------------------------------------------------------------------- JUnit, JSON, timeline


@pytest.fixture(scope="module")
def every_wire(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Path]:
    """Four rows (a pass, a fail, a wire-only row, an unnotified change) on every wire,
    with ``--json`` and ``--junit``."""
    folder = tmp_path_factory.mktemp("every-wire")
    table = folder / "four.md"
    table.write_text("# Four\n\n" + HEADER + PASSING + FAILING + WIRE_ONLY + UNNOTIFIED)
    junit = folder / "report.xml"
    done = acceptance("--wire", "all", "--json", "--junit", str(junit), str(table))
    assert done.returncode == 1, done.stdout + done.stderr
    return json.loads(done.stdout), junit, table


def test_the_junit_report_has_a_suite_per_wire_and_a_case_per_row(every_wire):
    _, junit, table = every_wire
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == WIRES
    for suite in suites:
        cases = {c.get("name"): c for c in suite.findall("testcase")}
        assert list(cases) == ["mine-passes", "mine-fails", "mine-wire-only", "mine-unnotified"]
        assert suite.get("tests") == "4"
        assert all(c.get("classname") == f"{suite.get('name')}.four" for c in cases.values())
        assert cases["mine-fails"].get("file") == str(table)
        assert cases["mine-fails"].get("line") == "6"
        failure = cases["mine-fails"].find("failure")
        assert failure is not None
        assert failure.get("message", "").startswith("text is ")
        assert "expected: fresh v1; no server read" in (failure.text or "")
        assert cases["mine-passes"].find("failure") is None
        assert cases["mine-passes"].find("skipped") is None
        assert float(cases["mine-passes"].get("time", "-1")) >= 0
        skipped = cases["mine-wire-only"].find("skipped")
        if suite.get("name") in ("core", "engine"):
            assert skipped is not None
            assert "schema is checked on the wire" in skipped.get("message", "")
            assert suite.get("skipped") == "1"
        else:
            assert skipped is None
            assert cases["mine-wire-only"].find("failure") is None
            assert suite.get("skipped") == "0"
        assert suite.get("failures") == "1"
    assert root.get("tests") == str(4 * len(WIRES))
    assert root.get("failures") == str(len(WIRES))
    assert root.get("skipped") == "2"


QUICK = ["core", "engine", "http", "http-2025"]
"""What the default (``quick``) plays a table without fleet rows on, in order."""


def test_the_default_plays_every_row_on_a_network_wire_and_says_what_it_left_out(tmp_path):
    table = tmp_path / "two.md"
    table.write_text("# Two\n\n" + HEADER + PASSING + WIRE_ONLY)
    done = acceptance(str(table))
    assert done.returncode == 0, done.stdout + done.stderr
    played = [line.split()[0] for line in done.stdout.splitlines() if line.endswith(" pass")]
    assert played == ["core", "engine", "http", "http", "http-2025", "http-2025"]
    assert (
        "not played: the stdio, stdio-2025 wires (the same rows over a stdio subprocess, on "
        "both revisions); freshcache acceptance --wire all plays every wire and revision"
    ) in done.stdout
    report = json.loads(acceptance("--json", str(table)).stdout)
    assert report["wire"] == "quick"
    assert report["not_played"] == ["stdio", "stdio-2025"]
    assert [c["wire"] for c in report["cases"]] == [w for w in QUICK for _ in range(2)]


def test_every_wire_played_at_once_still_reports_wire_by_wire_in_order(every_wire):
    report, _, _ = every_wire
    assert [c["wire"] for c in report["cases"]] == [w for w in WIRES for _ in range(4)]
    assert [c["id"] for c in report["cases"]][:4] == [
        "mine-passes",
        "mine-fails",
        "mine-wire-only",
        "mine-unnotified",
    ]
    assert report["not_played"] == []


def test_the_json_report_names_the_tables_and_lists_the_failures(every_wire):
    report, junit, table = every_wire
    assert report["tables"] == {"origin": "given", "files": [str(table)]}
    assert report["junit"] == str(junit)
    assert [(f["id"], f["wire"]) for f in report["failures"]] == [
        ("mine-fails", wire) for wire in WIRES
    ]
    assert report["failures"][0]["where"] == f"{table}:6"
    assert report["summary"] == {
        **report["summary"],
        "passed": 3 * len(WIRES) - 2,
        "failed": len(WIRES),
        "skipped": 2,
    }
    for case in report["cases"]:
        assert {"expected", "actual", "observed", "timeline", "where"} <= set(case)


def _events(case: dict[str, Any]) -> list[str]:
    return [e["event"] for e in case["timeline"]]


@pytest.mark.parametrize("wire", ["core", "engine", "http", "stdio"])
def test_the_timeline_shows_the_notification_the_re_read_and_the_result(every_wire, wire):
    report, _, _ = every_wire
    case = next(c for c in report["cases"] if c["wire"] == wire and c["id"] == "mine-passes")
    times = [e["ms"] for e in case["timeline"]]
    assert times == sorted(times)
    assert times[0] >= 0
    events = _events(case)

    def at(event: str) -> int:
        return events.index(event)

    assert at("step: server sets selected v2 and notifies") == 0
    assert (
        at("heard resources/updated selected")
        < at("read sent selected")
        < at("read landed selected: v2")
        < at("step: read selected")
        < at("result: fresh v2")
    )
    if wire != "core":  # the bare engine has no cache, so no state-change feed
        assert (
            at("heard resources/updated selected")
            < at("cache: selected is awaiting_fresh_source (invalidated)")
            < at("cache: selected is fresh")
        )


@pytest.mark.parametrize("wire", ["core", "engine", "http", "stdio"])
def test_the_timeline_records_what_happened_not_what_a_row_implies(every_wire, wire):
    report, _, _ = every_wire
    case = next(c for c in report["cases"] if c["wire"] == wire and c["id"] == "mine-unnotified")
    # The server changed without a word: nothing was heard, nothing re-read; a hit.
    assert _events(case) == [
        "step: server sets selected v2",
        "step: read selected",
        "result: fresh v1",
    ]


def test_v_prints_each_case_timeline_under_its_row(tmp_path):
    table = tmp_path / "one.md"
    table.write_text(HEADER + PASSING)
    done = acceptance("--wire", "engine", "-v", str(table))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    row = next(i for i, line in enumerate(lines) if line.split()[:2] == ["engine", "mine-passes"])
    timeline = lines[row + 1 : row + 9]
    assert timeline[0].split(maxsplit=2)[1:] == ["ms", "step: server sets selected v2 and notifies"]
    assert any(line.endswith("ms  heard resources/updated selected") for line in timeline)
    assert any(line.endswith("ms  result: fresh v2") for line in timeline)
    quiet = acceptance("--wire", "engine", str(table))
    assert "heard resources/updated" not in quiet.stdout


def test_a_junit_path_in_a_missing_folder_is_a_one_line_error(tmp_path):
    done = acceptance("--wire", "core", "--junit", str(tmp_path / "nope" / "r.xml"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"freshcache: cannot write the JUnit report to {tmp_path / 'nope' / 'r.xml'}: "
        f"no folder {tmp_path / 'nope'}"
    ]
    assert done.stdout == ""


def test_a_row_known_failing_is_skipped_in_junit_with_the_defect():
    from freshcache.acceptance._junit import junit_xml
    from freshcache.acceptance._runner import CaseReport

    known = CaseReport(
        "row-x", "t.md:3", True, "fresh v2", "fresh v1", known_failure="issue 99: state is fresh v1"
    )
    crashed = CaseReport("row-y", "t.md:4", False, "fresh v2", "(not compared)", ["crashed: X"])
    root = junit_xml([("engine", known), ("engine", crashed)], 1.0).getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("2", "1", "1")
    cases = suite.findall("testcase")
    skipped = cases[0].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "known failing: issue 99: state is fresh v1"
    failure = cases[1].find("failure")
    assert failure is not None
    assert failure.get("message") == "crashed: X"
    assert "actual:   (not compared)" in (failure.text or "")


def test_the_suite_does_not_play_again_the_rows_a_run_of_the_command_passed(tmp_path):
    # CI's first step writes this report; the suite then skips what it played cleanly.
    report = tmp_path / "played.xml"
    report.write_text(
        '<testsuites><testsuite name="core">'
        '<testcase name="seed-1"/>'
        '<testcase name="seed-2"><failure message="no"/></testcase>'
        '<testcase name="seed-3"><properties><property name="settle_gave_up" value="1"/>'
        "</properties></testcase>"
        '</testsuite><testsuite name="engine"><testcase name="seed-4"/></testsuite></testsuites>'
    )
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"),
            *("tests/test_acceptance_core.py", "tests/test_acceptance_engine.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "FRESHCACHE_PLAYED_TABLES": str(report)},
        check=False,
    )
    collected = done.stdout.splitlines()
    assert (
        "tests/test_acceptance_core.py::test_row_passes_on_the_bare_engine[seed-1]" not in collected
    )
    assert (
        "tests/test_acceptance_engine.py::test_row_passes_on_the_engine[asyncio-seed-4]"
        not in collected
    )
    for kept in (
        "tests/test_acceptance_core.py::test_row_passes_on_the_bare_engine[seed-2]",
        "tests/test_acceptance_core.py::test_row_passes_on_the_bare_engine[seed-3]",
        "tests/test_acceptance_core.py::test_row_passes_on_the_bare_engine[seed-4]",
        "tests/test_acceptance_engine.py::test_row_passes_on_the_engine[asyncio-seed-1]",
    ):
        assert kept in collected, done.stdout + done.stderr
    assert "2 deselected" in done.stdout


def test_a_crash_names_where_it_happened_and_a_failed_read_says_why():
    from freshcache._core import RequestFailed
    from freshcache._core._backoff import BackoffSettings
    from freshcache.acceptance._runner import crash_site
    from freshcache.acceptance._steps import ALIASES
    from freshcache.acceptance._timeline import answer

    try:
        BackoffSettings(base=-1.0)
    except Exception as exc:
        sites = crash_site(exc).split(" <- ")
    where, function = sites[0].split(" ")
    assert re.fullmatch(r"freshcache/_core/_backoff\.py:\d+", where)
    assert function == "__post_init__"
    assert sites[-1].startswith("test_acceptance_report.py:")
    failed = RequestFailed("unreachable", "resources/read: RemoteProtocolError: illegal status")
    assert answer(ALIASES["selected"], failed) == (
        "read landed selected: failed (unreachable: resources/read: RemoteProtocolError: "
        "illegal status)"
    )
