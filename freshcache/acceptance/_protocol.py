"""The reference server's MCP 2026-07-28 protocol, transport-neutral.

`ReferenceProtocol.handle` takes one decoded JSON-RPC message and answers with an
`Answer`: a single JSON message, a stream of messages (``subscriptions/listen``),
nothing (a notification), or a fault the transport must act out (stall, hang up,
cut a frame). The HTTP and stdio reference servers are thin shells around it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio

from freshcache import (
    CatalogListChanged,
    ListenAcknowledged,
    ListReply,
    ReadReply,
    Remediation,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    UntrustedMessage,
)
from freshcache.testing import ReferenceServer, call_tool, push_event

# The spec's names, spelled here as the reference server's own (not taken from
# freshcache._protocol._wire): the stdio server process then never loads the client's pydantic
# wire models, and a test checks both spellings agree.
PROTOCOL_VERSION = "2026-07-28"
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022

DENIED_CODE = -32003
"""The JSON-RPC code the reference server uses for "not allowed" on stdio (HTTP uses 403)."""

CATALOG_FIELDS = {"tools": "tools", "prompts": "prompts", "resource_templates": "resourceTemplates"}
"""The field of a list result that holds a catalog's items, by catalog kind."""

ChangeHint = ResourceUpdated | ResourceListChanged | CatalogListChanged
"""A change the reference server tells a listen of."""


def plain(value: Any) -> Any:
    """A JSON value to send, from the read-only mappings and tuples the reference
    server keeps."""
    return json.loads(json.dumps(value, default=dict))


SERVER_INFO = {"name": "freshcache-reference", "version": "0.1.0"}


@dataclass(frozen=True, slots=True)
class Reply:
    """One JSON-RPC message to send back, with the HTTP status it deserves."""

    message: dict[str, Any]
    http_status: int = 200
    before: tuple[dict[str, Any], ...] = ()
    """Messages written ahead of it on the same answer (change hints): HTTP sends them
    as an SSE answer, stdio as the lines before the response."""
    session_id: str | None = None
    """Revision 2025-11-25: the session this answer opened (``initialize``); HTTP
    announces it in ``Mcp-Session-Id``."""


@dataclass(frozen=True, slots=True)
class Denied:
    """The principal may not read: HTTP answers 403, stdio a JSON-RPC error."""

    request_id: str | int
    message: str
    data: Any = None
    """The error's ``data`` (an authorization denial envelope, when the server sends one)."""


@dataclass(frozen=True, slots=True)
class Stall:
    """Answer nothing until the client gives up (a read that times out)."""


@dataclass(frozen=True, slots=True)
class HangUp:
    """Close the connection without an answer (the server is unreachable)."""


@dataclass(frozen=True, slots=True)
class Accepted:
    """A notification: nothing to answer (HTTP 202)."""


@dataclass(frozen=True, slots=True)
class Stream:
    """A listen stream: messages to send as they come (see `StreamItem`)."""

    items: AsyncIterator[StreamItem]


@dataclass(frozen=True, slots=True)
class Garbage:
    """A malformed frame to put on the stream as is."""

    raw: str


@dataclass(frozen=True, slots=True)
class CutMidFrame:
    """End the stream abruptly, in the middle of a frame."""

    partial: str


StreamItem = dict[str, Any] | Garbage | CutMidFrame
Answer = Reply | Denied | Stall | HangUp | Accepted | Stream


def _result(request_id: str | int, result: dict[str, Any]) -> dict[str, Any]:
    result = dict(result)
    result.setdefault("resultType", "complete")
    result["_meta"] = {**result.get("_meta", {}), META_SERVER_INFO: SERVER_INFO}
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error(
    request_id: str | int | None, code: int, message: str, data: Any = None
) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    body: dict[str, Any] = {"jsonrpc": "2.0", "error": err}
    if request_id is not None:
        body["id"] = request_id
    return body


def refused_read(
    request_id: str | int, failed: RequestFailed, *, not_found: tuple[int, int]
) -> Answer:
    """A read the `ReferenceServer` refused, as both revisions answer it. They differ
    only in the error code and HTTP status for an unknown resource (``not_found``)."""
    match failed:
        case RequestFailed(kind="denied", detail=detail, remediation=remediation):
            return Denied(request_id, detail, denial_data(remediation))
        case RequestFailed(kind="not_found", detail=detail):
            code, status = not_found
            return Reply(error(request_id, code, "Resource not found", {"detail": detail}), status)
        case RequestFailed(kind="unreachable"):
            return HangUp()
        case RequestFailed(detail=detail):
            return Reply(error(request_id, INTERNAL_ERROR, detail or "Internal error"))


def tool_call_answer(
    server: ReferenceServer, request_id: str | int, params: dict[str, Any]
) -> Answer:
    """``tools/call`` on the wire (both revisions): `call_tool`'s answer,
    a JSON-RPC error for a refusal, a hang-up while the server is down."""
    outcome = call_tool(server, params.get("name"), params.get("arguments"), params)
    if isinstance(outcome, RequestFailed):
        if outcome.lost:  # it ran: the answer starts, then breaks off
            return Stream(_lost_answer(str(params.get("name"))))
        if outcome.kind == "unreachable":
            return HangUp()
        return Reply(error(request_id, outcome.code or INTERNAL_ERROR, outcome.detail), 200)
    return Reply(_result(request_id, outcome))


async def _lost_answer(name: str) -> AsyncIterator[StreamItem]:
    """A ``tools/call`` answer that breaks off after the tool ran: a log notification
    (HTTP commits to an SSE answer), then the cut (stdio: the process dies)."""
    params = {"level": "info", "data": f"{name} ran"}
    yield {"jsonrpc": "2.0", "method": "notifications/message", "params": params}
    yield CutMidFrame("")


def denial_data(remediation: Remediation | None) -> dict[str, Any] | None:
    """A denial's error ``data``: the authorization denial envelope (SEP-2643) the
    reference server sends when a row asks for one, else none."""
    if remediation is None:
        return None
    envelope: dict[str, Any] = {"reason": remediation.reason or "insufficient_authorization"}
    if remediation.context_id is not None:
        envelope["authorizationContextId"] = remediation.context_id
    if remediation.hints:
        envelope["remediationHints"] = [plain(hint) for hint in remediation.hints]
    return {"authorization": envelope}


def refused_list(request_id: str | int, failed: RequestFailed, *, status: int) -> Answer:
    """A list page the `ReferenceServer` refused (a bad cursor, the server down)."""
    if failed.kind == "unreachable":
        return HangUp()
    return Reply(error(request_id, INVALID_PARAMS, failed.detail), status)


def list_body(page: ListReply) -> dict[str, Any]:
    """A ``resources/list`` result's resources and cursor, written alike by both revisions."""
    body: dict[str, Any] = {
        "resources": [
            {
                "uri": r.uri,
                "name": r.name or r.uri,
                **({"mimeType": r.mime_type} if r.mime_type else {}),
            }
            for r in page.resources
        ]
    }
    if page.next_cursor is not None:
        body["nextCursor"] = page.next_cursor
    return body


def _status_for(code: int) -> int:
    if code == METHOD_NOT_FOUND:
        return 404
    if code in (INVALID_PARAMS, HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION, -32700, -32600):
        return 400
    return 200


class ReferenceProtocol:
    """Answers MCP requests from the state of a `ReferenceServer`."""

    def __init__(self, server: ReferenceServer) -> None:
        self.server = server
        self.requests: list[dict[str, Any]] = []
        """Every request received, as decoded (tests validate them against the schema)."""
        self._rounds: dict[str, ReadReply] = {}
        """Results held back for the retry carrying their ``requestState``."""

    async def handle(self, message: dict[str, Any], principal: str | None = None) -> Answer:
        self.requests.append(message)
        request_id = message.get("id")
        method = message.get("method")
        params = message.get("params") or {}
        if request_id is None:
            return Accepted()
        if not isinstance(method, str) or not isinstance(params, dict):
            return Reply(error(request_id, -32600, "Invalid request"), 400)
        meta = params.get("_meta")
        if not isinstance(meta, dict) or META_PROTOCOL_VERSION not in meta:
            return Reply(error(request_id, INVALID_PARAMS, "Missing required _meta"), 400)
        version = meta[META_PROTOCOL_VERSION]
        if version != PROTOCOL_VERSION:
            data = {"supported": [PROTOCOL_VERSION], "requested": version}
            return Reply(
                error(
                    request_id, UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", data
                ),
                400,
            )
        server = self.server
        match method:
            case "server/discover":
                if server.down:
                    return HangUp()
                caps: dict[str, Any] = {"resources": {}, **catalog_capabilities(server)}
                if server.listen_supported:
                    caps["resources"] = {
                        "subscribe": True,
                        "listChanged": server.list_changed_supported,
                    }
                return Reply(
                    _result(
                        request_id,
                        {
                            "supportedVersions": [PROTOCOL_VERSION],
                            "capabilities": caps,
                            "ttlMs": 0,
                            "cacheScope": "public",
                        },
                    )
                )
            case "resources/read":
                uri = params.get("uri")
                if not isinstance(uri, str):
                    return Reply(error(request_id, INVALID_PARAMS, "uri is required"), 400)
                if server.down:
                    return HangUp()
                held = self._rounds.pop(str(params.get("requestState")), None)
                if held is not None:  # the retry of a round this server asked for
                    return self._read_answer(request_id, held)
                upcoming = _upcoming_fault(server, uri)
                if upcoming == "timeout":
                    await server.read(uri, principal)  # consume the fault, count the read
                    return Stall()
                if upcoming == "version_refused":
                    if server.faults.get(uri):
                        server.faults[uri].popleft()  # refused before it was read: not a read
                    data = {"supported": [PROTOCOL_VERSION], "requested": version}
                    return Reply(
                        error(
                            request_id,
                            UNSUPPORTED_PROTOCOL_VERSION,
                            "Unsupported protocol version",
                            data,
                        ),
                        400,
                    )
                reply = await server.read(uri, principal)
                if isinstance(reply, ReadReply) and reply.multi_round_trip:
                    # Act out one requestState round: the result comes on the retry.
                    token = f"round-{len(self._rounds) + 1}"
                    self._rounds[token] = replace(reply, multi_round_trip=False)
                    return Reply(
                        _result(request_id, {"resultType": "input_required", "requestState": token})
                    )
                return self._read_answer(request_id, reply, upcoming)
            case "resources/list":
                if server.down:
                    return HangUp()
                cursor = params.get("cursor")
                page = server.list_page(cursor if isinstance(cursor, str) else None)
                return self._list_answer(request_id, page)
            case "tools/call":
                return tool_call_answer(server, request_id, params)
            case "tools/list" | "prompts/list" | "resources/templates/list":
                if server.down:
                    return HangUp()
                kind = CATALOG_OF_METHOD[method]
                found = catalog_page(server, kind, request_id, params, principal, missing=404)
                if not isinstance(found, ListReply):
                    return found
                body = {
                    **catalog_body(kind, found),
                    "ttlMs": int(found.ttl_ms or 0),
                    "cacheScope": found.cache_scope or "private",
                }
                return Reply(_result(request_id, body))
            case "subscriptions/listen":
                if server.down:
                    return HangUp()
                if not server.listen_supported:
                    return Reply(error(request_id, METHOD_NOT_FOUND, "Method not found"), 404)
                if server.listen_refusals:
                    server.listen_refusals -= 1
                    data = {"supported": [PROTOCOL_VERSION], "requested": version}
                    text = "Unsupported protocol version"
                    refusal = error(request_id, UNSUPPORTED_PROTOCOL_VERSION, text, data)
                    return Reply(refusal, 400)
                filt = params.get("notifications") or {}
                uris = frozenset(filt.get("resourceSubscriptions") or ())
                catalogs = frozenset(
                    kind
                    for kind, name in (
                        ("tools", "toolsListChanged"),
                        ("prompts", "promptsListChanged"),
                    )
                    if filt.get(name) is True
                )
                registered = server.subscribe(
                    request_id,
                    uris,
                    bool(filt.get("resourcesListChanged")),
                    catalogs,
                    embed=filt.get("embedResources") is True,
                )
                if registered is None:
                    return HangUp()
                _, receive = registered

                def release() -> None:
                    receive.close()
                    server.unsubscribe(request_id)

                return Stream(_Owned(self._stream(request_id, filt, receive), release))
            case _:
                return Reply(error(request_id, METHOD_NOT_FOUND, "Method not found"), 404)

    def _read_answer(
        self, request_id: str | int, reply: ReadReply | RequestFailed, shape: str | None = None
    ) -> Answer:
        match reply:
            case ReadReply():
                body: dict[str, Any] = {
                    "contents": [item.to_mcp() for item in reply.contents],
                    "ttlMs": int(reply.ttl_ms or 0),
                    "cacheScope": reply.cache_scope or "private",
                }
                match shape:  # results that break the schema
                    case "no_contents":
                        del body["contents"]
                    case "ttl_string":
                        body["ttlMs"] = str(body["ttlMs"])
                    case "ttl_bool":
                        body["ttlMs"] = True
                    case _:
                        pass
                return Reply(_result(request_id, body), before=hint_notifications(reply.hints))
            case RequestFailed():
                return refused_read(request_id, reply, not_found=(INVALID_PARAMS, 400))

    def _list_answer(self, request_id: str | int, page: ListReply | RequestFailed) -> Answer:
        match page:
            case ListReply():
                body = {
                    **list_body(page),
                    "ttlMs": int(page.ttl_ms or 0),
                    "cacheScope": page.cache_scope or "private",
                }
                return Reply(_result(request_id, body), before=hint_notifications(page.hints))
            case RequestFailed():
                return refused_list(request_id, page, status=400)

    async def _stream(
        self,
        request_id: str | int,
        requested: dict[str, Any],
        receive: anyio.abc.ObjectReceiveStream[tuple[str, object]],
    ) -> AsyncGenerator[StreamItem, None]:
        sid_meta = {META_SUBSCRIPTION_ID: request_id}
        try:
            async with receive:
                async for kind, payload in receive:
                    match push_event(request_id, (kind, payload)):
                        case ListenAcknowledged(
                            resource_uris=honoured, list_changed=list_changed, catalogs=catalogs
                        ):
                            filt: dict[str, Any] = {}
                            if list_changed:
                                filt["resourcesListChanged"] = True
                            if "tools" in catalogs:
                                filt["toolsListChanged"] = True
                            if "prompts" in catalogs:
                                filt["promptsListChanged"] = True
                            if honoured:
                                filt["resourceSubscriptions"] = sorted(honoured)
                            yield _notification(
                                "notifications/subscriptions/acknowledged",
                                {"_meta": sid_meta, "notifications": filt},
                            )
                        case (
                            ResourceUpdated()
                            | ResourceListChanged()
                            | CatalogListChanged() as change
                        ):
                            yield change_notification(change)
                        case UntrustedMessage():
                            yield Garbage(str(payload))
                        case StreamClosed():
                            yield {
                                "jsonrpc": "2.0",
                                "id": request_id,
                                "result": {"resultType": "complete", "_meta": sid_meta},
                            }
                            return
                        case _:  # StreamLost: die in the middle of a frame
                            frame = json.dumps(
                                _notification(
                                    "notifications/resources/updated",
                                    {"_meta": sid_meta, "uri": "guide://cut"},
                                )
                            )
                            yield CutMidFrame(frame[: len(frame) // 2])
                            return
        finally:
            self.server.unsubscribe(request_id)


class _Owned:
    """A listen stream's items that let go of its subscription on ``aclose`` even when
    never iterated (the client left before the first frame: an async generator that
    never started runs no ``finally``, and its receive stream would be left unclosed)."""

    def __init__(self, items: AsyncGenerator[StreamItem, None], release: Callable[[], None]):
        self._items = items
        self._release = release

    def __aiter__(self) -> _Owned:
        return self

    async def __anext__(self) -> StreamItem:
        return await self._items.__anext__()

    async def aclose(self) -> None:
        try:
            await self._items.aclose()
        finally:
            self._release()


def _notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def _upcoming_fault(server: ReferenceServer, uri: str) -> str | None:
    """The fault the next read of ``uri`` will meet (without consuming it)."""
    queue = server.faults.get(uri)
    return queue[0] if queue else server.sticky_faults.get(uri)


def change_notification(change: ChangeHint, *, meta: bool = True) -> dict[str, Any]:
    """A change as the notification a server writes; with ``meta`` (2026-07-28) it
    names the change's subscription id, when it has one, in ``_meta``."""
    params: dict[str, Any] = {}
    if meta and change.subscription_id is not None:
        params["_meta"] = {META_SUBSCRIPTION_ID: change.subscription_id}
    if isinstance(change, ResourceUpdated):
        params["uri"] = change.uri
        if change.contents is not None:  # a pushed body (embedResources, SEP-3119)
            params["contents"] = [item.to_mcp() for item in change.contents]
        return _notification("notifications/resources/updated", params)
    if isinstance(change, CatalogListChanged):
        return _notification(f"notifications/{change.kind}/list_changed", params)
    return _notification("notifications/resources/list_changed", params)


CATALOG_OF_METHOD = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/templates/list": "resource_templates",
}
"""The catalog each list method asks for."""


def catalog_capabilities(server: ReferenceServer) -> dict[str, Any]:
    """The ``tools`` and ``prompts`` capabilities (``listChanged`` when granted)."""
    changing = server.listen_supported and server.catalogs.list_changed_supported
    return {"tools": {"listChanged": changing}, "prompts": {"listChanged": changing}}


def catalog_body(kind: str, page: ListReply) -> dict[str, Any]:
    """A catalog page's items and cursor, written alike by both revisions."""
    body: dict[str, Any] = {CATALOG_FIELDS[kind]: plain(page.items)}
    if page.next_cursor is not None:
        body["nextCursor"] = page.next_cursor
    return body


def catalog_page(
    server: ReferenceServer,
    kind: str,
    request_id: str | int,
    params: dict[str, Any],
    principal: str | None,
    *,
    missing: int,
) -> ListReply | Answer:
    """The catalog page a list request asks for, or what to answer instead (no such
    catalog: ``missing`` is its HTTP status; a stalled or refused page), alike on both
    revisions (a refusal's HTTP status: 400 when ``missing`` is 404, else 200)."""
    if kind not in server.catalogs.items:
        return Reply(error(request_id, METHOD_NOT_FOUND, "Method not found"), missing)
    if server.catalogs.faults.get(kind) == "timeout":
        return Stall()
    cursor = params.get("cursor")
    page = server.catalogs.page(
        kind, cursor if isinstance(cursor, str) else None, principal, down=False
    )
    if isinstance(page, RequestFailed):
        return refused_catalog(request_id, page, status=400 if missing == 404 else 200)
    return page


def refused_catalog(request_id: str | int, failed: RequestFailed, *, status: int) -> Answer:
    """A catalog page the reference server refused (a bad cursor, a fault)."""
    match failed.kind:
        case "unreachable":
            return HangUp()
        case "denied":
            return Denied(request_id, failed.detail)
        case "not_found":
            return Reply(error(request_id, INVALID_PARAMS, failed.detail), status)
        case _:
            return Reply(error(request_id, INTERNAL_ERROR, failed.detail))


def hint_notifications(
    hints: tuple[StreamEvent, ...], *, meta: bool = True
) -> tuple[dict[str, Any], ...]:
    """Change hints as the notifications a server writes on an answer."""
    return tuple(
        change_notification(hint, meta=meta)
        for hint in hints
        if isinstance(hint, ResourceUpdated | ResourceListChanged)
    )


def status_for_error(code: int) -> int:
    """The HTTP status the spec gives a JSON-RPC error code (400, 404, else 200)."""
    return _status_for(code)
