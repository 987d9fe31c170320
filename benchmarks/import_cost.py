"""What importing freshcache costs, against ``python -c pass`` (issue 38, item 3).

    python benchmarks/import_cost.py [--runs 7] [--no-bytecode] [--json PATH]

Each row is a fresh interpreter (`sys.executable`), its CPU time (user + system, from
``os.wait4``); the rows run interleaved, ``--runs`` times each; the figures are the
minimum and the median. By default the bytecode caches are used, as in an installed
package (pip compiles it): ``PYTHONDONTWRITEBYTECODE`` is dropped and the caches go to
a temporary ``PYTHONPYCACHEPREFIX`` warmed by one run of each row first.
``--no-bytecode`` keeps ``PYTHONDONTWRITEBYTECODE=1`` with no caches: every module is
compiled from source on each run, as in a checkout whose environment sets that.

For each command-line row, ``modules`` lists the heavy modules it loaded (what
``-X importtime`` names): a command loads only what it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

ROWS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "import freshcache": ["-c", "import freshcache"],
    "from freshcache import FreshCache": ["-c", "from freshcache import FreshCache"],
    "freshcache --help": ["-m", "freshcache", "--help"],
    "freshcache acceptance --help": ["-m", "freshcache", "acceptance", "--help"],
    "freshcache proxy --help": ["-m", "freshcache", "proxy", "--help"],
    "freshcache serve --help": ["-m", "freshcache", "serve", "--help"],
}

HEAVY = (
    "freshcache._core",
    "freshcache._middleware._cache",
    "freshcache._sources._http",
    "freshcache._sources._stdio",
    "freshcache.acceptance._runner",
    "freshcache._proxy",
    "asyncio",
    "anyio",
    "httpx",
    "pydantic",
    "opentelemetry",
    "mcp",
)


def cpu_of(argv: list[str], env: dict[str, str]) -> float:
    process = subprocess.Popen(
        [sys.executable, *argv],
        env=env,
        cwd=env["PYTHONPYCACHEPREFIX"],  # (not a checkout's: ``-c`` and ``-m`` import from it)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, (argv, process.returncode)
    return usage.ru_utime + usage.ru_stime


def modules_of(argv: list[str], env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        env=env,
        cwd=env["PYTHONPYCACHEPREFIX"],
        capture_output=True,
        text=True,
    )
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    return [name for name in HEAVY if name in loaded]


def measure(runs: int, bytecode: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as caches:
        if bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = caches
            for argv in ROWS.values():
                cpu_of(argv, env)
        else:  # (an empty cache folder: nothing is written to it, nothing read from it)
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env["PYTHONPYCACHEPREFIX"] = caches
        seen: dict[str, list[float]] = {name: [] for name in ROWS}
        for _ in range(runs):
            for name, argv in ROWS.items():
                seen[name].append(cpu_of(argv, env))
        modules = {name: modules_of(argv, env) for name, argv in ROWS.items() if "-m" in argv}
    floor = min(seen["python -c pass"])
    rows = {
        name: {
            "min_s": round(min(v), 3),
            "median_s": round(statistics.median(v), 3),
            "less_python_min_s": round(min(v) - floor, 3),
        }
        for name, v in seen.items()
    }
    for name, loaded in modules.items():
        rows[name]["modules"] = loaded
    return {
        "bytecode": bytecode,
        "runs": runs,
        "rows": rows,
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "machine": f"{platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}",
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-bytecode", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = measure(args.runs, not args.no_bytecode)
    print(f"{'row':<36} {'min s':>7} {'median s':>9} {'less pass':>10}  modules")
    for name, row in result["rows"].items():
        print(
            f"{name:<36} {row['min_s']:>7} {row['median_s']:>9} {row['less_python_min_s']:>10}"
            f"  {' '.join(row.get('modules', []))}"
        )
    print(f"load average {result['load_average']}, {result['machine']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
