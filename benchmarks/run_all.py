"""Run every benchmark and print one table: ``python benchmarks/run_all.py [--quick] [--charts]``.

Each benchmark is its own script (run it alone for details); this runs them one
after another in subprocesses, so that one's garbage does not weigh on the next,
collects the JSON files they write into ``benchmarks/results/`` and prints the
figures side by side, with the machine noted. Needs the test extra
(``pip install '.[test]'``): some compare with the official SDK client, whose server
is started on loopback. Not part of CI's pass criteria. ``--charts`` then redraws the
charts under ``docs/charts/`` from the results (``python -m benchmarks.charts``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

# script, arguments for a full run, arguments for --quick
SCRIPTS: list[tuple[str, list[str], list[str]]] = [
    ("hit_path.py", [], ["--loops", "10000", "--repeats", "15"]),
    ("hit_path_adapter.py", [], ["--loops", "20000", "--repeats", "3"]),
    ("concurrent_reads.py", [], ["--rounds", "2"]),
    ("memory.py", [], ["--entries", "20000"]),
    ("http_stream.py", [], ["--updates", "500", "--restarts", "2"]),
    ("flood_stdio.py", [], ["--updates", "5000", "--repeats", "1"]),
    ("scale.py", [], ["--quick"]),
    ("idle.py", [], ["--seconds", "2"]),
    ("costs.py", [], ["--entries", "20000", "--selected", "2000"]),
]


def run(script: str, args: list[str]) -> tuple[bool, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(HERE / script), *args], check=False)
    return done.returncode == 0, time.perf_counter() - started


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (about a minute)")
    parser.add_argument("--only", action="append", help="run only these scripts (e.g. hit_path.py)")
    parser.add_argument(
        "--charts", action="store_true", help="then redraw docs/charts/ from the results"
    )
    args = parser.parse_args()
    failed: list[str] = []
    for script, full, quick in SCRIPTS:
        if args.only and script not in args.only:
            continue
        if not (HERE / script).exists():
            print(f"== {script}: missing, skipped")
            continue
        print(f"== {script}", flush=True)
        ok, seconds = run(script, quick if args.quick else full)
        print(f"   ({'ok' if ok else 'FAILED'} in {seconds:.1f}s)\n", flush=True)
        if not ok:
            failed.append(script)
    print(
        f"machine: {os.cpu_count()} cpus, Python {platform.python_version()}, {platform.platform()}"
    )
    summary = {
        name: load(name)
        for name in (
            "hit_path",
            "hit_path_adapter",
            "concurrent_reads",
            "memory",
            "http_stream",
            "flood_stdio",
            "scale",
            "idle",
            "costs",
        )
    }
    (RESULTS / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"all results: {RESULTS / 'summary.json'}")
    if args.charts:
        drawn = subprocess.run([sys.executable, "-m", "benchmarks.charts"], cwd=HERE.parent)
        if drawn.returncode != 0:
            failed.append("charts")
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
