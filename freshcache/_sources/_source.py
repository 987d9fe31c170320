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

Besides reads, lists and the listen, a source declares each capability the cache may
use, and one it lacks is declared ``None`` (nothing is probed for):

- `Source.list_catalog`: pages of the catalogs (tools, prompts, resource templates);
  ``None``: every catalog is an explicit ``server_error`` state;
- `Source.ask_pushed_bodies`: ask later listens for pushed bodies (`Policy.pushed_bodies`);
  ``None``: it only ever hears change hints;
- `Source.shared_catalogs`: catalog walks shared by a fleet (`FleetSource`); ``None``
  for every source a fleet does not wrap;
- `Source.forward`: one request passed through as asked, whose result is computed per
  request and never cached (``prompts/get``: `FreshCache.get_prompt`); ``None``: such
  a request is an explicit ``server_error`` state.

`Source.call_tool` is a method every source has: one that cannot call tools answers
`no_tool_calls` (an explicit failure, never an attempt).

`SourceWrapper` is a source around another one that forwards every call to it; a
wrapper that notes, steers or substitutes some calls overrides only those.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .._core import (
    Catalog,
    CatalogKind,
    CatalogWalk,
    ListReply,
    Partition,
    ReadReply,
    RequestFailed,
    StreamEvent,
)
from .._protocol._tools import ToolAnswer, ToolReply
from .._protocol._wire import PROTOCOL_VERSION

__all__ = [
    "CAPABILITIES",
    "PROTOCOL_VERSION",
    "CatalogPager",
    "Forwarder",
    "ServerInfo",
    "SharedWalks",
    "Source",
    "SourceWrapper",
    "WalkCatalog",
    "cannot_forward",
    "no_catalogs",
    "no_tool_calls",
]

CatalogPager = Callable[[CatalogKind, str | None, Partition], Awaitable[ListReply | RequestFailed]]
"""One page of ``tools/list``, ``prompts/list`` or ``resources/templates/list``."""

Forwarder = Callable[[str, Mapping[str, Any], Partition], Awaitable[ToolReply | RequestFailed]]
"""One request passed through (`Source.forward`): ``(method, params, principal)``."""

WalkCatalog = Callable[[CatalogWalk], Awaitable[Catalog]]
"""A cache's own walk of a catalog (the lister's), handed to `SharedWalks.walk`."""


class SharedWalks(Protocol):
    """Catalog walks someone else may have done already (a fleet's shared store)."""

    async def walk(self, done: CatalogWalk, walk: WalkCatalog) -> Catalog:
        """``done``'s catalog: a current shared walk, or ``walk(done)``, this cache's own."""
        ...


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
    revision_decided: bool = True
    """``False`` when the server itself did not answer ``server/discover`` (no answer, or
    an HTTP failure without JSON-RPC in it): nothing says which revision it speaks, so
    the source asks again before its next request or listen
    (`freshcache._protocol._client.discovery_unanswered`)."""
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

    @property
    def list_catalog(self) -> CatalogPager | None:
        """One page of a catalog; ``None``: this source cannot list catalogs."""
        ...

    @property
    def ask_pushed_bodies(self) -> Callable[[], bool] | None:
        """Ask later listens for pushed bodies (``embedResources``), answering whether
        they will; ``None``: this source only ever hears change hints."""
        ...

    @property
    def shared_catalogs(self) -> SharedWalks | None:
        """Catalog walks others may have done (a fleet); ``None``: walk them all here."""
        ...

    @property
    def forward(self) -> Forwarder | None:
        """One request passed through as asked (``prompts/get``): its result, with the
        change hints its answer carried, or why not; sent the way `call_tool` is (a
        lost answer re-issued only where `freshcache._protocol._reissue` allows).
        ``None``: this source passes nothing through."""
        ...


CAPABILITIES = ("list_catalog", "ask_pushed_bodies", "shared_catalogs", "forward")
"""The `Source` members a source may declare ``None`` (see the module docstring)."""


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
        ask = self.inner.ask_pushed_bodies
        return ask is not None and ask()

    async def call_tool(
        self, params: Mapping[str, Any], principal: Partition, tool: Mapping[str, Any] | None
    ) -> ToolAnswer:
        return await self.inner.call_tool(params, principal, tool)

    async def list_catalog(
        self, kind: CatalogKind, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        lister = self.inner.list_catalog
        if lister is None:
            return no_catalogs(self.inner, kind)
        return await lister(kind, cursor, principal)

    @property
    def shared_catalogs(self) -> SharedWalks | None:
        return self.inner.shared_catalogs

    async def forward(
        self, method: str, params: Mapping[str, Any], principal: Partition
    ) -> ToolReply | RequestFailed:
        forward = self.inner.forward
        if forward is None:
            return cannot_forward(self.inner, method)
        return await forward(method, params, principal)


def no_catalogs(source: object, kind: CatalogKind) -> RequestFailed:
    """The answer for a source that cannot list catalogs."""
    return RequestFailed(
        "server_error",
        f"{type(source).__name__} cannot list {kind}: it declares no list_catalog "
        "(a LoaderSource lists catalogs when given catalogs=)",
    )


def cannot_forward(source: object, method: str) -> RequestFailed:
    """The answer for a source that passes no requests through."""
    return RequestFailed("server_error", f"{type(source).__name__} cannot pass {method} through")


def no_tool_calls(source: object) -> RequestFailed:
    """The answer of a source that cannot call tools (it reaches no MCP server)."""
    return RequestFailed("server_error", f"{type(source).__name__} cannot call tools")
