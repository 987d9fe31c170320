"""`LegacyHttp`: MCP 2025-11-25 over Streamable HTTP, for `HttpSource` (DESIGN §6).

Spec (2025-11-25 basic/transports, basic/lifecycle, server/resources): ``initialize``
answered with an ``Mcp-Session-Id``; ``notifications/initialized``; that session id
and ``MCP-Protocol-Version`` on every later request; server-to-client notifications on
one GET SSE stream per session; HTTP 404 means the session is gone (initialize again);
DELETE ends the session.

Like `HttpSource` this only moves bytes: what a message means, which URIs to
subscribe or unsubscribe and what an acknowledgment covers are the rules of
`freshcache._protocol._client.ClientProtocol` / `freshcache._protocol._legacy.LegacySession`.

**The channel.** One GET stream per session carries every notification, so it is
shared by every virtual subscription (`listen`) open at once (a selection change opens
a new one before the old closes: `freshcache._core._streams`). A background task
(`BackgroundTask`) reads it: a task of one listen would be cancelled, and the stream
cut, whenever that listen is closed. Each listen subscribes what its URIs still need
once the stream is live (each request once the ones before it for the same URI were
answered: `freshcache._sources._subscribing.InOrder`), then yields its acknowledgment: a URI is
covered once its subscribe succeeded, in order, *and* the channel is live. A hint that
does not fit a listen's inbox ends that listen (`freshcache._core._backlog`). When the
stream ends, every open listen ends with `StreamLost` and the session is given up: the
next listen initializes a new one, subscribes again, and the engine re-reads
(invariant 4). A ``Last-Event-ID``
resumption is never attempted: it could not replace the re-read.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from .._core import (
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    RequestFailed,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from .._core._backlog import overflowed
from .._core._subscribe_order import SUBSCRIBE, UNSUBSCRIBE
from .._errors import ProtocolError
from .._protocol._client import (
    Answer,
    ClientProtocol,
    ForSubscription,
    IdKey,
    Ignored,
    Unclaimed,
    Untrusted,
    decode,
    id_key,
)
from .._protocol._http import (
    STATELESS,
    Attempt,
    Ending,
    HttpAnswer,
    HttpBinding,
    get_stream_refused,
)
from .._protocol._wire import Message
from ._background import BackgroundTask, Inbox
from ._source import ServerInfo
from ._sse import (
    HttpStats,
    SseComment,
    SseEnd,
    SseEvent,
    SseLimits,
    SseOversized,
    SseSilent,
    StreamStats,
    read_stream,
)
from ._subscribing import InOrder

log = logging.getLogger("freshcache.http")

_FINAL = (StreamLost, StreamClosed, ListenUnsupported)


@dataclass(frozen=True, slots=True)
class LegacyLink:
    """What `LegacyHttp` needs of the `HttpSource` it serves, handed in (a narrow
    interface: it never reaches into the source)."""

    protocol: ClientProtocol
    binding: HttpBinding
    identity: str
    """The endpoint without credentials (for messages)."""
    url: str
    timeout: float
    idle_timeout: float
    limits: SseLimits
    stats: HttpStats
    """The source's running totals (the GET stream counts into them)."""
    streams: dict[str | int, StreamStats]
    """The source's open streams, by id (the virtual subscriptions and the GET stream)."""
    call: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any] | RequestFailed]]
    """One request with the source's retries, as the default principal."""
    headers: Callable[[Mapping[str, str]], dict[str, str]]
    """The source's own headers and credentials (default principal) around MCP headers."""
    client: Callable[[], httpx.AsyncClient]
    """The source's HTTP client (made on first use)."""
    has_client: Callable[[], bool]
    """Whether the source has an HTTP client now (nothing to end without one)."""
    note_untrusted: Callable[[str], None]


@dataclass(frozen=True, slots=True)
class _Carried:
    """An event the GET stream carried (counted as taken in once consumed)."""

    event: StreamEvent


class LegacyHttp:
    """The 2025-11-25 session of one `HttpSource` and its GET stream (module docstring)."""

    def __init__(self, link: LegacyLink, max_backlog: int = 1000) -> None:
        self._link = link
        self._protocol = link.protocol
        self._binding = link.binding
        self._max_backlog = max_backlog
        self._ids = itertools.count(1)
        self._session_lock = anyio.Lock()
        self._inboxes: dict[IdKey, Inbox[StreamEvent | _Carried]] = {}
        self._channel_stats: dict[str, StreamStats] = {}
        """Per session: what its GET streams carried (frames counted once consumed)."""
        self._channel: BackgroundTask | None = None
        self._live = False
        self._settled = anyio.Event()
        """Set when the GET stream is live or has failed to open."""
        self._stale_sessions: list[str] = []
        self.sessions = 0
        """Sessions initialized so far (introspection, tests)."""
        self.channels = 0
        """GET streams opened so far."""
        self._in_order = InOrder()
        """2025 subscribe/unsubscribe, one at a time per URI, in the order recorded."""
        self.overflows = 0
        """Subscriptions ended because their consumer fell ``max_backlog`` messages behind."""

    # ------------------------------------------------------------------ the session

    async def start(self, declined: HttpAnswer) -> ServerInfo:
        """``server/discover`` was declined: initialize a 2025 session instead."""
        try:
            outcome = await self._initialize(force=True)
        except ProtocolError as exc:
            if type(exc) is not ProtocolError:
                raise  # an unsupported version names both revisions already
            raise ProtocolError(self._binding.neither_revision(declined, exc)) from exc
        return self._binding.started(declined, outcome)

    async def session_for(self, method: str) -> str | RequestFailed | None:
        """Before each 2025 request: the session it goes out on (initialized first if
        there is none), or why there is none; ``None`` for ``initialize``."""
        session = self._protocol.legacy
        if session is None or method == "initialize":
            return None
        failed = await self.ensure_session()
        return failed if failed is not None else session.session_id

    async def session_ended(
        self, method: str, answer: HttpAnswer, sent_on: str | None, attempt: Attempt
    ) -> bool:
        """After each answer: take a new session id; when the binding says a 404 ended
        the session (`HttpBinding.session_gone`), give it up so the caller sends again."""
        if method == "initialize":
            self.note_answer(answer)
        if not self._binding.session_gone(method, answer, attempt):
            return False
        await self.expired(sent_on)
        return True

    async def ensure_session(self) -> RequestFailed | None:
        """Initialize a session if there is none (first use, after a 404, a lost stream)."""
        session = self._protocol.legacy
        if session is not None and session.initialized:  # (a stateless server: no id)
            return None
        result = await self._initialize()
        return result if isinstance(result, RequestFailed) else None

    async def expired(self, session_id: str | None) -> None:
        """A request on ``session_id`` got HTTP 404: that session is gone."""
        session = self._protocol.legacy
        if session is not None and session.session_id == session_id:
            session.expired()
            await self._end_channel("the server ended the session (HTTP 404)")

    async def _initialize(self, *, force: bool = False) -> ServerInfo | RequestFailed | None:
        """``initialize`` + ``notifications/initialized``, once at a time; ``None`` when
        another task initialized the session meanwhile."""
        async with self._session_lock:
            session = self._protocol.legacy
            if not force and session is not None and session.initialized:
                return None
            if session is not None and session.session_id is not None:
                self._stale_sessions.append(session.session_id)
            params = self._protocol.initialize()
            self._last_session_id = None
            outcome = await self._link.call("initialize", params)
            if isinstance(outcome, RequestFailed):
                return outcome
            info = self._protocol.initialized(outcome)  # raises for a version not spoken
            session = self._protocol.legacy
            assert session is not None
            session.session_id = self._last_session_id
            self.sessions += 1
            await _post_notification(self._link, self._protocol.initialized_notification())
            for stale in self._stale_sessions:
                await _delete_session(self._link, stale)
            self._stale_sessions.clear()
            return info

    _last_session_id: str | None = None

    def note_answer(self, answer: HttpAnswer) -> None:
        """`HttpSource` hands over the session id an answer carried."""
        if answer.session_id is not None:
            self._last_session_id = answer.session_id

    async def aclose(self) -> None:
        """Stop the GET stream and end the session (and any left behind)."""
        session = self._protocol.legacy
        current = None if session is None else session.session_id
        await self._end_channel("the source is closing")
        ending = [*self._stale_sessions, *([current] if current is not None else [])]
        self._stale_sessions.clear()
        if self._link.has_client():
            for sid in dict.fromkeys(ending):
                await _delete_session(self._link, sid)
        if session is not None:
            session.expired()

    # ------------------------------------------------------------------ listen

    async def listen(
        self, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """One virtual subscription on the session's GET stream (module docstring)."""
        sid = f"session-{next(self._ids)}"
        stats = StreamStats(uris, list_changed)
        self._link.streams[sid] = stats
        self._link.stats.streams_opened += 1
        try:
            async with aclosing(self._listen(sid, uris, list_changed)) as events:
                async for event in events:
                    if isinstance(event, ListenAcknowledged):
                        stats.acknowledged = True
                    yield event
                    stats.frames += 1
        finally:
            self._link.streams.pop(sid, None)

    async def _listen(
        self, sid: str, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        yield ListenStarted(sid, uris, list_changed)
        failed = await self.ensure_session()
        if failed is not None:
            yield StreamLost(sid, f"no session: {failed.kind}: {failed.detail}")
            return
        if not self._binding.trusted_channel():
            yield ListenUnsupported(STATELESS)
            return
        key = id_key(sid)
        inbox = Inbox[StreamEvent | _Carried](self._max_backlog)
        self._inboxes[key] = inbox
        to_subscribe = self._protocol.legacy_listen(sid, uris, list_changed)
        session = self._protocol.legacy
        assert session is not None
        ended = False
        try:
            if await self._channel_live():
                await self._in_order.subscribe(
                    session, uris, to_subscribe, self._subscribe, self._link.timeout
                )
                ack = self._protocol.acknowledge(sid)
                if ack is not None and self._live and not inbox.put(ack):
                    inbox.put(overflowed(sid, inbox.limit), final=True)
            else:
                self._in_order.abandon(session, to_subscribe, SUBSCRIBE)
            while not ended:
                item = await inbox.get()
                event = item.event if isinstance(item, _Carried) else item
                ended = isinstance(event, _FINAL)
                yield event
                if isinstance(item, _Carried):
                    self._taken()
        finally:
            self._inboxes.pop(key, None)
            await self._close(sid)

    async def _subscribe(self, uri: str) -> bool | None:
        outcome = await self._link.call("resources/subscribe", {"uri": uri})
        if isinstance(outcome, RequestFailed):
            log.info(
                "%s: resources/subscribe %s refused: %s",
                self._link.identity,
                uri,
                outcome.detail,
            )
        return _answered(outcome)

    async def _unsubscribe(self, uri: str) -> bool | None:
        outcome = await self._link.call("resources/unsubscribe", {"uri": uri})
        return _answered(outcome)

    async def _close(self, sid: str) -> None:
        gone = self._protocol.legacy_close(sid)
        session = self._protocol.legacy
        if session is None:
            return
        if not self._live:
            self._in_order.abandon(session, gone, UNSUBSCRIBE)
            return
        with anyio.move_on_after(self._link.timeout, shield=True):
            for uri in gone:
                await self._in_order.send(
                    session, uri, UNSUBSCRIBE, self._unsubscribe, self._link.timeout
                )
        self._in_order.abandon(session, gone, UNSUBSCRIBE)  # what the deadline cut off
        if not self._inboxes:
            await self._end_channel("no subscription is open")

    async def _channel_live(self) -> bool:
        """Start the GET stream if it is not running; wait until it is live or down."""
        if self._channel is None:
            self._live, self._settled = False, anyio.Event()
            self._channel = BackgroundTask(f"HttpSource GET {self._link.identity}", self._read)
            self._channel.start()
        with anyio.move_on_after(self._link.timeout):
            await self._settled.wait()
        if self._live:
            return True
        if not self._settled.is_set():
            await self._end_channel(f"the GET stream did not open in {self._link.timeout:g}s")
        return False

    async def _end_channel(self, detail: str) -> None:
        channel, self._channel = self._channel, None
        self._ended(detail)  # first: the subscriptions end with this detail
        if channel is not None:
            await channel.stop()

    def _ended(self, detail: str, how: Ending = "lost") -> None:
        """The GET stream is gone: every open subscription ends (`StreamClosed` when the
        server ended the body cleanly, else `StreamLost`); the session too, unless the
        server has no GET stream at all."""
        self._live = False
        self._settled.set()
        for ending in self._protocol.channel_ended(detail, graceful=how == "closed"):
            inbox = self._inboxes.get(id_key(ending.subscription_id))
            if inbox is not None:
                final = ListenUnsupported(detail) if how == "unsupported" else ending.event
                inbox.put(final, final=True)
        session = self._protocol.legacy
        if session is not None and how != "unsupported":
            if session.session_id is not None:
                self._stale_sessions.append(session.session_id)
            session.expired()

    async def _read(self) -> None:
        """The GET stream's body, in the background (module docstring)."""
        source, session = self._link, self._protocol.legacy
        assert session is not None
        headers = source.headers(self._binding.legacy_stream_headers())
        timeout = httpx.Timeout(source.timeout, read=source.idle_timeout)
        detail = "the GET stream ended"
        how: Ending = "lost"
        self.channels += 1
        try:
            async with source.client().stream(
                "GET", source.url, headers=headers, timeout=timeout
            ) as response:
                refused = get_stream_refused(
                    response.status_code, response.headers.get("content-type")
                )
                if refused is not None:
                    detail, how = refused
                    return
                self._live = True
                self._settled.set()
                if session.session_id is not None:  # the channel shows in source.streams
                    channel = self._channel_stats.setdefault(
                        session.session_id, StreamStats(frozenset(), False, acknowledged=True)
                    )
                    source.streams[session.session_id] = channel
                detail, how = await self._frames(response)
        except httpx.TimeoutException as exc:
            detail = (
                f"no byte for {source.idle_timeout:g}s on the GET stream ({type(exc).__name__})"
            )
        except httpx.HTTPError as exc:
            detail = f"the GET stream broke: {type(exc).__name__}: {exc}"
        finally:
            self._channel = None
            if session.session_id is not None:
                source.streams.pop(session.session_id, None)
            source.stats.streams_lost += how == "lost"
            source.stats.streams_closed += how == "closed"
            self._ended(detail, how)

    async def _frames(self, response: httpx.Response) -> tuple[str, Ending]:
        """Take the GET stream's frames in until it ends; why and how it ended. The size
        limit and the keep-alive silence rule are the listen stream's."""
        source = self._link
        async with aclosing(read_stream(response.aiter_bytes(), source.limits)) as items:
            async for item in items:
                match item:
                    case SseComment():
                        source.stats.keepalives += 1
                        for stats in source.streams.values():
                            stats.keepalives += 1
                    case SseEvent(data=data):
                        source.stats.frames += 1
                        self._route(decode(data))
                    case SseSilent():
                        source.stats.silent_losses += 1
                        return f"the GET stream fell silent: {item}", "lost"
                    case SseOversized(limit=size_limit):
                        source.stats.oversized += 1
                        return f"a frame grew past max_frame_bytes={size_limit} bytes", "lost"
                    case SseEnd(cut=True):
                        # A body the server finished is its own end of the stream, like a
                        # listen's ``complete``; one cut mid-frame is a loss.
                        return "the GET stream ended in the middle of a frame", "lost"
        return "the server ended the GET stream", "closed"

    def _route(self, message: Message) -> None:
        """One message of the GET stream, to the subscription the protocol names."""
        received = self._protocol.receive(message)
        match received:
            case ForSubscription(subscription_id=sid, event=event, before_ack=before_ack):
                if before_ack or isinstance(event, UntrustedMessage):
                    self._link.note_untrusted(f"{event!r} before the subscribe completed")
                self._deliver(sid, event)
            case Unclaimed(event=event):
                self._deliver(None, event)
            case Untrusted(event=event):
                self._link.note_untrusted(event.detail)
                self._deliver(None, event)
            case Ignored() | Answer():
                # (An answer to a POST in flight belongs on that POST's answer; echoed
                # here it changes nothing, as a late answer does not.)
                self._taken()
            case _:
                self._link.note_untrusted(f"unexpected message on the GET stream: {message!r}")
                self._taken()

    def _deliver(self, sid: str | int | None, event: StreamEvent) -> None:
        key = id_key(sid) if sid is not None else None
        inbox = self._inboxes.get(key) if key is not None else None
        if inbox is None:
            key, inbox = next(iter(self._inboxes.items()), (None, None))
        if inbox is None:
            self._taken()
        elif not inbox.put(_Carried(event)):
            # A dropped hint would leave its URI fresh: the subscription is lost instead
            # (`freshcache._core._backlog`), as on stdio.
            self.overflows += 1
            owner = (
                sid
                if sid is not None
                else next((s for s in self._protocol.open_subscriptions if id_key(s) == key), None)
            )
            inbox.put(overflowed(owner, inbox.limit), final=True)
            log.warning("%s: a subscription could not keep up; ended it", self._link.identity)
            self._taken()

    def _taken(self) -> None:
        """One frame of the GET stream was consumed (or had nothing to hand on)."""
        session = self._protocol.legacy
        stats = self._channel_stats.get(session.session_id or "") if session else None
        if stats is not None:
            stats.frames += 1


def _answered(outcome: object) -> bool | None:
    """How a subscribe/unsubscribe was answered, for the ledger: ``None`` when it was not
    (the server may still act on it)."""
    if isinstance(outcome, RequestFailed):
        return None if outcome.kind in ("timeout", "unreachable") else False
    return True


def _json(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


async def _post_notification(source: LegacyLink, message: dict[str, Any]) -> None:
    """A notification POST: the server answers 202 without a body."""
    headers = source.headers(source.protocol.revision.headers(message["method"], {}))
    with contextlib.suppress(httpx.HTTPError):
        response = await source.client().post(source.url, content=_json(message), headers=headers)
        if response.status_code >= 300:
            log.warning(
                "%s: %s answered HTTP %d",
                source.identity,
                message["method"],
                response.status_code,
            )


async def _delete_session(source: LegacyLink, session_id: str) -> None:
    """End a session (basic/transports: DELETE; a 405 means the server will not)."""
    headers = source.headers(source.binding.end_session_headers(session_id))
    with (
        anyio.move_on_after(source.timeout, shield=True),
        contextlib.suppress(httpx.HTTPError),
    ):
        await source.client().delete(source.url, headers=headers)


__all__ = ["LegacyHttp", "LegacyLink"]
