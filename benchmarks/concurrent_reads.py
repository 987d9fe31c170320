"""1,000 concurrent reads of a just-invalidated URI: freshcache vs the official SDK client.

    python benchmarks/concurrent_reads.py [--readers N] [--rounds R] [--json PATH]

Starts the official-SDK fixture server (tests/fixtures/sdk_server.py) on loopback.
Each round changes the resource on the server (which publishes
``notifications/resources/updated``), waits until the client under test has taken
the notification in, then fires N concurrent reads of that URI and records how many
reads reached the server and the wall time until every reader had an answer, and
whether every reader got the new text.

- freshcache: ``FreshCache(HttpSource(url), select=[uri])``; ``await cache.read(uri)``.
- SDK: ``mcp.Client(url)`` with its default response cache, listening to the URI;
  ``await client.read_resource(uri)``.

Needs the test extra (``pip install '.[test]'``). Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import start_sdk_server, stop_process  # noqa: E402

URI = "guide://shipping/approval"


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.001)


async def fire(
    readers: int, read: Callable[[], Awaitable[str | None]]
) -> tuple[float, list[str | None]]:
    texts: list[str | None] = []

    async def one() -> None:
        texts.append(await read())

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(readers):
            tg.start_soon(one)
    return time.perf_counter() - started, texts


async def bench_freshcache(server: Any, readers: int, rounds: int) -> dict[str, Any]:
    from freshcache import FreshCache, HttpSource

    walls, reads, correct = [], [], 0
    async with FreshCache(HttpSource(server.url), select=[URI], read_timeout=30.0) as cache:
        await until(lambda: cache.stream_status == "live" and cache.status(URI).state == "fresh")
        for n in range(rounds):
            text = f"round {n}"
            before = server.reads(URI)
            invalidations = cache.engine.counters.invalidations
            await anyio.to_thread.run_sync(lambda t=text: server.control("set", uri=URI, text=t))
            await until(lambda i=invalidations: cache.engine.counters.invalidations > i)

            async def read() -> str | None:
                return (await cache.read(URI)).text

            wall, texts = await fire(readers, read)
            await until(lambda: cache.pending_reads == 0)
            walls.append(wall)
            reads.append(server.reads(URI) - before)
            correct += all(t == text for t in texts)
    return {"wall_s": walls, "server_reads": reads, "rounds_all_new_text": correct}


async def bench_sdk(server: Any, readers: int, rounds: int) -> dict[str, Any]:
    from mcp import Client

    walls, reads, correct = [], [], 0
    seen: list[str] = []
    async with Client(server.url) as client:
        await client.read_resource(URI)
        async with (
            client.listen(resource_subscriptions=[URI]) as sub,
            anyio.create_task_group() as tg,
        ):

            async def pump() -> None:
                async for event in sub:
                    seen.append(getattr(event, "uri", ""))

            tg.start_soon(pump)
            for n in range(rounds):
                text = f"sdk round {n}"
                before = server.reads(URI)
                count = len(seen)
                await anyio.to_thread.run_sync(
                    lambda t=text: server.control("set", uri=URI, text=t)
                )
                await until(lambda c=count: len(seen) > c)

                async def read() -> str | None:
                    result = await client.read_resource(URI)
                    return getattr(result.contents[0], "text", None)

                wall, texts = await fire(readers, read)
                walls.append(wall)
                reads.append(server.reads(URI) - before)
                correct += all(t == text for t in texts)
            tg.cancel_scope.cancel()
    return {"wall_s": walls, "server_reads": reads, "rounds_all_new_text": correct}


def summary(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "median_wall_ms": round(1000 * statistics.median(raw["wall_s"]), 2),
        "median_server_reads": statistics.median(raw["server_reads"]),
        "rounds_all_new_text": raw["rounds_all_new_text"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    default_json = Path(__file__).parent / "results" / "concurrent_reads.json"
    parser.add_argument("--json", type=Path, default=default_json)
    args = parser.parse_args()
    server = start_sdk_server()
    try:
        fresh = anyio.run(bench_freshcache, server, args.readers, args.rounds)
        server.control("set", uri=URI, text="reset")
        sdk = anyio.run(bench_sdk, server, args.readers, args.rounds)
    finally:
        stop_process(server.process)
    rows = {"freshcache": summary(fresh), "sdk_client": summary(sdk)}
    print(
        f"{args.readers} concurrent reads of a just-invalidated URI, {args.rounds} rounds (median)"
    )
    print(f"{'client':<12} {'server reads':>13} {'wall ms':>9} {'rounds with new text':>22}")
    for name, row in rows.items():
        print(
            f"{name:<12} {row['median_server_reads']:>13} {row['median_wall_ms']:>9.1f} "
            f"{row['rounds_all_new_text']:>17}/{args.rounds}"
        )
    report = {
        "benchmark": "concurrent_reads",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "readers": args.readers,
        "rounds": args.rounds,
        "results": rows,
        "raw": {"freshcache": fresh, "sdk_client": sdk},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
