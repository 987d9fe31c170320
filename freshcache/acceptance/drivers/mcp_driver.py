"""The driver for the official Python SDK 2.x: `mcp.Client` with its response cache on.

Thin on purpose: reads go through ``Client.read_resource`` (the SDK's cache serves a
hit within the server's ``ttlMs`` and is evicted by the change events of
``Client.listen``), lists through ``Client.list_resources``; the driver keeps one
``listen`` open for the selection and opens it again when the SDK reports it lost,
as the SDK's docs say (not when the server answers that it has no such method). On a
2025-11-25 server (the SDK negotiates down by itself) there is no listen: the driver
subscribes each selected URI with ``Client.subscribe_resource``, the SDK's 2025 way,
and the SDK's cache evicts on the ``resources/updated`` the session hears. The SDK
has no freshness states, so a read answers its text or its error. Run:
``python -m freshcache.acceptance.drivers.mcp_driver``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import CacheConfig, InMemoryResponseCacheStore
from mcp.types import CONNECTION_CLOSED

from .._runner import VirtualClock
from ._loop import OnVirtualClock, hello, run

METHOD_NOT_FOUND = -32601
"""JSON-RPC's answer to a method the server does not have (a server without listen)."""


def text_of(result: Any) -> str:
    """The text a model would be handed: the contents' text parts, joined."""
    return "".join(getattr(part, "text", None) or "" for part in result.contents)


class McpSession(OnVirtualClock):
    def __init__(
        self, client: Client, clock: VirtualClock, tg: anyio.abc.TaskGroup, transport: str
    ) -> None:
        self.client, self.clock, self.tg, self.transport = client, clock, tg, transport
        self._listening: anyio.CancelScope | None = None
        self._cut_off = anyio.Event()
        self.selection: tuple[str, ...] | None = None
        """The URIs of the last ``select``; `listening_for` once its listen is open."""
        self.listening_for: tuple[str, ...] | None = None

    def failed(self, exc: Exception) -> dict[str, Any]:
        """What the app gets instead of an answer: the error."""
        return {"error": f"{type(exc).__name__}: {exc}"}

    async def read(self, uri: str, timeout: float | None, principal: str | None) -> dict[str, Any]:
        try:
            with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                return {"text": text_of(await self.client.read_resource(uri))}
        except Exception as exc:  # what the app would get instead of text
            return self.failed(exc)

    async def list_resources(self) -> dict[str, Any]:
        uris: list[str] = []
        cursor: str | None = None
        try:
            while True:  # every page, as an app walks them (the SDK caches the first)
                page = await self.client.list_resources(cursor=cursor)
                uris.extend(str(r.uri) for r in page.resources)
                cursor = page.next_cursor
                if not cursor:
                    break
        except Exception as exc:
            return self.failed(exc)
        return {"uris": uris}

    async def catalog(self, message: dict[str, Any]) -> dict[str, Any]:
        """A catalog as an app gets it: every page through the SDK (its cache on)."""
        kind = message["kind"]
        names: list[str] = []
        cursor: str | None = None
        try:
            while True:
                if kind == "tools":
                    page: Any = await self.client.list_tools(cursor=cursor)
                    items = page.tools
                elif kind == "prompts":
                    page = await self.client.list_prompts(cursor=cursor)
                    items = page.prompts
                else:
                    page = await self.client.list_resource_templates(cursor=cursor)
                    items = page.resource_templates
                names.extend(str(item.name) for item in items)
                cursor = page.next_cursor
                if not cursor:
                    break
        except Exception as exc:
            return self.failed(exc)
        return {"names": names}

    async def select(self, uris: list[str]) -> None:
        if self._listening is not None:
            self._listening.cancel()
        self._listening = anyio.CancelScope()
        self.selection = tuple(uris)
        self.tg.start_soon(self._listen, uris, self._listening)

    async def _listen(self, uris: list[str], scope: anyio.CancelScope) -> None:
        """Keep one ``listen`` open for ``uris``: the SDK evicts on its events (on
        2025-11-25: one ``resources/subscribe`` per URI instead)."""
        with scope:
            if self.client.protocol_version != "2026-07-28":
                await self._subscribe(uris)
                return
            while True:
                try:
                    async with self.client.listen(
                        resource_subscriptions=uris,
                        resources_list_changed=True,
                        tools_list_changed=True,
                        prompts_list_changed=True,
                    ) as subscription:
                        self.listening_for = tuple(uris)
                        async for _ in subscription:
                            pass  # the SDK's cache has evicted before the event is handed over
                except MCPError as exc:
                    if exc.code == METHOD_NOT_FOUND:
                        return  # the server has no listen: asking again changes nothing
                    if exc.code == CONNECTION_CLOSED and self.transport == "stdio":
                        # The server process is gone and the SDK starts no other: every
                        # later request fails at once. On HTTP the code also ends one
                        # stream (the session lives on), so there the driver asks again.
                        self._cut_off.set()
                        return
                except Exception:  # lost, refused, or the server is away: listen again
                    pass
                self.listening_for = None
                await anyio.sleep(0.05)

    async def cut_off(self) -> str:
        """Returns once the client can no longer reach its server (`_loop` tells the
        harness, which then stops waiting for a listen that cannot come)."""
        await self._cut_off.wait()
        return "the client's stdio session closed (the SDK starts no new server process)"

    async def _subscribe(self, uris: list[str]) -> None:
        for uri in uris:
            with warnings.catch_warnings(), contextlib.suppress(Exception):
                warnings.simplefilter("ignore")  # deprecated as of 2026-07-28, meant for 2025
                await self.client.subscribe_resource(uri)


class McpDriver:
    session_class = McpSession

    def hello(self) -> dict[str, Any]:
        version = importlib.metadata.version("mcp")
        return hello(
            f"mcp {version}",
            ops=["advance", "catalog"],
            policies=["share_public"],
            listens=True,
            store_entries=True,
            revisions=("2026-07-28", "2025-11-25"),  # Client negotiates 2025-11-25 down
        )

    @asynccontextmanager
    async def connect(self, spec: dict[str, Any]) -> AsyncIterator[McpSession]:
        clock = VirtualClock()
        policy = spec.get("policy", {})
        entries = spec.get("store_entries")
        cache = CacheConfig(
            clock=clock.wall,
            share_public=bool(policy.get("share_public", False)),
            store=None if entries is None else InMemoryResponseCacheStore(max_entries=entries),
            partition="" if entries is None else "harness",
            # A bounded store is a custom one; on stdio the SDK then needs a server name.
            target_id=None if entries is None or spec["transport"] == "http" else "stdio-server",
        )
        server: str | StdioServerParameters = (
            spec["url"]
            if spec["transport"] == "http"
            else StdioServerParameters(command=spec["command"][0], args=spec["command"][1:])
        )
        request_timeout = spec.get("timeouts", {}).get("read", 2.0)
        client = Client(server, cache=cache, read_timeout_seconds=request_timeout)
        async with client, anyio.create_task_group() as tg:
            session = self.session_class(client, clock, tg, spec["transport"])
            await session.select(list(spec.get("select", [])))
            yield session
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    run(McpDriver())
