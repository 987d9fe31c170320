"""`HttpSource`: MCP 2026-07-28 over Streamable HTTP, on httpx (DESIGN §4 "sources", §5).

Spec pages: basic/transports/streamable-http (one POST per request, headers, the
Base64 sentinel, JSON or SSE answers, cancellation by closing the stream),
basic/patterns/subscriptions (listen, acknowledgment first, graceful close),
basic/versioning (``-32022``), basic/index (``_meta``, error codes).

The source is thin: it moves bytes. What a message means (ids, acknowledgment first,
trust, how a listen ends, ``-32022``, ``requestState`` rounds, error mapping) is the
`freshcache._protocol.ClientProtocol`'s to say, the same object stdio drives; here
HTTP exchanges become `ReadReply` / `ListReply` / `RequestFailed` values and a listen
stream core `StreamEvent`s. It keeps no freshness state. httpx errors are translated
here, at the boundary; nothing from httpx escapes.

How answers become states (DESIGN §5):

=====================================================  =============================
what happened                                          outcome
=====================================================  =============================
connection refused, reset, cut before the answer       ``unreachable``
no byte for ``idle_timeout`` / over ``timeout`` total  ``timeout``
a result that breaks the schema (no ``contents``,      ``server_error`` naming the
``ttlMs`` not a number, unknown ``cacheScope``)        field
HTTP 401 (after one retry with fresh credentials), 403 ``denied``
JSON-RPC error the `DenialRules` call a denial         ``denied``
``-32602`` / ``-32002``                                ``not_found``
``-32603``, other JSON-RPC errors, HTTP 5xx            ``server_error``
an unusable answer (bad JSON, wrong id, over limit)    ``server_error``
an answer that carries ``Age`` (an intermediary's      a reply with
copy, RFC 9111 §5.1: not from the origin server)       ``from_server=False``
``-32022`` listing a version freshcache speaks         retried with that version
``-32022`` otherwise                                   `UnsupportedVersionError`
``-32020``                                             `HeaderMismatchError`
``-32601`` / HTTP 404 (not for listen)                 `ProtocolError` (wrong URL?)
=====================================================  =============================

For ``subscriptions/listen`` a 404 or ``-32601`` means `ListenUnsupported`, and
every way the stream can end other than the listen request's ``complete`` result
(or a server ``notifications/cancelled`` naming it) is a `StreamLost`; so is silence
for ``keepalive_misses`` of the stream's own keep-alive intervals, at least
``silence_floor`` seconds, once it has sent keep-alives (`freshcache._sse.SilenceRule`).

A ``resources/updated`` or ``resources/list_changed`` on the SSE answer of any other
request is a change hint for the engine (invariant 9): it rides on that request's
reply (``hints``), with whatever subscription id it carried. ``requestState`` rounds
and ``-32022`` follow the rules of `freshcache._protocol` that stdio follows too.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import httpx

from ._core import (
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    Partition,
    ReadReply,
    RequestFailed,
    ResourceListChanged,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from ._errors import ConfigurationError, ProtocolError
from ._http_legacy import LegacyHttp
from ._protocol import (
    IGNORED_NOTIFICATIONS,
    Answer,
    ClientProtocol,
    ForSubscription,
    Ignored,
    Renegotiate,
    Unclaimed,
    Untrusted,
    answer_hint,
    same_id,
)
from ._source import ServerInfo
from ._sse import (
    SseComment,
    SseEnd,
    SseEvent,
    SseItem,
    SseLimits,
    SseOversized,
    SseParser,
    SseSilent,
    StreamStats,
    read_stream,
)
from ._telemetry import annotate_request
from ._wire import (
    ClientIdentity,
    DenialRules,
    ErrorResponse,
    Malformed,
    Message,
    Notification,
    Request,
    Response,
    list_reply,
    parse_message,
)

log = logging.getLogger("freshcache.http")

Auth = Callable[[Partition], Mapping[str, str]]
"""Credentials per principal: returns the headers (e.g. ``Authorization``) for one."""

_RESERVED_HEADERS = frozenset(
    {"accept", "content-type", "mcp-protocol-version", "mcp-method", "mcp-name", "content-length"}
)
_ENDINGS = (StreamLost, StreamClosed, ListenUnsupported)
_SNIPPET = 200


@dataclass(slots=True)
class HttpStats:
    """Running totals of one `HttpSource`, for status output and tests."""

    requests: int = 0
    retries: int = 0
    frames: int = 0
    keepalives: int = 0
    untrusted: int = 0
    """Messages that could not be trusted: malformed, wrong id, out of order."""
    oversized: int = 0
    idle_timeouts: int = 0
    silent_losses: int = 0
    """Listen streams given up because they fell silent after keep-alives."""
    streams_opened: int = 0
    streams_lost: int = 0
    streams_closed: int = 0


@dataclass(frozen=True, slots=True)
class _Answer:
    """What one POST brought back, before it is judged."""

    status: int
    message: Message | None
    """The JSON-RPC answer to our request, a `Malformed`, or ``None`` (no JSON-RPC body)."""
    detail: str = ""
    from_cache: bool = False
    broken: bool = False
    """An SSE answer stream that ended before the answer (spec: re-issue the request)."""
    session_id: str | None = None
    """The ``Mcp-Session-Id`` the answer carried (2025-11-25 ``initialize``)."""


@dataclass(frozen=True, slots=True)
class _Retry:
    reason: str


@dataclass(slots=True)
class _Attempt:
    reauthorized: bool = False
    renegotiated: bool = False
    reissued: bool = False
    new_session: bool = False
    history: list[str] = field(default_factory=list)


class HttpSource:
    """Reaches one MCP server over Streamable HTTP (protocol revision 2026-07-28).

    ::

        async with FreshCache(HttpSource("http://127.0.0.1:8000/mcp"), select=[uri]) as cache:
            result = await cache.read(uri)
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        auth: Auth | None = None,
        timeout: float = 30.0,
        idle_timeout: float = 60.0,
        keepalive_misses: int = 3,
        silence_floor: float = 5.0,
        max_frame_bytes: int = 4 * 1024 * 1024,
        denial: DenialRules | None = None,
        client: httpx.AsyncClient | None = None,
        identity: ClientIdentity | None = None,
    ) -> None:
        """
        ``url``: the MCP endpoint (``http://`` or ``https://``).
        ``headers``: sent with every POST (not the MCP headers freshcache sets itself).
        ``auth``: principal -> headers, called for every request so that each principal
        reads with its own credentials; ``None`` is the default principal (used for
        discovery and the listen stream too).
        ``timeout``: seconds one request (not the listen stream) may take in all;
        also the connect timeout.
        ``idle_timeout``: seconds an answer may stay silent, not even an SSE keep-alive
        comment, before it counts as lost (listen: `StreamLost`; a request: timeout).
        ``keepalive_misses``, ``silence_floor``: once a listen stream has sent
        keep-alives, silence for ``keepalive_misses`` of its own intervals (the
        longest of the last few), but at least ``silence_floor`` seconds, is a loss
        too: a server process that died behind a proxy can leave the stream open and
        mute. ``idle_timeout`` stays the outer guard.
        ``max_frame_bytes``: the largest JSON body or SSE frame taken in.
        ``denial``: which JSON-RPC errors mean "denied" (HTTP 401/403 always do).
        ``client``: an ``httpx.AsyncClient`` to reuse (freshcache will not close it).
        ``identity``: the ``clientInfo``/``clientCapabilities`` sent in ``_meta``.
        """
        self.url = _check_url(url)
        self.headers = _check_headers(headers)
        if auth is not None and not callable(auth):
            raise ConfigurationError(
                f"HttpSource auth must be a callable principal -> headers, got {auth!r}"
            )
        self.auth = auth
        self.timeout = _check_seconds("timeout", timeout)
        self.idle_timeout = _check_seconds("idle_timeout", idle_timeout)
        if (
            isinstance(keepalive_misses, bool)
            or not isinstance(keepalive_misses, int)
            or keepalive_misses < 1
        ):
            raise ConfigurationError(
                f"HttpSource keepalive_misses must be an int >= 1, got {keepalive_misses!r}"
            )
        if not isinstance(max_frame_bytes, int) or max_frame_bytes < 256:
            raise ConfigurationError(
                f"HttpSource max_frame_bytes must be an int >= 256, got {max_frame_bytes!r}"
            )
        self.limits = SseLimits(
            max_frame_bytes, keepalive_misses, _check_seconds("silence_floor", silence_floor)
        )
        """The frame size limit and the keep-alive silence rule of every SSE stream."""
        self.denial = denial if denial is not None else DenialRules()
        if client is not None and not isinstance(client, httpx.AsyncClient):
            raise ConfigurationError(
                f"HttpSource client must be an httpx.AsyncClient, got {type(client).__name__}"
            )
        self._client = client
        self._owns_client = client is None
        self.client_identity = identity if identity is not None else ClientIdentity()
        self.stats = HttpStats()
        self.streams: dict[str | int, StreamStats] = {}
        """Listen streams open now, by subscription id."""
        self._ids = itertools.count(1)
        self._identity = str(httpx.URL(self.url).copy_with(username=None, password=None))
        self.protocol = ClientProtocol(
            self._identity, identity=self.client_identity, denial=self.denial
        )
        """The MCP rules; this class only moves bytes in and out of it."""
        self._reader = _Reader(self)
        self.legacy = LegacyHttp(self)
        """The 2025-11-25 session and GET stream, used once negotiation falls back."""
        parsed = httpx.URL(self.url)
        self._address = parsed.host
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)

    # ------------------------------------------------------------------ Source

    @property
    def identity(self) -> str:
        """The endpoint URL without credentials; part of every cache key."""
        return self._identity

    @property
    def protocol_version(self) -> str:
        """The version sent in headers and ``_meta``; changed by ``-32022`` negotiation."""
        return self.protocol.version

    async def start(self) -> ServerInfo:
        """``server/discover``; if the answer means "not this revision", ``initialize``
        (2025-11-25, `LegacyHttp`). A server that cannot be reached is reported, not
        raised; one that speaks neither revision raises `UnsupportedVersionError`."""
        # Hints on the discovery answer are dropped: nothing is cached before it.
        async with self.legacy.negotiation():
            first = await self._exchange("server/discover", {}, None, [])
            if isinstance(first, _Answer) and self.protocol.discover_declined(
                first.message, status=first.status
            ):
                return await self.legacy.start(first)
            outcome, _ = await self._call("server/discover", {}, None, [], first=first)
            return self.protocol.server_info(outcome)

    async def aclose(self) -> None:
        """End a 2025 session (DELETE) and close the HTTP client if this source made it."""
        await self.legacy.aclose()
        client = self._client
        if client is not None and self._owns_client:
            self._client = None
            await client.aclose()

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        """One ``resources/read`` that reaches the server (``requestState`` rounds included).

        Change hints the server put on the SSE answers of these requests ride on the
        reply (`ReadReply.hints`), so the cache counts them before judging it.
        """
        hints: list[StreamEvent] = []
        rounds = self.protocol.read_rounds(uri)
        while True:
            result, from_cache = await self._call("resources/read", rounds.params, principal, hints)
            reply = result if isinstance(result, RequestFailed) else rounds.take(result)
            if reply is not None:
                break
        if isinstance(reply, ReadReply) and from_cache:
            reply = replace(reply, from_server=False)
        return replace(reply, hints=tuple(hints)) if hints else reply

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        """One page of ``resources/list`` (with the change hints its answer carried)."""
        params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        hints: list[StreamEvent] = []
        result, _ = await self._call("resources/list", params, principal, hints)
        page = result if isinstance(result, RequestFailed) else list_reply(result)
        return replace(page, hints=tuple(hints)) if hints else page

    async def listen(
        self, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """One ``subscriptions/listen`` stream; see `freshcache._source` for the contract.

        Closing the generator closes the HTTP response, which is how a client
        cancels on Streamable HTTP. On 2025-11-25 the GET stream and
        ``resources/subscribe`` stand in for it (`LegacyHttp.listen`).
        """
        if self.protocol.legacy is not None:
            async with aclosing(self.legacy.listen(uris, list_changed)) as legacy_events:
                async for legacy_event in legacy_events:
                    yield legacy_event
            return
        listen_id: int = next(self._ids)
        stats = StreamStats(uris, list_changed)
        self.streams[listen_id] = stats
        self.stats.streams_opened += 1
        try:
            yield ListenStarted(listen_id, uris, list_changed)
            detail = "the listen stream ended without an outcome"
            for _ in range(2):  # a second request only after -32022 renegotiation
                retry = False
                listen = self.protocol.listen(listen_id, uris, list_changed)
                async with aclosing(self._listen_once(listen_id, listen.message, stats)) as events:
                    async for event in events:
                        if isinstance(event, _Retry):
                            retry = True
                            detail = f"the protocol version changed twice ({event.reason})"
                            break
                        yield event
                        if isinstance(event, _ENDINGS):
                            return
                if not retry:
                    break
            self.stats.streams_lost += 1
            yield StreamLost(listen_id, detail)
        finally:
            self.protocol.close_subscription(listen_id)
            self.streams.pop(listen_id, None)

    # ------------------------------------------------------------------ listen

    async def _listen_once(
        self, listen_id: int, message: dict[str, Any], stats: StreamStats
    ) -> AsyncGenerator[StreamEvent | _Retry, None]:
        method = "subscriptions/listen"
        client = self._http()
        timeout = httpx.Timeout(self.timeout, read=self.idle_timeout)
        self.stats.requests += 1
        self._annotate(listen_id)
        try:
            async with client.stream(
                "POST",
                self.url,
                content=_json(message),
                headers=self._headers(
                    self.protocol.revision.headers(method, message["params"]), None
                ),
                timeout=timeout,
            ) as response:
                kind = _content_type(response)
                if kind == "sse" and response.status_code == 200:
                    async with aclosing(
                        self._reader.listen_events(response, listen_id, stats)
                    ) as events:
                        async for event in events:
                            yield event
                    return
                answer = await self._reader.plain_answer(response, listen_id, kind)
                yield self._listen_refused(answer, listen_id)
        except httpx.TimeoutException as exc:
            self.stats.idle_timeouts += isinstance(exc, httpx.ReadTimeout)
            self.stats.streams_lost += 1
            yield StreamLost(
                listen_id,
                f"no byte for {self.idle_timeout:g}s on the listen stream, not even a "
                f"keep-alive ({type(exc).__name__})",
            )
        except httpx.HTTPError as exc:
            self.stats.streams_lost += 1
            yield StreamLost(listen_id, f"{type(exc).__name__}: {exc}")

    def _translate(self, message: Message, listen_id: int, stats: StreamStats) -> list[StreamEvent]:
        """One message of a listen stream, as the events the engine should see."""
        if isinstance(message, ErrorResponse) and same_id(message.id, listen_id):
            refused = self._listen_refused(_Answer(200, message), listen_id)
            if isinstance(refused, _Retry):
                # The version changed: the supervisor re-listens with the new one.
                self.stats.streams_lost += 1
                return [StreamLost(listen_id, refused.reason)]
            return [refused]
        match self.protocol.receive(message, stream=listen_id):
            case ForSubscription(event=event, before_ack=before_ack):
                if before_ack:
                    self._note_untrusted(f"{_kind(event)} before the acknowledgment")
                match event:
                    case ListenAcknowledged():
                        stats.acknowledged = True
                    case UntrustedMessage(detail=detail):
                        self._note_untrusted(detail)
                    case StreamClosed():
                        self.stats.streams_closed += 1
                return [event]
            case Unclaimed(event=event):
                # Not this stream's: it may only make content less fresh (invariant 9).
                self._note_untrusted(
                    f"{_kind(event)} with subscription id {event.subscription_id!r}"
                )
                return [event]
            case Untrusted(event=event):
                self._note_untrusted(event.detail)
                return [event]
            case Ignored():
                return []  # progress or logging: not about subscriptions
            case Answer():
                pass
        return [self._untrusted(f"unexpected message on the listen stream: {message!r}")]

    def _listen_refused(self, answer: _Answer, listen_id: int) -> StreamEvent | _Retry:
        """A listen answered by something other than an SSE stream."""
        message = answer.message
        if answer.status == 404 and not isinstance(message, ErrorResponse):
            return ListenUnsupported("the server answered HTTP 404 to subscriptions/listen")
        if isinstance(message, ErrorResponse):
            self.protocol.close_subscription(listen_id)
            refused = self.protocol.listen_refused(
                listen_id, message, where=f" (HTTP {answer.status})"
            )
            if isinstance(refused, Renegotiate):
                return _Retry("renegotiated")
            if isinstance(refused, StreamLost):
                self.stats.streams_lost += 1
            return refused
        if (
            isinstance(message, Response)
            and same_id(message.id, listen_id)
            and message.result.get("resultType", "complete") == "complete"
        ):
            self.stats.streams_closed += 1
            return StreamClosed(listen_id)
        self.stats.streams_lost += 1
        return StreamLost(
            listen_id, f"the listen request was answered HTTP {answer.status} {answer.detail}"
        )

    # ------------------------------------------------------------------ requests

    async def _call(
        self,
        method: str,
        params: dict[str, Any],
        principal: Partition,
        hints: list[StreamEvent],
        *,
        first: _Answer | RequestFailed | None = None,
    ) -> tuple[dict[str, Any] | RequestFailed, bool]:
        """One request, retried where the protocol says so: the result (and whether an
        intermediary answered from its copy) or why not. Change hints found on the
        answers are appended to ``hints``. ``first``: the first attempt's answer, if
        it was already sent (discovery)."""
        attempt = _Attempt()
        await self.legacy.negotiated(method)
        for _ in range(4):
            sent_on = await self.legacy.session_for(method)
            if isinstance(sent_on, RequestFailed):
                return sent_on, False
            answer, first = first or await self._exchange(method, params, principal, hints), None
            if isinstance(answer, RequestFailed):
                return answer, False
            if await self.legacy.session_ended(method, answer, sent_on, attempt):
                continue  # 2025: a 404 ended the session; a new one is started, send again
            judged = self._judge(answer, method, attempt)
            if not isinstance(judged, _Retry):
                return judged, answer.from_cache
            self.stats.retries += 1
            attempt.history.append(judged.reason)
        return RequestFailed("server_error", f"{method}: gave up after {attempt.history}"), False

    async def _exchange(
        self, method: str, params: dict[str, Any], principal: Partition, hints: list[StreamEvent]
    ) -> _Answer | RequestFailed:
        request_id: int = next(self._ids)
        self._annotate(request_id)
        outgoing = self.protocol.request(request_id, method, params, track=False)
        body = _json(outgoing.message)
        headers = self._headers(outgoing.headers, principal)
        client = self._http()
        timeout = httpx.Timeout(self.timeout, read=min(self.idle_timeout, self.timeout))
        self.stats.requests += 1
        try:
            with anyio.fail_after(self.timeout):
                async with client.stream(
                    "POST", self.url, content=body, headers=headers, timeout=timeout
                ) as response:
                    kind = _content_type(response)
                    if kind == "sse":
                        return await self._reader.sse_answer(response, request_id, hints)
                    return await self._reader.plain_answer(response, request_id, kind)
        except TimeoutError:
            return RequestFailed("timeout", f"{method}: no answer within {self.timeout:g}s")
        except httpx.TimeoutException as exc:
            what = "connecting" if isinstance(exc, httpx.ConnectTimeout) else "waiting"
            return RequestFailed(
                "timeout", f"{method}: timed out {what} ({type(exc).__name__}: {exc})"
            )
        except httpx.TransportError as exc:
            return RequestFailed("unreachable", f"{method}: {type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            return RequestFailed("server_error", f"{method}: {type(exc).__name__}: {exc}")

    def _judge(
        self, answer: _Answer, method: str, attempt: _Attempt
    ) -> dict[str, Any] | RequestFailed | _Retry:
        return _judge(
            answer, method, attempt, self.protocol, self.auth is not None, self._note_untrusted
        )

    # ------------------------------------------------------------------ plumbing

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout)
            self._owns_client = True
        return self._client

    def _annotate(self, request_id: int) -> None:
        annotate_request(
            request_id, transport="tcp", protocol="http", address=self._address, port=self._port
        )

    def _headers(self, mcp_headers: Mapping[str, str], principal: Partition) -> dict[str, str]:
        headers = dict(self.headers)
        if self.auth is not None:
            headers.update(self.auth(principal))
        headers.update(mcp_headers)
        return headers

    def _untrusted(self, detail: str, sid: str | int | None = None) -> UntrustedMessage:
        self._note_untrusted(detail)
        return UntrustedMessage(detail, sid)

    def _note_untrusted(self, detail: str) -> None:
        self.stats.untrusted += 1
        log.info("%s: untrusted message: %s", self.identity, detail)


# ---------------------------------------------------------------------- helpers


class _Reader:
    """What HTTP answers carry: one POST's answer (JSON or SSE) as an `_Answer`, and a
    listen stream's SSE frames as messages for the protocol object, under the size
    limit and the silence rule. Moves bytes; judges nothing."""

    def __init__(self, source: HttpSource) -> None:
        self.stats = source.stats
        self.limits = source.limits
        self._note_untrusted = source._note_untrusted
        self._translate = source._translate

    async def plain_answer(self, response: httpx.Response, request_id: int, kind: str) -> _Answer:
        status = response.status_code
        from_cache = "age" in response.headers
        session = response.headers.get("mcp-session-id")
        raw = bytearray()
        async for chunk in response.aiter_bytes():
            raw += chunk
            if len(raw) > self.limits.max_frame_bytes:
                self.stats.oversized += 1
                return _Answer(
                    status,
                    Malformed(f"answer body over max_frame_bytes={self.limits.max_frame_bytes}"),
                    from_cache=from_cache,
                )
        if kind != "json" or not raw:
            return _Answer(status, None, _body_note(response.headers.get("content-type"), raw))
        message = _decode(bytes(raw))
        if isinstance(message, ErrorResponse) and status >= 400:
            pass  # the one answer to this POST, whatever id the server could give it
            # (SDK 1.x: ``"server-error"`` for "Missing session ID" / "Session not found")
        elif isinstance(message, (Response, ErrorResponse)) and not _answers(message, request_id):
            self._note_untrusted(f"an answer for request {message.id!r}, not {request_id}")
            message = Malformed(f"the answer is for request {message.id!r}, not {request_id}")
        return _Answer(status, message, from_cache=from_cache, session_id=session)

    async def sse_answer(
        self, response: httpx.Response, request_id: int, hints: list[StreamEvent]
    ) -> _Answer:
        """An answer sent as an SSE stream: keep the change hints, skip what else is not
        our answer, take the answer."""
        status = response.status_code
        from_cache = "age" in response.headers
        parser = SseParser(max_frame_bytes=self.limits.max_frame_bytes)
        chunks = response.aiter_bytes()
        try:
            while True:
                chunk = await anext(chunks, None)
                for item in parser.feed(chunk) if chunk is not None else parser.end():
                    answer = self._take(item, request_id, status, from_cache, hints)
                    if answer is not None:
                        session = response.headers.get("mcp-session-id")
                        return replace(answer, session_id=session) if session else answer
                if chunk is None:
                    break
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            # The stream broke mid-answer: the spec says re-issue the request.
            return _Answer(status, None, f"{type(exc).__name__}: {exc}", broken=True)
        return _Answer(
            status,
            None,
            "the SSE answer ended before the answer" + (" (cut mid-frame)" if parser.cut else ""),
            broken=True,
        )

    def _take(
        self,
        item: SseItem,
        request_id: int,
        status: int,
        from_cache: bool,
        hints: list[StreamEvent],
    ) -> _Answer | None:
        """One item of an SSE answer: the answer to our request, or ``None`` (go on).

        A change hint on the answer of any request counts (invariant 9): it goes into
        ``hints``, whatever subscription id it names, and may only make content less
        fresh."""
        match item:
            case SseComment():
                self.stats.keepalives += 1
            case SseOversized(limit=limit):
                self.stats.oversized += 1
                return _Answer(status, Malformed(f"an SSE frame over max_frame_bytes={limit}"))
            case SseEvent(data=data):
                self.stats.frames += 1
                message = _decode(data)
                match message:
                    case Response() | ErrorResponse() if _answers(message, request_id):
                        return _Answer(status, message, from_cache=from_cache)
                    case Notification(method=m) if m in IGNORED_NOTIFICATIONS:
                        pass
                    case _:
                        hint = answer_hint(message)
                        if hint is not None:
                            hints.append(hint)
                        else:
                            self._note_untrusted(f"unexpected message in an answer: {message}")
        return None

    async def listen_events(
        self, response: httpx.Response, listen_id: int, stats: StreamStats
    ) -> AsyncGenerator[StreamEvent, None]:
        async with aclosing(read_stream(response.aiter_bytes(), self.limits)) as items:
            async for item in items:
                match item:
                    case SseComment():
                        stats.keepalives += 1
                        self.stats.keepalives += 1
                    case SseEvent(data=data):
                        self.stats.frames += 1
                        for event in self._translate(_decode(data), listen_id, stats):
                            yield event
                            if isinstance(event, _ENDINGS):
                                stats.frames += 1
                                return
                        # Counted once the consumer took every event of the frame in.
                        stats.frames += 1
                    case SseSilent():
                        self.stats.silent_losses += 1
                        self.stats.streams_lost += 1
                        yield StreamLost(
                            listen_id,
                            f"the listen stream fell silent: {item} "
                            f"({self.limits.keepalive_misses} missed)",
                        )
                    case SseOversized(limit=limit, size=size):
                        self.stats.oversized += 1
                        self.stats.streams_lost += 1
                        log.warning(
                            "listen %s: frame of %d+ bytes over max_frame_bytes=%d; "
                            "dropping the stream",
                            listen_id,
                            size,
                            limit,
                        )
                        yield StreamLost(
                            listen_id, f"a frame grew past max_frame_bytes={limit} bytes"
                        )
                    case SseEnd(cut=cut):
                        self.stats.streams_lost += 1
                        yield StreamLost(
                            listen_id,
                            "the listen stream ended without the listen result"
                            + (", in the middle of a frame" if cut else ""),
                        )


def _judge(
    answer: _Answer,
    method: str,
    attempt: _Attempt,
    protocol: ClientProtocol,
    can_reauthorize: bool,
    note_untrusted: Callable[[str], None],
) -> dict[str, Any] | RequestFailed | _Retry:
    """What one answer means: a result, a failure, or a reason to send it again."""
    status, message = answer.status, answer.message
    if status == 401:
        if not attempt.reauthorized and can_reauthorize:
            attempt.reauthorized = True
            return _Retry("HTTP 401: asked for credentials again")
        return RequestFailed("denied", f"HTTP 401: {_error_text(message, answer.detail)}", 401)
    if status == 403:
        return RequestFailed("denied", f"HTTP 403: {_error_text(message, answer.detail)}", 403)
    match message:
        case Response() | ErrorResponse():
            judged = protocol.answer(method, message, retried=attempt.renegotiated)
            if isinstance(judged, Renegotiate):
                attempt.renegotiated = True
                return _Retry(judged.reason)
            return judged
        case Malformed(detail=detail):
            note_untrusted(detail)
            return RequestFailed("server_error", f"{method}: unusable answer: {detail}", status)
        case _:
            pass
    if answer.broken and not attempt.reissued:
        # Spec: a broken stream loses the request; re-issue it with a new id.
        attempt.reissued = True
        return _Retry("the SSE answer broke off")
    if answer.broken:
        return RequestFailed("unreachable", f"{method}: {answer.detail}", status)
    if status == 404:
        raise ProtocolError(
            f"nothing answers MCP at {protocol.server} (HTTP 404 without a JSON-RPC body); "
            "check the endpoint path"
        )
    if 300 <= status < 400:
        where = answer.detail
        return RequestFailed(
            "server_error", f"{method}: redirected (HTTP {status}); use the final URL {where}"
        )
    return RequestFailed(
        "server_error", f"{method}: HTTP {status} without a JSON-RPC answer {answer.detail}"
    )


def _answers(message: Response | ErrorResponse, request_id: int) -> bool:
    # An error whose id the server could not read comes without one (JSON-RPC 2.0).
    return message.id is None or same_id(message.id, request_id)


def _json(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _kind(event: StreamEvent) -> str:
    return (
        "resources/list_changed" if isinstance(event, ResourceListChanged) else "resources/updated"
    )


def _decode(data: str | bytes) -> Message:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return Malformed(f"invalid JSON: {exc}")
    message = parse_message(obj)
    if isinstance(message, Request):
        return Malformed(f"the server sent a request ({message.method}); not allowed")
    return message


def _body_note(content_type: str | None, raw: bytes | bytearray) -> str:
    """A one-line note on a body that is not JSON-RPC, for a detail: a web page is named,
    not quoted; other text gives its first words, whitespace folded."""
    kind = (content_type or "no content type").split(";")[0].strip()
    if kind == "text/html" or raw[:200].lstrip().lower().startswith((b"<!doctype", b"<html")):
        return f"({kind}: a web page, not MCP)"
    text = " ".join(bytes(raw[:_SNIPPET]).decode("utf-8", "replace").split())
    if len(text) > 80:
        text = text[:77] + "..."
    return f"({kind}) {text}".strip()


def _content_type(response: httpx.Response) -> str:
    value = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if value == "text/event-stream":
        return "sse"
    if value == "application/json" or value.endswith("+json"):
        return "json"
    return "other"


def _error_text(message: Message | None, detail: str) -> str:
    if isinstance(message, ErrorResponse):
        return f"{message.message} ({message.code})"
    return detail or "no detail"


def _check_url(url: object) -> str:
    if not isinstance(url, str):
        raise ConfigurationError(f"HttpSource url must be a string, got {url!r}")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ConfigurationError(f"HttpSource url {url!r} is not a valid URL: {exc}") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigurationError(
            f"HttpSource url must be an http:// or https:// URL of the MCP endpoint, got {url!r}"
        )
    return url


def _check_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ConfigurationError(f"HttpSource headers must map str to str, got {name!r}")
        if name.lower() in _RESERVED_HEADERS:
            raise ConfigurationError(
                f"HttpSource headers may not set {name!r}: freshcache sets it for every request"
            )
        out[name] = value
    return out


def _check_seconds(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or math.isnan(value)
        or value <= 0
    ):
        raise ConfigurationError(
            f"HttpSource {name} must be a number of seconds > 0, got {value!r}"
        )
    return float(value)


__all__ = ["Auth", "HttpSource", "HttpStats", "StreamStats"]
