"""`HttpSource`: MCP 2026-07-28 over Streamable HTTP, on httpx (DESIGN §4 "sources", §5).

Spec pages: basic/transports/streamable-http (one POST per request, headers, the
Base64 sentinel, JSON or SSE answers, cancellation by closing the stream),
basic/patterns/subscriptions (listen, acknowledgment first, graceful close),
basic/versioning (``-32022``), basic/index (``_meta``, error codes).

The source is thin: it moves bytes and reports transport events (refused, timed out,
cut). What a message means (ids, acknowledgment first, trust, how a listen ends,
``-32022``, ``requestState`` rounds, error mapping) is the
`freshcache._protocol._client.ClientProtocol`'s to say, the same object stdio drives; what an
HTTP exchange means (status, which message of an answer answers, the SSE answer's
other messages, 2025 sessions) is its sans-IO binding's,
`freshcache._protocol._http.HttpBinding`. Here HTTP exchanges become `ReadReply` /
`ListReply` / `RequestFailed` values and a listen stream core `StreamEvent`s. It keeps
no freshness state. httpx errors are translated here, at the boundary; nothing from
httpx escapes.

How answers become states (DESIGN §5; decided by `HttpBinding.judge`):

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
``silence_floor`` seconds, once it has sent keep-alives (`freshcache._sources._sse.SilenceRule`).

Which revision to speak is settled by the first ``server/discover`` the server itself
answers: until then each request or listen negotiates first
(`freshcache._sources._negotiation`).

A ``resources/updated`` or ``resources/list_changed`` on the SSE answer of any other
request is a change hint for the engine (invariant 9): it rides on that request's
reply (``hints``), with whatever subscription id it carried. ``requestState`` rounds
and ``-32022`` follow the rules of `freshcache._protocol._client` that stdio follows too.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, aclosing
from dataclasses import replace
from typing import Any

import anyio
import httpx

from .._core import (
    CATALOG_METHODS,
    CatalogKind,
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
from .._errors import ConfigurationError
from .._middleware._telemetry import annotate_request
from .._protocol._client import (
    Answer,
    ClientProtocol,
    ForSubscription,
    Ignored,
    ListenAgain,
    Outgoing,
    RequestId,
    Unclaimed,
    Untrusted,
    decode,
    discovery_unanswered,
)
from .._protocol._http import (
    Attempt,
    HttpAnswer,
    HttpBinding,
    Retry,
    answer_kind,
    from_intermediary,
)
from .._protocol._reissue import lost_answer
from .._protocol._tools import ToolReply, tool_answer
from .._protocol._wire import ClientIdentity, DenialRules, Message, list_reply
from ._http_legacy import LegacyHttp, LegacyLink
from ._negotiation import Negotiation
from ._source import ServerInfo
from ._speaking import SpeaksClientProtocol
from ._sse import (
    HttpStats,
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

log = logging.getLogger("freshcache.http")

Resume = Callable[[str], AbstractAsyncContextManager[httpx.Response]]
"""Opens the GET that resumes an answer's SSE stream after the given event id."""
MAX_RESUMES = 3
"""How many times one answer's stream is resumed before its answer counts as lost."""
DEFAULT_RETRY_MS = 1000
"""The wait before resuming when the server set no ``retry``."""

Auth = Callable[[Partition], Mapping[str, str]]
"""Credentials per principal: returns the headers (e.g. ``Authorization``) for one."""

_RESERVED_HEADERS = frozenset(
    {"accept", "content-type", "mcp-protocol-version", "mcp-method", "mcp-name", "content-length"}
)
_ENDINGS = (StreamLost, StreamClosed, ListenUnsupported)


class HttpSource(SpeaksClientProtocol):
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
        self.binding = HttpBinding(self.protocol, self._note_untrusted)
        self.check_tool_call = self.binding.prepare_tool_call
        """The MCP-over-HTTP rules (status, ids, SSE answers, 2025 sessions), sans-IO."""
        self._reader = _Reader(self.limits, self.stats, self.binding, self._note_untrusted)
        self._negotiation = Negotiation(self.start)
        self.legacy = LegacyHttp(
            LegacyLink(
                protocol=self.protocol,
                binding=self.binding,
                identity=self._identity,
                url=self.url,
                timeout=self.timeout,
                idle_timeout=self.idle_timeout,
                limits=self.limits,
                stats=self.stats,
                streams=self.streams,
                call=self._default_call,
                headers=lambda mcp_headers: self._headers(mcp_headers, None),
                client=self._http,
                has_client=lambda: self._client is not None,
                note_untrusted=self._note_untrusted,
            )
        )
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
        with self._negotiation.running() as negotiation:
            first = await self._exchange("server/discover", {}, None, [])
            if isinstance(first, HttpAnswer) and self.protocol.discover_declined(
                first.message, status=first.status
            ):
                try:
                    return await self.legacy.start(first)
                finally:
                    if self.protocol.legacy is not None:  # (not if cut off before it)
                        negotiation.settled()  # 2025 from now on, its session on demand
            outcome, _ = await self._call("server/discover", {}, None, [], first=first)
            negotiation.settled(discovery_unanswered(outcome))
            return self.protocol.server_info(outcome)

    async def aclose(self) -> None:
        """End a 2025 session (DELETE) and close the HTTP client if this source made it."""
        await self.legacy.aclose()
        client = self._client
        if client is not None and self._owns_client:
            self._client = None
            await client.aclose()

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        """One ``resources/read`` that reaches the server (``requestState`` rounds included);
        change hints on its SSE answers ride on the reply (`ReadReply.hints`)."""
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

    async def list_catalog(
        self, kind: CatalogKind, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        """One page of a catalog (``tools/list``, ...), with its answer's change hints."""
        params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        hints: list[StreamEvent] = []
        result, _ = await self._call(CATALOG_METHODS[kind], params, principal, hints)
        page = (
            result
            if isinstance(result, RequestFailed)
            else self.binding.catalog_page(kind, result, principal)
        )
        for name, reason in page.excluded if isinstance(page, ListReply) else ():
            log.warning("%s: tool %r left out of the catalog: %s", self.identity, name, reason)
        return replace(page, hints=tuple(hints)) if hints else page

    async def listen(
        self, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """One ``subscriptions/listen`` stream (contract: `freshcache._sources._source`).
        Closing the generator closes the HTTP response, which is how a client cancels
        on Streamable HTTP; on 2025-11-25 the GET stream and ``resources/subscribe``
        stand in for it (`LegacyHttp.listen`)."""
        if (
            unsettled := await self._negotiation.before("subscriptions/listen", self.timeout)
        ) is not None:
            unsent: int = next(self._ids)
            yield ListenStarted(unsent, uris, list_changed)
            yield StreamLost(unsent, unsettled.detail)
            return
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
            outgoing: Outgoing | None = self.protocol.listen(listen_id, uris, list_changed)
            while outgoing is not None:
                sending, outgoing = outgoing, None
                async with aclosing(self._listen_once(listen_id, sending, stats)) as events:
                    async for event in events:
                        if isinstance(event, ListenAgain):
                            # -32022: the protocol re-sends the listen in the new version.
                            outgoing = event.outgoing
                            break
                        yield event
                        if isinstance(event, _ENDINGS):
                            return
            self.stats.streams_lost += 1
            yield StreamLost(listen_id, "the listen stream ended without an outcome")
        finally:
            self.protocol.close_subscription(listen_id)
            self.streams.pop(listen_id, None)

    # ------------------------------------------------------------------ listen

    async def _listen_once(
        self, listen_id: int, outgoing: Outgoing, stats: StreamStats
    ) -> AsyncGenerator[StreamEvent | ListenAgain, None]:
        client = self._http()
        timeout = httpx.Timeout(self.timeout, read=self.idle_timeout)
        self.stats.requests += 1
        self._annotate(listen_id)
        try:
            async with client.stream(
                "POST",
                self.url,
                content=_json(outgoing.message),
                headers=self._headers(outgoing.headers, None),
                timeout=timeout,
            ) as response:
                content_type = response.headers.get("content-type")
                if self.binding.listen_streams(response.status_code, content_type):
                    async with aclosing(
                        self._reader.listen_events(response, listen_id, stats)
                    ) as events:
                        async for event in events:
                            yield event
                    return
                kind = answer_kind(content_type)
                answer = await self._reader.plain_answer(response, listen_id, kind)
                yield self._reader.ended(self.binding.listen_answer(answer, listen_id))
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

    async def forward(
        self, method: str, params: Mapping[str, Any], principal: Partition
    ) -> ToolReply | RequestFailed:
        """`Source.forward`: one request on this channel, re-issued only as `_call` allows."""
        hints: list[StreamEvent] = []
        outcome, _ = await self._call(method, dict(params), principal, hints)
        return tool_answer(outcome, tuple(hints))

    # ------------------------------------------------------------------ requests

    async def _call(
        self,
        method: str,
        params: dict[str, Any],
        principal: Partition,
        hints: list[StreamEvent],
        *,
        first: HttpAnswer | RequestFailed | None = None,
    ) -> tuple[dict[str, Any] | RequestFailed, bool]:
        """One request, retried where the protocol says so: the result (and whether an
        intermediary answered from its copy) or why not. Change hints found on the
        answers are appended to ``hints``. ``first``: the first attempt's answer, if
        it was already sent (discovery)."""
        attempt = Attempt()
        if (unsettled := await self._negotiation.before(method, self.timeout)) is not None:
            return unsettled, False
        refused = self.binding.refused_call(method, params, principal)
        if refused is not None:
            return refused, False  # never sent (a tool left out of the catalog)
        # 2025-11-25 only: the session each attempt goes out on (2026 never visits it).
        session = self.legacy if self.protocol.legacy is not None else None
        for _ in range(4):
            sent_on = None if session is None else await session.session_for(method)
            if isinstance(sent_on, RequestFailed):
                return sent_on, False
            answer, first = first or await self._exchange(method, params, principal, hints), None
            if isinstance(answer, RequestFailed):
                return answer, False
            if session is not None and await session.session_ended(
                method, answer, sent_on, attempt
            ):
                continue  # 2025: a 404 ended the session; a new one is started, send again
            judged = self.binding.judge(
                answer, method, attempt, can_reauthorize=self.auth is not None
            )
            if not isinstance(judged, Retry):
                return judged, answer.from_cache
            self.stats.retries += 1
            attempt.history.append(judged.reason)
        return RequestFailed("server_error", f"{method}: gave up after {attempt.history}"), False

    async def _default_call(
        self, method: str, params: dict[str, Any]
    ) -> dict[str, Any] | RequestFailed:
        """`_call` as the default principal, hints dropped (2025 session requests)."""
        outcome, _ = await self._call(method, params, None, [])
        return outcome

    async def _exchange(
        self, method: str, params: dict[str, Any], principal: Partition, hints: list[StreamEvent]
    ) -> HttpAnswer | RequestFailed:
        request_id: int = next(self._ids)
        self._annotate(request_id)
        outgoing = self.protocol.request(request_id, method, params)
        body = _json(outgoing.message)
        headers = self._headers(outgoing.headers, principal)
        headers.update(self.binding.call_headers(method, params, principal))
        client = self._http()
        timeout = httpx.Timeout(self.timeout, read=min(self.idle_timeout, self.timeout))
        self.stats.requests += 1
        unsent = False  # not connected: the request never left
        try:
            with anyio.fail_after(self.timeout):
                async with client.stream(
                    "POST", self.url, content=body, headers=headers, timeout=timeout
                ) as response:
                    kind = answer_kind(response.headers.get("content-type"))
                    if kind == "sse":
                        legacy = self.protocol.legacy is not None
                        resume = _resumer(client, self.url, headers, timeout) if legacy else None
                        return await self._reader.sse_answer(response, request_id, hints, resume)
                    return await self._reader.plain_answer(response, request_id, kind)
        except TimeoutError:
            failed = RequestFailed("timeout", f"{method}: no answer within {self.timeout:g}s")
        except httpx.TimeoutException as exc:
            unsent = isinstance(exc, httpx.ConnectTimeout)
            what = "connecting" if unsent else "waiting"
            failed = RequestFailed(
                "timeout", f"{method}: timed out {what} ({type(exc).__name__}: {exc})"
            )
        except httpx.TransportError as exc:
            unsent = isinstance(exc, httpx.ConnectError)
            failed = RequestFailed("unreachable", f"{method}: {type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            failed = RequestFailed("server_error", f"{method}: {type(exc).__name__}: {exc}")
        finally:
            self.protocol.forget(request_id)  # answered, failed or abandoned
        # Anything after connecting may have reached the server.
        return failed if unsent else lost_answer(method, failed)

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

    def _note_untrusted(self, detail: str) -> None:
        self.stats.untrusted += 1
        log.info("%s: untrusted message: %s", self.identity, detail)


# ---------------------------------------------------------------------- helpers


class _Reader:
    """What HTTP answers carry: one POST's answer (JSON or SSE) as an `_Answer`, and a
    listen stream's SSE frames as messages for the protocol object, under the size
    limit and the silence rule. Moves bytes; judges nothing."""

    def __init__(
        self,
        limits: SseLimits,
        stats: HttpStats,
        binding: HttpBinding,
        note_untrusted: Callable[[str], None],
    ) -> None:
        self.limits = limits
        """The frozen limits of every answer it reads (the source's ``limits``)."""
        self.stats = stats
        self.protocol = binding.protocol
        self._binding = binding
        self._note_untrusted = note_untrusted

    async def plain_answer(
        self, response: httpx.Response, request_id: RequestId, kind: str
    ) -> HttpAnswer:
        status = response.status_code
        raw = bytearray()
        async for chunk in response.aiter_bytes():
            raw += chunk
            if len(raw) > self.limits.max_frame_bytes:
                self.stats.oversized += 1
                return self._binding.oversized(status, self.limits.max_frame_bytes, frame=False)
        return self._binding.plain_answer(
            status,
            answer_kind(response.headers.get("content-type")),
            bytes(raw),
            request_id,
            content_type=response.headers.get("content-type"),
            from_cache=from_intermediary(response.headers),
            session_id=response.headers.get("mcp-session-id"),
        )

    async def sse_answer(
        self,
        response: httpx.Response,
        request_id: int,
        hints: list[StreamEvent],
        resume: Resume | None = None,
    ) -> HttpAnswer:
        """An answer sent as an SSE stream: the frames, in order, to the binding, which
        says which is the answer and which are hints; moves bytes, judges nothing.

        With ``resume`` (2025-11-25), a stream that ends before the answer after it set
        an event id is resumed: after the server's ``retry``, a GET with that id as
        ``Last-Event-ID`` (spec basic/transports, "Resumability and Redelivery"), up to
        `MAX_RESUMES` times. The request is never sent again: this is how a tool call's
        answer survives a closed connection instead of ending ``may_have_run``."""
        status = response.status_code
        from_cache = from_intermediary(response.headers)
        session = response.headers.get("mcp-session-id")
        parser = SseParser(max_frame_bytes=self.limits.max_frame_bytes)
        outcome = await self._sse_stream(response, parser, request_id, from_cache, hints)
        last_id, retry_ms = parser.last_id, parser.retry_ms
        for _ in range(MAX_RESUMES):
            if resume is None or not isinstance(outcome, str) or last_id is None:
                break
            await anyio.sleep((DEFAULT_RETRY_MS if retry_ms is None else retry_ms) / 1000)
            self.stats.resumed += 1
            why = f"{outcome}; resumed from event {last_id!r}"
            try:
                async with resume(last_id) as again:
                    kind = answer_kind(again.headers.get("content-type"))
                    if again.status_code != 200 or kind != "sse":
                        outcome = f"{why}: HTTP {again.status_code}"
                        break
                    parser = SseParser(max_frame_bytes=self.limits.max_frame_bytes)
                    outcome = await self._sse_stream(again, parser, request_id, from_cache, hints)
            except httpx.HTTPError as exc:
                outcome = f"{why}: {type(exc).__name__}: {exc}"
                break
            last_id = parser.last_id or last_id
            retry_ms = retry_ms if parser.retry_ms is None else parser.retry_ms
        if isinstance(outcome, str):
            return self._binding.broken(status, outcome)
        return replace(outcome, session_id=session) if session else outcome

    async def _sse_stream(
        self,
        response: httpx.Response,
        parser: SseParser,
        request_id: int,
        from_cache: bool,
        hints: list[StreamEvent],
    ) -> HttpAnswer | str:
        """One SSE stream read until the answer, or why it ended without one."""
        status = response.status_code
        chunks = response.aiter_bytes()
        try:
            while True:
                chunk = await anext(chunks, None)
                for item in parser.feed(chunk) if chunk is not None else parser.end():
                    answer = self._take(item, request_id, status, from_cache, hints)
                    if answer is not None:
                        return answer
                if chunk is None:
                    break
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return "the SSE answer ended before the answer" + (" (cut mid-frame)" if parser.cut else "")

    def _take(
        self,
        item: SseItem,
        request_id: int,
        status: int,
        from_cache: bool,
        hints: list[StreamEvent],
    ) -> HttpAnswer | None:
        """One item of an SSE answer: the answer to our request, or ``None`` (go on);
        a change hint on the way goes into ``hints``."""
        match item:
            case SseComment():
                self.stats.keepalives += 1
            case SseOversized(limit=limit):
                self.stats.oversized += 1
                return self._binding.oversized(status, limit, frame=True)
            case SseEvent(data=data):
                self.stats.frames += 1
                taken = self._binding.sse_message(data, request_id, status, from_cache=from_cache)
                if isinstance(taken, HttpAnswer):
                    return taken
                if taken is not None:
                    hints.append(taken)
        return None

    def _translate(
        self, message: Message, listen_id: int, stats: StreamStats
    ) -> list[StreamEvent | ListenAgain]:
        """One message of a listen stream, as the events the engine should see."""
        match self.protocol.receive(message, stream=listen_id):
            case ForSubscription(event=event, before_ack=before_ack):
                if before_ack:
                    self._note_untrusted(f"{_kind(event)} before the acknowledgment")
                match event:
                    case ListenAcknowledged():
                        stats.acknowledged = True
                    case UntrustedMessage(detail=detail):
                        self._note_untrusted(detail)
                return [self.ended(event)]
            case ListenAgain() as relisten:
                return [relisten]
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
        return [self._untrusted_event(f"unexpected message on the listen stream: {message!r}")]

    def ended(self, event: StreamEvent | ListenAgain) -> StreamEvent | ListenAgain:
        """Count how a listen stream ended, if ``event`` ends it."""
        self.stats.streams_closed += isinstance(event, StreamClosed)
        self.stats.streams_lost += isinstance(event, StreamLost)
        return event

    def _untrusted_event(self, detail: str) -> UntrustedMessage:
        self._note_untrusted(detail)
        return UntrustedMessage(detail)

    async def listen_events(
        self, response: httpx.Response, listen_id: int, stats: StreamStats
    ) -> AsyncGenerator[StreamEvent | ListenAgain, None]:
        async with aclosing(read_stream(response.aiter_bytes(), self.limits)) as items:
            async for item in items:
                match item:
                    case SseComment():
                        stats.keepalives += 1
                        self.stats.keepalives += 1
                    case SseEvent(data=data):
                        self.stats.frames += 1
                        for event in self._translate(decode(data), listen_id, stats):
                            yield event
                            if isinstance(event, (*_ENDINGS, ListenAgain)):
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


def _resumer(
    client: httpx.AsyncClient, url: str, headers: Mapping[str, str], timeout: httpx.Timeout
) -> Resume:
    """How a 2025-11-25 answer's stream is resumed: a GET with the request's session
    headers and ``Last-Event-ID`` (2026-07-28 streams are not resumable)."""
    again = {k: v for k, v in headers.items() if k.lower() not in ("content-type", "accept")}
    again["Accept"] = "text/event-stream"

    def resume(last_id: str) -> AbstractAsyncContextManager[httpx.Response]:
        sent = {**again, "Last-Event-ID": last_id}
        return client.stream("GET", url, headers=sent, timeout=timeout)

    return resume


def _json(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _kind(event: StreamEvent) -> str:
    return (
        "resources/list_changed" if isinstance(event, ResourceListChanged) else "resources/updated"
    )


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
        if name.lower() in _RESERVED_HEADERS or name.lower().startswith("mcp-param-"):
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
