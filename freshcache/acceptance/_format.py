"""Acceptance-table files: Markdown pipe tables a QA engineer edits without Python.

A file is Markdown. Every table whose header is ``| id | source | steps | expect |``
holds cases, one per row; everything else (headings, prose, other tables) is
commentary. ``steps`` and ``expect`` are lists of phrases separated by ``;`` (see
`freshcache.acceptance._steps` for the vocabulary). Problems are reported as
``path:line: what is wrong``, all of them at once.

An optional fifth column, ``on 2025-11-25``, says what the row gives against a server
on that revision when DESIGN §6 makes it differ (empty: the same): either
``EXPECTATIONS because REASON`` (the faithful 2025 outcome, e.g. a read counted as
``ttlMs`` 0) or ``skip because REASON``. The reason is required: a reviewer checks it
against §6, and the 2026 expectation is never touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from freshcache import TableError

from ._steps import Expect, Given, Step, parse_expect, parse_step

COLUMNS = ("id", "source", "steps", "expect")
COLUMN_2025 = "on 2025-11-25"
"""The optional column: what the row gives on revision 2025-11-25 (module docstring)."""


class CaseRow(BaseModel):
    """One validated row."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, populate_by_name=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=60)
    source: str = Field(min_length=1)
    steps: tuple[Step | Given, ...]
    expect: tuple[Expect, ...]
    on_2025: tuple[tuple[Expect, ...] | None, str] | None = Field(
        default=None, alias="on 2025-11-25"
    )
    """(2025 expectations, or ``None`` to skip; the reason), or ``None``: the same."""

    @field_validator("steps", mode="before")
    @classmethod
    def _parse_steps(cls, value: object) -> tuple[Step | Given, ...]:
        phrases = _phrases(value)
        if not phrases:
            raise ValueError("no steps")
        parsed = tuple(parse_step(p) for p in phrases)
        seen_action = False
        for phrase, step in zip(phrases, parsed, strict=True):
            if isinstance(step, Given):
                if seen_action:
                    raise ValueError(f"{phrase!r}: 'given' steps come before all others")
            else:
                seen_action = True
        return parsed

    @field_validator("expect", mode="before")
    @classmethod
    def _parse_expect(cls, value: object) -> tuple[Expect, ...]:
        phrases = _phrases(value)
        if not phrases:
            raise ValueError("no expectations")
        return tuple(parse_expect(p) for p in phrases)

    @field_validator("on_2025", mode="before")
    @classmethod
    def _parse_2025(cls, value: object) -> tuple[tuple[Expect, ...] | None, str] | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str):
            raise ValueError("expected text")
        what, sep, reason = value.partition(" because ")
        if not sep or not reason.strip():
            raise ValueError(
                f"{value!r}: write 'EXPECTATIONS because REASON' or 'skip because REASON'"
            )
        if what.strip().lower() == "skip":
            return None, reason.strip()
        return tuple(parse_expect(p) for p in _phrases(what)), reason.strip()


def _phrases(value: object) -> list[str]:
    if not isinstance(value, str):
        raise ValueError("expected text")
    return [p.strip() for p in value.split(";") if p.strip()]


@dataclass(frozen=True, slots=True)
class Case:
    """A row with where it came from."""

    row: CaseRow
    path: str
    line: int
    steps_text: str
    expect_text: str
    cell_2025: str | None = None

    @property
    def id(self) -> str:
        return self.row.id

    def expect_on(self, revision: str) -> tuple[tuple[Expect, ...] | None, str]:
        """The expectations on ``revision`` (``None``: not playable there) and their text."""
        if revision != "2025-11-25" or self.row.on_2025 is None:
            return self.row.expect, self.expect_text
        expect, reason = self.row.on_2025
        if expect is None:
            return None, reason
        return expect, f"{'; '.join(_expect_texts(self))} (2025: {reason})"

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _expect_texts(case: Case) -> list[str]:
    cell = case.cell_2025 or ""
    return [p.strip() for p in cell.partition(" because ")[0].split(";") if p.strip()]


_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _cells(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    return [cell.strip() for cell in body.split("|")]


def parse_text(text: str, path: str) -> tuple[list[Case], list[str]]:
    """Parse one file's text; returns the cases and the problems found."""
    cases: list[Case] = []
    problems: list[str] = []
    columns: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped.startswith("|"):
            columns = None  # a table ends at the first line that is not a row
            continue
        cells = _cells(stripped)
        if columns is None:
            lowered = [c.lower() for c in cells]
            columns = lowered if set(COLUMNS) <= set(lowered) else []
            extra = set(lowered) - set(COLUMNS)
            if columns and (extra - {COLUMN_2025} or len(set(lowered)) != len(lowered)):
                problems.append(
                    f"{path}:{number}: a case table has exactly the columns "
                    f"{' | '.join(COLUMNS)} (and optionally {COLUMN_2025}); "
                    f"found {' | '.join(cells)}"
                )
                columns = []
            continue
        if not columns or _SEPARATOR.match(stripped):
            continue
        if len(cells) != len(columns):
            problems.append(
                f"{path}:{number}: row has {len(cells)} cells, the table has {len(columns)} "
                "columns (a '|' inside a cell must be written '\\|')"
            )
            continue
        values = dict(zip(columns, cells, strict=True))
        try:
            row = CaseRow.model_validate(values)
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(p) for p in error["loc"]) or "row"
                message = error["msg"].removeprefix("Value error, ")
                problems.append(f"{path}:{number}: {where}: {message}")
            continue
        cases.append(
            Case(row, path, number, values["steps"], values["expect"], values.get(COLUMN_2025))
        )
    return cases, problems


def table_files(paths: Iterable[Path]) -> list[Path]:
    """Expand directories into their ``*.md`` files (sorted); keep files as given."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(sorted(path.glob("*.md")))
        else:
            out.append(path)
    return out


def load_cases(paths: Sequence[Path]) -> list[Case]:
    """Load and validate every case; raise `TableError` listing every problem."""
    problems: list[str] = []
    cases: list[Case] = []
    files = table_files(paths)
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            problems.append(f"{file}: no such file or directory")
            continue
        except IsADirectoryError:
            problems.append(f"{file}: is a directory")
            continue
        except UnicodeDecodeError as exc:
            problems.append(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})")
            continue
        except OSError as exc:
            problems.append(f"{file}: cannot be read ({exc.strerror})")
            continue
        found, file_problems = parse_text(text, str(file))
        cases.extend(found)
        problems.extend(file_problems)
    seen: dict[str, Case] = {}
    for case in cases:
        first = seen.setdefault(case.id, case)
        if first is not case:
            problems.append(f"{case.where}: duplicate id {case.id!r} (first at {first.where})")
    if not problems and not cases:
        where = ", ".join(str(p) for p in paths) or "(no paths)"
        problems.append(
            f"{where}: no acceptance cases found "
            "(a table needs the columns id | source | steps | expect)"
        )
    if problems:
        raise TableError(problems)
    return cases
