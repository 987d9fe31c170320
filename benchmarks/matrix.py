"""The comparison: every acceptance row played through every shipped driver's client.

Runs ``freshcache acceptance --client NAME --json`` once per shipped driver (over HTTP
and stdio, with the server on 2026-07-28 and on 2025-11-25) and writes the pass/fail
matrix, rows x clients, to ``benchmarks/results/matrix.md`` and ``matrix.json``. A
driver that cannot run here (its package or Node missing) is listed with the reason,
and so is a wire on which none of a client's rows can be played (it gets no column).
One run; nothing is timed.

    python benchmarks/matrix.py [--only NAME ...]   # --only: the others kept from matrix.json
    python benchmarks/matrix.py --again      # matrix.md again from matrix.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from freshcache.acceptance.drivers import SHIPPED, Unavailable, command_for

RESULTS = Path(__file__).resolve().parent / "results"
CLI = "from freshcache._cli import main; main()"
MARK = {"pass": "pass", "fail": "FAIL", "skip": "-"}


def play(name: str) -> dict[str, object]:
    """One driver's JSON report, or why it could not run."""
    try:
        command_for(name)
    except Unavailable as exc:
        return {"unavailable": str(exc)}
    done = subprocess.run(
        [sys.executable, "-c", CLI, "acceptance", "--client", name, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1):
        return {"unavailable": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    report: dict[str, object] = json.loads(done.stdout)
    return report


def verdict(case: dict[str, object]) -> str:
    if case["skipped"]:
        return "skip"
    return "pass" if case["passed"] else "fail"


def collect(names: list[str]) -> dict[str, Any]:
    """Play every driver in ``names``: the clients, the columns, each row's verdicts."""
    reports = {name: play(name) for name in names}
    rows: dict[str, dict[str, str]] = {}
    why: dict[str, dict[str, str]] = {}
    clients: dict[str, str] = {}
    columns: list[str] = []
    for name, report in reports.items():
        if "unavailable" in report:
            clients[name] = f"not run: {report['unavailable']}"
            continue
        clients[name] = str(report.get("client_version") or report.get("client"))
        for case in report["cases"]:  # type: ignore[union-attr]
            wire = case["wire"].split(":")[0]
            column = f"{name} {wire}"
            if column not in columns:
                columns.append(column)
            rows.setdefault(case["id"], {})[column] = verdict(case)
            said = case["skipped"] or "; ".join(case["failures"])
            if said:
                why.setdefault(case["id"], {})[column] = f"{case['actual']}: {said}"
    today = datetime.date.today().isoformat()
    return {"date": today, "python": platform.python_version(), "clients": clients,
            "columns": columns, "rows": rows, "why": why}


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` with the clients played again in ``new`` replaced (``--only``): the other
    clients' columns stay as measured, each client line saying when it was played."""
    again = set(new["clients"])
    kept = [c for c in old.get("columns") or old["summary"] if c.split(" ", 1)[0] not in again]
    keep = {c for c in kept}
    rows: dict[str, dict[str, str]] = {}
    why: dict[str, dict[str, str]] = {}
    for source, allowed in ((old, keep), (new, None)):
        for table, into in ((source["rows"], rows), (source["why"], why)):
            for row, cells in table.items():
                for column, value in cells.items():
                    if allowed is None or column in allowed:
                        into.setdefault(row, {})[column] = value
    clients = {
        name: what if name in again or "(played " in what else f"{what} (played {old['date']})"
        for name, what in {**old["clients"], **new["clients"]}.items()
    }
    columns = kept + [c for c in new["columns"] if c not in keep]
    order = {name: i for i, name in enumerate(SHIPPED)}
    columns.sort(key=lambda c: order.get(c.split(" ", 1)[0], len(order)))
    return {**new, "clients": clients, "columns": columns, "rows": rows, "why": why}


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


def write(data: dict[str, Any]) -> list[str]:
    """``matrix.json`` and ``matrix.md`` from the collected data; the markdown lines."""
    rows = data["rows"]
    columns, clients = played_columns(data)
    summary = {
        col: {v: sum(1 for r in rows.values() if r.get(col) == v) for v in MARK} for col in columns
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "matrix.json").write_text(json.dumps({**data, "summary": summary}, indent=2) + "\n")
    lines = [
        f"# Acceptance rows x clients ({data['date']}, Python {data['python']})",
        "",
        "Generated by `python benchmarks/matrix.py`. `pass`/`FAIL` as measured; `-` a row the",
        "client cannot be driven through. Why a row failed or was not played, per client: `why`",
        "in `matrix.json`.",
        "",
        *(f"- `{name}`: {what}" for name, what in clients.items()),
        "",
        "| summary | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
        *(
            f"| {v} | " + " | ".join(str(summary[c][v]) for c in columns) + " |"
            for v in ("pass", "fail", "skip")
        ),
        "",
        "| row | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
        *(
            f"| {row} | " + " | ".join(MARK[cells.get(c, "skip")] for c in columns) + " |"
            for row, cells in rows.items()
        ),
    ]
    (RESULTS / "matrix.md").write_text("\n".join(lines) + "\n")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=list(SHIPPED))
    parser.add_argument(
        "--again", action="store_true", help="write matrix.md again from matrix.json, no play"
    )
    args = parser.parse_args()
    if args.again:
        data = json.loads((RESULTS / "matrix.json").read_text())
    elif args.only and (RESULTS / "matrix.json").exists():
        data = merged(json.loads((RESULTS / "matrix.json").read_text()), collect(args.only))
    else:
        data = collect(args.only or list(SHIPPED))
    lines = write(data)
    print("\n".join(lines[: 10 + len(data["clients"])]))


if __name__ == "__main__":
    main()
