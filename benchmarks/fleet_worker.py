"""One worker process of `benchmarks/fleet.py` (and `tests/test_fleet_processes.py`).

``python fleet_worker.py MCP_URL URI [VALKEY_URL|-]``: prints one JSON line per
change of what it would hand out (``state``, ``text``, wall time), ``leading`` when
it holds the listener lease, and, when told on stdin: ``read``, one read of the URI (a
follower does not re-read a change it heard on the fleet channel: the next read does);
``hits``, the cost of a hit;
``cpu``, the CPU seconds this process used so far; ``profile``, a cProfile of the
process so far written to ``$FLEET_WORKER_PROFILE.<pid>`` (when that is set);
``reset``, the profile starts again from now (to profile a window of samples alone).
"""

from __future__ import annotations

import cProfile
import json
import os
import sys
import time
from typing import Any

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
        stream = ""
        stdin = anyio.wrap_file(sys.stdin)

        async def commands() -> None:
            async for line in stdin:
                if line.strip() == "read":
                    # Until it is fresh (a read may end not fresh: a deadline).
                    for _ in range(50):
                        if (await cache.read(uri)).state == "fresh":
                            break
                    report()
                if line.strip() == "cpu":
                    say(cpu=time.process_time())
                if line.strip() == "reset" and PROFILE is not None:
                    PROFILE.disable()
                    PROFILE.clear()
                    PROFILE.enable()
                if line.strip() == "profile" and PROFILE is not None:
                    PROFILE.dump_stats(f"{os.environ['FLEET_WORKER_PROFILE']}.{os.getpid()}")
                    PROFILE.enable()  # dump_stats stops it: a later dump still counts
                    say(profiled=True)
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

        def watch() -> None:
            """The lease and the stream as this worker sees them, printed when they move."""
            nonlocal leading, stream
            lead = lease is not None and lease.leading is not None
            if lead != leading:
                leading = lead
                say(leading=lead, at=time.time())
            if cache.stream_status != stream:
                stream = cache.stream_status
                say(stream=stream, at=time.time())

        def report(change: object = None) -> None:
            nonlocal last
            # A change's own state first: a re-read may have landed already (fresh at
            # the same text again), and the moment it was not fresh is what is timed.
            passed = getattr(change, "new_state", "fresh")
            if passed != "fresh" and last is not None and last[0] == "fresh":
                last = (passed, None)
                say(
                    state=passed,
                    text=None,
                    at=time.time(),
                    reads=cache.engine.counters.server_reads,
                )
            status = cache.status(uri)
            now = (status.state, status.text)
            if now != last:
                last = now
                say(
                    state=status.state,
                    text=status.text,
                    at=time.time(),
                    reads=cache.engine.counters.server_reads,
                )
            watch()

        # The lease's moves are told, not polled: the worker's lease part calls these
        # when it takes the lease, sees another holder or stops leading. (Polled every
        # 50 ms, 8 workers woke 160 times a second for it, which the floor's plain
        # subscribers do not.)
        lease = cache._fleet.lease if cache._fleet is not None else None
        if lease is not None:
            for name in ("saw_holder", "stop"):
                told = getattr(lease, name)

                def hooked(*args: object, _told: Any = told) -> None:
                    _told(*args)
                    watch()

                setattr(lease, name, hooked)

        async with anyio.create_task_group() as tg:
            tg.start_soon(commands)
            # Woken by the cache's own change feed, not by polling: eight polling
            # processes would starve a 2-core machine of the CPU the fleet needs.
            async with cache.changes() as changes:
                report()
                async for change in changes:
                    report(change)


PROFILE = cProfile.Profile(time.process_time) if os.environ.get("FLEET_WORKER_PROFILE") else None

if __name__ == "__main__":
    if PROFILE is not None:
        PROFILE.enable()
    anyio.run(main, *sys.argv[1:4])
