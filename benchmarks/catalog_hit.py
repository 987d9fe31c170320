"""Cost of a fresh catalog hit (``await cache.tools()``) beside a fresh resource hit.

    python benchmarks/catalog_hit.py [--loops N] [--rounds R]

One process, one event loop, an in-memory reference server whose stream is live and
acknowledged (the catalogs are covered). Variants, interleaved in every round so that
a busy machine weighs on all alike:

- ``awaited_dict_lookup``: ``await get(uri)`` on a dict, the floor of any async cache;
- ``read_hit``: ``await cache.read(uri)`` on a fresh entry;
- ``tools_hit``: ``await cache.tools()`` on a fresh catalog (the same object handed
  out every time: no I/O, no copy).

Prints nanoseconds per call (minimum and median of R rounds of N calls), each median's
ratio to the floor, and the load average before and after. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

from freshcache import FreshCache
from freshcache.acceptance import InMemorySource, ReferenceServer

URI = "guide://shipping/approval"


async def _timed(call: Callable[[], Awaitable[object]], loops: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(loops):
        await call()
    return (time.perf_counter_ns() - start) / loops


async def measure(loops: int, rounds: int) -> dict[str, list[float]]:
    server = ReferenceServer()
    server.set(URI, "v1")
    table = {URI: "v1"}

    async def dict_get() -> str:
        return table[URI]

    async with FreshCache(InMemorySource(server), select=[URI]) as cache:
        deadline = time.monotonic() + 10
        while cache.stream_status != "live" and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert (await cache.read(URI)).state == "fresh"
        assert (await cache.tools()).state == "fresh"
        hit = await cache.tools()
        assert hit.state == "fresh"
        assert not hit.server_read
        assert await cache.tools() is hit, "a catalog hit must hand out the same object"

        async def read_hit() -> object:
            return await cache.read(URI)

        async def tools_hit() -> object:
            return await cache.tools()

        variants: dict[str, Callable[[], Awaitable[object]]] = {
            "awaited_dict_lookup": dict_get,
            "read_hit": read_hit,
            "tools_hit": tools_hit,
        }
        results: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name, call in variants.items():
                results[name].append(await _timed(call, loops))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (the median of >= 3 rounds is reported)")
    before = [round(x, 2) for x in os.getloadavg()]
    results = asyncio.run(measure(args.loops, args.rounds))
    after = [round(x, 2) for x in os.getloadavg()]
    print(f"python {sys.version.split()[0]} on {platform.machine()}, {os.cpu_count()} cores")
    print(f"load average before {before}, after {after}")
    floor = statistics.median(results["awaited_dict_lookup"])
    print(f"{'variant':<22}{'min ns':>10}{'median ns':>12}{'median / floor':>16}")
    for name, rounds in results.items():
        median = statistics.median(rounds)
        print(f"{name:<22}{min(rounds):>10.0f}{median:>12.0f}{median / floor:>16.2f}")
    ratio = statistics.median(results["tools_hit"]) / statistics.median(results["read_hit"])
    print(f"tools hit / read hit (medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
