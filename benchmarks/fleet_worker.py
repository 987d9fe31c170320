"""One worker process of `benchmarks/fleet.py` (and `tests/test_fleet_processes.py`).

``python fleet_worker.py MCP_URL URI [VALKEY_URL|-]``: prints one JSON line per
change of what it would hand out (``state``, ``text``, wall time), ``leading`` when
it holds the listener lease, and, when told ``hits`` on stdin, the cost of a hit.
"""

from __future__ import annotations

import json
import sys
import time

import anyio

from freshcache import FreshCache, HttpSource, Policy
from freshcache.fleet import Fleet


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


async def main(mcp_url: str, uri: str, valkey: str) -> None:
    fleet = None if valkey == "-" else Fleet(valkey, namespace="bench")
    policy = Policy(subscription_backed=True)
    async with FreshCache(HttpSource(mcp_url), select=[uri], fleet=fleet, policy=policy) as cache:
        last: tuple[str, str | None] | None = None
        leading = False
        stdin = anyio.wrap_file(sys.stdin)

        async def commands() -> None:
            async for line in stdin:
                if line.strip() == "hits":
                    await cache.read(uri)
                    # In slices, so the lease renewal still runs between them.
                    best = float("inf")
                    for _ in range(20):
                        started = time.perf_counter()
                        for _ in range(5000):
                            await cache.read(uri)
                        best = min(best, (time.perf_counter() - started) / 5000 * 1e9)
                        await anyio.sleep(0.01)
                    say(hit_ns=best, fleet=cache.describe().get("fleet", {}).get("counters"))

        def report() -> None:
            nonlocal last
            status = cache.status(uri)
            now = (status.state, status.text)
            if now != last:
                last = now
                say(state=status.state, text=status.text, at=time.time(),
                    reads=cache.engine.counters.server_reads)

        async def watch_lease() -> None:
            nonlocal leading
            stream = ""
            while True:
                lead = bool(cache.describe().get("fleet", {}).get("leading"))
                if lead != leading:
                    leading = lead
                    say(leading=lead, at=time.time())
                if cache.stream_status != stream:
                    stream = cache.stream_status
                    say(stream=stream, at=time.time())
                await anyio.sleep(0.02)

        async with anyio.create_task_group() as tg:
            tg.start_soon(commands)
            tg.start_soon(watch_lease)
            # Woken by the cache's own change feed, not by polling: eight polling
            # processes would starve a 2-core machine of the CPU the fleet needs.
            async with cache.changes() as changes:
                report()
                async for _ in changes:
                    report()

if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4])
