"""Table files: parsing, validation messages (path:line) and the command's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from freshcache import TableError
from freshcache._cli import main
from freshcache.acceptance import load_cases, parse_text
from freshcache.acceptance._steps import Given, NextRead, Notify, Observe, parse_expect, parse_step

HEADER = "| id | source | steps | expect |\n|---|---|---|---|\n"


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("notify updated selected", Notify("updated", "guide://shipping/approval")),
        ("notify updated other x3", Notify("updated", "guide://shipping/rates", 3)),
        ("read   selected", Observe("read", "guide://shipping/approval")),
        ("read selected in background", Observe("background", "guide://shipping/approval")),
        (
            "reads of selected time out",
            NextRead("guide://shipping/approval", "timeout", sticky=True),
        ),
        ("given ack omits extra", Given("ack_omits", "guide://shipping/holidays")),
    ],
    ids=[
        "notify",
        "notify-repeated",
        "spaces-folded",
        "background-not-read",
        "sticky-fault",
        "given",
    ],
)
def test_phrases_parse_into_steps(phrase, expected):
    assert parse_step(phrase) == expected


def test_an_unknown_phrase_names_itself():
    with pytest.raises(ValueError, match="unknown step 'tickle the server'"):
        parse_step("tickle the server")


@pytest.mark.parametrize(
    ("phrase", "message"),
    [
        ("fresh", "say which version"),
        ("denied v2", "only fresh and stale"),
        ("purple", "unknown expectation"),
    ],
    ids=["fresh-without-version", "denied-with-version", "nonsense"],
)
def test_bad_expectations_are_explained(phrase, message):
    with pytest.raises(ValueError, match=message):
        parse_expect(phrase)


def test_prose_and_other_tables_are_comments():
    text = "# Title\n\nSome prose | with a bar.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n" + HEADER
    text += "| ok-1 | test | read selected | fresh v1 |\n"
    cases, problems = parse_text(text, "t.md")
    assert problems == []
    assert [c.id for c in cases] == ["ok-1"]
    assert cases[0].line == 11


def test_every_problem_is_reported_with_its_line(tmp_path):
    body = HEADER + (
        "| Bad Id | s | read selected | fresh v1 |\n"
        "| ok-2 | s | dance | fresh v1 |\n"
        "| ok-3 | s | read selected | glowing |\n"
        "| ok-4 | s | read selected; given not cached | fresh v1 |\n"
        "| ok-5 | s | read selected |\n"
    )
    path = write(tmp_path, "bad.md", body)
    with pytest.raises(TableError) as info:
        load_cases([path])
    problems = info.value.problems
    assert problems[0].startswith(f"{path}:3: id:")
    assert problems[1] == f"{path}:4: steps: unknown step 'dance'"
    assert problems[2] == f"{path}:5: expect: unknown expectation 'glowing'"
    assert problems[3].startswith(f"{path}:6: steps: 'given not cached': 'given' steps come before")
    assert problems[4].startswith(f"{path}:7: row has 3 cells")


def test_duplicate_ids_point_at_both_places(tmp_path):
    one = write(tmp_path, "a.md", HEADER + "| same | s | read selected | fresh v1 |\n")
    two = write(tmp_path, "b.md", HEADER + "| same | s | read selected | fresh v1 |\n")
    with pytest.raises(TableError) as info:
        load_cases([one, two])
    assert info.value.problems == (f"{two}:3: duplicate id 'same' (first at {one}:3)",)


def test_a_file_without_cases_is_unusable(tmp_path):
    path = write(tmp_path, "empty.md", "# nothing here\n")
    with pytest.raises(TableError, match="no acceptance cases found"):
        load_cases([path])


def test_a_missing_file_and_a_binary_file_are_reported(tmp_path):
    binary = tmp_path / "bin.md"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TableError) as info:
        load_cases([tmp_path / "nope.md", binary])
    assert info.value.problems[0] == f"{tmp_path / 'nope.md'}: no such file or directory"
    assert info.value.problems[1].startswith(f"{binary}: not UTF-8 text")


def test_the_command_exits_2_with_file_and_line_on_a_corrupted_table(tmp_path, capsys):
    path = write(
        tmp_path, "broken.md", HEADER + "| seed-x | s | read selected; explode | fresh v1 |\n"
    )
    assert main(["acceptance", "--wire", "engine", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3: steps: unknown step 'explode'" in err
    assert "Traceback" not in err


def test_the_command_exits_1_when_a_case_fails_and_says_which(tmp_path, capsys):
    path = write(
        tmp_path,
        "wrong.md",
        HEADER
        + "| wrong-1 | s | server sets selected v2 and notifies; read selected | fresh v1 |\n",
    )
    assert main(["acceptance", "--wire", "engine", str(path)]) == 1
    out = capsys.readouterr().out
    assert "wrong-1" in out
    assert "FAIL" in out
    assert "0 passed, 1 failed" in out


def test_the_json_report_lists_every_case(tmp_path, capsys):
    path = write(
        tmp_path,
        "two.md",
        HEADER
        + "| one | s | read selected | fresh v1 |\n| two | s | notify updated other; read selected | fresh v1; no server read |\n",
    )
    assert main(["acceptance", "--wire", "engine", "--json", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in report["cases"]] == ["one", "two"]
    assert all(c["passed"] is True for c in report["cases"])
    assert report["summary"] == {**report["summary"], "passed": 2, "failed": 0}


def test_only_plays_the_named_cases_and_rejects_unknown_ids(capsys):
    assert main(["acceptance", "--only", "seed-6", "--wire", "all"]) == 0
    out = capsys.readouterr().out
    assert "6 passed, 0 failed" in out  # the bare engine, the engine, HTTP and stdio (x2)
    assert "core: 1/1 passed" in out
    assert "stdio: 1/1 passed" in out
    assert "http-2025: 1/1 passed" in out
    assert "stdio-2025: 1/1 passed" in out
    assert main(["acceptance", "--only", "seed-6"]) == 0  # quick: no stdio
    out = capsys.readouterr().out
    assert "4 passed, 0 failed" in out
    assert "stdio" not in out.split("not played:")[0]
    assert main(["acceptance", "--only", "no-such-case"]) == 2


def test_the_installed_command_runs_the_shipped_tables():
    done = subprocess.run(
        [sys.executable, "-m", "freshcache._cli", "acceptance", "--wire", "engine"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "seed-1" in done.stdout
    assert " 0 failed" in done.stdout


HEADER_2025 = "| id | source | steps | expect | on 2025-11-25 |\n|---|---|---|---|---|\n"


def test_the_2025_column_gives_that_revision_its_own_outcome_or_a_skip_with_a_reason():
    text = HEADER_2025 + (
        "| same | s | read selected | fresh v1 | |\n"
        "| other | s | read other | fresh v1; no server read | fresh v1; server read because "
        "2025 reads count as ttlMs 0 |\n"
        "| gone | s | read selected | fresh v1 | skip because no such thing in 2025 |\n"
    )
    cases, problems = parse_text(text, "t.md")
    assert problems == []
    same, other, gone = cases
    assert same.expect_on("2025-11-25") == same.expect_on("2026-07-28")
    expect, shown = other.expect_on("2025-11-25")
    assert expect == (parse_expect("fresh v1"), parse_expect("server read"))
    assert shown == "fresh v1; server read (2025: 2025 reads count as ttlMs 0)"
    assert other.expect_on("2026-07-28")[0] == other.row.expect  # 2026 is never touched
    assert gone.expect_on("2025-11-25") == (None, "no such thing in 2025")


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("fresh v1", "write 'EXPECTATIONS because REASON'"),
        ("skip", "write 'EXPECTATIONS because REASON'"),
        ("glowing because why not", "unknown expectation 'glowing'"),
    ],
    ids=["no-reason", "skip-without-reason", "bad-expectation"],
)
def test_a_2025_cell_without_a_reason_or_with_a_bad_expectation_is_refused(cell, message):
    text = HEADER_2025 + f"| r | s | read selected | fresh v1 | {cell} |\n"
    cases, problems = parse_text(text, "t.md")
    assert cases == []
    assert len(problems) == 1
    assert message in problems[0]
    assert problems[0].startswith("t.md:3: on 2025-11-25")


def test_a_table_with_an_unknown_column_is_refused():
    text = "| id | source | steps | expect | on 1999 |\n|---|---|---|---|---|\n"
    text += "| r | s | read selected | fresh v1 | x |\n"
    _, problems = parse_text(text, "t.md")
    assert problems and "optionally on 2025-11-25" in problems[0]
