"""The reference server's MCP 2025-11-25 protocol, transport-neutral.

Revision 2025-11-25 (spec basic/lifecycle, basic/transports, server/resources) has no
``server/discover``, no ``_meta`` on requests, no ``subscriptions/listen`` and no
caching hints. A client opens a session with ``initialize`` (answered with the
negotiated version and the capabilities) and ``notifications/initialized``; it gets
notifications on one channel (HTTP: a GET SSE stream of the session; stdio: stdout)
and asks for ``resources/updated`` per URI with ``resources/subscribe``.

`Protocol2025` answers from the same `ReferenceServer` as `ReferenceProtocol`, with
the same `Answer` values, so the HTTP and stdio shells act both revisions out alike.
How the table's faults look here:

- *ack omits X*: ``resources/subscribe`` for X is refused (``-32602``);
- *no listen*: the capabilities offer neither ``resources.subscribe`` nor
  ``listChanged`` (subscribe answers ``-32601``; HTTP answers GET with 405);
- *acks held*: ``resources/subscribe`` answers wait for *release acks*;
- *stream drops* / *stream closes*: the session's notification channel is cut in the
  middle of a frame / ends cleanly; the session itself lives on;
- *session expires* (and *server goes down*): the server forgets every session;
  HTTP requests naming one get 404, stdio's process exits.

A server that speaks only this revision answers ``server/discover`` with ``-32601``,
as the official SDK 1.x does.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from freshcache import (
    CatalogListChanged,
    ListenAcknowledged,
    ListReply,
    ReadReply,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    UntrustedMessage,
)
from freshcache.testing import ReferenceServer, push_event

from ._protocol import (
    CATALOG_OF_METHOD,
    SERVER_INFO,
    Accepted,
    Answer,
    CutMidFrame,
    Garbage,
    HangUp,
    Reply,
    Stall,
    Stream,
    StreamItem,
    catalog_body,
    catalog_capabilities,
    catalog_page,
    change_notification,
    error,
    hint_notifications,
    list_body,
    refused_list,
    refused_read,
    tool_call_answer,
)

REVISION = "2025-11-25"
ACCEPTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
"""The versions this server agrees to in ``initialize`` (it offers ``REVISION`` otherwise)."""

INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002
"""2025-11-25's code for an unknown resource (server/resources, error handling)."""

NOT_INITIALIZED = "Received request before initialization was complete"

BOTH = "both"
"""A server that speaks 2026-07-28 and 2025-11-25 at once, as real servers do (the
official SDK's among them): each client gets the revision it speaks (`speaks_2025`)."""
_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"


def speaks_2025(
    message: object,
    *,
    version_header: str | None = None,
    session_id: str | None = None,
    http_method: str = "POST",
) -> bool:
    """Whether a request to a server speaking both revisions is a 2025-11-25 one: an
    ``initialize``, a request of a session, one whose ``MCP-Protocol-Version`` names a
    2025 revision, or one without the 2026-07-28 ``_meta`` envelope (the official
    SDK's rule). Anything else is 2026-07-28's to answer, refusals included."""
    if version_header is not None:
        return version_header.strip() in ACCEPTED_VERSIONS
    if session_id is not None or http_method != "POST":
        return True
    if not isinstance(message, dict):
        return False
    if message.get("method") == "initialize":
        return True
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return not (isinstance(meta, dict) and _VERSION_KEY in meta)


@dataclass(slots=True)
class ServedSession:
    """One 2025-11-25 session: its version, whether the client said ``initialized``, and
    the URIs it subscribed to (they outlive a notification channel, not the session)."""

    id: str
    version: str
    epoch: int
    initialized: bool = False
    subscribed: set[str] = field(default_factory=set)
    channels: int = 0
    """Notification channels opened so far (HTTP GET streams; stdio: one)."""
    ended: bool = False


class Protocol2025:
    """Answers MCP 2025-11-25 requests from the state of a `ReferenceServer`."""

    revision = REVISION

    def __init__(self, server: ReferenceServer) -> None:
        self.server = server
        self.requests: list[dict[str, Any]] = []
        """Every message received, as decoded (requests and notifications)."""
        self.sessions: dict[str, ServedSession] = {}
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ sessions

    def session(self, session_id: str | None) -> ServedSession | None:
        """The live session of that id (``None``: unknown, ended, or expired)."""
        found = self.sessions.get(session_id or "")
        if found is None or found.ended or found.epoch != self.server.sessions_ended:
            return None
        return found

    def end(self, session: ServedSession) -> None:
        """The client ended the session (HTTP DELETE, or stdin closed)."""
        session.ended = True
        for key in [k for k in self.server.subscribers if _belongs(k, session)]:
            self.server.unsubscribe(key)

    def forget_sessions(self) -> None:
        """The server process died: no session survives it."""
        for session in self.sessions.values():
            session.ended = True

    @property
    def live_sessions(self) -> list[ServedSession]:
        return [s for s in self.sessions.values() if self.session(s.id) is s]

    # ------------------------------------------------------------------ requests

    async def handle(
        self,
        message: dict[str, Any],
        principal: str | None = None,
        session: ServedSession | None = None,
    ) -> Answer:
        """One message of ``session`` (``None``: before ``initialize``)."""
        self.requests.append(message)
        request_id = message.get("id")
        method = message.get("method")
        params = message.get("params") or {}
        if request_id is None:
            if method == "notifications/initialized" and session is not None:
                session.initialized = True
            return Accepted()
        if not isinstance(method, str) or not isinstance(params, dict):
            return Reply(error(request_id, INVALID_REQUEST, "Invalid request"))
        server = self.server
        if method == "initialize":
            if server.down:
                return HangUp()
            return self._initialize(request_id, params)
        if method == "ping":
            return Reply(_result(request_id, {}))
        if session is None:
            return Reply(error(request_id, INVALID_REQUEST, NOT_INITIALIZED))
        if server.down:
            return HangUp()
        match method:
            case "resources/read":
                uri = params.get("uri")
                if not isinstance(uri, str):
                    return Reply(error(request_id, INVALID_PARAMS, "uri is required"))
                queue = server.faults.get(uri)
                upcoming = queue[0] if queue else server.sticky_faults.get(uri)
                reply = await server.read(uri, principal)
                if upcoming == "timeout":
                    return Stall()
                return self._read_answer(request_id, reply, upcoming)
            case "resources/list":
                cursor = params.get("cursor")
                page = server.list_page(cursor if isinstance(cursor, str) else None)
                return self._list_answer(request_id, page)
            case "tools/list" | "prompts/list" | "resources/templates/list":
                kind = CATALOG_OF_METHOD[method]
                found = catalog_page(server, kind, request_id, params, principal, missing=200)
                if not isinstance(found, ListReply):
                    return found
                return Reply(_result(request_id, catalog_body(kind, found)))
            case "tools/call":
                return tool_call_answer(server, request_id, params)
            case "resources/subscribe" | "resources/unsubscribe":
                uri = params.get("uri")
                if not isinstance(uri, str):
                    return Reply(error(request_id, INVALID_PARAMS, "uri is required"))
                if not server.listen_supported:
                    return Reply(error(request_id, METHOD_NOT_FOUND, "Method not found"))
                if method == "resources/unsubscribe":
                    await server.unsubscribes_released()
                    self._unsubscribe(session, uri)
                    return Reply(_result(request_id, {}))
                return await self._subscribe(request_id, session, uri)
            case _:  # server/discover, subscriptions/listen, ...: not in this revision
                return Reply(error(request_id, METHOD_NOT_FOUND, "Method not found"))

    def _initialize(self, request_id: str | int, params: dict[str, Any]) -> Reply:
        asked = params.get("protocolVersion")
        version = asked if asked in ACCEPTED_VERSIONS else REVISION
        server = self.server
        session = ServedSession(
            f"session-{next(self._ids)}-{id(self):x}", str(version), server.sessions_ended
        )
        self.sessions[session.id] = session
        resources: dict[str, Any] = {}
        if server.listen_supported:
            resources = {"subscribe": True, "listChanged": server.list_changed_supported}
        result = {
            "protocolVersion": version,
            "capabilities": {"resources": resources, **catalog_capabilities(server)},
            "serverInfo": SERVER_INFO,
        }
        return Reply(_result(request_id, result), session_id=session.id)

    async def _subscribe(self, request_id: str | int, session: ServedSession, uri: str) -> Reply:
        server = self.server
        for key, sub in server.subscribers.items():
            if _belongs(key, session):
                sub.requested = sub.requested | {uri}
        if server.acks_held:
            await server.acks_released()
        if uri in server.omit_from_ack:
            return Reply(
                error(request_id, INVALID_PARAMS, f"Subscriptions to {uri} are not offered")
            )
        session.subscribed.add(uri)
        for key, sub in server.subscribers.items():
            if _belongs(key, session):
                sub.resource_uris = sub.resource_uris | {uri}
        return Reply(_result(request_id, {}))

    def _unsubscribe(self, session: ServedSession, uri: str) -> None:
        session.subscribed.discard(uri)
        for key, sub in self.server.subscribers.items():
            if _belongs(key, session):
                sub.resource_uris = sub.resource_uris - {uri}
                sub.requested = sub.requested - {uri}

    def _read_answer(
        self, request_id: str | int, reply: ReadReply | RequestFailed, shape: str | None
    ) -> Answer:
        match reply:
            case ReadReply():
                body: dict[str, Any] = {"contents": [item.to_mcp() for item in reply.contents]}
                if shape == "no_contents":
                    del body["contents"]
                return Reply(
                    _result(request_id, body), before=hint_notifications(reply.hints, meta=False)
                )
            case RequestFailed():
                return refused_read(request_id, reply, not_found=(RESOURCE_NOT_FOUND, 200))

    def _list_answer(self, request_id: str | int, page: ListReply | RequestFailed) -> Answer:
        match page:
            case ListReply():
                return Reply(
                    _result(request_id, list_body(page)),
                    before=hint_notifications(page.hints, meta=False),
                )
            case RequestFailed():
                return refused_list(request_id, page, status=200)

    # ------------------------------------------------------------------ notifications

    def notifications(self, session: ServedSession) -> Stream | None:
        """The session's notification channel (HTTP: a GET stream; stdio: stdout);
        ``None`` while the server is down."""
        server = self.server
        session.channels += 1
        key = f"{session.id}#{session.channels}"
        registered = server.subscribe(
            key,
            frozenset(session.subscribed),
            bool(server.list_changed_supported),
            frozenset({"tools", "prompts"}),  # the channel carries every list_changed
        )
        if registered is None:
            return None
        sub, receive = registered
        sub.requested = frozenset(session.subscribed)
        return Stream(self._stream(key, receive))

    async def _stream(
        self, key: str, receive: anyio.abc.ObjectReceiveStream[tuple[str, object]]
    ) -> AsyncIterator[StreamItem]:
        try:
            async with receive:
                async for kind, payload in receive:
                    match push_event(key, (kind, payload)):
                        case ListenAcknowledged():
                            continue  # 2025 has no acknowledgment: subscribe answers instead
                        case (
                            ResourceUpdated()
                            | ResourceListChanged()
                            | CatalogListChanged() as change
                        ):
                            yield change_notification(change, meta=False)
                        case UntrustedMessage():
                            yield Garbage(str(payload))
                        case StreamClosed():
                            return  # the channel ends cleanly
                        case _:  # StreamLost
                            yield CutMidFrame(
                                '{"jsonrpc":"2.0","method":"notifications/resources/upd'
                            )
                            return
        finally:
            self.server.unsubscribe(key)


def _belongs(key: str | int, session: ServedSession) -> bool:
    return isinstance(key, str) and key.startswith(f"{session.id}#")


def _result(request_id: str | int, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


__all__ = [
    "ACCEPTED_VERSIONS",
    "BOTH",
    "REVISION",
    "Protocol2025",
    "ServedSession",
    "Stall",
    "speaks_2025",
]
