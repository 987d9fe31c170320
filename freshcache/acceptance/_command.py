"""``freshcache acceptance``: load tables, play them on the chosen wires, print a report.

The command line (`freshcache._cli`) imports this module only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

import anyio

from .. import __version__
from .._errors import FreshCacheError, TableError
from ._format import Case, load_cases
from ._runner import CaseReport, EngineWorld, World, fleet_unplayable, play

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE = 0, 1, 2


def shipped_tables() -> Path:
    """Where the tables shipped with freshcache live (wheel, or a source checkout)."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_shipped_tables", here.parent / "acceptance_tables"):
        if candidate.is_dir():
            return candidate
    raise FreshCacheError(
        "the shipped acceptance tables are missing from this installation; "
        "pass the path of a tables folder: freshcache acceptance PATH"
    )


Player = Callable[[Case], Awaitable[CaseReport]]

WIRES = ("core", "engine", "http", "stdio", "http-2025", "stdio-2025", "fleet")
"""Where rows can be played, in the order ``all`` plays them; the ``-2025`` wires put the
reference server on revision 2025-11-25 (DESIGN §6)."""


def _players(wire: str, fleet: str | Exception | None = None) -> list[tuple[str, Player]]:
    """The wires to play on, in order, each with how it plays one case; ``fleet``: the
    store URL the fleet rows play against, or why they cannot be played."""
    players: list[tuple[str, Player]] = []
    if wire in ("core", "all"):
        from ._core_world import play_core

        async def core(case: Case) -> CaseReport:
            return play_core(case)  # synchronous: no event loop in the bare engine

        players.append(("core", core))
    worlds: list[tuple[str, Callable[[], World]]] = []
    if wire in ("engine", "all"):
        worlds.append(("engine", EngineWorld))
    if wire in ("http", "all"):
        from ._http_world import HttpWorld

        worlds.append(("http", HttpWorld))
    if wire in ("stdio", "all"):
        from ._stdio_world import StdioWorld

        worlds.append(("stdio", StdioWorld))
    if wire in ("http-2025", "all"):
        from ._http_world import HttpWorld

        worlds.append(("http-2025", lambda: HttpWorld(revision="2025-11-25")))
    if wire in ("stdio-2025", "all"):
        from ._stdio_world import StdioWorld

        worlds.append(("stdio-2025", lambda: StdioWorld(revision="2025-11-25")))
    for name, make in worlds:

        async def in_world(case: Case, make: Callable[[], World] = make) -> CaseReport:
            return await play(case, make())

        players.append((name, in_world))
    if wire in ("fleet", "all"):
        players.append(("fleet", _fleet_player(fleet)))
    return players


def _fleet_player(fleet: str | Exception | None) -> Player:
    """The fleet wire: a `FleetWorld` on the store at ``fleet`` (``redis://``), or, when
    ``fleet`` is the reason they cannot be played, every fleet row skipped with it."""

    async def in_fleet(case: Case) -> CaseReport:
        if not isinstance(fleet, str):
            why = str(fleet or "no store for the fleet rows: pass --fleet redis://host:port/db")
            return CaseReport(case.id, case.where, True, case.expect_text, "-", skipped=why)
        from ._fleet_world import FleetWorld

        return await play(case, FleetWorld(fleet))

    return in_fleet


class _Printer:
    """Table output: colour on a terminal, plain otherwise, a progress line on stderr."""

    def __init__(self, out: TextIO, err: TextIO, colour: bool) -> None:
        self.out, self.err, self.colour = out, err, colour
        self.progress = err.isatty()

    def paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text

    def header(self) -> None:
        print(f"{'wire':<10} {'case':<40} {'expected':<46} {'actual':<40} result", file=self.out)

    def step(self, done: int, total: int, wire: str, case: Case) -> None:
        if self.progress:
            print(f"\r[{done}/{total}] {wire} {case.id:<50}", end="", file=self.err, flush=True)

    def row(self, wire: str, report: CaseReport) -> None:
        if self.progress:
            print("\r" + " " * 70 + "\r", end="", file=self.err)
        if report.skipped:
            verdict = self.paint("skip", "33")
        elif report.known_failure:
            verdict = self.paint("known", "33")
        elif report.passed:
            verdict = self.paint("pass", "32")
        else:
            verdict = self.paint("FAIL", "31;1")
        print(
            f"{wire:<10} {report.id:<40} {_clip(report.expected, 46):<46} "
            f"{_clip(report.actual, 40):<40} {verdict}",
            file=self.out,
        )
        for failure in report.failures:
            print(f"        {report.where}: {failure}", file=self.out)
        if report.known_failure:
            print(f"        known failing, {report.known_failure}", file=self.out)
        if report.skipped:
            print(f"        cannot be played on {wire}: {report.skipped}", file=self.out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


async def _run_all(
    cases: Sequence[Case],
    wire: str,
    printer: _Printer | None,
    fleet: str | Exception | None = None,
) -> list[tuple[str, CaseReport]]:
    results: list[tuple[str, CaseReport]] = []
    players = _players(wire, fleet)
    fleet_rows = [c for c in cases if fleet_unplayable(c, fleet_world=True) is None]
    total = sum(len(fleet_rows if name == "fleet" else cases) for name, _ in players)
    done = 0
    for name, player in players:
        # The fleet wire plays the fleet rows only (the others have their wires).
        for case in fleet_rows if name == "fleet" else cases:
            if printer is not None:
                printer.step(done, total, name, case)
            report = await player(case)
            done += 1
            results.append((name, report))
            if printer is not None:
                printer.row(name, report)
    return results


def _fleet_store(
    stack: ExitStack, args: argparse.Namespace, cases: Sequence[Case]
) -> str | Exception | None:
    """The store URL for the fleet rows (``--fleet``, or a Valkey started for them), or
    the reason they cannot be played; ``None`` when no fleet row is played."""
    if args.wire not in ("fleet", "all"):
        return None
    if not any(fleet_unplayable(c, fleet_world=True) is None for c in cases):
        return None
    from ._fleet_world import FleetUnavailable, fleet_store

    try:
        return stack.enter_context(fleet_store(getattr(args, "fleet", None), sys.stderr))
    except FleetUnavailable as exc:
        return exc


def run(args: argparse.Namespace) -> int:
    """`freshcache acceptance`: play the tables, print the report, give the exit code."""
    paths = [Path(p) for p in args.paths] if args.paths else [shipped_tables()]
    try:
        cases = load_cases(paths)
    except TableError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"freshcache: {len(exc.problems)} problem(s); no case was run", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.only:
        wanted = set(args.only)
        unknown = wanted - {c.id for c in cases}
        if unknown:
            print(f"freshcache: no case with id {', '.join(sorted(unknown))}", file=sys.stderr)
            return EXIT_UNUSABLE
        cases = [c for c in cases if c.id in wanted]
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ and not args.json
    printer = None if args.json else _Printer(sys.stdout, sys.stderr, colour)
    if printer is not None:
        printer.header()
    started = time.perf_counter()
    with ExitStack() as stack:
        fleet = _fleet_store(stack, args, cases)
        results = anyio.run(_run_all, cases, args.wire, printer, fleet)
    elapsed = time.perf_counter() - started
    passed = sum(1 for _, r in results if r.passed and not r.skipped)
    skipped = sum(1 for _, r in results if r.skipped)
    failed = sum(1 for _, r in results if not r.passed)
    if args.json:
        report = {
            "freshcache": __version__,
            "wire": args.wire,
            "cases": [{"wire": wire, **r.as_json()} for wire, r in results],
            "summary": {
                "passed": passed,
                "failed": failed,
                "skipped": skipped,
                "seconds": round(elapsed, 3),
            },
        }
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print()
        for wire in dict.fromkeys(w for w, _ in results):
            mine = [r for w, r in results if w == wire]
            ok = sum(1 for r in mine if r.passed and not r.skipped)
            print(f"{wire}: {ok}/{len(mine)} passed", end="")
            print(
                f", {sum(1 for r in mine if r.skipped)} not playable"
                if any(r.skipped for r in mine)
                else ""
            )
        print(f"({elapsed:.1f}s)")
        line = f"{passed} passed, {failed} failed"
        if skipped:
            line += f", {skipped} skipped"
        known = sum(1 for _, r in results if r.known_failure)
        if known:
            line += f" ({known} of the passed are known failing: KNOWN_FAILING)"
        print(line)
    return EXIT_OK if failed == 0 else EXIT_FAILED
