"""`McpClientSource`: a `Source` over the official MCP Python SDK's client (``mcp`` 2.x).

DESIGN §4 ("an adapter over the official mcp SDK client"). The SDK does the wire
work (2026-07-28 ``_meta``, headers, SSE, stdio framing); this module turns its
results, exceptions and ``Client.listen`` events into engine replies and stream
events, and keeps three SDK habits away from `FreshCache`:

- **Its response cache.** ``Client.read_resource`` answers from a local copy while
  ``ttlMs`` lasts, and keeps that copy after a ``SubscriptionLost`` (seed case 3's
  hazard). Every read goes to the server through ``client.session.read_resource``:
  the very request ``cache_mode="refresh"`` sends, one level down so that a first
  round asking for input (``input_required``) can be told from a terminal result
  (results reached through input rounds are marked never-cache, as the spec
  requires). Lists use ``Client.list_resources(cache_mode="refresh")``.
- **Its failure modes.** ``MCPError`` codes, SDK timeouts, connection errors and the
  nested exception groups of its task groups become `RequestFailed` values or
  stream endings; none of them is raised out of a source method (only -32601 and
  -32020 on a read raise `ProtocolError`: freshcache is pointed at the wrong thing).
- **A dead transport.** A stdio child that exits leaves the client answering every
  request with ``MCPError(-32000, "Connection closed")``; an HTTP server that refuses a
  connection makes the SDK cancel whatever task entered the client and raise an
  ``ExceptionGroup`` at its exit (python-sdk#3560). Over a client you entered yourself
  (``McpClientSource(client)``) freshcache reports ``unreachable``/``stream_lost`` but
  cannot shield your task from the SDK; ``McpClientSource.connect(server)`` enters its
  own clients in a background task (see `._background`) and replaces a dead one on
  the next request, so a server that goes away and comes back is just a gap.

**Catalogs.** ``list_catalog`` pages ``tools/list``, ``prompts/list`` and
``resources/templates/list`` through the client (``cache_mode="refresh"``, so the SDK's
response cache never answers), carrying the result's ``ttlMs``/``cacheScope`` on
2026-07-28 and none on an older revision. The listen asks for ``toolsListChanged`` and
``promptsListChanged`` too, and the acknowledgment reports a catalog as covered only
when the server honoured its flag and declared ``listChanged`` for it in its
capabilities (templates: ``resources.listChanged``); the SDK's ``ToolsListChanged`` /
``PromptsListChanged`` events become `CatalogListChanged`.

**2025-11-25 sessions** have no ``subscriptions/listen``: the session itself carries
``notifications/tools/list_changed`` (and prompts', resources'), to the client's
``message_handler``. A source built with `McpClientSource.connect` over stdio puts
its own handler first (`_Heard`; the caller's, if given, still gets every message)
and its listen acknowledges, at once, the catalogs whose ``listChanged`` the server
declared (templates with ``resources.listChanged``; no URI: resources are read before
each use), then yields what the handler hears until the client goes (a dead
transport, noticed by the next request: `StreamLost`, and the next client's listen
covers them afresh). Over stdio a notification cannot be lost while the client lives:
it comes on the one pipe the answers come on. Over HTTP the SDK opens the session's
GET stream some time after the handshake and re-opens it without a word after it
breaks, so a ``list_changed`` sent meanwhile is lost unseen: there, on an in-process
server or a transport object (not looked into), and on a client you entered yourself
(its handler is not ours to wrap), no stream covers a catalog: the engine lists it
before each use.

The SDK is imported when a source is built, never when freshcache is imported:
without it, building one raises `MissingDependencyError` naming the install command.
"""

from __future__ import annotations

import itertools
import logging
import shlex
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.lowlevel

from .._core import (
    CatalogKind,
    CatalogListChanged,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    Partition,
    ReadReply,
    RequestFailed,
    ResourceContents,
    ResourceInfo,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
)
from .._core._backlog import overflowed
from .._core._frozen import frozen
from .._errors import ConfigurationError, MissingDependencyError
from .._protocol._client import session_info
from .._protocol._reissue import lost_answer, sdk_answer_lost
from .._protocol._tools import ToolReply
from .._protocol._wire import (
    METHOD_NOT_FOUND,
    PROTOCOL_VERSION,
    DenialRules,
    catalog_reply,
    failure_from_error,
    revision_at_least,
)
from ._background import BackgroundTask, Inbox
from ._source import ServerInfo, cannot_forward

log = logging.getLogger("freshcache")

INSTALL_HINT = "pip install '.[mcp]' (in a checkout of freshcache)"

CONNECTION_CLOSED = -32000
"""The SDK's own code for "the connection is gone" (``mcp_types.CONNECTION_CLOSED``)."""
REQUEST_TIMEOUT = -32001
"""The SDK's own code for "no answer within ``read_timeout_seconds``"."""

T = TypeVar("T")


def load_sdk() -> SimpleNamespace:
    """The parts of the ``mcp`` SDK this adapter uses; `MissingDependencyError` without it."""
    try:
        from mcp import Client, StdioServerParameters
        from mcp.client.subscriptions import (
            ListenNotSupportedError,
            PromptsListChanged,
            ResourcesListChanged,
            ResourceUpdated,
            SubscriptionLost,
            ToolsListChanged,
        )
        from mcp.shared.exceptions import MCPError
    except ImportError as exc:
        raise MissingDependencyError(
            "McpClientSource needs the official MCP Python SDK 2.x (mcp>=2.3,<3), which is "
            f"not installed here; install it with: {INSTALL_HINT}"
        ) from exc
    return SimpleNamespace(
        Client=Client,
        StdioServerParameters=StdioServerParameters,
        ListenNotSupportedError=ListenNotSupportedError,
        ResourceUpdated=ResourceUpdated,
        ResourcesListChanged=ResourcesListChanged,
        ToolsListChanged=ToolsListChanged,
        PromptsListChanged=PromptsListChanged,
        SubscriptionLost=SubscriptionLost,
        MCPError=MCPError,
    )


# --------------------------------------------------------------------------- errors


def failure_from_sdk_error(exc: BaseException, denial: DenialRules) -> RequestFailed:
    """Map whatever an SDK request raised to a `RequestFailed` (DESIGN §5).

    ``MCPError`` -32602 / -32002 → ``not_found``; a denial per ``denial`` → ``denied``;
    -32000 (the SDK's "connection closed") and connection errors → ``unreachable``;
    -32001 (the SDK's request timeout) and ``TimeoutError`` → ``timeout``; -32603 and
    anything else → ``server_error``. An ``ExceptionGroup`` is judged by its first
    leaf. -32601 and -32020 raise `ProtocolError` (a misconfiguration, not a state).
    """
    leaf = _first_leaf(exc)
    sdk = load_sdk()
    if isinstance(leaf, sdk.MCPError):
        code, message = int(leaf.code), str(leaf.message)
        if code == CONNECTION_CLOSED:
            return RequestFailed("unreachable", f"connection closed: {message}", code)
        if code == REQUEST_TIMEOUT:
            return RequestFailed("timeout", message, code)
        return failure_from_error(code, message, data=leaf.data, denial=denial)
    if isinstance(leaf, TimeoutError) or _is_httpx2(leaf, "TimeoutException"):
        return RequestFailed("timeout", _describe(leaf))
    if isinstance(leaf, OSError) or _is_httpx2(leaf, "TransportError"):
        return RequestFailed("unreachable", _describe(leaf))
    if isinstance(leaf, RuntimeError) and "context manager" in str(leaf):
        # "Client must be used within an async context manager": not entered, or exited.
        return RequestFailed("unreachable", f"the mcp.Client is not open: {leaf}")
    if type(leaf).__name__ == "ValidationError":
        return RequestFailed("server_error", f"malformed result: {_describe(leaf)}")
    return RequestFailed("server_error", _describe(leaf))


def is_connection_closed(exc: BaseException) -> bool:
    """Whether ``exc`` says the client's transport is gone for good."""
    leaf = _first_leaf(exc)
    code = getattr(leaf, "code", None)
    return code == CONNECTION_CLOSED and str(getattr(leaf, "message", "")) == "Connection closed"


def _first_leaf(exc: BaseException) -> BaseException:
    seen = 0
    while seen < 32:  # nested anyio task groups wrap a few levels deep
        members = getattr(exc, "exceptions", None)
        if not isinstance(members, tuple) or not members:
            return exc
        # Prefer a real error over the cancellations a failing task group adds.
        exc = next((m for m in members if isinstance(m, Exception)), members[0])
        seen += 1
    return exc


def _is_httpx2(exc: BaseException, name: str) -> bool:
    try:
        import httpx2  # the SDK's HTTP client (pydantic's httpx fork)
    except ImportError:  # pragma: no cover - installed with the SDK
        return False
    kind = getattr(httpx2, name, None)
    return isinstance(kind, type) and isinstance(exc, kind)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --------------------------------------------------------------------------- connections


@dataclass(eq=False)
class _Connection:
    """One entered ``mcp.Client``."""

    client: Any
    closed: anyio.Event | None = None
    """Set once the client has exited (owned clients only; a borrowed one is not watched)."""
    retired: anyio.Event | None = None
    """Set to make the host let go of an owned client (its transport is gone)."""


class _Unreachable(Exception):
    """No usable client right now; the message says why."""


@dataclass(eq=False)
class _Attempt:
    done: anyio.Event
    connection: _Connection | None = None
    detail: str = ""


class _BorrowedClient:
    """A client the caller entered and keeps: used as it is, never replaced."""

    def __init__(self, client: Any) -> None:
        self.connection = _Connection(client)

    async def get(self) -> _Connection:
        return self.connection

    def retire(self, connection: _Connection) -> None:
        return None  # not ours to replace

    async def aclose(self) -> None:
        return None  # the caller exits it


class _OwnedClients:
    """Clients this source builds, enters in its background task, and replaces after
    their transport died (stdio: a new child process; HTTP: a new connection)."""

    def __init__(
        self, first: Any, make: Callable[[], Any], connect_timeout: float, name: str
    ) -> None:
        self._next: Any = first
        self._make = make
        self._timeout = connect_timeout
        self._live: _Connection | None = None
        self._attempt: _Attempt | None = None
        self._wanted: anyio.Event | None = None
        self._closed = False
        self._host = BackgroundTask(name, self._serve)

    async def get(self) -> _Connection:
        live = self._live
        if live is not None and live.retired is not None and not live.retired.is_set():
            return live
        if self._closed:
            raise _Unreachable("the source is closed")
        attempt = self._attempt
        if attempt is None:
            # One connection attempt, shared by every caller that needs a client now.
            attempt = self._attempt = _Attempt(anyio.Event())
            if self._wanted is None:
                self._wanted = anyio.Event()
            self._wanted.set()
            self._host.start()
        with anyio.move_on_after(self._timeout):
            await attempt.done.wait()
        if attempt.connection is not None:
            return attempt.connection
        raise _Unreachable(attempt.detail or f"no connection within {self._timeout:g}s")

    def retire(self, connection: _Connection) -> None:
        if connection.retired is not None:
            connection.retired.set()

    async def aclose(self) -> None:
        self._closed = True
        if self._attempt is not None:  # nobody waits the full connect_timeout for nothing
            self._finish(self._attempt, None, "the source is closed")
        live = self._live
        if live is not None and live.retired is not None and live.closed is not None:
            live.retired.set()  # let the client exit on its own first (stdio: a clean shutdown)
            with anyio.move_on_after(5.0, shield=True):
                await live.closed.wait()
        await self._host.stop()

    async def _serve(self) -> None:
        while True:
            wanted = self._wanted
            assert wanted is not None
            await wanted.wait()
            self._wanted = anyio.Event()
            attempt = self._attempt
            if attempt is not None:
                await self._connect(attempt)

    async def _connect(self, attempt: _Attempt) -> None:
        connection: _Connection | None = None
        detail = ""
        try:
            client, self._next = (self._next if self._next is not None else self._make()), None
            async with client:
                connection = _Connection(client, closed=anyio.Event(), retired=anyio.Event())
                self._live = connection
                self._finish(attempt, connection, "")
                assert connection.retired is not None
                await connection.retired.wait()
        except Exception as exc:  # what the SDK raises at entry or exit, groups included
            detail = _describe(_first_leaf(exc))
            log.info("%s ended: %s", self._host.name, detail)
        finally:
            if connection is not None:
                for event in (connection.retired, connection.closed):
                    if event is not None:
                        event.set()
                if self._live is connection:
                    self._live = None
        if connection is None:
            self._finish(attempt, None, detail or "the client could not connect")

    def _finish(self, attempt: _Attempt, connection: _Connection | None, detail: str) -> None:
        attempt.connection, attempt.detail = connection, detail
        if self._attempt is attempt:
            self._attempt = None
        attempt.done.set()


# --------------------------------------------------------------------------- 2025 sessions


_SESSION_EVENTS: dict[str, str] = {
    "notifications/tools/list_changed": "tools",
    "notifications/prompts/list_changed": "prompts",
    "notifications/resources/list_changed": "resources",
}
"""The session notifications a 2025-11-25 listen hands on (method -> what changed)."""

_MAX_HEARD = 1000
"""Per listen; one that falls further behind is lost (its catalogs are listed again)."""


class _Heard:
    """The ``message_handler`` of the clients `McpClientSource.connect` builds: every
    ``*/list_changed`` a 2025-11-25 session delivers goes to each open listen's inbox
    (registered before its acknowledgment, so nothing after that is missed), then to
    the caller's own handler, if one was given."""

    def __init__(self, then: Callable[[Any], Awaitable[None]] | None) -> None:
        self._then = then
        self.inboxes: set[Inbox[str]] = set()

    async def __call__(self, message: Any) -> None:
        what = _SESSION_EVENTS.get(getattr(message, "method", None) or "")
        if what is not None:
            for inbox in self.inboxes:
                if not inbox.put(what):
                    inbox.put("overflowed", final=True)
        if self._then is not None:
            await self._then(message)
        else:
            await anyio.lowlevel.checkpoint()


# --------------------------------------------------------------------------- the source


class McpClientSource:
    """A `Source` over the official MCP Python SDK's ``mcp.Client`` (SDK 2.x).

    ``McpClientSource(client)`` uses a client you entered (``async with Client(...)``)
    and still own. ``McpClientSource.connect(server, **client_options)`` builds and
    enters its own clients and replaces one whose transport died; prefer it when the
    server may go away (see the module docstring for why).

    ``denial`` says which JSON-RPC errors mean "this principal may not read it"
    (default: messages such as "Forbidden", see `DenialRules`). The SDK does not keep
    HTTP status codes: a plain HTTP 401/403 reaches it as -32603 and counts as
    ``server_error`` (still no text), unless ``denial`` matches its message.
    """

    def __init__(
        self, client: Any, *, denial: DenialRules | None = None, identity: str | None = None
    ) -> None:
        sdk = load_sdk()
        if not isinstance(client, sdk.Client):
            raise ConfigurationError(
                f"McpClientSource takes an entered mcp.Client, got {client!r}; to let freshcache "
                "connect by itself use McpClientSource.connect(url_or_stdio_parameters)"
            )
        self._setup(
            sdk,
            _BorrowedClient(client),
            denial,
            identity if identity is not None else _identity_of(client.server),
            None,
        )

    @classmethod
    def connect(
        cls,
        server: Any,
        *,
        denial: DenialRules | None = None,
        identity: str | None = None,
        connect_timeout: float = 10.0,
        **client_options: Any,
    ) -> McpClientSource:
        """A source that builds ``mcp.Client(server, **client_options)`` itself.

        ``server`` is what ``mcp.Client`` takes: a URL, ``StdioServerParameters``, a
        transport. The client is entered on first use in a background task and
        replaced on the next request after its transport died. ``cache`` defaults to
        ``None`` (freshcache never uses the SDK's response cache).
        """
        sdk = load_sdk()
        if not connect_timeout > 0:
            raise ConfigurationError(
                f"connect_timeout must be a number of seconds > 0, got {connect_timeout!r}"
            )
        options = {"cache": None, **client_options}
        # A 2025-11-25 session's list_changed reaches the client's message handler; only
        # where none can be lost unseen while the client lives (see the module docstring).
        heard = (
            _Heard(options.get("message_handler"))
            if isinstance(server, sdk.StdioServerParameters)
            else None
        )
        if heard is not None:
            options["message_handler"] = heard

        def make() -> Any:
            return sdk.Client(server, **options)

        first = make()  # builds (and so validates) the options now, not at first use
        self = cls.__new__(cls)
        name = identity if identity is not None else _identity_of(server)
        owned = _OwnedClients(first, make, connect_timeout, f"mcp client {name}")
        self._setup(sdk, owned, denial, name, heard)
        return self

    def _setup(
        self,
        sdk: SimpleNamespace,
        clients: _BorrowedClient | _OwnedClients,
        denial: DenialRules | None,
        identity: str,
        heard: _Heard | None,
    ) -> None:
        self._sdk = sdk
        self._clients = clients
        self.denial = denial if denial is not None else DenialRules()
        self._identity = identity
        self._failed_listens = itertools.count(1)
        self._heard = heard
        self._sessions = itertools.count(1)

    def __repr__(self) -> str:
        mode = "owned" if isinstance(self._clients, _OwnedClients) else "borrowed"
        return f"McpClientSource({self._identity!r}, {mode})"

    @property
    def identity(self) -> str:
        return self._identity

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> ServerInfo:
        try:
            connection = await self._clients.get()
            client = connection.client
            version = str(client.protocol_version)
            capabilities = client.server_capabilities
            implementation = client.server_info
            discovered = getattr(client.session, "discover_result", None)
        except _Unreachable as exc:
            return ServerInfo(reachable=False, detail=str(exc))
        except Exception as exc:
            return ServerInfo(reachable=False, detail=_describe(_first_leaf(exc)))
        resources = getattr(capabilities, "resources", None)
        info = session_info(
            version,
            supported=tuple(getattr(discovered, "supported_versions", None) or ()),
            subscribe=bool(getattr(resources, "subscribe", False)),
            list_changed=bool(getattr(resources, "list_changed", False)),
            name=getattr(implementation, "name", None),
            server_version=getattr(implementation, "version", None),
        )
        if not info.listen and self._session_heard(version) and _session_covers(capabilities):
            # The session carries list_changed: a listen covers what it declares.
            return replace(info, listen=True)
        return info

    def _session_heard(self, version: str) -> bool:
        """Whether this source hears a pre-2026 session's own notifications."""
        return self._heard is not None and not revision_at_least(version, PROTOCOL_VERSION)

    async def aclose(self) -> None:
        await self._clients.aclose()

    # ------------------------------------------------------------------ requests

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        async def read(client: Any) -> ReadReply:
            first = await client.session.read_resource(uri, allow_input_required=True)
            if hasattr(first, "contents"):
                return _read_reply(first, multi_round_trip=False)
            # input_required: let the SDK drive the rounds (its callbacks answer them);
            # what comes back was reached through retries and must never be cached.
            final = await client.read_resource(uri, cache_mode="refresh")
            return _read_reply(final, multi_round_trip=True)

        return await self._request(read)

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        async def page(client: Any) -> ListReply:
            result = await client.list_resources(cursor=cursor, cache_mode="refresh")
            return ListReply(
                tuple(
                    ResourceInfo(r.uri, r.name, r.mime_type, frozen(_json(r)))
                    for r in result.resources
                ),
                next_cursor=result.next_cursor,
                ttl_ms=result.ttl_ms,
                cache_scope=result.cache_scope,
            )

        return await self._request(page)

    ask_pushed_bodies = None
    """The SDK's listen carries change hints only."""
    shared_catalogs = None

    async def list_catalog(
        self, kind: CatalogKind, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        """One page of ``tools/list``, ``prompts/list`` or ``resources/templates/list``."""

        async def page(client: Any) -> ListReply | RequestFailed:
            lister = getattr(client, _SDK_LISTERS[kind])
            result = await lister(cursor=cursor, cache_mode="refresh")
            dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            modern = revision_at_least(client.protocol_version, PROTOCOL_VERSION)
            return catalog_reply(kind, dumped, hintless=not modern)

        return await self._request(page)

    async def call_tool(
        self, params: Mapping[str, Any], principal: Partition, tool: Mapping[str, Any] | None
    ) -> ToolReply | RequestFailed:
        """One ``tools/call`` through the SDK session (`forward`)."""
        return await self.forward("tools/call", params, principal)

    async def forward(
        self, method: str, params: Mapping[str, Any], principal: Partition
    ) -> ToolReply | RequestFailed:
        """`Source.forward` (``prompts/get``; ``tools/call`` too) through the SDK session
        (``allow_input_required``: an ``input_required`` result is handed back, not
        answered by the SDK). Never sent twice: an exception after it went out (the
        connection closed, the SDK's timeout, an unusable result) is a lost answer;
        only the server's JSON-RPC error is its answer."""
        sender = _SDK_SENDERS.get(method)
        if sender is None:
            return cannot_forward(self, method)
        try:
            connection = await self._clients.get()
        except _Unreachable as exc:
            return RequestFailed("unreachable", str(exc))  # never sent

        async def sent(client: Any) -> dict[str, Any]:
            send = getattr(client.session, sender)
            name, arguments = params["name"], params.get("arguments")
            result = await send(name, arguments, allow_input_required=True, **_rounds(params))
            dumped: dict[str, Any] = result.model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            return dumped

        try:
            return ToolReply(await _until_closed(connection, sent))
        except Exception as exc:
            if is_connection_closed(exc) or isinstance(exc, _Unreachable):
                self._clients.retire(connection)
            if isinstance(exc, _Unreachable):
                return lost_answer(method, RequestFailed("unreachable", str(exc)))
            failure = failure_from_sdk_error(exc, self.denial)
            leaf = _first_leaf(exc)
            if isinstance(leaf, self._sdk.MCPError) and not sdk_answer_lost(
                int(leaf.code), str(leaf.message), (CONNECTION_CLOSED, REQUEST_TIMEOUT)
            ):
                return failure  # the server's own error answer
            return lost_answer(method, failure)

    async def _request(self, call: Callable[[Any], Awaitable[T]]) -> T | RequestFailed:
        try:
            connection = await self._clients.get()
        except _Unreachable as exc:
            return RequestFailed("unreachable", str(exc))
        try:
            return await _until_closed(connection, call)
        except Exception as exc:
            if is_connection_closed(exc) or isinstance(exc, _Unreachable):
                self._clients.retire(connection)
            if isinstance(exc, _Unreachable):
                return RequestFailed("unreachable", str(exc))
            return failure_from_sdk_error(exc, self.denial)

    # ------------------------------------------------------------------ listening

    async def listen(
        self, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """One ``Client.listen`` stream, mapped onto the `Source.listen` contract.

        The stream's id is the SDK's listen request id once the acknowledgment is in
        (``ListenStarted`` and ``ListenAcknowledged`` follow each other); a stream
        that fails before that gets a local id and ends at once.
        """
        sdk = self._sdk
        connection: _Connection | None = None
        try:
            connection = await self._clients.get()
            session = self._session_heard(str(connection.client.protocol_version))
        except Exception as exc:
            sid = f"mcp-listen-unsent-{next(self._failed_listens)}"
            yield ListenStarted(sid, uris, list_changed)
            yield self._listen_failed(sid, exc, connection)
            return
        if session:  # a 2025-11-25 session this source hears
            async with aclosing(self._session_listen(connection, uris, list_changed)) as held:
                async for event in held:
                    yield event
            return
        try:
            manager = connection.client.listen(
                tools_list_changed=list_changed,
                prompts_list_changed=list_changed,
                resources_list_changed=list_changed,
                resource_subscriptions=sorted(uris),
            )
            subscription = await manager.__aenter__()
        except Exception as exc:
            sid = f"mcp-listen-unsent-{next(self._failed_listens)}"
            yield ListenStarted(sid, uris, list_changed)
            yield self._listen_failed(sid, exc, connection)
            return
        sid = subscription.subscription_id
        try:
            yield ListenStarted(sid, uris, list_changed)
            honored = subscription.honored
            yield ListenAcknowledged(
                sid,
                frozenset(honored.resource_subscriptions or ()),
                bool(honored.resources_list_changed),
                covered_catalogs(honored, connection.client.server_capabilities),
            )
            while True:
                try:
                    event = await _until_closed(connection, lambda _: subscription.__anext__())
                except StopAsyncIteration:
                    yield StreamClosed(sid)
                    return
                except sdk.SubscriptionLost as exc:
                    cause = exc.__cause__
                    yield StreamLost(sid, f"{exc}" + (f" ({cause})" if cause is not None else ""))
                    return
                except Exception as exc:
                    if is_connection_closed(exc) or isinstance(exc, _Unreachable):
                        self._clients.retire(connection)
                    yield StreamLost(sid, _describe(_first_leaf(exc)))
                    return
                if isinstance(event, sdk.ResourceUpdated):
                    yield ResourceUpdated(str(event.uri), sid)
                elif isinstance(event, sdk.ResourcesListChanged):
                    yield ResourceListChanged(sid)
                elif isinstance(event, sdk.ToolsListChanged):
                    yield CatalogListChanged("tools", sid)
                elif isinstance(event, sdk.PromptsListChanged):
                    yield CatalogListChanged("prompts", sid)
        finally:
            # Leaving the SDK's context cancels the subscription (HTTP: closes the
            # stream; stdio: notifications/cancelled). Its exit does not block.
            with anyio.CancelScope(shield=True):
                try:
                    await manager.__aexit__(None, None, None)
                except Exception as exc:
                    log.debug("closing subscription %s: %r", sid, exc)

    async def _session_listen(
        self, connection: _Connection, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """A listen on a 2025-11-25 session (no ``subscriptions/listen``): acknowledged
        at once with the catalogs the server declared ``listChanged`` for, then what
        the session delivers, until the client goes."""
        assert self._heard is not None
        sid = f"mcp-session-{next(self._sessions)}"
        yield ListenStarted(sid, uris, list_changed)
        inbox = Inbox[str](_MAX_HEARD)
        self._heard.inboxes.add(inbox)  # before the ack: nothing after it can be missed
        try:
            capabilities = connection.client.server_capabilities
            asked = SimpleNamespace(
                tools_list_changed=list_changed,
                prompts_list_changed=list_changed,
                resources_list_changed=list_changed,
            )
            resources = getattr(capabilities, "resources", None)
            yield ListenAcknowledged(
                sid,
                frozenset(),  # no resources/subscribe here: URIs are read before each use
                list_changed and bool(getattr(resources, "list_changed", False)),
                covered_catalogs(asked, capabilities),
            )
            while True:
                try:
                    what = await _until_closed(connection, lambda _: inbox.get())
                except _Unreachable as exc:
                    yield StreamLost(sid, str(exc))
                    return
                if what == "tools":
                    yield CatalogListChanged("tools", sid)
                elif what == "prompts":
                    yield CatalogListChanged("prompts", sid)
                elif what == "resources":
                    yield ResourceListChanged(sid)
                else:
                    yield overflowed(sid, _MAX_HEARD)
                    return
        finally:
            self._heard.inboxes.discard(inbox)

    def _listen_failed(
        self, sid: str, exc: BaseException, connection: _Connection | None
    ) -> StreamEvent:
        leaf = _first_leaf(exc)
        sdk = self._sdk
        if isinstance(leaf, sdk.ListenNotSupportedError):
            return ListenUnsupported(str(leaf))
        if isinstance(leaf, sdk.MCPError) and leaf.code == METHOD_NOT_FOUND:
            return ListenUnsupported(f"the server has no subscriptions/listen: {leaf.message}")
        gone = is_connection_closed(leaf) or isinstance(leaf, _Unreachable)
        if connection is not None and gone:
            self._clients.retire(connection)
        if isinstance(leaf, TimeoutError):
            return StreamLost(sid, "no acknowledgment within the client's read_timeout_seconds")
        return StreamLost(sid, _describe(leaf))


async def _until_closed(connection: _Connection, call: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``call(client)``, giving up with `_Unreachable` if the client exits meanwhile."""
    closed = connection.closed
    if closed is None:
        return await call(connection.client)
    if closed.is_set():
        raise _Unreachable("the connection to the server closed")
    outcome: list[T] = []
    failure: list[Exception] = []
    async with anyio.create_task_group() as watch:

        async def on_close() -> None:
            await closed.wait()
            watch.cancel_scope.cancel()

        watch.start_soon(on_close)
        try:
            outcome.append(await call(connection.client))
        except Exception as exc:  # re-raised below, outside the task group (no group wrapping)
            failure.append(exc)
        finally:
            watch.cancel_scope.cancel()
    if failure:
        raise failure[0]
    if not outcome:
        raise _Unreachable("the connection to the server closed while the request was in flight")
    return outcome[0]


_SDK_LISTERS: dict[CatalogKind, str] = {
    "tools": "list_tools",
    "prompts": "list_prompts",
    "resource_templates": "list_resource_templates",
}
"""The ``mcp.Client`` method that lists each catalog."""


def covered_catalogs(honored: Any, capabilities: Any) -> frozenset[str]:
    """The catalogs a listen acknowledgment covers: the server honoured the flag and
    declared ``listChanged`` for that catalog (templates: with the resource list)."""

    def declared(name: str) -> bool:
        return bool(getattr(getattr(capabilities, name, None), "list_changed", False))

    covered: set[str] = set()
    if getattr(honored, "tools_list_changed", None) and declared("tools"):
        covered.add("tools")
    if getattr(honored, "prompts_list_changed", None) and declared("prompts"):
        covered.add("prompts")
    if getattr(honored, "resources_list_changed", None) and declared("resources"):
        covered.add("resource_templates")
    return frozenset(covered)


def _session_covers(capabilities: Any) -> bool:
    """Whether a 2025-11-25 session declares a ``listChanged`` a listen can cover."""
    return any(
        getattr(getattr(capabilities, name, None), "list_changed", False)
        for name in ("tools", "prompts", "resources")
    )


def _read_reply(result: Any, *, multi_round_trip: bool) -> ReadReply:
    contents = tuple(
        ResourceContents.from_mcp(item.model_dump(by_alias=True, mode="json", exclude_none=True))
        for item in result.contents
    )
    return ReadReply(
        contents,
        ttl_ms=result.ttl_ms,
        cache_scope=result.cache_scope,
        from_server=True,
        multi_round_trip=multi_round_trip,
    )


def _json(model: Any) -> dict[str, Any]:
    """An SDK model as the JSON the server sent (wire names, no unset fields)."""
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


_SDK_SENDERS = {"tools/call": "call_tool", "prompts/get": "get_prompt"}
"""The requests this source sends through the SDK session's own methods."""


def _rounds(params: Mapping[str, Any]) -> dict[str, Any]:
    """The SDK's keywords for a continuation of an ``input_required`` request."""
    extra: dict[str, Any] = {}
    if "requestState" in params:
        extra["request_state"] = params["requestState"]
    if "inputResponses" in params:
        extra["input_responses"] = params["inputResponses"]
    return extra


def _identity_of(server: Any) -> str:
    if isinstance(server, str):
        parts = urlsplit(server)
        # Credentials never go into cache keys.
        netloc = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    command = getattr(server, "command", None)
    if isinstance(command, str):
        args = [str(a) for a in getattr(server, "args", None) or []]
        return "stdio:" + shlex.join([command, *args])
    return f"mcp:{type(server).__name__}@{id(server):x}"


__all__ = ["INSTALL_HINT", "McpClientSource", "failure_from_sdk_error", "load_sdk"]
