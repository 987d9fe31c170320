"""MCP 2026-07-28 messages, sans-IO: build requests, read replies and stream messages.

Shared by every transport (HTTP, stdio). Spec pages: basic/index (``_meta`` keys,
error codes), basic/transports/streamable-http (headers, Base64 sentinel),
basic/patterns/subscriptions (listen, acknowledgment, graceful close),
server/resources and server/utilities/caching (read/list results).

pydantic validates what comes off the wire; what goes on is plain dicts. Nothing in
here performs I/O.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._core import (
    CATALOG_FIELDS,
    CatalogKind,
    ListReply,
    ReadReply,
    Remediation,
    RequestFailed,
    ResourceContents,
    ResourceInfo,
)
from .._core._frozen import frozen
from .._errors import (
    ConfigurationError,
    HeaderMismatchError,
    MethodNotFoundError,
    UnsupportedVersionError,
)

if TYPE_CHECKING:
    from ._wire_models import ValidationError, _Contents, _ListResult, _Message, _ReadResult
else:

    class _OnFirstUse:
        """A wire model until the first message is validated: then `_load_models` puts
        the pydantic model in its place (pydantic is a third of a second to import)."""

        def __init__(self, name: str) -> None:
            self.name = name

        def model_validate(self, obj: Any) -> Any:
            return _load_models()[self.name].model_validate(obj)

    _Message, _Contents, _ReadResult, _ListResult = (
        _OnFirstUse(name) for name in ("_Message", "_Contents", "_ReadResult", "_ListResult")
    )

    class ValidationError(Exception):
        """Raised by no one: replaced by pydantic's with the models."""


def _load_models() -> dict[str, Any]:
    """Load the pydantic models into this module's globals (once); those globals."""
    from . import _wire_models

    names = ("ValidationError", "_Message", "_Contents", "_ReadResult", "_ListResult")
    models = globals()
    models.update({name: getattr(_wire_models, name) for name in names})
    return models


def _inject_trace_context(meta: dict[str, Any]) -> None:
    """OpenTelemetry's ``propagate.inject``, imported on the first request sent (its
    import reads the propagators' entry points)."""
    from opentelemetry import propagate

    globals()["_inject_trace_context"] = propagate.inject  # the callers call it directly now
    propagate.inject(meta)


PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_VERSIONS = (PROTOCOL_VERSION,)
LEGACY_VERSION = "2025-11-25"
"""The older revision freshcache offers in ``initialize`` when ``server/discover`` fails."""
LEGACY_VERSIONS = (LEGACY_VERSION, "2025-06-18", "2025-03-26")
"""What an ``initialize`` answer may name for freshcache to go on (basic/lifecycle)."""
SESSION_HEADER = "Mcp-Session-Id"

_DATED_REVISION = re.compile(r"\d{4}-\d{2}-\d{2}")


def revision_at_least(version: object, revision: str) -> bool:
    """Whether protocol ``version`` is the dated ``revision`` or a later one. Only dated
    revisions (``YYYY-MM-DD``) are ordered: anything else (a draft label, ``None``)
    counts as not reaching it, so it gets no feature of a newer revision."""
    return (
        isinstance(version, str)
        and _DATED_REVISION.fullmatch(version) is not None
        and version >= revision  # zero-padded dates order as strings once both are dates
    )


META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

# JSON-RPC / MCP error codes (basic/index "Error codes").
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602  # also "resource not found" and "invalid cursor"
INTERNAL_ERROR = -32603
LEGACY_RESOURCE_NOT_FOUND = -32002
HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022

_DENIAL_WORDS = (
    r"(?i)\b(forbidden|access denied|permission denied|not permitted|not allowed|"
    r"unauthori[sz]ed|not authori[sz]ed|insufficient[_ ]scope)\b"
)


@dataclass(frozen=True, slots=True)
class DenialRules:
    """Which JSON-RPC errors mean "this principal may not read it" (DESIGN §5).

    No code is reserved for denial, so servers differ. By default an error whose
    message says so in plain words (forbidden, access denied, unauthorized ...)
    counts as a denial, whatever its code; list the codes your server uses in
    ``codes`` to be exact. HTTP 401 and 403 always mean denied.
    """

    codes: frozenset[int] = frozenset()
    """JSON-RPC error codes that always mean denied."""
    message_pattern: str | None = _DENIAL_WORDS
    """Regular expression searched in the error message; ``None`` turns it off."""
    _compiled: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        reserved = {INVALID_PARAMS, LEGACY_RESOURCE_NOT_FOUND, INTERNAL_ERROR, METHOD_NOT_FOUND}
        clash = set(self.codes) & reserved
        if clash:
            raise ConfigurationError(
                f"DenialRules.codes {sorted(clash)} already mean not found / internal error "
                "/ method not found in MCP; pick your server's own denial code"
            )
        if self.message_pattern is not None:
            try:
                object.__setattr__(self, "_compiled", re.compile(self.message_pattern))
            except re.error as exc:
                raise ConfigurationError(
                    f"DenialRules.message_pattern is not a valid regular expression: {exc}"
                ) from exc

    def is_denial(self, code: int, message: str) -> bool:
        if code in self.codes:
            return True
        if code in (INVALID_PARAMS, LEGACY_RESOURCE_NOT_FOUND, METHOD_NOT_FOUND):
            return False
        return self._compiled is not None and self._compiled.search(message) is not None


# --------------------------------------------------------------------------- outgoing


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """What freshcache says about itself in every request's ``_meta``."""

    name: str = "freshcache"
    version: str = "0.1.0"
    capabilities: Mapping[str, Any] = field(default_factory=dict)


def request_meta(identity: ClientIdentity, protocol_version: str) -> dict[str, Any]:
    """The ``_meta`` every 2026-07-28 request carries."""
    return {
        META_PROTOCOL_VERSION: protocol_version,
        META_CLIENT_INFO: {"name": identity.name, "version": identity.version},
        META_CLIENT_CAPABILITIES: dict(identity.capabilities),
    }


def build_request(
    request_id: str | int,
    method: str,
    params: Mapping[str, Any] | None,
    *,
    identity: ClientIdentity,
    protocol_version: str = PROTOCOL_VERSION,
    extra_meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A JSON-RPC request with the required ``_meta`` (and e.g. ``traceparent``)."""
    body: dict[str, Any] = dict(params or {})
    meta = request_meta(identity, protocol_version)
    if extra_meta:
        meta.update(extra_meta)
    # W3C trace context of the current span (basic/index: the reserved, unprefixed
    # `traceparent`/`tracestate` keys); a no-op when nothing is being traced.
    _inject_trace_context(meta)
    body["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}


def build_legacy_request(
    request_id: str | int, method: str, params: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A 2025-11-25 JSON-RPC request: no per-request ``_meta`` identity (``initialize``
    carries it once), only the W3C trace context when something is being traced."""
    body: dict[str, Any] = dict(params or {})
    meta: dict[str, Any] = {}
    _inject_trace_context(meta)
    if meta:
        body["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body}


def initialize_params(identity: ClientIdentity) -> dict[str, Any]:
    """``initialize`` params (2025-11-25 basic/lifecycle): offer `LEGACY_VERSION`."""
    return {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": dict(identity.capabilities),
        "clientInfo": {"name": identity.name, "version": identity.version},
    }


def legacy_http_headers(protocol_version: str, session_id: str | None) -> dict[str, str]:
    """Headers for one 2025-11-25 Streamable HTTP request: the negotiated version and
    the session (basic/transports: both on every request after ``initialize``)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": protocol_version,
    }
    if session_id is not None:
        headers[SESSION_HEADER] = session_id
    return headers


def build_notification(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": dict(params)}


def listen_params(
    uris: frozenset[str], list_changed: bool, *, embed_resources: bool = False
) -> dict[str, Any]:
    """``subscriptions/listen`` params: the filter (spec basic/patterns/subscriptions);
    with ``embed_resources`` it asks for pushed bodies (``embedResources``, SEP-3119)."""
    notifications: dict[str, Any] = {}
    if list_changed:
        notifications["resourcesListChanged"] = True
        notifications["toolsListChanged"] = True
        notifications["promptsListChanged"] = True
    if uris:
        notifications["resourceSubscriptions"] = sorted(uris)
        if embed_resources:
            notifications["embedResources"] = True
    return {"notifications": notifications}


_PLAIN_HEADER = re.compile(r"^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$")


def encode_header_value(value: str) -> str:
    """A header value per streamable-http "Value encoding": plain visible ASCII (inner
    spaces too) as is, anything else (non-ASCII, control characters, a tab anywhere,
    edge whitespace, or a value that looks like the sentinel) as ``=?base64?...?=`` of
    its UTF-8 bytes. ``Mcp-Name`` and every ``Mcp-Param-*`` header."""
    looks_encoded = value.startswith("=?base64?") and value.endswith("?=")
    if value == "" or (_PLAIN_HEADER.match(value) and not looks_encoded):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def decode_header_value(value: str) -> str:
    """Inverse of `encode_header_value` (servers and tests use it)."""
    if value.startswith("=?base64?") and value.endswith("?="):
        return base64.b64decode(value[len("=?base64?") : -2]).decode("utf-8")
    return value


def http_headers(
    method: str, params: Mapping[str, Any] | None, protocol_version: str = PROTOCOL_VERSION
) -> dict[str, str]:
    """Headers for one Streamable HTTP POST (DESIGN §5)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": protocol_version,
        "Mcp-Method": method,
    }
    if params is not None:
        if method == "resources/read" and "uri" in params:
            headers["Mcp-Name"] = encode_header_value(str(params["uri"]))
        elif method in ("tools/call", "prompts/get") and "name" in params:
            headers["Mcp-Name"] = encode_header_value(str(params["name"]))
    return headers


# --------------------------------------------------------------------------- incoming


@dataclass(frozen=True, slots=True)
class Response:
    """A JSON-RPC success response."""

    id: str | int | None
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """A JSON-RPC error response."""

    id: str | int | None
    code: int
    message: str
    data: Any = None


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Request:
    """A request sent *by the server* (not allowed in 2026-07-28; counted, ignored)."""

    id: str | int
    method: str


@dataclass(frozen=True, slots=True)
class Malformed:
    """Something that is not a JSON-RPC message."""

    detail: str


Message = Response | ErrorResponse | Notification | Request | Malformed


def parse_message(obj: Any) -> Message:
    """Classify one decoded JSON value; never raises."""
    if not isinstance(obj, dict):
        return Malformed(f"not a JSON object: {type(obj).__name__}")
    try:
        msg = _Message.model_validate(obj)
    except ValidationError as exc:
        return Malformed(f"not a JSON-RPC 2.0 message: {exc.errors()[0]['msg']}")
    if msg.method is not None:
        if msg.id is not None:
            return Request(msg.id, msg.method)
        return Notification(msg.method, msg.params or {})
    if msg.error is not None:
        code = msg.error.get("code")
        if not isinstance(code, int):
            return Malformed("error response without an integer code")
        return ErrorResponse(msg.id, code, str(msg.error.get("message", "")), msg.error.get("data"))
    if msg.result is not None:
        return Response(msg.id, msg.result)
    return Malformed("neither result, error nor method")


def _schema_problem(what: str, exc: ValidationError) -> RequestFailed:
    """A result that breaks the schema, as a ``server_error`` naming the field."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(the result)"
    return RequestFailed("server_error", f"malformed {what} result: {where}: {first['msg']}")


@dataclass(frozen=True, slots=True)
class InputRequired:
    """A ``resultType: "input_required"`` read result (multi-round-trip)."""

    request_state: str | None
    input_requests: dict[str, Any] | None


def read_reply(
    result: Mapping[str, Any], *, retried: bool = False, hintless: bool = False
) -> ReadReply | InputRequired | RequestFailed:
    """Turn a ``resources/read`` result into a reply (``retried``: an MRTR retry's result;
    ``hintless``: a 2025-11-25 result, which has no caching hints to read)."""
    try:
        parsed = _ReadResult.model_validate(result)
    except ValidationError as exc:
        return _schema_problem("read", exc)
    if parsed.resultType == "input_required":
        return InputRequired(parsed.requestState, parsed.inputRequests)
    if parsed.resultType != "complete":
        return RequestFailed("server_error", f"unknown resultType {parsed.resultType!r}")
    if parsed.contents is None:
        return RequestFailed("server_error", "malformed read result: contents: Field required")
    contents = _contents_of(parsed.contents)
    if hintless:
        return ReadReply(contents, hintless=True)
    return ReadReply(
        contents,
        ttl_ms=parsed.ttlMs,
        cache_scope=parsed.cacheScope,
        multi_round_trip=retried,
    )


def _contents_of(items: Iterable[_Contents]) -> tuple[ResourceContents, ...]:
    """Validated wire items as `ResourceContents` (a read result's or a pushed body's)."""
    return tuple(
        ResourceContents(
            uri=c.uri,
            text=c.text,
            blob=c.blob,
            mime_type=c.mimeType,
            annotations=c.annotations,
            meta=c.meta,
        )
        for c in items
    )


def pushed_contents(params: Mapping[str, Any]) -> tuple[ResourceContents, ...] | None:
    """The body a ``notifications/resources/updated`` pushed (``contents``, in the shape
    of a read result's), or ``None`` when it has none or a malformed one (then the
    notification is a plain change hint: a broken envelope may only invalidate)."""
    raw = params.get("contents")
    if not isinstance(raw, list) or not raw:
        return None
    uri = params.get("uri")
    try:
        items = [_Contents.model_validate(item) for item in raw]
    except ValidationError:
        return None
    if any(item.text is None and item.blob is None for item in items):
        return None
    if not any(item.uri == uri for item in items):
        return None  # a body that is not this URI's is no proof of it
    return _contents_of(items)


def catalog_reply(
    kind: CatalogKind, result: Mapping[str, Any], *, hintless: bool = False
) -> ListReply | RequestFailed:
    """Turn a ``tools/list`` / ``prompts/list`` / ``resources/templates/list`` result into
    a page whose items are deeply frozen copies (``hintless``: a 2025-11-25 result).
    An item without the fields the schema requires of it (`usable_item`) is left out:
    no caller could use it, and a framework's tool registry would fail on it."""
    name = CATALOG_FIELDS[kind]
    items = result.get(name)
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return RequestFailed("server_error", f"malformed {kind} list result: {name}")
    items = [item for item in items if usable_item(kind, item)]
    cursor = result.get("nextCursor")
    ttl = result.get("ttlMs")
    scope = result.get("cacheScope")
    if (
        not (cursor is None or isinstance(cursor, str))
        or not (ttl is None or (isinstance(ttl, (int, float)) and not isinstance(ttl, bool)))
        or scope not in (None, "public", "private")
    ):
        return RequestFailed("server_error", f"malformed {kind} list result: hints or cursor")
    size = len(json.dumps(items, separators=(",", ":"), default=str))
    return ListReply(
        (),
        next_cursor=cursor,
        ttl_ms=None if hintless else ttl,
        cache_scope=None if hintless else scope,
        items=frozen(items),
        item_bytes=size,
        hintless=hintless,
    )


_REQUIRED_OBJECTS: dict[str, tuple[str, ...]] = {"tools": ("inputSchema",)}
_REQUIRED_TEXTS: dict[str, tuple[str, ...]] = {"resource_templates": ("uriTemplate",)}


def usable_item(kind: CatalogKind, item: Mapping[str, Any]) -> bool:
    """Whether a catalog item has what the schema requires of it: a non-empty string
    ``name`` (every kind), a tool's ``inputSchema`` object, a template's
    ``uriTemplate`` string."""
    name = item.get("name")
    if not isinstance(name, str) or not name:
        return False
    if not all(isinstance(item.get(key), dict) for key in _REQUIRED_OBJECTS.get(kind, ())):
        return False
    return all(isinstance(item.get(key), str) for key in _REQUIRED_TEXTS.get(kind, ()))


def list_reply(result: Mapping[str, Any]) -> ListReply | RequestFailed:
    """Turn a ``resources/list`` result into a page."""
    try:
        parsed = _ListResult.model_validate(result)
    except ValidationError as exc:
        return _schema_problem("list", exc)
    return ListReply(
        tuple(
            ResourceInfo(r.uri, r.name, r.mimeType, frozen(raw))
            for r, raw in zip(parsed.resources, result["resources"], strict=True)
        ),
        next_cursor=parsed.nextCursor,
        ttl_ms=parsed.ttlMs,
        cache_scope=parsed.cacheScope,
    )


MAX_INPUT_ROUNDS = 4
"""``requestState`` round trips one read may take before freshcache gives up."""


class ReadRounds:
    """The multi-round-trip rule of one ``resources/read`` (server/resources, MRTR), sans-IO.

    Every transport drives it the same way: send ``params``, hand the result to
    `take`; ``None`` means "send ``params`` again" (now carrying ``requestState``).
    A result reached through a retry is marked ``multi_round_trip`` and is never
    cached. freshcache declares no client capabilities, so a round that asks for
    input (``inputRequests``) cannot be answered and is a ``server_error``.
    """

    __slots__ = ("hintless", "params", "rounds", "uri")

    def __init__(self, uri: str, *, hintless: bool = False) -> None:
        self.uri = uri
        self.hintless = hintless
        self.params: dict[str, Any] = {"uri": uri}
        self.rounds = 0

    def take(self, result: Mapping[str, Any]) -> ReadReply | RequestFailed | None:
        reply = read_reply(result, retried=self.rounds > 0, hintless=self.hintless)
        if not isinstance(reply, InputRequired):
            return reply
        if reply.input_requests:
            return RequestFailed(
                "server_error",
                f"the server needs input freshcache cannot give for {self.uri} "
                f"({', '.join(sorted(reply.input_requests))}); it declares no client capabilities",
            )
        if not reply.request_state:
            return RequestFailed(
                "server_error",
                "input_required result with neither requestState nor inputRequests",
            )
        self.rounds += 1
        if self.rounds >= MAX_INPUT_ROUNDS:
            return RequestFailed(
                "server_error",
                f"still input_required after {MAX_INPUT_ROUNDS} round trips for {self.uri}",
            )
        self.params = {"uri": self.uri, "requestState": reply.request_state}
        return None


def renegotiated_version(
    error: ErrorResponse, *, current: str, server: str, method: str, retried: bool
) -> str:
    """The version to re-send a request with after ``-32022`` (basic/versioning).

    The error's data lists what the server speaks; the first of those freshcache
    speaks too is the answer, once per request (``retried``: it was already re-sent
    after a ``-32022``). Raises `UnsupportedVersionError` when there is none or the
    server refuses a version it lists. One rule for every transport.
    """
    data = error.data if isinstance(error.data, dict) else {}
    offered = data.get("supported")
    supported = [v for v in offered if isinstance(v, str)] if isinstance(offered, list) else []
    requested = str(data.get("requested") or current)
    common = [v for v in SUPPORTED_VERSIONS if v in supported]
    if common and not retried:
        return common[0]
    why = (
        f"it rejected {requested} although it lists it as supported"
        if common
        else "no version in common"
    )
    raise UnsupportedVersionError(
        f"{server} supports MCP {supported or '(no versions listed)'} ({method}), freshcache "
        f"speaks {list(SUPPORTED_VERSIONS)}: {why}. Upgrade freshcache or the server.",
        supported=supported,
        requested=requested,
    )


def failure_from_error(
    code: int,
    message: str,
    *,
    data: Any = None,
    denial: DenialRules,
    http_status: int | None = None,
) -> RequestFailed:
    """Map a JSON-RPC error to a result-deciding failure (DESIGN §5).

    Raises `ProtocolError` subclasses for errors that are configuration problems
    (header mismatch, method not found), not resource states.
    """
    remediation = denial_envelope(data)
    if remediation is not None:
        return RequestFailed("denied", message, code, remediation=remediation)
    if code in (INVALID_PARAMS, LEGACY_RESOURCE_NOT_FOUND):
        return RequestFailed("not_found", message, code)
    if denial.is_denial(code, message):
        return RequestFailed("denied", message, code)
    if code == HEADER_MISMATCH:
        raise HeaderMismatchError(
            f"the server says request headers and body disagree (-32020): {message}. "
            "This is a bug in freshcache or a proxy rewriting headers; please report it."
        )
    if code == METHOD_NOT_FOUND:
        raise MethodNotFoundError(
            f"the server does not implement this method (-32601): {message}. Check that "
            "the URL points at an MCP 2026-07-28 endpoint."
        )
    return RequestFailed("server_error", f"{message} ({code})", code)


def denial_envelope(data: Any) -> Remediation | None:
    """The authorization denial envelope of an error's ``data`` (``authorization``:
    ``reason``, ``authorizationContextId``, ``credentialDisposition``,
    ``remediationHints``; a proposal: SEP-2643), or ``None`` when there is none.

    An envelope means denied whatever the error code (none is assigned yet). With no
    usable remediation hint the remediation is *unavailable* (denied, nothing to
    retry with); hints (objects with a string ``type``) make it *available* and are
    handed on, read-only. A malformed envelope is no envelope: the code and message
    decide, as before.
    """
    if not isinstance(data, Mapping):
        return None
    envelope = data.get("authorization")
    if not isinstance(envelope, Mapping) or not isinstance(envelope.get("reason"), str):
        return None
    raw_hints = envelope.get("remediationHints")
    hints = (
        tuple(
            frozen(hint)
            for hint in raw_hints
            if isinstance(hint, Mapping) and isinstance(hint.get("type"), str)
        )
        if isinstance(raw_hints, list)
        else ()
    )
    context_id = envelope.get("authorizationContextId")
    disposition = envelope.get("credentialDisposition")
    return Remediation(
        available=bool(hints),
        hints=hints,
        context_id=context_id if isinstance(context_id, str) else None,
        reason=envelope["reason"],
        credential_disposition=disposition if isinstance(disposition, str) else None,
    )


def subscription_id_of(params: Mapping[str, Any] | None) -> str | int | None:
    meta = (params or {}).get("_meta")
    if isinstance(meta, dict):
        sid = meta.get(META_SUBSCRIPTION_ID)
        if isinstance(sid, (str, int)) and not isinstance(sid, bool):
            return sid
    return None
