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

import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
from anyio.streams.memory import MemoryObjectSendStream

from freshcache import HttpSource, Partition
from freshcache.testing import Push, ReferenceServer

from ._format import Case
from ._http_server import ReferenceHttpServer, ReplyMode, Revision
from ._runner import (
    DEADLINE_ROW_SECONDS,
    Setup,
    VirtualClock,
    World,
    load_factor,
    unplayable_on_2025,
)
from ._settle import wait_for
from ._steering import apply_to_reference, configure_reference
from ._steps import NextRead, Notify, ServerChange, ServerSets


class FrameCounter(httpx.AsyncBaseTransport):
    """The client's transport, counting the whole SSE events with data that the client
    has taken from GET answers (2025 notification streams): an event counts once the
    client comes back for the bytes after it, i.e. once it has parsed and routed it."""

    def __init__(self) -> None:
        # Plain HTTP to its own loopback server: no TLS, so no CA bundle to load (that
        # alone was 20-46 ms of CPU per row, a world being made for every row).
        self.inner = httpx.AsyncHTTPTransport(verify=False)
        self.frames = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method != "GET":
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CountedStream(response.stream, self),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CountedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, counter: FrameCounter) -> None:
        self.inner, self.counter = inner, counter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = b""
        async for chunk in self.inner:
            yield chunk
            pending += chunk
            *events, pending = pending.split(b"\r\n\r\n")
            self.counter.frames += sum(1 for event in events if b"data:" in event)

    async def aclose(self) -> None:
        await self.inner.aclose()


def revision_of(name: str) -> Revision:
    """A world's revision as the reference server takes it."""
    return "2025-11-25" if name == "2025-11-25" else "2026-07-28"


def bearer(principal: Partition) -> dict[str, str]:
    """Credentials of the reference server: the principal's name as a bearer token."""
    return {"Authorization": f"Bearer {principal}"} if principal else {}


class LoopbackHttpWorld(World):
    """What the HTTP worlds share, whichever server answers on loopback: an `HttpSource`
    with its own client, the cache on an exit stack, and a bounded ``settle`` that looks
    (`_look`) until nothing is left to wait for."""

    settle_pause = 0.002
    """Seconds between two looks while `settle` waits."""

    silence_floor = 1.5
    """Seconds of silence after keep-alives that count as a loss at the least (the
    reference server sends one every 0.1 s; ``idle_timeout`` is the outer guard). Server
    and cache share one process here: when a loaded machine leaves it unscheduled, no
    keep-alive is written either, so a pause this long reads as a loss. Below 1 s, a
    busy 2-core machine lost streams in rows that never asked for it."""

    def __init__(self, *, read_timeout: float, idle_timeout: float, settle_timeout: float) -> None:
        self.clock = VirtualClock()
        self.read_timeout = read_timeout * load_factor()
        self.idle_timeout = idle_timeout * load_factor()  # keep-alives come late under load
        self.settle_limit = settle_timeout
        self.principal: str | None = None
        self.source: HttpSource
        self.settle_limits = 0
        """How often `settle` gave up waiting (a row that then fails says why)."""
        self.last_busy: str | None = None
        self.frame_counter = FrameCounter()
        self._stack = AsyncExitStack()

    async def _connect(self, url: str, setup: Setup, *, timeout: float, **options: Any) -> None:
        """Open an `HttpSource` on ``url``, enter the row's cache over it (``options``:
        more cache arguments) and reach the seed situation. A deadline row
        (`Setup.deadline_row`) gets a short request deadline: its unanswered read only
        has to time out. Listen streams keep their idle deadline (a stream is not what
        such a row times out, and a loaded machine must not lose one)."""
        if setup.deadline_row:
            timeout = min(timeout, DEADLINE_ROW_SECONDS)
        # trust_env=False: a proxy from the environment must not sit on loopback traffic.
        client = httpx.AsyncClient(trust_env=False, transport=self.frame_counter)
        self._stack.push_async_callback(client.aclose)
        self.source = HttpSource(
            url,
            auth=bearer,
            timeout=timeout,
            idle_timeout=self.idle_timeout,
            silence_floor=self.silence_floor,
            client=client,
        )
        self.cache = await self._stack.enter_async_context(
            self.make_cache(self.source, setup, read_timeout=self.read_timeout, **options)
        )
        await self.reach_seed_situation(setup)

    def _reads_busy(self, held: int) -> str | None:
        """Reads in flight beyond the ``held`` ones, or a list walk (``None``: neither)."""
        cache = self.cache
        if (due := cache.pending_reads + cache.queued_reads) > held:
            return f"{due} reads in flight or queued, {held} held"
        if cache.relisting:
            return "a re-list is under way"
        return None

    def _selection_unacknowledged(self) -> bool:
        """No acknowledged stream covers the current selection."""
        selected = self.cache.selected
        streams = self.source.streams.values()
        return not any(s.uris == selected and s.acknowledged for s in streams)


async def act_on_http_server(
    http: ReferenceHttpServer,
    step: ServerSets | Notify | NextRead | ServerChange,
    principal: str | None,
) -> None:
    """One server-side step on the reference server behind ``http``: on its model, and
    for *server goes down* / *comes back* on the listener too (every HTTP world's way)."""
    apply_to_reference(http.server, step, principal)
    match step:
        case ServerChange(what="down"):
            await http.go_down()
        case ServerChange(what="up"):
            await http.come_up()
        case _:
            pass


class HttpWorld(LoopbackHttpWorld):
    """A `FreshCache` over `HttpSource` against `ReferenceHttpServer` on loopback.

    With ``revision="2025-11-25"`` (the ``http-2025`` wire) the server speaks only that
    revision: the cache negotiates down, holds a session, takes notifications from the
    session's GET stream and subscribes per URI; rows whose subject 2025 lacks are
    skipped with the reason (`unplayable_on_2025`).
    """

    name = "http"

    def __init__(
        self,
        *,
        reply_mode: ReplyMode = "auto",
        read_timeout: float = 2.0,
        idle_timeout: float = 3.0,
        keepalive_interval: float = 0.1,
        settle_timeout: float = 5.0,
        cache_options: dict[str, Any] | None = None,
        revision: Revision = "2026-07-28",
    ) -> None:
        super().__init__(
            read_timeout=read_timeout, idle_timeout=idle_timeout, settle_timeout=settle_timeout
        )
        if revision != "2026-07-28":
            self.name = "http-2025"
            self.revision = revision
        self.cache_options = dict(cache_options or {})
        """Extra `FreshCache` arguments (e.g. tracer and meter providers)."""
        self.server = ReferenceServer()
        self.reply_mode: ReplyMode = reply_mode
        self.keepalive_interval = keepalive_interval
        self.http: ReferenceHttpServer
        self._queues: dict[str | int, MemoryObjectSendStream[Push]] = {}

    def unplayable(self, case: Case) -> str | None:
        if self.revision != "2026-07-28":
            return unplayable_on_2025(case)
        return None  # every phrase of the vocabulary has an HTTP form (module docstring)

    async def start(self, setup: Setup) -> None:
        configure_reference(self.server, setup)
        self.principal = setup.principal
        self.http = await self._stack.enter_async_context(
            ReferenceHttpServer(
                self.server,
                reply_mode=self.reply_mode,
                keepalive_interval=self.keepalive_interval,
                revision=revision_of(self.revision),
            )
        )
        await self._connect(self.http.url, setup, timeout=10.0, **self.cache_options)

    async def stop(self) -> None:
        self.server.release_reads()
        await self._stack.aclose()

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        self._capture_queues()  # before the step: a dropped stream still owes its frames
        if step == ServerChange("fall_silent"):
            await self._until_keepalives_seen()
            self.http.fall_silent()  # before the server forgets the streams
            self._queues.clear()
        lost = self.source.stats.silent_losses
        await act_on_http_server(self.http, step, self.principal)
        if step == ServerChange("fall_silent"):
            await self._until_silence_noticed(lost)

    async def _until_keepalives_seen(self, count: int = 3) -> None:
        """ "After keep-alives": let every open stream show the server's rhythm first."""
        streams = self.source.streams
        await wait_for(
            lambda: all(s.keepalives >= count for s in streams.values()),
            limit=self.settle_limit,
            pause=0.01,
            what=f"{count} keep-alives on every stream",
        )

    async def _until_silence_noticed(self, before: int) -> None:
        """Wait until the source gave a mute stream up by the keep-alive rule; the idle
        timeout catching it instead (or nothing) fails the row."""
        stats = self.source.stats
        with contextlib.suppress(TimeoutError):
            await wait_for(
                lambda: stats.silent_losses != before,
                limit=2 * self.idle_timeout + 1.0,
                pause=0.01,
            )
        if stats.silent_losses == before:
            raise AssertionError(
                f"the silent stream was not noticed by the keep-alive rule "
                f"(idle timeouts: {self.source.stats.idle_timeouts})"
            )

    async def _look(self) -> str | None:
        return self.busy()

    def busy(self) -> str | None:
        """What the cache has not taken in yet, or ``None`` when it is settled."""
        cache, server, source, http = self.cache, self.server, self.source, self.http
        if (busy := self._reads_busy(server.reads_in_flight)) is not None:
            return busy
        self._capture_queues()
        if http.legacy is not None and http.channel_frames_written > self.frame_counter.frames:
            taken = self.frame_counter.frames
            return f"GET streams: {http.channel_frames_written} frames written, {taken} taken in"
        for sid, stream in list(source.streams.items()):
            held = server.acks_held or server.unsubscribes_held  # (a subscribe waits for it)
            if not stream.acknowledged and not held:
                return f"stream {sid} waits for its acknowledgment"
            written = http.frames_written.get(sid, 0)
            if written > stream.frames:
                return f"stream {sid}: {written} frames written, {stream.frames} taken in"
            queue = self._queues.get(sid)
            if queue is not None and (queued := queue.statistics().current_buffer_used):
                return f"stream {sid}: {queued} frames queued at the server"
        if server.acks_held and cache.selected:
            # Acks held: settled once a listen for the selection is open.
            if server.listens_for(cache.selected):
                return None
            return "no listen for the current selection is open yet"
        if (
            server.listen_supported
            and not server.down
            and cache.selected
            and cache.stream_status not in ("unsupported", "disabled")
            and self._selection_unacknowledged()
        ):
            return "no acknowledged stream for the current selection yet"
        return None

    def server_reads(self) -> int:
        return self.server.reads

    def _capture_queues(self) -> None:
        for sid, sub in self.server.subscribers.items():
            self._queues[sid] = sub.send


__all__ = ["HttpWorld", "LoopbackHttpWorld", "act_on_http_server", "bearer", "configure_reference"]
