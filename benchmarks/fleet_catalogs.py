"""``tools/list`` requests per change of the tool list, with a fleet of N workers.

    python benchmarks/fleet_catalogs.py [--workers 4] [--changes 3] [--calls 5]

N `FreshCache` workers with ``fleet=`` in one process share a Valkey started here,
over one in-memory reference server whose tool list is public (``cacheScope:
public``, ``ttlMs`` 60 s) and shared (``Policy(share_public=True)``). Each change is
made on the server and notified on the listener's stream; once the listener's own
engine took it in, every worker asks for its tools ``--calls`` times (an agent's
turns), and each call must hand out the new list. Printed: ``tools/list`` requests
per change (the server's count) and per call, and the load average. ``--private``:
the list is private (never shared through the store: each worker walks it once per
change). Counts, not
times: the figures do not depend on the machine's load.

Run it on an older checkout (``PYTHONPATH=<checkout>``) for the figures before the
fleet shared catalogs: a follower's catalog was then covered by nothing, and listed
before each use.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests.valkey_support, last

import freshcache
from freshcache import FreshCache, Policy
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.acceptance._steps import catalog_items
from freshcache.fleet import Fleet
from tests.valkey_support import Valkey

URI = "guide://shipping/approval"


async def _until(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the fleet did not get there in time")
        await asyncio.sleep(0.005)


def _version(cache: FreshCache) -> str | None:
    status = cache.catalog_status("tools")
    return status.names[0] if status.state == "fresh" and status.names else None


async def measure(
    url: str, workers: int, changes: int, calls: int, scope: str = "public"
) -> dict[str, Any]:
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    server.catalogs.scope = "public" if scope == "public" else "private"
    server.catalogs.set("tools", catalog_items("tools", "v1"))
    caches = [
        FreshCache(
            InMemorySource(server),
            select=[URI],
            fleet=Fleet(url, namespace="bench", lease=2.0, op_timeout=1.0),
            policy=Policy(share_public=True),
            read_timeout=5.0,
        )
        for _ in range(workers)
    ]
    entered = []
    try:
        for cache in caches:
            entered.append(await cache.__aenter__())
        await _until(lambda: all(c.stream_status == "live" for c in caches))
        for cache in caches:
            assert (await cache.tools()).state == "fresh"
        first = server.catalogs.lists.get("tools", 0)
        leader = next(c for c in caches if c.describe()["fleet"]["leading"])
        per_change = []
        for n in range(2, changes + 2):
            before = server.catalogs.lists.get("tools", 0)
            server.set_catalog("tools", catalog_items("tools", f"v{n}"))  # and notifies
            old = f"search-v{n - 1}"
            await _until(lambda old=old: _version(leader) != old)  # heard
            for _ in range(calls):
                for cache in caches:
                    tools = await cache.tools()
                    if tools.state != "fresh" or tools.names[0] != f"search-v{n}":
                        raise AssertionError(f"not the new tool list: {tools}")
            per_change.append(server.catalogs.lists.get("tools", 0) - before)
        return {"first_listing": first, "per_change": per_change}
    finally:
        for cache in reversed(entered):
            await cache.__aexit__(None, None, None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--changes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5, help="tools() calls per worker per change")
    parser.add_argument(
        "--private",
        action="store_true",
        help="a private tool list (never shared: one walk per worker)",
    )
    args = parser.parse_args()
    load = os.getloadavg()
    valkey = Valkey()
    valkey.start()
    try:
        scope = "private" if args.private else "public"
        found = asyncio.run(measure(valkey.url, args.workers, args.changes, args.calls, scope))
    finally:
        valkey.stop()
    print(f"freshcache from {Path(freshcache.__file__).parent}")
    print(f"{platform.python_version()} on {os.cpu_count()} cores, {platform.processor() or '-'}")
    print(f"load average before: {load[0]:.2f}, after: {os.getloadavg()[0]:.2f}")
    calls = args.workers * args.calls
    scope = "private" if args.private else "public"
    print(f"{args.workers} workers, a {scope} tool list, {calls} tools() calls per change")
    print(f"first listing by every worker: {found['first_listing']} tools/list requests")
    for n, count in enumerate(found["per_change"], 1):
        print(f"change {n}: {count} tools/list requests ({count / calls:.2f} per call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
