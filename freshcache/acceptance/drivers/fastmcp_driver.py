"""The driver for fastmcp's `Client`, its response cache on (``cache=True``).

Thin: reads through ``Client.read_resource``, lists through ``Client.list_resources``.
fastmcp's Client offers no ``subscriptions/listen``, so its cache hears of no change
and keeps a result for the server's ``ttlMs``; ``select`` has nothing to do. It has no
freshness states: a read answers its text or its error. Run: ``python -m
freshcache.acceptance.drivers.fastmcp_driver``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from mcp.client import CacheConfig

from .._runner import VirtualClock
from ._loop import OnVirtualClock, hello, run


class FastmcpSession(OnVirtualClock):
    def __init__(self, client: Client[Any], clock: VirtualClock) -> None:
        self.client, self.clock = client, clock

    async def read(self, uri: str, timeout: float | None, principal: str | None) -> dict[str, Any]:
        try:
            with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                contents = await self.client.read_resource(uri)
        except Exception as exc:  # what the app would get instead of text
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"text": "".join(getattr(part, "text", None) or "" for part in contents)}

    async def list_resources(self) -> dict[str, Any]:
        try:
            listed = await self.client.list_resources()
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"uris": [str(r.uri) for r in listed]}

    async def select(self, uris: list[str]) -> None:
        """fastmcp's Client has no listen: a selection changes nothing it does."""


class FastmcpDriver:
    def hello(self) -> dict[str, Any]:
        version = importlib.metadata.version("fastmcp")
        return hello(f"fastmcp {version}", ops=["advance"], policies=["share_public"])

    @asynccontextmanager
    async def connect(self, spec: dict[str, Any]) -> AsyncIterator[FastmcpSession]:
        clock = VirtualClock()
        share = bool(spec.get("policy", {}).get("share_public", False))
        command = spec.get("command") or [""]
        target: Any = (
            spec["url"]
            if spec["transport"] == "http"
            else StdioTransport(command[0], command[1:], keep_alive=False)
        )
        client: Client[Any] = Client(
            target,
            cache=CacheConfig(clock=clock.wall, share_public=share),
            timeout=spec.get("timeouts", {}).get("read", 2.0),
        )
        async with client:
            yield FastmcpSession(client, clock)


if __name__ == "__main__":
    run(FastmcpDriver())
