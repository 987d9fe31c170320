"""The driver for freshcache itself: `FreshCache` over `HttpSource` or `StdioSource`.

It has explicit states, takes a virtual clock (``advance``), reports its stream and
counters (``inspect``) and can say what it has not taken in yet (``look``), so every
row the wires play can be played through it. Run: ``python -m
freshcache.acceptance.drivers.freshcache_driver``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx

from freshcache import (
    BackoffSettings,
    FreshCache,
    HttpSource,
    MemoryStore,
    Partition,
    Policy,
    ReadResult,
    StdioSource,
    __version__,
)

from .._http_world import FrameCounter
from .._runner import VirtualClock
from ._loop import OnVirtualClock, hello, run


def _bearer(principal: Partition) -> dict[str, str]:
    return {"Authorization": f"Bearer {principal}"} if principal else {}


def _answer(result: ReadResult) -> dict[str, Any]:
    return {
        "state": result.state,
        "reason": result.reason,
        "text": result.text,
        "server_read": result.server_read,
        "detail": result.detail,
    }


class FreshcacheSession(OnVirtualClock):
    def __init__(
        self,
        cache: FreshCache,
        source: HttpSource | StdioSource,
        clock: VirtualClock,
        frames: FrameCounter | None = None,
    ) -> None:
        self.cache, self.source, self.clock = cache, source, clock
        self.frames = frames
        """HTTP: the frames the client took from GET streams (2025-11-25 notifications)."""

    async def read(self, uri: str, timeout: float | None, principal: str | None) -> dict[str, Any]:
        return _answer(await self.cache.read(uri, principal=principal, timeout=timeout))

    async def status(self, message: dict[str, Any]) -> dict[str, Any]:
        return _answer(self.cache.status(message["uri"], principal=message.get("principal")))

    async def list_resources(self) -> dict[str, Any]:
        listed = await self.cache.list_resources()
        return {
            "state": listed.state,
            "reason": listed.reason,
            "uris": [r.uri for r in listed.resources],
            "server_read": listed.server_read,
        }

    async def catalog(self, message: dict[str, Any]) -> dict[str, Any]:
        kind, principal = message["kind"], message.get("principal")
        if kind == "tools":
            catalog = await self.cache.tools(principal=principal)
        elif kind == "prompts":
            catalog = await self.cache.prompts(principal=principal)
        else:
            catalog = await self.cache.resource_templates(principal=principal)
        return {
            "state": catalog.state,
            "reason": catalog.reason,
            "names": list(catalog.names),
            "server_read": catalog.server_read,
        }

    async def select(self, uris: list[str]) -> None:
        self.cache.select(uris)

    async def inspect(self, message: dict[str, Any]) -> dict[str, Any]:
        engine = self.cache.engine
        return {
            "stream": self.cache.stream_status,
            "untrusted_messages": engine.counters.untrusted_messages,
            "tracked_uris": engine.tracked_uris,
        }

    async def look(self, message: dict[str, Any]) -> dict[str, Any]:
        """What the cache has not taken in of what the server says it did."""
        server: dict[str, Any] = message["server"]
        cache = self.cache
        if (due := cache.pending_reads + cache.queued_reads) > int(server.get("reads_held", 0)):
            return {"busy": f"{due} reads in flight or queued"}
        if cache.relisting:
            return {"busy": "a re-list is under way"}
        busy = (
            self._http_busy(self.source, server, self.frames)
            if isinstance(self.source, HttpSource)
            else self._stdio_busy(self.source, server)
        )
        if busy is None and server.get("wants_stream") and cache.selected:
            if cache.stream_status not in ("live", "unsupported", "disabled"):
                busy = f"the stream is {cache.stream_status}"
            elif isinstance(self.source, HttpSource) and not any(
                s.uris == cache.selected and s.acknowledged for s in self.source.streams.values()
            ):
                busy = "no acknowledged stream for the current selection yet"
        return {"busy": busy}

    @staticmethod
    def _http_busy(
        source: HttpSource, server: dict[str, Any], frames: FrameCounter | None
    ) -> str | None:
        channel = int(server.get("channel_frames_written", 0))
        if frames is not None and channel > frames.frames:
            return f"GET streams: {channel} frames written, {frames.frames} taken in"
        written: dict[str, int] = server.get("frames_written", {})
        for sid, stream in list(source.streams.items()):
            if not stream.acknowledged and not server.get("acks_held"):
                return f"stream {sid} waits for its acknowledgment"
            if written.get(str(sid), 0) > stream.frames:
                return f"stream {sid}: frames not yet taken in"
        return None

    @staticmethod
    def _stdio_busy(source: StdioSource, server: dict[str, Any]) -> str | None:
        stats = source.stats()
        if stats.backlog:
            return f"{stats.backlog} messages not yet taken by the cache"
        if stats.pid is not None and stats.pid in server.get("gone_pids", ()):
            return f"server process {stats.pid} exited; the source has not seen it yet"
        held = server.get("pid") == stats.pid and server.get("acks_held")
        if stats.pid is not None and stats.lines_from_current == 0 and not held:
            # Started, not yet answered: a read now would wait on a process that may
            # exit at once (the server is down) or answer soon (it is back). One that
            # runs and holds its acknowledgments has answered nothing on purpose.
            return f"server process {stats.pid} is starting"
        if "pid" not in server:
            return None  # the server is down: nothing to take in
        if server["pid"] != stats.pid:
            return "the server process (re)starting"
        if server["lines_written"] != stats.lines_from_current:
            return "lines in the pipe"
        return None


async def _warm_up(source: StdioSource) -> None:
    """Start the server before the cache, so the short request timeout measures the
    server and not the interpreter starting up (as the stdio world does)."""
    with anyio.fail_after(30.0):
        while not (await source.start()).reachable:  # noqa: ASYNC110 - a retry
            await anyio.sleep(0.05)


class FreshcacheDriver:
    def hello(self) -> dict[str, Any]:
        return hello(f"freshcache {__version__}", everything=True)

    @asynccontextmanager
    async def connect(self, spec: dict[str, Any]) -> AsyncIterator[FreshcacheSession]:
        timeouts: dict[str, float] = spec.get("timeouts", {})
        clock = VirtualClock()
        frames: FrameCounter | None = None
        async with AsyncExitStack() as stack:
            source: HttpSource | StdioSource
            if spec["transport"] == "http":
                frames = FrameCounter()  # 2025: what the GET stream delivered (look)
                client = httpx.AsyncClient(trust_env=False, transport=frames)
                stack.push_async_callback(client.aclose)
                source = HttpSource(
                    spec["url"],
                    auth=_bearer,
                    timeout=10.0,
                    idle_timeout=timeouts.get("idle", 3.0),
                    silence_floor=1.5,  # as HttpWorld: a loaded machine's pauses are no loss
                    client=client,
                )
            else:
                source = StdioSource(
                    spec["command"],
                    timeout=timeouts.get("request", 0.5),
                    restart=BackoffSettings(
                        base=0.05, cap=0.2, quick_death=0.0, max_per_hour=1_000_000
                    ),
                    shutdown_timeout=2.0,
                )
                await _warm_up(source)
            entries = spec.get("store_entries")
            policy = dict(spec.get("policy", {}))
            if "stale_on_error" in policy:
                policy["stale_on_error"] = tuple(policy["stale_on_error"])
            cache = FreshCache(
                source,
                select=spec.get("select", []),
                policy=Policy(**policy),
                store=None if entries is None else MemoryStore(max_entries=int(entries)),
                principal=spec.get("principal"),
                read_timeout=timeouts.get("read", 2.0),
                ack_timeout=timeouts.get("read", 2.0),
                backoff=BackoffSettings(base=0.002, cap=0.01, quick_death=0.0),
                clock=clock,
                wall_clock=clock.wall,
            )
            entered = await stack.enter_async_context(cache)
            yield FreshcacheSession(entered, source, clock, frames)


if __name__ == "__main__":
    run(FreshcacheDriver())
