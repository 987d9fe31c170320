"""What an idle listening cache costs: CPU % of one core per source.

    python benchmarks/idle.py [--seconds 5] [--sources http,stdio,...] [--json PATH]

An idle cache is four selected URIs fresh, the stream live, then nothing happens
(`tests/idle_support.py` builds one per source: ``freshcache serve`` over loopback HTTP
on 2026-07-28 and on 2025-11-25 with its GET stream, ``freshcache serve --stdio`` on
both revisions, a fleet worker on a Valkey started here, a `LoaderSource` with a quiet
change feed, `McpClientSource` over the official SDK's HTTP client). Over
``--seconds`` of rest, per source: the process's CPU time over the wall time
(``time.process_time``; the servers run in other processes), the stream driver's loop
turns and the event loop's turns per second. The target (quiet at rest, issue 21): at
most 1 % of a core on every source. Each source runs in its own subprocess, so one's
leftovers do not weigh on the next.

Prints a table with the load average and writes ``benchmarks/results/idle.json``. Not a
pass/fail test (`tests/test_idle.py` counts the loop turns).

``--wakes`` also says what woke each source's loop over the window: every callback the
event loop ran, named (a task by the frames it went back to waiting in), how often a
second and its mean thread CPU time (the profile behind the fleet worker's heartbeat
figures in docs/fleet.md; the accounting costs a little itself).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.idle_support import SOURCES, measure  # noqa: E402

TARGET_PERCENT = 1.0


def _callback_name(handle: asyncio.Handle) -> str:
    callback: Any = handle._callback  # type: ignore[attr-defined]
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        frames: list[str] = []
        awaited: Any = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
            if frame is not None:
                frames.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
        shown = frames if len(frames) <= 4 else [*frames[:2], "…", *frames[-2:]]
        return "task waiting in " + " > ".join(shown)
    return str(getattr(callback, "__qualname__", type(callback).__name__))


class Wakes:
    """Counts and times every callback the event loop runs (`--wakes`)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.cpu: dict[str, float] = {}
        self._run = asyncio.Handle._run

    def window(self, opens: bool) -> None:
        """Count from when the window opens to when it closes (not the shutdown)."""
        if not opens:
            asyncio.Handle._run = self._run  # type: ignore[method-assign]
            return
        wakes, run = self, self._run

        def timed(handle: asyncio.Handle) -> None:
            started = time.thread_time()
            try:
                run(handle)
            finally:
                name = _callback_name(handle)
                wakes.counts[name] += 1
                wakes.cpu[name] = wakes.cpu.get(name, 0.0) + time.thread_time() - started

        asyncio.Handle._run = timed  # type: ignore[method-assign,assignment]

    def top(self, seconds: float, n: int = 12) -> list[dict[str, object]]:
        return [
            {
                "callback": name,
                "per_s": round(count / seconds, 2),
                "mean_cpu_us": round(1e6 * self.cpu[name] / count),
            }
            for name, count in self.counts.most_common(n)
        ]


def one(source: str, seconds: float, wakes: bool = False) -> dict[str, object]:
    """Measure ``source`` in this process (the subprocess side of `main`)."""
    counted = Wakes() if wakes else None
    with tempfile.TemporaryDirectory() as tmp:
        rest = measure(source, Path(tmp), seconds, counted.window if counted else None)
    row: dict[str, object] = {
        "source": source,
        "seconds": round(rest.seconds, 3),
        "cpu_percent": round(rest.cpu_percent, 3),
        "driver_turns_per_s": round(rest.driver_turns / rest.seconds, 2),
        "loop_turns_per_s": round(rest.loop_turns / rest.seconds, 2),
    }
    if counted is not None:
        row["wakes"] = counted.top(rest.seconds)
    return row


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="rest window per source")
    parser.add_argument("--sources", default=",".join(SOURCES))
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "idle.json")
    parser.add_argument("--wakes", action="store_true", help="say what woke each loop")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the subprocess side
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.seconds, args.wakes)))
        return 0
    load_before = load_average()
    rows = []
    for source in args.sources.split(","):
        done = subprocess.run(
            [sys.executable, __file__, "--one", source, "--seconds", str(args.seconds)]
            + (["--wakes"] if args.wakes else []),
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        if done.returncode != 0:
            rows.append({"source": source, "failed": done.stderr.strip().splitlines()[-1:]})
        else:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    load_after = load_average()
    machine = f"{os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}"
    print(f"{machine}; load average {load_before} before, {load_after} after")
    print(f"{'source':<11} {'CPU % of a core':>15} {'driver turns/s':>14} {'loop turns/s':>12}")
    for r in rows:
        if "failed" in r:
            print(f"{r['source']:<11} failed: {r['failed']}")
            continue
        print(
            f"{r['source']:<11} {r['cpu_percent']:>15.3f} {r['driver_turns_per_s']:>14.1f} "
            f"{r['loop_turns_per_s']:>12.1f}"
        )
        for wake in r.get("wakes", []):
            print(f"    {wake['per_s']:>7.2f}/s {wake['mean_cpu_us']:>6} µs  {wake['callback']}")
    report = {
        "benchmark": "idle",
        "machine": machine,
        "seconds": args.seconds,
        "target_cpu_percent": TARGET_PERCENT,
        "load_average": {"before": load_before, "after": load_after},
        "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")
    return 1 if any("failed" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
