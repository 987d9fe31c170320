"""``freshcache acceptance``: load tables, play them on the chosen wires, print a report.

The command line (`freshcache._cli`) imports this module only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio

from freshcache import FreshCacheError, TableError, __version__

from ._driver import DriverError, DriverProcess, Hello
from ._format import Case, load_cases
from ._junit import timeline_lines, write_junit
from ._runner import (
    STEP_TIMEOUT,
    CaseReport,
    EngineWorld,
    World,
    expected_text,
    fleet_unplayable,
    play,
)
from ._verdicts import (
    CLASSES,
    Verdict,
    classify,
    hands_out_text,
    malformed_text,
    observed_before,
)

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


def checkout_tables(start: Path) -> Path | None:
    """The ``acceptance_tables/`` of the freshcache checkout ``start`` is in, if any: the
    nearest folder (``start`` or a parent) holding both that folder and a
    ``pyproject.toml`` whose project is named freshcache."""
    for folder in (start, *start.parents):
        tables = folder / "acceptance_tables"
        if tables.is_dir() and _names_freshcache(folder / "pyproject.toml"):
            return tables
    return None


def _names_freshcache(pyproject: Path) -> bool:
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        import tomllib
    except ImportError:  # Python 3.10: the [project] table's name line
        section = re.search(r"(?ms)^\[project\]\s*$(.*?)(?=^\[|\Z)", text)
        return section is not None and bool(
            re.search(r"""(?m)^\s*name\s*=\s*["']freshcache["']\s*$""", section[1])
        )
    try:
        project = tomllib.loads(text).get("project", {})
    except tomllib.TOMLDecodeError:
        return False
    return isinstance(project, dict) and project.get("name") == "freshcache"


@dataclass(frozen=True, slots=True)
class Tables:
    """Which tables a run plays and why those: ``given``, ``checkout`` or ``installed``."""

    paths: list[Path]
    origin: str

    @classmethod
    def choose(cls, given: Sequence[str]) -> Tables:
        if given:
            return cls([Path(p) for p in given], "given")
        found = checkout_tables(Path.cwd())
        if found is not None:
            return cls([Path(os.path.relpath(found))], "checkout")
        return cls([shipped_tables()], "installed")

    def describe(self) -> str:
        where = ", ".join(str(p) for p in self.paths)
        if self.origin == "checkout":
            return f"tables: this checkout's {where} (pass PATH to play others)"
        if self.origin == "installed":
            return (
                f"tables: the copy installed with freshcache {__version__}, {where} "
                "(inside a checkout its acceptance_tables/ are played; or pass PATH)"
            )
        return f"tables: {where}"


def played_files(cases: Sequence[Case]) -> dict[str, int]:
    """The table files the cases come from, in order, with how many cases each."""
    files: dict[str, int] = {}
    for case in cases:
        files[case.path] = files.get(case.path, 0) + 1
    return files


Player = Callable[[Case], Awaitable[CaseReport]]

WIRES = ("core", "engine", "http", "stdio", "http-2025", "stdio-2025", "fleet")
"""Where rows can be played, in the order ``all`` plays them; the ``-2025`` wires put the
reference server on revision 2025-11-25 (DESIGN §6)."""
QUICK = ("core", "engine", "http", "http-2025", "fleet")
"""What ``quick`` (the default without a client) plays: every row on a real network
wire (HTTP on loopback, on both revisions; the fleet rows on Valkey), and on the two
engine levels. Left to ``all``: the same rows over a stdio subprocess, both revisions."""
CLIENT_WIRES = ("http", "stdio", "http-2025", "stdio-2025", "all")
"""The ``--wire`` values a client under test (``--client``) can be played on."""


def wires_of(wire: str) -> tuple[str, ...]:
    """The wires a ``--wire`` value plays, in report order."""
    if wire == "all":
        return WIRES
    if wire == "quick":
        return QUICK
    return (wire,)


def not_played(wire: str) -> tuple[str, ...]:
    """The wires ``quick`` leaves out (none for any other value: those were asked for)."""
    return tuple(w for w in WIRES if w not in QUICK) if wire == "quick" else ()


def _players(
    wire: str, fleet: str | Exception | None = None, step_timeout: float = STEP_TIMEOUT
) -> list[tuple[str, Player]]:
    """The wires to play on, in order, each with how it plays one case; ``fleet``: the
    store URL the fleet rows play against, or why they cannot be played."""
    players: list[tuple[str, Player]] = []
    chosen = wires_of(wire)
    if "core" in chosen:
        from ._core_world import play_core

        async def core(case: Case) -> CaseReport:
            return play_core(case)  # synchronous: no event loop in the bare engine

        players.append(("core", core))
    worlds: list[tuple[str, Callable[[], World]]] = []
    if "engine" in chosen:
        worlds.append(("engine", EngineWorld))
    if "http" in chosen:
        from ._http_world import HttpWorld

        worlds.append(("http", HttpWorld))
    if "stdio" in chosen:
        from ._stdio_world import StdioWorld

        worlds.append(("stdio", StdioWorld))
    if "http-2025" in chosen:
        from ._http_world import HttpWorld

        worlds.append(("http-2025", lambda: HttpWorld(revision="2025-11-25")))
    if "stdio-2025" in chosen:
        from ._stdio_world import StdioWorld

        worlds.append(("stdio-2025", lambda: StdioWorld(revision="2025-11-25")))
    for name, make in worlds:

        async def in_world(case: Case, make: Callable[[], World] = make) -> CaseReport:
            return await play(case, make(), step_timeout=step_timeout)

        players.append((name, in_world))
    if "fleet" in chosen:
        players.append(("fleet", _fleet_player(fleet, step_timeout)))
    return players


def _fleet_player(fleet: str | Exception | None, step_timeout: float = STEP_TIMEOUT) -> Player:
    """The fleet wire: a `FleetWorld` on the store at ``fleet`` (``redis://``), or, when
    ``fleet`` is the reason they cannot be played, every fleet row skipped with it."""

    async def in_fleet(case: Case) -> CaseReport:
        if not isinstance(fleet, str):
            why = str(fleet or "no store for the fleet rows: pass --fleet redis://host:port/db")
            return CaseReport(case.id, case.where, True, expected_text(case), "-", skipped=why)
        from ._fleet_world import FleetWorld

        return await play(case, FleetWorld(fleet), step_timeout=step_timeout)

    return in_fleet


W = 44
"""Width of the expected and the actual column: the same, so equal texts clip alike."""


class _Printer:
    """Table output: colour on a terminal, plain otherwise, a progress line on stderr."""

    def __init__(self, out: TextIO, err: TextIO, colour: bool, timeline: bool = False) -> None:
        self.out, self.err, self.colour, self.timeline = out, err, colour, timeline
        self.progress = err.isatty()

    def tables(self, tables: Tables, cases: Sequence[Case]) -> None:
        print(tables.describe(), file=self.out)
        for path, count in played_files(cases).items():
            print(f"  {path}  ({count} case{'s' if count != 1 else ''})", file=self.out)
        print(file=self.out)

    def paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text

    def header(self) -> None:
        print(f"{'wire':<10} {'case':<40} {'expected':<{W}} {'actual':<{W}} result", file=self.out)

    def step(self, done: int, total: int, wire: str, case: Case) -> None:
        if self.progress:
            print(f"\r[{done}/{total}] {wire} {case.id:<50}", end="", file=self.err, flush=True)

    def row(self, wire: str, report: CaseReport) -> None:
        if self.progress:
            print("\r" + " " * 70 + "\r", end="", file=self.err)
        if report.skipped:
            verdict = self.paint("skip", "33")
        elif report.not_played:
            verdict = self.paint("not played", "33")
        elif report.known_failure:
            verdict = self.paint("known", "33")
        elif report.passed:
            verdict = self.paint("pass", "32")
        else:
            verdict = self.paint("FAIL", "31;1")
        print(
            f"{wire:<10} {report.id:<40} {_clip(report.expected, W):<{W}} "
            f"{_clip(report.actual, W):<{W}} {verdict}",
            file=self.out,
        )
        for failure in report.failures:
            print(f"        {report.where}: {failure}", file=self.out)
        if report.known_failure:
            print(f"        known failing, {report.known_failure}", file=self.out)
        if report.skipped:
            print(f"        cannot be played on {wire}: {report.skipped}", file=self.out)
        if report.not_played:
            print(f"        not played: {report.not_played}", file=self.out)
        if self.timeline:
            for line in timeline_lines(report):
                print(f"        {line}", file=self.out)

    def failures(
        self, results: Sequence[tuple[str, CaseReport]], classes: dict[int, Verdict | None]
    ) -> None:
        failed = [(wire, r) for wire, r in results if r.failed]
        if not failed:
            return
        print(self.paint(f"{len(failed)} failed:", "31;1"), file=self.out)
        for wire, report in failed:
            print(f"  {report.id} on {wire}, {report.where}", file=self.out)
            print(f"    expected  {report.expected}", file=self.out)
            print(f"    actual    {report.actual}", file=self.out)
            for failure in report.failures:
                print(f"    - {failure}", file=self.out)
            print(f"    class     {classes.get(id(report)) or 'unclassified'}", file=self.out)
        print(file=self.out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _client_players(
    driver: DriverProcess, hello: Hello, wire: str, step_timeout: float = STEP_TIMEOUT
) -> list[tuple[str, Player]]:
    """The wires a client under test is played on: HTTP and stdio, on 2026-07-28 and
    2025-11-25 (a wire or revision the client lacks still lists every row, each with
    that reason)."""
    from ._client_world import ClientHttpWorld, ClientStdioWorld

    makers: list[Callable[[], World]] = []
    if wire in ("http", "all"):
        makers.append(lambda: ClientHttpWorld(driver, hello))
    if wire in ("stdio", "all"):
        makers.append(lambda: ClientStdioWorld(driver, hello))
    if wire in ("http-2025", "all"):
        makers.append(lambda: ClientHttpWorld(driver, hello, revision="2025-11-25"))
    if wire in ("stdio-2025", "all"):
        makers.append(lambda: ClientStdioWorld(driver, hello, revision="2025-11-25"))
    players: list[tuple[str, Player]] = []
    broken: list[str] = []
    """Why the driver failed the cases just played, one entry per case in a row."""

    async def in_world(case: Case, make: Callable[[], World]) -> CaseReport:
        if len(broken) >= DRIVER_STRIKES:
            # A driver that exits or hangs on every case would cost each case its
            # deadline; the rest get this verdict and the run ends with its summary.
            why = f"the driver failed the last {len(broken)} cases ({broken[-1]})"
            return CaseReport(case.id, case.where, False, expected_text(case), "-", not_played=why)
        try:
            await driver.ensure_started()  # again, if a row made it exit
        except DriverError as exc:
            report = CaseReport(case.id, case.where, False, expected_text(case), "-", [str(exc)])
        else:
            driver.unanswered = None
            world = make()
            report = await play(case, world, step_timeout=step_timeout)
            if driver.unanswered is not None and not report.passed:
                # The case ran out of time waiting on the driver: say so, and stop the
                # driver so that the next case does not wait on it too.
                op, waited = driver.unanswered
                await driver.kill()
                report.failures[:] = [f"the driver gave no answer to {op!r} within {waited:.0f} s"]
            elif getattr(world, "row_open", False):
                # The row's client was never closed (the case ran out of time): the next
                # row gets a driver started afresh, not one still holding this row.
                await driver.kill()
                report.passed = False
                report.failures.append("the driver did not close the row's client: restarted")
        # The driver's own words are the verdict ("the driver exited with status 3
        # during 'open'"), not a crash of the harness.
        report.failures[:] = [f.removeprefix("crashed: DriverError: ") for f in report.failures]
        failed = [f for f in report.failures if f.startswith(("the driver ", "not played: "))]
        if failed:
            broken.append(failed[0])
        else:
            broken.clear()
        return report

    for make in makers:

        async def in_this_world(case: Case, make: Callable[[], World] = make) -> CaseReport:
            return await in_world(case, make)

        players.append((make().name, in_this_world))
    return players


DRIVER_STRIKES = 3
"""Cases in a row the driver may fail (exit, hang, break the protocol) before the rest
are given that verdict without being played."""


async def _run_all(
    cases: Sequence[Case],
    wire: str,
    printer: _Printer | None,
    fleet: str | Exception | None = None,
    driver_argv: list[str] | None = None,
    played: list[str] | None = None,
    step_timeout: float = STEP_TIMEOUT,
) -> list[tuple[str, CaseReport]]:
    """Every case on every wire; ``played`` gets the client's name from its driver."""
    if driver_argv is None:
        return await _play_all(cases, _players(wire, fleet, step_timeout), printer)
    async with DriverProcess(driver_argv) as driver:
        hello = await driver.ensure_started()
        if played is not None:
            played.append(hello.client)
        if printer is not None:
            print(f"client under test: {hello.client} (its stderr: {driver.log})", file=printer.err)
        players = _client_players(driver, hello, wire, step_timeout)
        return await _play_all(cases, players, printer, at_once=False)


ROWS_AT_ONCE = {"stdio": 2, "stdio-2025": 2}
"""How many rows a wire plays at once (each in a world of its own: its own server
subprocess, state folder and control port), where not one: a stdio row spends most of
its time starting processes and waiting on them. Rows in one event loop with an
in-process server (the HTTP wires) stay one at a time: they time their own servers."""


async def _play_all(
    cases: Sequence[Case],
    players: list[tuple[str, Player]],
    printer: _Printer | None,
    *,
    at_once: bool = True,
) -> list[tuple[str, CaseReport]]:
    """Every case on every wire. With ``at_once`` the wires play together, each
    `ROWS_AT_ONCE` rows at a time; without (a client under test: its one driver plays
    one row at a time) one row after the other. The report lists the rows in order,
    wire by wire as `WIRES` orders them, each printed as soon as those before it are."""
    fleet_rows = [c for c in cases if fleet_unplayable(c, fleet_world=True) is None]
    # The fleet wire plays the fleet rows and the catalog rows (`fleet_unplayable`).
    plan = [
        (name, player, fleet_rows if name == "fleet" else list(cases)) for name, player in players
    ]
    reports: list[list[CaseReport | None]] = [[None] * len(rows) for _, _, rows in plan]
    shown = [0] * len(plan)
    total = sum(len(rows) for _, _, rows in plan)
    done = 0

    def show() -> None:
        for n, (name, _, rows) in enumerate(plan):
            while shown[n] < len(rows) and (report := reports[n][shown[n]]) is not None:
                if printer is not None:
                    printer.row(name, report)
                shown[n] += 1
            if shown[n] < len(rows):
                return

    async def play_row(n: int, i: int, limiter: anyio.CapacityLimiter) -> None:
        nonlocal done
        name, player, rows = plan[n]
        async with limiter:
            if printer is not None:
                printer.step(done, total, name, rows[i])
            reports[n][i] = await player(rows[i])
        done += 1
        show()

    async with anyio.create_task_group() as tg:
        for n, (_, _, rows) in enumerate(plan):
            limiter = anyio.CapacityLimiter(ROWS_AT_ONCE.get(plan[n][0], 1) if at_once else 1)
            if not at_once:
                for i in range(len(rows)):
                    await play_row(n, i, limiter)
                continue
            for i in range(len(rows)):
                tg.start_soon(play_row, n, i, limiter)
    return [
        (name, report)
        for (name, _, _), mine in zip(plan, reports, strict=True)
        for report in mine
        if report is not None
    ]


def _driver_argv(args: argparse.Namespace) -> list[str] | int | None:
    """The driver to start for ``--client NAME`` / ``--client-cmd CMD`` (``None``: play
    freshcache in process); an exit code when the choice is unusable (message printed)."""
    name: str | None = getattr(args, "client", None)
    command: str | None = getattr(args, "client_cmd", None)
    if name is not None and command is not None:
        print("freshcache: give --client or --client-cmd, not both", file=sys.stderr)
        return EXIT_UNUSABLE
    if command is not None:
        argv = shlex.split(command)
        if not argv:
            print("freshcache: --client-cmd is empty", file=sys.stderr)
            return EXIT_UNUSABLE
        return argv
    if name is None:
        return None
    from .drivers import SHIPPED, Unavailable, command_for, prepare

    if name not in SHIPPED:
        print(
            f"freshcache: no shipped driver {name!r}; shipped: {', '.join(SHIPPED)} "
            "(or --client-cmd 'CMD' for your own)",
            file=sys.stderr,
        )
        return EXIT_UNUSABLE
    try:
        prepare(name, lambda line: print(f"freshcache: {line}", file=sys.stderr, flush=True))
        return command_for(name)
    except Unavailable as exc:
        print(f"freshcache: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE


def _failure_json(wire: str, report: CaseReport, verdict: Verdict | None) -> dict[str, Any]:
    return {
        "id": report.id,
        "wire": wire,
        "where": report.where,
        "class": verdict,
        "expected": report.expected,
        "actual": report.actual,
        "failures": report.failures,
    }


def failure_classes(
    cases: Sequence[Case], results: Sequence[tuple[str, CaseReport]]
) -> dict[int, Verdict | None]:
    """Each failed report's class (`freshcache.acceptance._verdicts`), by ``id(report)``."""
    by_id = {case.id: case for case in cases}
    classes: dict[int, Verdict | None] = {}
    for _, report in results:
        if not report.failed:
            continue
        case = by_id.get(report.id)
        classes[id(report)] = classify(
            report.failures,
            malformed_answer=case is not None and malformed_text(case),
            observed_earlier=case is not None and observed_before(case),
            handed_text=hands_out_text(report.observed),
        )
    return classes


def _class_counts(reports: Sequence[CaseReport], classes: dict[int, Verdict | None]) -> str:
    """``3 old text, 20 extra reads``: the failed reports by class, most serious first."""
    found = [classes.get(id(r)) for r in reports if r.failed]
    counts = [(c, found.count(c)) for c in (*CLASSES, None)]
    return ", ".join(f"{n} {c or 'unclassified'}" for c, n in counts if n)


def _fleet_store(
    stack: ExitStack, args: argparse.Namespace, cases: Sequence[Case]
) -> str | Exception | None:
    """The store URL for the fleet rows (``--fleet``, or a Valkey started for them), or
    the reason they cannot be played; ``None`` when no fleet row is played."""
    if "fleet" not in wires_of(args.wire):
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
    junit = Path(args.junit) if args.junit else None
    if junit is not None and (junit.is_dir() or not junit.parent.is_dir()):
        problem = "is a folder" if junit.is_dir() else f"no folder {junit.parent}"
        print(f"freshcache: cannot write the JUnit report to {junit}: {problem}", file=sys.stderr)
        return EXIT_UNUSABLE
    tables = Tables.choose(args.paths)
    try:
        cases = load_cases(tables.paths)
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
    driver_argv = _driver_argv(args)
    if isinstance(driver_argv, int):
        return driver_argv
    if getattr(args, "wire", None) is None:  # the default: quick, or every client wire
        args.wire = "quick" if driver_argv is None else "all"
    if driver_argv is not None and args.wire not in CLIENT_WIRES:
        print(
            f"freshcache: --wire {args.wire} plays no client; use {', '.join(CLIENT_WIRES)} "
            "with --client/--client-cmd",
            file=sys.stderr,
        )
        return EXIT_UNUSABLE
    colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ and not args.json
    show_timeline = bool(args.timeline or args.verbose)
    printer = None if args.json else _Printer(sys.stdout, sys.stderr, colour, show_timeline)
    if printer is not None:
        printer.tables(tables, cases)
        printer.header()
    started = time.perf_counter()
    try:
        played: list[str] = []
        with ExitStack() as stack:
            fleet = None if driver_argv is not None else _fleet_store(stack, args, cases)
            step_timeout = getattr(args, "timeout", None) or STEP_TIMEOUT
            results = anyio.run(
                _run_all, cases, args.wire, printer, fleet, driver_argv, played, step_timeout
            )
    except DriverError as exc:
        print(f"freshcache: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    elapsed = time.perf_counter() - started
    passed = sum(1 for _, r in results if r.passed and not r.skipped)
    skipped = sum(1 for _, r in results if r.skipped)
    failed = sum(1 for _, r in results if r.failed)
    unplayed = sum(1 for _, r in results if r.not_played)
    classes = failure_classes(cases, results)
    if junit is not None:
        try:
            write_junit(junit, results, elapsed)
        except OSError as exc:
            print(
                f"freshcache: cannot write the JUnit report to {junit}: {exc.strerror}",
                file=sys.stderr,
            )
            return EXIT_UNUSABLE
    if args.json:
        report = {
            "freshcache": __version__,
            "wire": args.wire,
            "not_played": list(not_played(args.wire)),
            "client": None if driver_argv is None else " ".join(driver_argv),
            "client_version": played[0] if played else None,
            "tables": {"origin": tables.origin, "files": list(played_files(cases))},
            "junit": None if junit is None else str(junit),
            "cases": [
                {"wire": wire, **r.as_json(), "class": classes.get(id(r))} for wire, r in results
            ],
            "failures": [
                _failure_json(wire, r, classes.get(id(r))) for wire, r in results if r.failed
            ],
            "summary": {
                "passed": passed,
                "failed": failed,
                "skipped": skipped,
                "not_played": unplayed,
                "classes": {
                    c: sum(1 for v in classes.values() if v == c)
                    for c in (*CLASSES, None)
                    if c is not None or None in classes.values()
                },
                "seconds": round(elapsed, 3),
            },
        }
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        assert printer is not None
        print()
        printer.failures(results, classes)
        for wire in dict.fromkeys(w for w, _ in results):
            mine = [r for w, r in results if w == wire]
            ok = sum(1 for r in mine if r.passed and not r.skipped)
            print(f"{wire}: {ok}/{len(mine)} passed", end="")
            print(
                f", {sum(1 for r in mine if r.skipped)} not playable"
                if any(r.skipped for r in mine)
                else "",
                end="",
            )
            if any(r.not_played for r in mine):
                print(f", {sum(1 for r in mine if r.not_played)} not played", end="")
            by_class = _class_counts(mine, classes)
            print(f"; failed: {by_class}" if by_class else "")
        print(f"({elapsed:.1f}s)")
        left = not_played(args.wire)
        if left:
            print(
                f"not played: the {', '.join(left)} wires (the same rows over a stdio "
                "subprocess, on both revisions); freshcache acceptance --wire all plays "
                "every wire and revision"
            )
        line = f"{passed} passed, {failed} failed"
        if skipped:
            line += f", {skipped} skipped"
        if unplayed:
            line += f", {unplayed} not played (the driver failed the rows before them)"
        known = sum(1 for _, r in results if r.known_failure)
        if known:
            line += f" ({known} of the passed are known failing: KNOWN_FAILING)"
        print(line)
        if junit is not None:
            print(f"JUnit report: {junit}")
    return EXIT_OK if failed == 0 and unplayed == 0 else EXIT_FAILED
