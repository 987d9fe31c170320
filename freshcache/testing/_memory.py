"""`InMemorySource`: a `Source` wired straight to a `ReferenceServer`, no transport.

This is how the acceptance tables run at the engine level (fast and deterministic),
and how `freshcache acceptance` demonstrates the cache with no setup.
"""

from __future__ import annotations

import asyncio
import json
import types
from collections.abc import AsyncGenerator, Generator, Mapping
from typing import Any

import anyio
import anyio.lowlevel

from .._core import (
    CatalogKind,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    Partition,
    ReadReply,
    RequestFailed,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
)
from .._protocol._tools import ToolReply
from .._sources._source import PROTOCOL_VERSION, ServerInfo
from ._reference import ReferenceServer, call_tool, push_event

_PLAIN_READ = ReferenceServer.read
"""`ReferenceServer.read` as defined there: a server that does not override it answers
an unheld read at once (`ReferenceServer.answer_now`)."""

_BATCH = 64
"""Messages one receive hands on at most (a transport's chunk)."""


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@types.coroutine
def _yield_to_asyncio() -> Generator[None, None, None]:
    """What ``asyncio.sleep(0)`` awaits (one bare yield: the task runs again on the
    loop's next turn), without the coroutine around it."""
    yield


class InMemorySource:
    """A `Source` that calls a `ReferenceServer` in the same process."""

    def __init__(
        self, server: ReferenceServer | None = None, *, identity: str = "memory://reference"
    ) -> None:
        self.server = server if server is not None else ReferenceServer()
        self._identity = identity
        self._embed_resources = False
        self._asyncio: bool | None = None
        """Whether reads run on asyncio (asked at the first read)."""

    def ask_pushed_bodies(self) -> bool:
        """Ask every listen from now on for pushed bodies (``embedResources``)."""
        self._embed_resources = True
        return True

    shared_catalogs = None
    forward = None  # the reference server has no prompts/get

    @property
    def identity(self) -> str:
        return self._identity

    async def start(self) -> ServerInfo:
        server = self.server
        if server.down:
            return ServerInfo(reachable=False, detail="reference server is down")
        return ServerInfo(
            reachable=True,
            supported_versions=(PROTOCOL_VERSION,),
            protocol_version=PROTOCOL_VERSION,
            subscribe=server.listen_supported,
            list_changed=server.list_changed_supported,
            listen=server.listen_supported,
            name="freshcache-reference",
        )

    async def aclose(self) -> None:
        return None

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        # One turn of the event loop, as a request's round trip takes at least. On
        # asyncio that is the bare yield of ``asyncio.sleep(0)``, all
        # `anyio.lowlevel.checkpoint` does there after asking which event loop runs
        # (asked here once per source).
        if self._asyncio is None:
            self._asyncio = _on_asyncio()
        if self._asyncio:
            await _yield_to_asyncio()
        else:  # another event loop (anyio's trio backend)
            await anyio.lowlevel.checkpoint()
        server = self.server
        if type(server).read is _PLAIN_READ:  # (a subclass may see every read itself)
            answer = server.answer_now(uri, principal)
            if answer is not None:
                return answer
        return await server.read(uri, principal)

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        await anyio.lowlevel.checkpoint()
        return self.server.list_page(cursor)

    async def call_tool(
        self, params: Mapping[str, Any], principal: Partition, tool: Mapping[str, Any] | None
    ) -> ToolReply | RequestFailed:
        """``tools/call`` on the reference server (`freshcache.testing.call_tool`)."""
        await anyio.lowlevel.checkpoint()
        json.dumps(params)  # what a wire would do: frozen values must have been thawed
        outcome = call_tool(self.server, params.get("name"), params.get("arguments"), params)
        return outcome if isinstance(outcome, RequestFailed) else ToolReply(outcome)

    async def list_catalog(
        self, kind: CatalogKind, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        await anyio.lowlevel.checkpoint()
        if self.server.catalogs.faults.get(kind) == "timeout":
            await anyio.sleep_forever()
        return self.server.catalogs.page(kind, cursor, principal, down=self.server.down)

    async def listen(
        self, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        server = self.server
        sid = f"listen-{server.next_subscription_id()}"
        yield ListenStarted(sid, uris, list_changed)
        if not server.listen_supported:
            yield ListenUnsupported("the reference server has listening switched off")
            return
        catalogs = frozenset({"tools", "prompts"}) if list_changed else frozenset()
        registered = server.subscribe(
            sid, uris, list_changed, catalogs, embed=self._embed_resources
        )
        if registered is None:
            yield StreamLost(sid, "connection refused: reference server is down")
            return
        _, receive = registered
        try:
            async with receive:
                while True:
                    try:
                        pushes = [await receive.receive()]
                    except anyio.EndOfStream:
                        break
                    # What is already buffered comes with it, as one read of a real
                    # transport hands out every message of its chunk (bounded).
                    while len(pushes) < _BATCH:
                        try:
                            pushes.append(receive.receive_nowait())
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                    for push in pushes:
                        if push[0] == "updated":  # most pushes (`push_event`'s reading)
                            yield ResourceUpdated(str(push[1]), sid)
                            continue
                        event = push_event(sid, push)
                        yield event
                        if isinstance(event, StreamClosed | StreamLost):
                            return
            yield StreamLost(sid, "stream ended")
        finally:
            server.unsubscribe(sid)
