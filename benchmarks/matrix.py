"""The comparison: every acceptance row played through every shipped driver's client.

Runs ``freshcache acceptance --client NAME --json`` once per shipped driver (over HTTP
and stdio, with the server on 2026-07-28 and on 2025-11-25) and writes the matrix,
rows x clients, to ``benchmarks/results/matrix.md`` and ``matrix.json``. A failed row
is marked by its class (`freshcache.acceptance._verdicts`): old text handed out as
current, unproven text, strictness, no explicit state, or only extra server reads,
so a broken promise never reads like a cost. A driver that cannot run here (its
package or Node missing) is listed with the reason, and so is a wire on which none of
a client's rows can be played (it gets no column). One run; nothing is timed. The
matrix is written again as each client finishes: a run stopped part way keeps the
clients it played, and ``--only`` plays the rest into it.

    python benchmarks/matrix.py [--only NAME ...]   # --only: the others kept from matrix.json
                                                    # (the one in --out), played in that order
    python benchmarks/matrix.py --only mcp --wire http-2025   # only those columns again
    python benchmarks/matrix.py --again      # matrix.md again from matrix.json
    python benchmarks/matrix.py --out /tmp/again    # a rerun, written elsewhere
    python benchmarks/matrix.py --compare /tmp/again/matrix.json   # cells that differ
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from freshcache.acceptance._format import load_cases
from freshcache.acceptance._verdicts import (
    CLASSES,
    classify,
    hands_out_text,
    malformed_text,
    observed_before,
)
from freshcache.acceptance.drivers import SHIPPED, Unavailable, command_for

RESULTS = Path(__file__).resolve().parent / "results"
TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
CLI = "from freshcache._cli import main; main()"
MARK = {"pass": "pass", "fail": "FAIL", "skip": "-", "unplayed": "n/p"}
CLASS_MARK = {
    "old text": "OLD",
    "unproven": "unproven",
    "strictness": "strict",
    "no state": "no-state",
    "extra reads": "reads",
}
"""How a failed row is marked, by its class (``FAIL``: a failure of no known class)."""


def play(name: str, wires: list[str] | None = None) -> dict[str, object]:
    """One driver's JSON report (on ``wires``, default all), or why it could not run."""
    try:
        command_for(name)
    except Unavailable as exc:
        return {"unavailable": str(exc)}
    report: dict[str, Any] = {}
    for wire in wires or ["all"]:
        done = subprocess.run(
            [sys.executable, "-c", CLI, "acceptance", "--client", name, "--wire", wire, "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode not in (0, 1):
            return {
                "unavailable": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"
            }
        one = json.loads(done.stdout)
        cases = report.get("cases", []) + one["cases"]
        report = {**one, "cases": cases}
    return report


def machine() -> str:
    """The CPU and core count the run was played on, and the Node.js version."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        node = subprocess.run(
            ["node", "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        node = ""
    return f"{os.cpu_count()} cores, {cpu}" + (f", Node {node}" if node else "")


def verdict(case: dict[str, object]) -> str:
    if case["skipped"]:
        return "skip"
    if case.get("not_played"):
        return "unplayed"  # the driver failed the rows before it: no verdict
    return "pass" if case["passed"] else "fail"


def collect(names: list[str], wires: list[str] | None = None) -> dict[str, Any]:
    """Play every driver in ``names`` (on ``wires``, default all): the clients, the
    columns, each row's verdicts."""
    reports: dict[str, dict[str, Any]] = {}
    runs: dict[str, dict[str, object]] = {}
    for name in names:
        began, load = time.monotonic(), os.getloadavg()[0]
        reports[name] = play(name, wires)
        runs[name] = {
            "seconds": round(time.monotonic() - began),
            "load": [round(load, 1), round(os.getloadavg()[0], 1)],
        }
    rows: dict[str, dict[str, str]] = {}
    why: dict[str, dict[str, str]] = {}
    classes: dict[str, dict[str, str]] = {}
    clients: dict[str, str] = {}
    columns: list[str] = []
    for name, report in reports.items():
        if "unavailable" in report:
            clients[name] = f"not run: {report['unavailable']}"
            continue
        clients[name] = str(report.get("client_version") or report.get("client"))
        for case in report["cases"]:
            wire = case["wire"].split(":")[0]
            column = f"{name} {wire}"
            if column not in columns:
                columns.append(column)
            rows.setdefault(case["id"], {})[column] = verdict(case)
            said = case["skipped"] or case.get("not_played") or "; ".join(case["failures"])
            if said:
                why.setdefault(case["id"], {})[column] = f"{case['actual']}: {said}"
            if case.get("class"):
                classes.setdefault(case["id"], {})[column] = case["class"]
    today = datetime.date.today().isoformat()
    return {
        "date": today,
        "python": platform.python_version(),
        "machine": machine(),
        "runs": runs,
        "clients": clients,
        "columns": columns,
        "rows": rows,
        "why": why,
        "classes": classes,
    }


def classified(data: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Every failed cell's class: as the run reported it, or (a ``matrix.json`` from
    before classes) from its ``why``, the failure lines the runner wrote, with the
    row's steps from the tables."""
    cases = {case.id: case for case in load_cases([TABLES])}
    known: dict[str, dict[str, str]] = data.get("classes") or {}
    out: dict[str, dict[str, str]] = {}
    for row, cells in data["rows"].items():
        for column, value in cells.items():
            if value != "fail":
                continue
            verdict = known.get(row, {}).get(column)
            if verdict is None:
                why = data["why"].get(row, {}).get(column, "")
                case = cases.get(row)
                verdict = classify(
                    why.split("; "),
                    malformed_answer=case is not None and malformed_text(case),
                    observed_earlier=case is not None and observed_before(case),
                    handed_text=hands_out_text(why),
                )
            if verdict is not None:
                out.setdefault(row, {})[column] = verdict
    return out


def mark(row: str, column: str, data: dict[str, Any], classes: dict[str, dict[str, str]]) -> str:
    """A cell of the row table: ``pass``, ``-``, or a failure's class mark."""
    value = data["rows"][row].get(column, "skip")
    if value != "fail":
        return MARK[value]
    return CLASS_MARK.get(classes.get(row, {}).get(column, ""), MARK["fail"])


def merged(
    old: dict[str, Any], new: dict[str, Any], wires: list[str] | None = None
) -> dict[str, Any]:
    """``old`` with the clients played again in ``new`` replaced (``--only``; with
    ``wires``, only those wires' columns of theirs): the other columns stay as
    measured, each client line saying when it was played."""
    again = set(new["clients"])

    def replayed(column: str) -> bool:
        name, _, wire = column.partition(" ")
        return name in again and (wires is None or wire in wires)

    kept = [c for c in old.get("columns") or old["summary"] if not replayed(c)]
    keep = {c for c in kept}
    rows: dict[str, dict[str, str]] = {}
    why: dict[str, dict[str, str]] = {}
    classes: dict[str, dict[str, str]] = {}
    for source, allowed in ((old, keep), (new, None)):
        tables = (
            (source["rows"], rows),
            (source["why"], why),
            (source.get("classes", {}), classes),
        )
        for table, into in tables:
            for row, cells in table.items():
                for column, value in cells.items():
                    if allowed is None or column in allowed:
                        into.setdefault(row, {})[column] = value
    clients = {
        name: what
        if name in again or "(played " in what or old["date"] == new["date"]
        else f"{what} (played {old['date']})"
        for name, what in {**old["clients"], **new["clients"]}.items()
    }
    if wires is not None:
        for name in again & set(old["clients"]):
            found = re.search(r"\(played (\S+?)\)", old["clients"][name])
            when = found[1] if found else old["date"]
            other = [c.partition(" ")[2] for c in kept if c.startswith(f"{name} ")]
            clients[name] = (
                f"{new['clients'][name]} ({', '.join(wires)} played {new['date']}; "
                f"{', '.join(other)} played {when})"
            )
    columns = kept + [c for c in new["columns"] if c not in keep]
    order = {name: i for i, name in enumerate(SHIPPED)}
    columns.sort(key=lambda c: order.get(c.split(" ", 1)[0], len(order)))
    return {
        **new,
        "runs": {**(old.get("runs") or {}), **(new.get("runs") or {})},
        "clients": clients,
        "columns": columns,
        "rows": rows,
        "why": why,
        "classes": classes,
    }


def played_columns(data: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The columns with a row played, and the clients' lines naming each wire on which
    none was (with the reason most of its rows give)."""
    rows, why = data["rows"], data["why"]
    clients = dict(data["clients"])
    columns = []
    for column in data.get("columns") or list(data["summary"]):
        if any(cells.get(column) in ("pass", "fail") for cells in rows.values()):
            columns.append(column)
            continue
        reasons = Counter(r[column].split(": ", 1)[-1] for r in why.values() if column in r)
        name, wire = column.split(" ", 1)
        reason = reasons.most_common(1)[0][0] if reasons else "no row"
        clients[name] += f"; not played on {wire}: {reason}"
    return columns, clients


def played_on(data: dict[str, Any]) -> list[str]:
    """The lines saying where and how long each client played (with the load average
    before and after), when the data says it."""
    runs = data.get("runs") or {}
    if not runs:
        return []
    each = ", ".join(
        f"{name} {run['seconds'] // 60} min {run['seconds'] % 60} s "
        f"(load {run['load'][0]} at start, {run['load'][1]} at end)"
        for name, run in runs.items()
    )
    return [
        f"Played on {data.get('machine', 'this machine')}, each client (its last play) {each}.",
        "",
    ]


def write(data: dict[str, Any], out: Path = RESULTS) -> list[str]:
    """``matrix.json`` and ``matrix.md`` (in ``out``) from the collected data; the
    markdown lines."""
    rows = data["rows"]
    columns, clients = played_columns(data)
    classes = classified(data)
    summary = {
        col: {
            **{v: sum(1 for r in rows.values() if r.get(col) == v) for v in MARK},
            **{c: sum(1 for row in rows if classes.get(row, {}).get(col) == c) for c in CLASSES},
        }
        for col in columns
    }
    out.mkdir(parents=True, exist_ok=True)
    body = {**data, "classes": classes, "summary": summary}
    (out / "matrix.json").write_text(json.dumps(body, indent=2) + "\n")
    lines = [
        f"# Acceptance rows x clients ({data['date']}, Python {data['python']})",
        "",
        "Generated by `python benchmarks/matrix.py`. `pass` as measured; `-` a row the",
        "client cannot be driven through; `n/p` a row not played (its driver had failed",
        "the rows before it), never counted as failed. A failed row is marked by what went wrong, the",
        "promise first (`freshcache/acceptance/_verdicts.py` draws the line):",
        "",
        "- `OLD`: text handed out as current that is older than the row expects, or where",
        "  the row says it is denied, gone or not to be trusted (newer text never counts);",
        "- `unproven`: current text here, but without the server read the rules require",
        "  (a copy from before the change was heard of): old text had the server changed;",
        "- `strict`: a malformed answer (a `ttlMs` that is not a number, no contents)",
        "  accepted and its text handed out;",
        "- `no-state`: an error or nothing where a state or text was due;",
        "- `reads`: only a cost: more server reads than the row needs, or newer text.",
        "",
        "Why a row failed or was not played, per client: `why` in `matrix.json`.",
        "",
        *(f"- `{name}`: {what}" for name, what in clients.items()),
        "",
        *played_on(data),
        "| client wire | pass | old text | unproven | strictness | no state | extra reads "
        "| not playable | not played |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {c} | {summary[c]['pass']} | "
            + " | ".join(str(summary[c][k]) for k in CLASSES)
            + f" | {summary[c]['skip']} | {summary[c]['unplayed']} |"
            for c in columns
        ),
        "",
        "| row | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
        *(
            f"| {row} | " + " | ".join(mark(row, c, data, classes) for c in columns) + " |"
            for row in rows
        ),
    ]
    (out / "matrix.md").write_text("\n".join(lines) + "\n")
    return lines


def differences(one: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Each cell (verdict and class) on which two matrices differ, with both runs' why."""

    def cell(data: dict[str, Any], row: str, column: str) -> str:
        value = data["rows"].get(row, {}).get(column, "skip")
        kind = data.get("classes", {}).get(row, {}).get(column)
        return MARK[value] + (f" ({kind})" if kind else "")

    lines = []
    columns = list(dict.fromkeys([*one["columns"], *other["columns"]]))
    for row in dict.fromkeys([*one["rows"], *other["rows"]]):
        for column in columns:
            a, b = cell(one, row, column), cell(other, row, column)
            if a != b:
                lines.append(f"{row} | {column}: {a} / {b}")
                for data in (one, other):
                    lines.append(f"    {data['why'].get(row, {}).get(column, '')}")
    return lines


def play_all(only: list[str] | None, wires: list[str] | None, out: Path) -> list[str]:
    """Play each client in ``only`` (default every shipped driver) and write the matrix
    after each one: ``--only`` merges into the matrix in ``out``, a whole run starts a
    new one. Returns the markdown lines."""
    data = None
    if only and (out / "matrix.json").exists():
        data = json.loads((out / "matrix.json").read_text())
    lines: list[str] = []
    for name in only or list(SHIPPED):
        played = collect([name], wires)
        data = played if data is None else merged(data, played, wires)
        lines = write(data, out)
        print(f"matrix.py: {name} played, {out / 'matrix.md'} written", file=sys.stderr)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=list(SHIPPED))
    parser.add_argument(
        "--wire",
        action="append",
        choices=["http", "stdio", "http-2025", "stdio-2025"],
        help="with --only: play only these wires again, keep the client's others",
    )
    parser.add_argument(
        "--again", action="store_true", help="write matrix.md again from matrix.json, no play"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="the folder to write matrix.md and matrix.json to (default: benchmarks/results)",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="MATRIX_JSON",
        help="no play: list each cell on which that matrix.json and the one in --out differ",
    )
    args = parser.parse_args()
    if args.compare:
        found = differences(
            json.loads((args.out / "matrix.json").read_text()),
            json.loads(args.compare.read_text()),
        )
        print("\n".join(found) or "every cell the same")
        sys.exit(1 if found else 0)
    if args.again:
        lines = write(json.loads((args.out / "matrix.json").read_text()), args.out)
    else:
        lines = play_all(args.only, args.wire, args.out)
    table = next(i for i, line in enumerate(lines) if line.startswith("| row |"))
    print("\n".join(lines[:table]))


if __name__ == "__main__":
    main()
