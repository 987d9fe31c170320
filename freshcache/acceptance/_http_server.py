"""The reference server over Streamable HTTP: h11 on anyio TCP sockets, loopback only.

A thin shell around `ReferenceProtocol` (which decides *what* to answer) that acts the
answer out on the wire (spec basic/transports/streamable-http): a JSON body or an SSE
stream, ``403`` with ``WWW-Authenticate: ... insufficient_scope`` for a denial, silence
for a stall, a closed socket for a hang-up, half a frame and a closed socket for a
cut, malformed frames, keep-alive comments. It checks the request headers the way
the official SDK does (``-32020`` on a mismatch) so clients are held to the spec.

No web framework: `freshcache acceptance --wire http` runs from a plain install. h11
is a dependency of httpx, so it is always there.

Answer shapes (``reply_mode``):

- ``"auto"`` (default): JSON when the answer is ready within ``commit_after``
  seconds, else an SSE stream with keep-alives until it is (what the SDK does);
- ``"json"``: JSON always (``subscriptions/listen`` still streams);
- ``"sse"``: every answer is an SSE stream, committed at once.
"""

from __future__ import annotations

import base64
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import anyio
import anyio.abc
import h11
from anyio.abc import SocketAttribute, SocketStream
from typing_extensions import Self

from freshcache.testing import ReferenceServer, close_listens

from ._protocol import (
    DENIED_CODE,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    META_PROTOCOL_VERSION,
    Accepted,
    Answer,
    CutMidFrame,
    Denied,
    Garbage,
    HangUp,
    ReferenceProtocol,
    Reply,
    Stall,
    Stream,
    error,
)
from ._protocol_2025 import BOTH, Protocol2025, ServedSession, speaks_2025
from ._protocol_2025 import REVISION as LEGACY_REVISION

log = logging.getLogger("freshcache.acceptance.http")

ReplyMode = Literal["auto", "json", "sse"]
Revision = Literal["2026-07-28", "2025-11-25", "both"]

_KEEPALIVE = b": keep-alive\r\n\r\n"
_MAX_BODY = 1 << 20
_WRITE_LIMIT = 5.0
"""How long one write may wait for a client that takes no bytes (`_Connection._write`)."""


def decode_header_value(value: str) -> str:
    """An ``Mcp-Name`` header's value as sent: plain, or ``=?base64?...?=`` (the
    spec's encoding of a value a header cannot carry); a bad Base64 is a ValueError.
    The server's own reading, not the client's, so the two are checked against each
    other."""
    if value.startswith("=?base64?") and value.endswith("?="):
        return base64.b64decode(value[len("=?base64?") : -2]).decode("utf-8")
    return value


_ROUTING = ("mcp-protocol-version", "mcp-method", "mcp-name")


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One HTTP request as the server received it (tests check headers and bodies)."""

    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased names; repeated headers joined with ``", "``."""
    body: bytes
    message: Any = None
    """The decoded JSON body (``None`` when it was not JSON)."""
    repeated: frozenset[str] = frozenset()
    """Header names that appeared more than once."""


@dataclass(frozen=True, slots=True)
class RawHttp:
    """A test hook's answer: exactly this status, body and headers."""

    status: int
    body: bytes = b""
    content_type: str | None = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RawSse:
    """A test hook's answer: an SSE response whose body is these chunks, as written.

    ``end``: ``"finish"`` ends the body properly, ``"abort"`` closes the socket
    mid-body, ``"hold"`` keeps it open (sending keep-alives unless
    ``keepalive=False``) until the client goes away.
    """

    chunks: tuple[bytes, ...]
    end: Literal["finish", "abort", "hold"] = "finish"
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    pause: float = 0.0
    """Seconds between chunks (each chunk is its own write)."""
    keepalive: bool = True


Hook = Callable[[RecordedRequest], Awaitable["Answer | RawHttp | RawSse | None"]]
"""Called for every MCP request before the protocol; a non-``None`` answer wins."""


class ReferenceHttpServer:
    """A `ReferenceServer` served over HTTP/1.1 on 127.0.0.1 (a free port).

    Use as an async context manager::

        async with ReferenceHttpServer(server) as http:
            source = HttpSource(http.url)
    """

    def __init__(
        self,
        server: ReferenceServer | None = None,
        *,
        reply_mode: ReplyMode = "auto",
        keepalive_interval: float | None = 0.1,
        commit_after: float = 0.02,
        path: str = "/mcp",
        hook: Hook | None = None,
        check_headers: bool = True,
        stall_limit: float = 120.0,
        revision: Revision = "2026-07-28",
    ) -> None:
        if reply_mode not in ("auto", "json", "sse"):
            raise ValueError(f"reply_mode must be 'auto', 'json' or 'sse', got {reply_mode!r}")
        if revision not in ("2026-07-28", LEGACY_REVISION, BOTH):
            raise ValueError(
                f"revision must be '2026-07-28', '2025-11-25' or 'both', got {revision!r}"
            )
        self.server = server if server is not None else ReferenceServer()
        self.revision: Revision = revision
        self.protocol = ReferenceProtocol(self.server)
        self.legacy: Protocol2025 | None = (
            Protocol2025(self.server) if revision in (LEGACY_REVISION, BOTH) else None
        )
        """The 2025-11-25 protocol (sessions, GET stream, subscribe) when that revision is
        served (alone, or ``both``: each request to the one it speaks); ``None`` for
        2026-07-28 alone."""
        self.reply_mode: ReplyMode = reply_mode
        self.keepalive_interval = keepalive_interval
        self.commit_after = commit_after
        self.path = path
        self.hook = hook
        self.check_headers = check_headers
        self.stall_limit = stall_limit
        self.requests: list[RecordedRequest] = []
        """Every request received, in order."""
        self.frames_written: dict[str | int, int] = {}
        """Per listen request id: SSE frames written (keep-alives not counted)."""
        self.channel_frames_written = 0
        """2025-11-25: whole SSE frames written on GET streams, all sessions together."""
        self.port = 0
        self._listening: set[_Connection] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._accept_scope: anyio.CancelScope | None = None
        self._accept_done: anyio.Event | None = None
        self._connections: set[anyio.CancelScope] = set()

    @property
    def url(self) -> str:
        """The MCP endpoint URL."""
        return f"http://127.0.0.1:{self.port}{self.path}"

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await self.come_up()
        except BaseException:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg, self._tg = self._tg, None
        assert tg is not None
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(exc_type, exc, tb)
        finally:
            close_listens(self.server)
        return None

    def speaks_2025(self, request: RecordedRequest) -> bool:
        """Whether ``request`` goes to the 2025-11-25 protocol (always, on a server that
        speaks only that one)."""
        if self.revision != BOTH:
            return self.revision == LEGACY_REVISION
        return speaks_2025(
            request.message,
            version_header=request.headers.get("mcp-protocol-version"),
            session_id=request.headers.get("mcp-session-id"),
            http_method=request.method,
        )

    async def go_down(self) -> None:
        """Stop accepting and cut every open connection (the server process died; no
        2025 session survives it)."""
        if self.legacy is not None:
            self.legacy.forget_sessions()
        if self._accept_scope is not None:
            self._accept_scope.cancel()
        for scope in list(self._connections):
            scope.cancel()
        if self._accept_done is not None:
            with anyio.fail_after(5.0):
                await self._accept_done.wait()
        self._accept_scope = self._accept_done = None

    async def come_up(self) -> None:
        """Listen again (on the same port once one was chosen)."""
        assert self._tg is not None, "use ReferenceHttpServer inside 'async with'"
        if self._accept_scope is not None:
            return
        listener = None
        with anyio.fail_after(5.0):
            while listener is None:
                try:
                    listener = await anyio.create_tcp_listener(
                        local_host="127.0.0.1", local_port=self.port
                    )
                except OSError:
                    if not self.port:
                        raise
                    await anyio.sleep(0.01)  # the old socket is still closing
        self.port = listener.extra(SocketAttribute.local_port)
        await self._tg.start(self._accept, listener)

    async def _accept(
        self,
        listener: anyio.abc.Listener[SocketStream],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        done = self._accept_done = anyio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._accept_scope = scope
                task_status.started()
                async with listener:
                    assert self._tg is not None
                    await listener.serve(self._connection, self._tg)
        finally:
            done.set()

    async def _connection(self, stream: SocketStream) -> None:
        with anyio.CancelScope() as scope:
            self._connections.add(scope)
            try:
                await _Connection(self, stream).serve()
            except Exception as exc:
                if not _is_disconnect(exc):  # a server bug must show, but not stop the server
                    log.exception("reference HTTP server: connection failed")
            finally:
                self._connections.discard(scope)
                await anyio.aclose_forcefully(stream)

    def fall_silent(self) -> None:
        """Every open listen stream stays open but sends nothing more, not even a
        keep-alive (an old server process behind a proxy, gone mute)."""
        for connection in self._listening:
            connection.silent = True

    def count_frame(self, request_id: str | int) -> None:
        self.frames_written[request_id] = self.frames_written.get(request_id, 0) + 1


class _Connection:
    """One HTTP/1.1 connection: requests in order, one answer at a time."""

    def __init__(self, owner: ReferenceHttpServer, stream: SocketStream) -> None:
        self.owner = owner
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER)
        self.lock = anyio.Lock()
        self.committed = False
        self.extra_headers: list[tuple[str, str]] = []
        self.silent = False
        """A listen stream gone mute: no frame, no keep-alive (`fall_silent`)."""

    async def serve(self) -> None:
        while True:
            received = await self._next_request()
            if received is None:
                return
            if not await self._respond(*received):
                return
            if h11.MUST_CLOSE in (self.h11.our_state, self.h11.their_state):
                return
            try:
                self.h11.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _next_request(self) -> tuple[h11.Request, bytes] | None:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError:
                with suppress(h11.LocalProtocolError):
                    await self._plain(400, b"bad HTTP request")
                return None
            if event is h11.NEED_DATA:
                try:
                    data = await self.stream.receive(65536)
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    data = b""
                self.h11.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > _MAX_BODY:
                    await self._plain(413, b"request body too large")
                    return None
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return request, bytes(body)
            else:  # ConnectionClosed or PAUSED
                return None

    # ------------------------------------------------------------------ answering

    async def _respond(self, request: h11.Request, body: bytes) -> bool:
        owner = self.owner
        self.committed = False
        self.extra_headers = []
        headers: dict[str, str] = {}
        repeated: set[str] = set()
        for raw_name, raw_value in request.headers:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            if name in headers:
                repeated.add(name)
                headers[name] = f"{headers[name]}, {value}"
            else:
                headers[name] = value
        path = request.target.decode("latin-1").split("?", 1)[0]
        method = request.method.decode("latin-1")
        try:
            message: Any = json.loads(body) if body else None
        except ValueError:
            message = None
        recorded = RecordedRequest(method, path, headers, body, message, frozenset(repeated))
        owner.requests.append(recorded)
        if owner.legacy is not None and path == owner.path and owner.speaks_2025(recorded):
            return await self._legacy(owner.legacy, recorded)
        if method != "POST":
            return await self._plain(405, b"POST only", [("allow", "POST")])
        if path != owner.path:
            return await self._plain(404, b"not found")
        if owner.hook is not None:
            custom = await owner.hook(recorded)
            if custom is not None:
                return await self._act(custom, message if isinstance(message, dict) else {})
        if not isinstance(message, dict):
            answer: Answer = Reply(error(None, -32700, "Parse error"), 400)
            return await self._act(answer, {})
        if owner.check_headers:
            refusal = _header_problem(recorded, message)
            if refusal is not None:
                return await self._act(refusal, message)
        if _will_answer_from_local_copy(owner.server, message):
            # A caching intermediary's answer: RFC 9111 says Age marks it as not
            # generated by the origin for this request (how "local copy" looks on HTTP).
            self.extra_headers.append(("age", "3600"))
        principal = _principal(headers.get("authorization"))
        return await self._answer(message, principal)

    async def _legacy(self, legacy: Protocol2025, recorded: RecordedRequest) -> bool:
        """A 2025-11-25 request: sessions, the GET notification stream, DELETE."""
        owner = self.owner
        message = recorded.message if isinstance(recorded.message, dict) else {}
        if owner.hook is not None and recorded.method == "POST":
            custom = await owner.hook(recorded)
            if custom is not None:
                return await self._act(custom, message)
        gate = _legacy_gate(legacy, recorded, check_headers=owner.check_headers)
        if isinstance(gate, RawHttp):
            return await self._act(gate, message)
        if gate is not None:
            self.extra_headers.append(("mcp-session-id", gate.id))
        match recorded.method, gate:
            case "DELETE", ServedSession():
                legacy.end(gate)
                return await self._plain(200, b"")
            case "GET", ServedSession():
                if owner.server.down:
                    return False
                if not owner.server.listen_supported:
                    return await self._plain(405, b"no notification stream", [("allow", "POST")])
                stream = legacy.notifications(gate)
                if stream is None:
                    return False
                return await self._pump(gate.id, stream.items, channel=True)
            case _:
                pass
        if _will_answer_from_local_copy(owner.server, message):
            self.extra_headers.append(("age", "3600"))
        principal = _principal(recorded.headers.get("authorization"))
        return await self._answer(message, principal, gate, legacy=True)

    async def _answer(
        self,
        message: dict[str, Any],
        principal: str | None,
        session: ServedSession | None = None,
        *,
        legacy: bool = False,
    ) -> bool:
        """Run the protocol; commit to SSE (with keep-alives) when the mode says so."""
        owner = self.owner
        mode = owner.reply_mode
        if mode == "sse":
            await self._start_sse()
        result: list[Answer] = []
        gone = False
        async with anyio.create_task_group() as tg:

            async def produce() -> None:
                if legacy and owner.legacy is not None:
                    result.append(await owner.legacy.handle(message, principal, session))
                else:
                    result.append(await owner.protocol.handle(message, principal))
                tg.cancel_scope.cancel()

            async def watch() -> None:
                nonlocal gone
                await self._wait_for_disconnect()
                gone = True
                tg.cancel_scope.cancel()

            async def commit_later() -> None:
                if mode == "auto":
                    await anyio.sleep(owner.commit_after)
                    await self._start_sse()
                if self.committed:
                    await self._keepalives()

            tg.start_soon(produce)
            tg.start_soon(watch)
            if mode != "json":
                tg.start_soon(commit_later)
        if gone or not result:
            return False
        return await self._act(result[0], message)

    async def _act(self, answer: Answer | RawHttp | RawSse, message: dict[str, Any]) -> bool:
        request_id = message.get("id")
        match answer:
            case Reply(message=body, http_status=status, before=before, session_id=opened):
                if opened is not None and not self.committed:
                    self.extra_headers.append(("mcp-session-id", opened))
                if before:
                    # Change hints ahead of the answer: only an SSE answer can carry them.
                    await self._start_sse(status)
                    for message_before in before:
                        await self._frame(json.dumps(message_before))
                if self.committed:
                    await self._frame(json.dumps(body))
                    return await self._finish()
                return await self._json(status, body)
            case Denied(request_id=rid, message=text, data=data):
                body = error(rid, DENIED_CODE, f"Forbidden: {text}", data)
                if self.committed:
                    await self._frame(json.dumps(body))
                    return await self._finish()
                challenge = (
                    'Bearer error="insufficient_scope", scope="resources:read", '
                    f'error_description="{_quoted(text)}"'
                )
                return await self._json(403, body, [("www-authenticate", challenge)])
            case Stall():
                with anyio.move_on_after(self.owner.stall_limit):
                    await self._wait_for_disconnect()
                return False
            case HangUp():
                return False
            case Accepted():
                if self.committed:
                    return await self._finish()
                return await self._plain(202, b"")
            case Stream(items=items):
                return await self._pump(request_id, items)
            case RawHttp(status=status, body=raw, content_type=ctype, headers=extra):
                more = list(extra)
                if ctype is not None:
                    more.append(("content-type", ctype))
                return await self._send_whole(status, raw, more)
            case RawSse():
                return await self._raw_sse(answer)
        raise AssertionError(f"unknown answer {answer!r}")

    async def _pump(
        self, request_id: Any, items: AsyncIterator[Any], *, channel: bool = False
    ) -> bool:
        """A listen stream (or, ``channel``, a 2025 GET stream): frames as the protocol
        yields them, keep-alives between."""
        owner = self.owner
        sid = request_id if isinstance(request_id, (str, int)) else "?"
        outcome = "gone"
        owner._listening.add(self)
        try:
            if not self.committed:
                await self._start_sse()  # inside: a client gone by now still closes items
            async with anyio.create_task_group() as tg:

                async def pump() -> None:
                    nonlocal outcome
                    async for item in items:
                        if self.silent:
                            continue
                        match item:
                            case Garbage(raw=raw):
                                await self._frame(raw)
                            case CutMidFrame(partial=partial):
                                await self._data(b"event: message\r\ndata: " + partial.encode())
                                owner.count_frame(sid)
                                outcome = "cut"
                                break
                            case _:
                                await self._frame(json.dumps(item))
                        owner.count_frame(sid)
                        if channel:
                            owner.channel_frames_written += 1
                    else:
                        if self.silent:
                            await anyio.sleep_forever()  # open and mute until the client leaves
                        outcome = "end"
                    tg.cancel_scope.cancel()

                async def watch() -> None:
                    await self._wait_for_disconnect()
                    tg.cancel_scope.cancel()

                tg.start_soon(pump)
                tg.start_soon(watch)
                tg.start_soon(self._keepalives)
        finally:
            owner._listening.discard(self)
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
        if outcome == "end":
            return await self._finish()
        return False  # cut mid-frame, or the client went away: close the socket

    async def _raw_sse(self, answer: RawSse) -> bool:
        await self._start_sse(answer.status, list(answer.headers))
        for chunk in answer.chunks:
            await self._data(chunk)
            if answer.pause:
                await anyio.sleep(answer.pause)
        match answer.end:
            case "finish":
                return await self._finish()
            case "abort":
                return False
            case "hold":
                async with anyio.create_task_group() as tg:
                    if answer.keepalive:
                        tg.start_soon(self._keepalives)
                    with anyio.move_on_after(self.owner.stall_limit):
                        await self._wait_for_disconnect()
                    tg.cancel_scope.cancel()
                return False

    # ------------------------------------------------------------------ writing

    async def _wait_for_disconnect(self) -> None:
        """Return when the client closes its side (what an HTTP cancel looks like)."""
        while True:
            try:
                data = await self.stream.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            except OSError:
                return
            # A pipelined request: h11 keeps it for the next cycle.
            self.h11.receive_data(data)

    async def _keepalives(self) -> None:
        interval = self.owner.keepalive_interval
        if interval is None or not math.isfinite(interval):
            return
        while True:
            await anyio.sleep(interval)
            if self.silent:
                await anyio.sleep_forever()
            await self._data(_KEEPALIVE)

    async def _start_sse(
        self, status: int = 200, extra: list[tuple[str, str]] | None = None
    ) -> None:
        headers = [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache, no-transform"),
            ("x-accel-buffering", "no"),
            *self.extra_headers,
            *(extra or []),
        ]
        async with self.lock:
            if self.committed:
                return
            # Set with the state change, so a cancellation cannot separate the two.
            self.committed = True
            await self._write(h11.Response(status_code=status, headers=headers))

    async def _frame(self, data: str) -> None:
        lines = data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        frame = "event: message\r\n" + "".join(f"data: {line}\r\n" for line in lines) + "\r\n"
        await self._data(frame.encode())

    async def _data(self, data: bytes) -> None:
        await self._send(h11.Data(data=data))

    async def _finish(self) -> bool:
        await self._send(h11.EndOfMessage())
        return True

    async def _json(
        self, status: int, body: dict[str, Any], extra: list[tuple[str, str]] | None = None
    ) -> bool:
        raw = json.dumps(body, separators=(",", ":")).encode()
        return await self._send_whole(
            status, raw, [("content-type", "application/json"), *(extra or [])]
        )

    async def _plain(
        self, status: int, body: bytes, extra: list[tuple[str, str]] | None = None
    ) -> bool:
        headers = [("content-type", "text/plain")] if body else []
        return await self._send_whole(status, body, [*headers, *(extra or [])])

    async def _send_whole(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> bool:
        all_headers = [*headers, *self.extra_headers, ("content-length", str(len(body)))]
        await self._send(h11.Response(status_code=status, headers=all_headers))
        if body:
            await self._send(h11.Data(data=body))
        return await self._finish()

    async def _send(self, event: h11.Event) -> None:
        async with self.lock:
            await self._write(event)

    async def _write(self, event: h11.Event) -> None:
        """Hand ``event`` to h11 and its bytes to the socket as one step. Cancelled
        between the two (an answer ready just as ``auto`` commits to SSE), h11 would
        believe it sent headers the client never got, and the client would read the
        next chunk as a status line (a read that lands as "unreachable")."""
        data = self.h11.send(event)
        if data:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_WRITE_LIMIT) as bounded:
                await self.stream.send(data)
            if bounded.cancelled_caught:  # the client stopped reading: give it up
                raise anyio.BrokenResourceError(f"the client took no bytes for {_WRITE_LIMIT:g} s")


# ---------------------------------------------------------------------- checks


def _header_problem(request: RecordedRequest, message: dict[str, Any]) -> Answer | RawHttp | None:
    """What the SDK server would refuse: wrong Accept/Content-Type, routing headers that
    are missing, repeated or disagree with the body (``-32020``)."""
    headers = request.headers
    accept = headers.get("accept", "")
    if "application/json" not in accept or "text/event-stream" not in accept:
        return RawHttp(406, b"", None)
    if not headers.get("content-type", "").startswith("application/json"):
        return RawHttp(415, b"Content-Type must be application/json", "text/plain")
    request_id = message.get("id")
    if request_id is None:
        return None  # notification POSTs: header rules are not defined for them
    rid = request_id if isinstance(request_id, (str, int)) else None

    def mismatch(text: str) -> Reply:
        return Reply(error(rid, HEADER_MISMATCH, text), 400)

    for name in _ROUTING:
        if name in request.repeated:
            return mismatch(f"the {name} header appears more than once")
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    body_version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
    header_version = headers.get("mcp-protocol-version")
    if header_version is None:
        return mismatch("the MCP-Protocol-Version header is required")
    if body_version is not None and header_version != body_version:
        return mismatch(
            f"MCP-Protocol-Version {header_version!r} does not match _meta {body_version!r}"
        )
    if headers.get("mcp-method") != message.get("method"):
        return mismatch("the Mcp-Method header does not match the request body's method")
    if message.get("method") == "resources/read":
        uri = params.get("uri") if isinstance(params, dict) else None
        mcp_name = headers.get("mcp-name")
        if mcp_name is None:
            return mismatch("the Mcp-Name header is required for resources/read")
        try:
            decoded = decode_header_value(mcp_name)
        except ValueError:
            return mismatch("the Mcp-Name header is not valid Base64")
        if decoded != uri:
            return mismatch("the Mcp-Name header does not match the request body's 'uri'")
    if not isinstance(params, dict):
        return Reply(error(rid, INVALID_PARAMS, "params is required"), 400)
    return None


def _legacy_gate(
    legacy: Protocol2025, request: RecordedRequest, *, check_headers: bool
) -> RawHttp | ServedSession | None:
    """What a 2025-11-25 server checks before the protocol (what the official SDK 1.x
    answers, probed): a refusal, the request's session, or ``None`` for ``initialize``."""
    headers, message = request.headers, request.message
    if request.method not in ("POST", "GET", "DELETE"):
        return RawHttp(405, b"", None, (("allow", "GET, POST, DELETE"),))
    accept = headers.get("accept", "")
    if request.method == "GET" and "text/event-stream" not in accept:
        return RawHttp(406, b"", None)
    if request.method == "POST":
        both = "application/json" in accept and "text/event-stream" in accept
        if check_headers and not both:
            return RawHttp(406, b"", None)
        if not isinstance(message, dict):
            return _sdk_refusal(400, -32700, "Parse error")
        if message.get("method") == "initialize":
            return None
    session_id = headers.get("mcp-session-id")
    if session_id is None:
        return _sdk_refusal(400, -32600, "Bad Request: Missing session ID")
    session = legacy.session(session_id)
    if session is None:
        return _sdk_refusal(404, -32600, "Session not found")
    version = headers.get("mcp-protocol-version")
    if check_headers and request.method == "POST" and version != session.version:
        return _sdk_refusal(
            400,
            -32600,
            f"Bad Request: Unsupported protocol version: {version}; this session speaks "
            f"{session.version}",
        )
    return session


def _sdk_refusal(status: int, code: int, text: str) -> RawHttp:
    """A transport-level refusal as the SDK writes it (id ``"server-error"``)."""
    body = {"jsonrpc": "2.0", "id": "server-error", "error": {"code": code, "message": text}}
    return RawHttp(status, json.dumps(body, separators=(",", ":")).encode())


def _will_answer_from_local_copy(server: ReferenceServer, message: dict[str, Any]) -> bool:
    if message.get("method") != "resources/read":
        return False
    params = message.get("params")
    uri = params.get("uri") if isinstance(params, dict) else None
    if not isinstance(uri, str) or server.down:
        return False
    queue = server.faults.get(uri)
    fault = queue[0] if queue else server.sticky_faults.get(uri)
    return fault == "local_copy"


def _is_disconnect(exc: BaseException) -> bool:
    """Whether ``exc`` (or every exception of a group) is just the peer going away."""
    nested = getattr(exc, "exceptions", None)
    if isinstance(nested, tuple) and nested:
        return all(_is_disconnect(e) for e in nested)
    return isinstance(
        exc, (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)
    )


def _principal(authorization: str | None) -> str | None:
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip() or None
    return None


def _quoted(text: str) -> str:
    return "".join(c for c in text if c >= " " and c not in '"\\')[:200]


__all__ = [
    "LEGACY_REVISION",
    "RawHttp",
    "RawSse",
    "RecordedRequest",
    "ReferenceHttpServer",
    "ReplyMode",
    "Revision",
]
