"""Idle caches on every source, and a count of what wakes them (`tests/test_idle.py`,
`benchmarks/idle.py`).

An idle cache is one whose four selected URIs are fresh and whose stream is live; then
nothing happens. Quiet at rest, it does no work: its loops sleep until there is a
decision to carry out or a deadline moves. Each source is a real one: ``freshcache
serve`` over loopback HTTP (2026-07-28 and the 2025-11-25 GET stream) or as a stdio
subprocess (both revisions), a fleet worker on a real Valkey, a `LoaderSource` whose
change feed stays quiet, and `McpClientSource` (the official SDK's client over HTTP).
The servers run in other processes, so what is counted here (loop turns, event-loop
wake-ups, CPU) is the cache's alone.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from freshcache import FreshCache, HttpSource, LoaderSource, McpClientSource, StdioSource
from freshcache.acceptance._serve import SEED
from freshcache.fleet import Fleet
from tests.polling import reads_done, until
from tests.serve_support import cli, start_serve
from tests.valkey_support import Valkey

URIS = sorted(SEED)
"""The four selected URIs (``freshcache serve``'s seed resources)."""

SOURCES = ["http", "http-2025", "stdio", "stdio-2025", "fleet", "loader", "mcp-client"]
"""Every source an idle cache is measured on."""


class WakeCounter:
    """Counts the asyncio event loop's turns: each return from its selector is one.

    Every task that wakes (a timer, a socket that became readable, an event set) costs
    the loop at least one turn, so over an idle second this counts the wake-ups of
    every loop in the process, not only the ones that keep a counter of their own.
    """

    def __init__(self, inner: selectors.BaseSelector) -> None:
        self._inner = inner
        self.turns = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(timeout)
        self.turns += 1
        return ready

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @classmethod
    def install(cls) -> WakeCounter:
        """Count the running event loop's turns from now on (it must be asyncio's)."""
        loop: Any = asyncio.get_running_loop()
        if isinstance(loop._selector, cls):
            return loop._selector  # type: ignore[no-any-return]
        counter = cls(loop._selector)
        loop._selector = counter
        return counter


@dataclass(frozen=True, slots=True)
class Rest:
    """What an idle cache did over a window of ``seconds``."""

    source: str
    seconds: float
    driver_turns: int
    """Turns of the stream driver's run loop (`StreamDriver.loop_turns`)."""
    loop_turns: int
    """Turns of the whole event loop (`WakeCounter`)."""
    cpu_seconds: float
    """Process CPU time (``time.process_time``) over the window."""

    @property
    def cpu_percent(self) -> float:
        """Of one core."""
        return 100.0 * self.cpu_seconds / self.seconds


async def _quiet_feed() -> AsyncIterator[object]:
    """A `LoaderSource` change feed on which nothing ever changes."""
    await anyio.sleep_forever()
    yield  # pragma: no cover - never reached: makes this an async generator


async def _load(uri: str) -> str:
    return SEED[uri]


def _serve_args(source: str) -> list[str]:
    return ["--revision", "2025-11-25"] if source.endswith("-2025") else []


@asynccontextmanager
async def idle_cache(
    source: str, tmp: Path, fleet_timings: dict[str, float] | None = None
) -> AsyncIterator[FreshCache]:
    """A cache on ``source`` (one of `SOURCES`) with `URIS` fresh and its stream live;
    a fleet worker's `Fleet` gets ``fleet_timings`` (the defaults when ``None``)."""
    async with AsyncExitStack() as stack:
        fleet = None
        if source == "fleet":
            valkey = Valkey()
            valkey.start()
            stack.callback(valkey.stop)
            fleet = Fleet(valkey.url, namespace="idle", **(fleet_timings or {}))
        if source.startswith(("http", "fleet", "mcp-client")):
            served = start_serve(tmp, *_serve_args(source))
            stack.callback(served.stop)
            made: Any = (
                McpClientSource.connect(served.url)
                if source == "mcp-client"
                else HttpSource(served.url)
            )
        elif source.startswith("stdio"):
            made = StdioSource(cli("serve", "--stdio", *_serve_args(source)))
        elif source == "loader":
            made = LoaderSource(_load, changes=_quiet_feed(), default_ttl_ms=3_600_000)
        else:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        cache = await stack.enter_async_context(FreshCache(made, select=URIS, fleet=fleet))
        await settle(cache)
        yield cache


async def settle(cache: FreshCache, timeout: float = 60.0) -> None:
    """Wait until every selected URI is fresh (read once), the stream is live and no
    read is under way (the acknowledgment's re-reads have landed)."""
    for uri in URIS:
        await cache.read(uri)

    def at_rest() -> bool:
        return (
            cache.stream_status == "live"
            and reads_done(cache)
            and all(cache.status(uri).state == "fresh" for uri in URIS)
        )

    await until(at_rest, timeout)


async def rest(source: str, cache: FreshCache, seconds: float) -> Rest:
    """Watch an idle ``cache`` for ``seconds`` (the window is the measurement)."""
    counter = WakeCounter.install()
    driver = cache._streams
    turns, cpu, started = driver.loop_turns, time.process_time(), time.perf_counter()
    loop_turns = counter.turns
    await anyio.sleep(seconds)
    wall = time.perf_counter() - started
    return Rest(
        source,
        wall,
        driver.loop_turns - turns,
        counter.turns - loop_turns,
        time.process_time() - cpu,
    )


def measure(
    source: str, tmp: Path, seconds: float, window: Callable[[bool], None] | None = None
) -> Rest:
    """Start an idle cache on ``source`` in a fresh event loop and watch it ``seconds``
    (``window(True)`` is called as the window opens, ``window(False)`` as it closes:
    `benchmarks/idle.py --wakes`)."""

    async def main() -> Rest:
        async with idle_cache(source, tmp) as cache:
            if window is not None:
                window(True)
            try:
                return await rest(source, cache, seconds)
            finally:
                if window is not None:
                    window(False)

    return anyio.run(main)
