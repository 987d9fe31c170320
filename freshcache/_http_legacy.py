"""`LegacyHttp`: MCP 2025-11-25 over Streamable HTTP, for `HttpSource` (DESIGN §6).

Spec (2025-11-25 basic/transports, basic/lifecycle, server/resources): ``initialize``
answered with an ``Mcp-Session-Id``; ``notifications/initialized``; that session id
and ``MCP-Protocol-Version`` on every later request; server-to-client notifications on
one GET SSE stream per session; HTTP 404 means the session is gone (initialize again);
DELETE ends the session.

Like `HttpSource` this only moves bytes: what a message means, which URIs to
subscribe or unsubscribe and what an acknowledgment covers are the rules of
`freshcache._protocol.ClientProtocol` / `freshcache._legacy.LegacySession`.

**The channel.** One GET stream per session carries every notification, so it is
shared by every virtual subscription (`listen`) open at once (a selection change opens
a new one before the old closes: `freshcache._core._streams`). A background task
(`BackgroundTask`) reads it: a task of one listen would be cancelled, and the stream
cut, whenever that listen is closed. Each listen subscribes what its URIs still need
once the stream is live (each request once the ones before it for the same URI were
answered: `freshcache._subscribing.InOrder`), then yields its acknowledgment: a URI is
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
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import anyio
import httpx

from ._background import BackgroundTask, Inbox
from ._core import (
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    RequestFailed,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from ._core._backlog import overflowed
from ._core._subscribe_order import SUBSCRIBE, UNSUBSCRIBE
from ._errors import ProtocolError
from ._protocol import ForSubscription, IdKey, Ignored, Unclaimed, Untrusted, id_key
from ._source import ServerInfo
from ._sse import SseComment, SseEnd, SseEvent, SseOversized, SseSilent, StreamStats, read_stream
from ._subscribing import InOrder
from ._wire import (
    LEGACY_VERSION,
    PROTOCOL_VERSION,
    SESSION_HEADER,
    Malformed,
    Message,
    parse_message,
)

if TYPE_CHECKING:
    from ._http import HttpSource, _Answer, _Attempt

log = logging.getLogger("freshcache.http")

_FINAL = (StreamLost, StreamClosed, ListenUnsupported)
_Ending = Literal["lost", "closed", "unsupported"]
_STATELESS = (
    "the server gave no Mcp-Session-Id: without a session nothing ties its notifications "
    "to this client, so no subscription is trusted (selected resources are read before "
    "each use)"
)


@dataclass(frozen=True, slots=True)
class _Carried:
    """An event the GET stream carried (counted as taken in once consumed)."""

    event: StreamEvent


class LegacyHttp:
    """The 2025-11-25 session of one `HttpSource` and its GET stream (module docstring)."""

    def __init__(self, source: HttpSource, max_backlog: int = 1000) -> None:
        self._source = source
        self._protocol = source.protocol
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
        self._negotiating: anyio.Event | None = None
        self.sessions = 0
        """Sessions initialized so far (introspection, tests)."""
        self.channels = 0
        """GET streams opened so far."""
        self._in_order = InOrder()
        """2025 subscribe/unsubscribe, one at a time per URI, in the order recorded."""
        self.overflows = 0
        """Subscriptions ended because their consumer fell ``max_backlog`` messages behind."""

    # ------------------------------------------------------------------ the session

    async def start(self, declined: _Answer) -> ServerInfo:
        """``server/discover`` was declined: initialize a 2025 session instead."""
        try:
            outcome = await self._initialize(force=True)
        except ProtocolError as exc:
            if type(exc) is not ProtocolError:
                raise  # an unsupported version names both revisions already
            raise ProtocolError(_both(declined, exc)) from exc
        session = self._protocol.legacy
        if isinstance(outcome, ServerInfo) and session is not None and session.session_id is None:
            return replace(outcome, listen=False, detail=_STATELESS)
        if isinstance(outcome, ServerInfo):
            return outcome
        assert outcome is not None
        return ServerInfo(
            reachable=outcome.kind not in ("unreachable", "timeout"),
            detail=f"server/discover declined ({_what(declined)}); initialize: "
            f"{outcome.kind}: {outcome.detail}",
        )

    @contextlib.asynccontextmanager
    async def negotiation(self) -> AsyncIterator[None]:
        """While `HttpSource.start` decides which revision to speak."""
        self._negotiating = anyio.Event()
        try:
            yield
        finally:
            self._negotiating.set()

    async def negotiated(self, method: str) -> None:
        """Wait while the revision is being decided: a request sent now could be in the
        wrong one (a 2025 server refuses it without a session)."""
        negotiating = self._negotiating
        if negotiating is not None and method not in ("server/discover", "initialize"):
            with anyio.move_on_after(self._source.timeout):
                await negotiating.wait()

    async def session_for(self, method: str) -> str | RequestFailed | None:
        """Before each 2025 request: the session it goes out on (initialized first if
        there is none), or why there is none; ``None`` on 2026 or for ``initialize``."""
        session = self._protocol.legacy
        if session is None or method == "initialize":
            return None
        failed = await self.ensure_session()
        return failed if failed is not None else session.session_id

    async def session_ended(
        self, method: str, answer: _Answer, sent_on: str | None, attempt: _Attempt
    ) -> bool:
        """After each answer: take a new session id; on a 404 to a request on a session,
        give that session up (once per request) so the caller sends it again."""
        if method == "initialize":
            self.note_answer(answer)
        if self._protocol.legacy is None or answer.status != 404 or attempt.new_session:
            return False
        attempt.new_session = True
        attempt.history.append("HTTP 404: the session ended")
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
            outcome, _ = await self._source._call("initialize", params, None, [])
            if isinstance(outcome, RequestFailed):
                return outcome
            info = self._protocol.initialized(outcome)  # raises for a version not spoken
            session = self._protocol.legacy
            assert session is not None
            session.session_id = self._last_session_id
            self.sessions += 1
            await _post_notification(self._source, self._protocol.initialized_notification())
            for stale in self._stale_sessions:
                await _delete_session(self._source, stale)
            self._stale_sessions.clear()
            return info

    _last_session_id: str | None = None

    def note_answer(self, answer: _Answer) -> None:
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
        if self._source._client is not None:
            for sid in dict.fromkeys(ending):
                await _delete_session(self._source, sid)
        if session is not None:
            session.expired()

    # ------------------------------------------------------------------ listen

    async def listen(
        self, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """One virtual subscription on the session's GET stream (module docstring)."""
        sid = f"session-{next(self._ids)}"
        stats = StreamStats(uris, list_changed)
        self._source.streams[sid] = stats
        self._source.stats.streams_opened += 1
        try:
            async with aclosing(self._listen(sid, uris, list_changed)) as events:
                async for event in events:
                    if isinstance(event, ListenAcknowledged):
                        stats.acknowledged = True
                    yield event
                    stats.frames += 1
        finally:
            self._source.streams.pop(sid, None)

    async def _listen(
        self, sid: str, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        yield ListenStarted(sid, uris, list_changed)
        failed = await self.ensure_session()
        if failed is not None:
            yield StreamLost(sid, f"no session: {failed.kind}: {failed.detail}")
            return
        session = self._protocol.legacy
        if session is not None and session.session_id is None:
            yield ListenUnsupported(_STATELESS)
            return
        key = id_key(sid)
        inbox = Inbox[StreamEvent | _Carried](self._max_backlog)
        self._inboxes[key] = inbox
        to_subscribe = self._protocol.legacy_listen(sid, uris, list_changed)
        assert session is not None
        ended = False
        try:
            if await self._channel_live():
                for uri in to_subscribe:
                    await self._in_order.send(
                        session, uri, SUBSCRIBE, self._subscribe, self._source.timeout
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
        outcome, _ = await self._source._call("resources/subscribe", {"uri": uri}, None, [])
        if isinstance(outcome, RequestFailed):
            log.info(
                "%s: resources/subscribe %s refused: %s",
                self._source.identity,
                uri,
                outcome.detail,
            )
        return _answered(outcome)

    async def _unsubscribe(self, uri: str) -> bool | None:
        outcome, _ = await self._source._call("resources/unsubscribe", {"uri": uri}, None, [])
        return _answered(outcome)

    async def _close(self, sid: str) -> None:
        gone = self._protocol.legacy_close(sid)
        session = self._protocol.legacy
        if session is None:
            return
        if not self._live:
            self._in_order.abandon(session, gone, UNSUBSCRIBE)
            return
        with anyio.move_on_after(self._source.timeout, shield=True):
            for uri in gone:
                await self._in_order.send(
                    session, uri, UNSUBSCRIBE, self._unsubscribe, self._source.timeout
                )
        self._in_order.abandon(session, gone, UNSUBSCRIBE)  # what the deadline cut off
        if not self._inboxes:
            await self._end_channel("no subscription is open")

    async def _channel_live(self) -> bool:
        """Start the GET stream if it is not running; wait until it is live or down."""
        if self._channel is None:
            self._live, self._settled = False, anyio.Event()
            self._channel = BackgroundTask(f"HttpSource GET {self._source.identity}", self._read)
            self._channel.start()
        with anyio.move_on_after(self._source.timeout):
            await self._settled.wait()
        if self._live:
            return True
        if not self._settled.is_set():
            await self._end_channel(f"the GET stream did not open in {self._source.timeout:g}s")
        return False

    async def _end_channel(self, detail: str) -> None:
        channel, self._channel = self._channel, None
        self._ended(detail)  # first: the subscriptions end with this detail
        if channel is not None:
            await channel.stop()

    def _ended(self, detail: str, how: _Ending = "lost") -> None:
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
        source, session = self._source, self._protocol.legacy
        assert session is not None
        headers = source._headers(
            {
                "Accept": "text/event-stream",
                "MCP-Protocol-Version": session.version,
                SESSION_HEADER: session.session_id or "",
            },
            None,
        )
        timeout = httpx.Timeout(source.timeout, read=source.idle_timeout)
        detail = "the GET stream ended"
        how: _Ending = "lost"
        self.channels += 1
        try:
            async with source._http().stream(
                "GET", source.url, headers=headers, timeout=timeout
            ) as response:
                kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if response.status_code == 405:
                    detail = "the server offers no GET stream for notifications (HTTP 405)"
                    how = "unsupported"
                    return
                if response.status_code != 200 or kind != "text/event-stream":
                    detail = f"the GET stream was answered HTTP {response.status_code} ({kind})"
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

    async def _frames(self, response: httpx.Response) -> tuple[str, _Ending]:
        """Take the GET stream's frames in until it ends; why and how it ended. The size
        limit and the keep-alive silence rule are the listen stream's."""
        source = self._source
        async with aclosing(read_stream(response.aiter_bytes(), source.limits)) as items:
            async for item in items:
                match item:
                    case SseComment():
                        source.stats.keepalives += 1
                        for stats in source.streams.values():
                            stats.keepalives += 1
                    case SseEvent(data=data):
                        source.stats.frames += 1
                        self._route(_decode(data))
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
                    self._source._note_untrusted(f"{event!r} before the subscribe completed")
                self._deliver(sid, event)
            case Unclaimed(event=event):
                self._deliver(None, event)
            case Untrusted(event=event):
                self._source._note_untrusted(event.detail)
                self._deliver(None, event)
            case Ignored():
                self._taken()
            case _:
                self._source._note_untrusted(f"unexpected message on the GET stream: {message!r}")
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
            log.warning("%s: a subscription could not keep up; ended it", self._source.identity)
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


def _both(declined: _Answer, exc: ProtocolError) -> str:
    """The message of ``exc``, naming both revisions tried."""
    return (
        f"MCP {PROTOCOL_VERSION} server/discover was declined ({_what(declined)}) and "
        f"MCP {LEGACY_VERSION} initialize failed: {exc}"
    )


def _what(answer: _Answer) -> str:
    message = answer.message
    code = getattr(message, "code", None)
    text = getattr(message, "message", None) or answer.detail
    return f"HTTP {answer.status}" + (f", {code} {text}" if code is not None else f" {text}")


def _json(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _decode(data: str | bytes) -> Message:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return Malformed(f"invalid JSON: {exc}")
    return parse_message(obj)


async def _post_notification(source: HttpSource, message: dict[str, Any]) -> None:
    """A notification POST: the server answers 202 without a body."""
    headers = source._headers(source.protocol.revision.headers(message["method"], {}), None)
    with contextlib.suppress(httpx.HTTPError):
        response = await source._http().post(source.url, content=_json(message), headers=headers)
        if response.status_code >= 300:
            log.warning(
                "%s: %s answered HTTP %d",
                source.identity,
                message["method"],
                response.status_code,
            )


async def _delete_session(source: HttpSource, session_id: str) -> None:
    """End a session (basic/transports: DELETE; a 405 means the server will not)."""
    headers = source._headers({SESSION_HEADER: session_id}, None)
    with (
        anyio.move_on_after(source.timeout, shield=True),
        contextlib.suppress(httpx.HTTPError),
    ):
        await source._http().delete(source.url, headers=headers)


__all__ = ["LegacyHttp"]
