"""The `Source` protocol: one way of reaching a server (DESIGN §4, "sources").

A source is thin. It speaks one transport, turns replies into `ReadReply` /
`ListReply` / `RequestFailed` values and its subscription stream into core
`StreamEvent`s. It holds no freshness logic: that is the engine's.

Contract of `Source.listen`:

1. it yields `ListenStarted` (with the listen request's id) before anything else;
2. then whatever the stream carries, translated: `ListenAcknowledged`,
   `ResourceUpdated`, `ResourceListChanged`, `UntrustedMessage`;
3. and it ends by yielding exactly one of `StreamClosed` (the server's ``complete``
   result), `StreamLost` (anything else that ends the stream) or `ListenUnsupported`.

Closing the iterator early (``aclose``) cancels the subscription the way the
transport requires (HTTP: close the stream; stdio: ``notifications/cancelled``).

`SourceWrapper` is a source around another one that forwards every call to it; a
wrapper that notes, steers or substitutes some calls overrides only those.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._core import CatalogKind, ListReply, Partition, ReadReply, RequestFailed, StreamEvent
from .._protocol._tools import ToolAnswer
from .._protocol._wire import PROTOCOL_VERSION

__all__ = [
    "PROTOCOL_VERSION",
    "CatalogSource",
    "ServerInfo",
    "Source",
    "SourceWrapper",
    "ask_pushed_bodies",
    "no_catalogs",
    "no_tool_calls",
]


def ask_pushed_bodies(source: object) -> bool:
    """Ask ``source`` to request pushed bodies on its listens (``embedResources``): its
    own ``ask_pushed_bodies()``, else the ``embed_resources`` switch of the protocol
    object it speaks through (`HttpSource`, `StdioSource`). ``False`` when it has
    neither: it then only ever hears change hints."""
    ask = getattr(source, "ask_pushed_bodies", None)
    if callable(ask):
        return bool(ask())
    protocol = getattr(source, "protocol", None)
    if protocol is None or not hasattr(protocol, "embed_resources"):
        return False
    protocol.embed_resources = True
    return True


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What a source learned about its server when it started (``server/discover``)."""

    reachable: bool
    supported_versions: tuple[str, ...] = ()
    protocol_version: str | None = None
    """The version in use, once agreed."""
    subscribe: bool | None = None
    """``capabilities.resources.subscribe``; ``None`` when unknown."""
    list_changed: bool | None = None
    """``capabilities.resources.listChanged``; ``None`` when unknown."""
    listen: bool | None = None
    """Whether ``subscriptions/listen`` can be used at all; ``None`` when unknown."""
    name: str | None = None
    version: str | None = None
    ttl_ms: float | None = None
    cache_scope: str | None = None
    detail: str = ""
    failure: str | None = None
    """Why discovery gave no result: a failure kind (``"unreachable"``, ``"timeout"``,
    ``"denied"``, ``"server_error"`` when the answer was no usable JSON-RPC) or
    ``"error"`` (a JSON-RPC error answer); ``None`` when it did."""
    raw: dict[str, object] = field(default_factory=dict, compare=False, repr=False)


@runtime_checkable
class Source(Protocol):
    """How `FreshCache` reaches a server."""

    @property
    def identity(self) -> str:
        """A stable name of the server (URL, command line); part of every cache key."""
        ...

    async def start(self) -> ServerInfo:
        """Prepare the transport and discover the server. Must not raise when the
        server is down: report ``reachable=False`` instead."""
        ...

    async def aclose(self) -> None:
        """Release the transport (close connections, stop the subprocess)."""
        ...

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        """One ``resources/read`` that really reaches the server."""
        ...

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        """One page of ``resources/list``."""
        ...

    def listen(self, uris: frozenset[str], list_changed: bool) -> AsyncGenerator[StreamEvent, None]:
        """Open one ``subscriptions/listen`` stream (see the module docstring)."""
        ...

    async def call_tool(
        self, params: Mapping[str, Any], principal: Partition, tool: Mapping[str, Any] | None
    ) -> ToolAnswer:
        """One ``tools/call`` with ``params`` (`freshcache._protocol._tools.tool_call_params`),
        sent at most once: a lost answer is a failure marked ``lost``, never a second
        send. ``tool``: the tool's definition the caller built the call from (``None``:
        unknown); a source whose wire needs it (``Mcp-Param-*`` headers) takes it from
        there, and refuses a tool it left out of the catalog (`ToolRefused`). A source
        that cannot call tools answers `no_tool_calls`."""
        ...


class SourceWrapper:
    """A `Source` that forwards every call to ``inner``.

    Subclass it to change some calls (note them, answer some reads from elsewhere,
    route the stream) and inherit the rest, so a wrapper says only what it changes.
    """

    def __init__(self, inner: Source) -> None:
        self.inner = inner

    @property
    def identity(self) -> str:
        return self.inner.identity

    async def start(self) -> ServerInfo:
        return await self.inner.start()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        return await self.inner.read_resource(uri, principal)

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        return await self.inner.list_resources(cursor, principal)

    def listen(self, uris: frozenset[str], list_changed: bool) -> AsyncGenerator[StreamEvent, None]:
        return self.inner.listen(uris, list_changed)

    def ask_pushed_bodies(self) -> bool:
        return ask_pushed_bodies(self.inner)

    async def call_tool(
        self, params: Mapping[str, Any], principal: Partition, tool: Mapping[str, Any] | None
    ) -> ToolAnswer:
        return await self.inner.call_tool(params, principal, tool)

    async def list_catalog(
        self, kind: CatalogKind, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        lister = getattr(self.inner, "list_catalog", None)
        if lister is None:
            return no_catalogs(self.inner, kind)
        page: ListReply | RequestFailed = await lister(kind, cursor, principal)
        return page


@runtime_checkable
class CatalogSource(Protocol):
    """A `Source` that can also list catalogs (tools, prompts, resource templates).
    Optional: a source without it hands out catalogs as ``server_error`` states."""

    async def list_catalog(
        self, kind: CatalogKind, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        """One page of ``tools/list``, ``prompts/list`` or ``resources/templates/list``."""
        ...


def no_catalogs(source: object, kind: CatalogKind) -> RequestFailed:
    """The answer for a source that cannot list catalogs."""
    return RequestFailed(
        "server_error", f"{type(source).__name__} cannot list {kind} (no list_catalog)"
    )


def no_tool_calls(source: object) -> RequestFailed:
    """The answer of a source that cannot call tools (it reaches no MCP server)."""
    return RequestFailed("server_error", f"{type(source).__name__} cannot call tools")
