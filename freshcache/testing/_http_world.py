"""`HttpWorld`: acceptance rows played over real HTTP on loopback (DESIGN §3, §4).

The cache reaches the reference server through `HttpSource` and a real TCP socket on
127.0.0.1; the server is `ReferenceHttpServer` in the same event loop, so every row
steers it exactly as the engine level does (`apply_to_reference`). Only the clock
that decides TTLs is virtual, as at the engine level; timeouts are real and short.

How the wire acts out the table's phrases:

- a read that "times out" is a request the server never answers (no byte at all):
  the source gives up after ``idle_timeout`` (``timeout`` state);
- held reads answer late: the server commits to an SSE answer and sends keep-alive
  comments until it is released, so they do not time out;
- "returns local copy" is an answer an intermediary served from its copy: it carries
  ``Age`` (RFC 9111), which the source treats as not from the server;
- "server goes down" closes the listening socket and every connection; "comes back"
  listens on the same port again;
- "stream drops" writes half a frame and closes the socket; "stream closes" sends the
  listen result (``resultType: "complete"``).

`settle` waits, bounded by a deadline, until the cache has taken in what the server
did: no read in flight but held ones, no list walk, every frame the server wrote on
an open stream consumed by the cache, every open stream acknowledged, and, where the
server can listen, a live stream for the current selection.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
import anyio.lowlevel
import httpx
from anyio.streams.memory import MemoryObjectSendStream

from .._core import Partition
from .._http import HttpSource
from .._reference import Push, ReferenceServer
from .._tables._format import Case
from .._tables._runner import Setup, VirtualClock, World, apply_to_reference
from .._tables._steps import ALIASES, NextRead, Notify, ServerChange, ServerSets, text_for
from ._http_server import ReferenceHttpServer, ReplyMode


def bearer(principal: Partition) -> dict[str, str]:
    """Credentials of the reference server: the principal's name as a bearer token."""
    return {"Authorization": f"Bearer {principal}"} if principal else {}


class HttpWorld(World):
    """A `FreshCache` over `HttpSource` against `ReferenceHttpServer` on loopback."""

    name = "http"

    def __init__(
        self,
        *,
        reply_mode: ReplyMode = "auto",
        read_timeout: float = 2.0,
        idle_timeout: float = 0.5,
        keepalive_interval: float = 0.1,
        settle_timeout: float = 5.0,
        cache_options: dict[str, Any] | None = None,
    ) -> None:
        self.cache_options = dict(cache_options or {})
        """Extra `FreshCache` arguments (e.g. tracer and meter providers)."""
        self.server = ReferenceServer()
        self.clock = VirtualClock()
        self.reply_mode: ReplyMode = reply_mode
        self.read_timeout = read_timeout
        self.idle_timeout = idle_timeout
        self.keepalive_interval = keepalive_interval
        self.settle_timeout = settle_timeout
        self.principal: str | None = None
        self.http: ReferenceHttpServer
        self.source: HttpSource
        self.settle_timeouts = 0
        """How often `settle` gave up waiting (a row that then fails says why)."""
        self.last_busy: str | None = None
        self._stack = AsyncExitStack()
        self._queues: dict[str | int, MemoryObjectSendStream[Push]] = {}

    def unplayable(self, case: Case) -> str | None:
        return None  # every phrase of the vocabulary has an HTTP form (module docstring)

    async def start(self, setup: Setup) -> None:
        configure_reference(self.server, setup)
        self.principal = setup.principal
        stack = self._stack
        self.http = await stack.enter_async_context(
            ReferenceHttpServer(
                self.server,
                reply_mode=self.reply_mode,
                keepalive_interval=self.keepalive_interval,
            )
        )
        # trust_env=False: a proxy from the environment must not sit on loopback traffic.
        client = httpx.AsyncClient(trust_env=False)
        stack.push_async_callback(client.aclose)
        self.source = HttpSource(
            self.http.url,
            auth=bearer,
            timeout=10.0,
            idle_timeout=self.idle_timeout,
            client=client,
        )
        self.cache = await stack.enter_async_context(
            self.make_cache(
                self.source, setup, read_timeout=self.read_timeout, **self.cache_options
            )
        )
        await self.reach_seed_situation(setup)

    async def stop(self) -> None:
        self.server.release_reads()
        await self._stack.aclose()

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        self._capture_queues()  # before the step: a dropped stream still owes its frames
        apply_to_reference(self.server, step, self.principal)
        match step:
            case ServerChange(what="down"):
                await self.http.go_down()
            case ServerChange(what="up"):
                await self.http.come_up()
            case _:
                pass

    async def settle(self) -> None:
        with anyio.move_on_after(self.settle_timeout) as scope:
            while True:
                for _ in range(20):
                    await anyio.lowlevel.checkpoint()
                self.last_busy = self.busy()
                if self.last_busy is None:
                    return
                await anyio.sleep(0.002)
        if scope.cancelled_caught:
            self.settle_timeouts += 1

    def busy(self) -> str | None:
        """What the cache has not taken in yet, or ``None`` when it is settled."""
        cache, server, source, http = self.cache, self.server, self.source, self.http
        if cache.pending_reads > server.reads_in_flight:
            return f"{cache.pending_reads} reads in flight, {server.reads_in_flight} held"
        if cache.relisting:
            return "a re-list is under way"
        self._capture_queues()
        for sid, stream in list(source.streams.items()):
            if not stream.acknowledged:
                return f"stream {sid} waits for its acknowledgment"
            written = http.frames_written.get(sid, 0)
            if written > stream.frames:
                return f"stream {sid}: {written} frames written, {stream.frames} taken in"
            queue = self._queues.get(sid)
            if queue is not None and queue.statistics().current_buffer_used:
                return f"stream {sid}: frames queued at the server"
        if (
            server.listen_supported
            and not server.down
            and cache.selected
            and cache.stream_status not in ("unsupported", "disabled")
        ):
            selected = cache.selected
            if not any(s.uris == selected and s.acknowledged for s in source.streams.values()):
                return "no acknowledged stream for the current selection yet"
        return None

    def server_reads(self) -> int:
        return self.server.reads

    def _capture_queues(self) -> None:
        for sid, sub in self.server.subscribers.items():
            self._queues[sid] = sub.send


def configure_reference(server: ReferenceServer, setup: Setup) -> None:
    """Put a `ReferenceServer` in a row's starting situation (as the engine level does)."""
    server.listen_supported = setup.listen
    server.list_changed_supported = setup.list_changed
    server.omit_from_ack = set(setup.ack_omits)
    server.page_size = setup.page_size
    server.later_pages_ttl_ms = setup.later_pages_ttl_ms
    options: dict[str, Any] = {"ttl_ms": setup.ttl_ms, "cache_scope": setup.scope}
    for alias in ("selected", "other", "extra"):
        uri = ALIASES[alias]
        server.set(uri, text_for(uri, "v1"), **options)


__all__ = ["HttpWorld", "bearer", "configure_reference"]
