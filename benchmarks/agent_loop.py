"""Server reads of an agent loop from a cold start, against the floor of one read per
selected URI plus one per change (issue 38, item 1).

    python benchmarks/agent_loop.py [--steps 100] [--resources 10] [--changes 15]
                                    [--rounds 3] [--json PATH]

Against the official-SDK fixture server (`tests/fixtures/sdk_server.py`) on 127.0.0.1.
Each round resets the server to ``--resources`` resources, enters a fresh
``FreshCache(source, select=uris)`` and *at once* (no wait for the stream) plays
``--steps`` agent steps, each reading every resource: one ``await cache.context(uris)``
(concurrent reads, the agent-step API) or ``await cache.read(uri)`` per URI in turn.
``--changes`` changes are spread evenly over the steps (one resource each, in turn);
the step after a change starts once the cache has heard of it (as it would after a
model call between two steps). Counted:

- **server reads**: the fixture's own per-URI ``resources/read`` counters, so every
  read the cache made: the first ones, those an acknowledgment asked for, re-reads;
- **the floor**: one read per selected URI (the post-acknowledgment read of a cold
  start, DESIGN §8) plus one per change: ``resources + changes``;
- **stale citations**: answers handed out as ``fresh`` whose text was not the
  server's current text; and every answer's state.

Sources: ``HttpSource`` (freshcache's own HTTP client) and ``McpClientSource`` (over the
official SDK client). Not a pass/fail test; `benchmarks/results/agent_loop.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from freshcache import FreshCache, HttpSource, McpClientSource  # noqa: E402
from tests.conftest import SdkServer, start_sdk_server, stop_process  # noqa: E402


def text_of(uri: str, version: int) -> str:
    return f"{uri} version {version}"


def uris_of(count: int) -> list[str]:
    return [f"guide://bench/loop-{n}" for n in range(count)]


def reset(server: SdkServer, uris: list[str]) -> None:
    server.control("reset")
    for uri in uris:
        server.control("set", uri=uri, text=text_of(uri, 1), notify=False)


def reads(server: SdkServer, uris: list[str]) -> int:
    counts = server.state()["reads"]
    return sum(int(counts.get(uri, 0)) for uri in uris)


async def play(
    server: SdkServer, source_name: str, step: str, steps: int, resources: int, changes: int
) -> dict[str, Any]:
    uris = uris_of(resources)
    reset(server, uris)
    current = dict.fromkeys(uris, 1)
    change_at = {
        steps * k // (changes + 1): uris[(k - 1) % resources] for k in range(1, changes + 1)
    }
    source = (
        HttpSource(server.url)
        if source_name == "HttpSource"
        else McpClientSource.connect(server.url)
    )
    states: Counter[str] = Counter()
    stale = 0
    before = reads(server, uris)
    started = time.perf_counter()
    async with FreshCache(source, select=uris) as cache:
        for number in range(steps):
            changed = change_at.get(number)
            if changed is not None:
                current[changed] += 1
                text = text_of(changed, current[changed])
                server.control("set", uri=changed, text=text)
                with anyio.fail_after(10):  # the change reached the cache
                    while (
                        cache.status(changed).state == "fresh"
                        and cache.status(changed).text != text
                    ):
                        await anyio.sleep(0.002)
            if step == "context":
                got = await cache.context(uris)
                results = [*got.fresh, *got.withheld]
            else:
                results = [await cache.read(uri) for uri in uris]
            for result in results:
                states[result.state] += 1
                if result.state == "fresh" and result.text != text_of(
                    result.uri, current[result.uri]
                ):
                    stale += 1
    wall = time.perf_counter() - started
    made = reads(server, uris) - before
    floor = resources + changes
    return {
        "source": source_name,
        "step": step,
        "server_reads": made,
        "floor": floor,
        "ratio": round(made / floor, 3),
        "stale_citations": stale,
        "states": dict(states),
        "wall_s": round(wall, 3),
    }


async def main(
    steps: int, resources: int, changes: int, rounds: int, step_kinds: list[str]
) -> list[dict[str, Any]]:
    server = start_sdk_server()
    rows: list[dict[str, Any]] = []
    try:
        for _ in range(rounds):
            for step in step_kinds:
                for name in ("HttpSource", "McpClientSource"):
                    rows.append(await play(server, name, step, steps, resources, changes))
    finally:
        stop_process(server.process)
    return rows


def table(rows: list[dict[str, Any]], steps: int, resources: int, changes: int) -> str:
    lines = [
        f"{steps} agent steps x {resources} resources, {changes} changes, from a cold start;"
        f" floor {resources + changes} server reads",
        f"{'step':<8} {'source':<16} {'server reads':>12} {'x floor':>8} {'stale':>6}  states",
    ]
    for row in rows:
        states = ", ".join(f"{n} {s}" for s, n in sorted(row["states"].items()))
        lines.append(
            f"{row['step']:<8} {row['source']:<16} {row['server_reads']:>12} {row['ratio']:>8} "
            f"{row['stale_citations']:>6}  {states}"
        )
    for step in sorted({r["step"] for r in rows}):
        for name in ("HttpSource", "McpClientSource"):
            made = [r["server_reads"] for r in rows if r["source"] == name and r["step"] == step]
            if made:
                median = statistics.median(made)
                lines.append(
                    f"{step} {name}: median {median} reads over {len(made)} rounds,"
                    f" {median / (resources + changes):.2f}x the floor"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--resources", type=int, default=10)
    parser.add_argument("--changes", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--step",
        choices=("context", "read", "both"),
        default="both",
        help="an agent step: one context() of every URI, or one read() per URI in turn",
    )
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    kinds = ["context", "read"] if args.step == "both" else [args.step]
    rows = anyio.run(main, args.steps, args.resources, args.changes, args.rounds, kinds)
    print(table(rows, args.steps, args.resources, args.changes))
    print(f"load average {os.getloadavg()[0]:.1f}, {platform.processor() or platform.machine()}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
