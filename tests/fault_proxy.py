"""A TCP proxy on loopback that cuts one ``tools/call`` after the server ran it.

It passes bytes both ways unchanged until a client connection has sent a request
naming ``tools/call`` (armed once): that request reaches the server in full, and when
the server's first answer byte comes back the proxy drops it and resets the client's
connection (RST, no response byte), answers in the server's place (a gateway's
``502``), or swallows the answer (`HOLD`): the request was sent, the tool ran, the answer is lost. Transparent otherwise, so any HTTP client and either revision can be tested.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

HOLD = b""
"""An ``answer`` that never comes: the server's answer is swallowed, the connection
stays open."""


class CutToolCalls:
    def __init__(self, upstream_port: int, answer: bytes | None = None) -> None:
        self.upstream_port = upstream_port
        self.answer = answer
        """What the client gets instead of the server's answer (``None``: a reset)."""
        self.armed = True
        self.cuts = 0

    async def _serve(self, client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", self.upstream_port) as upstream:
            await self._pump(client, upstream)

    async def _pump(self, client: anyio.abc.SocketStream, upstream: anyio.abc.SocketStream) -> None:
        cut = anyio.Event()
        marked = False

        async def to_server() -> None:
            nonlocal marked
            async for data in client:
                if self.armed and b"tools/call" in data:
                    self.armed, marked = False, True
                await upstream.send(data)
            await upstream.send_eof()

        async def to_client() -> None:
            async for data in upstream:
                if marked and self.answer == HOLD:  # swallowed: the client waits on
                    self.cuts = 1
                    continue
                if marked:
                    self.cuts += 1
                    if self.answer is not None:
                        await client.send(self.answer)
                    else:
                        raw = client.extra(SocketAttribute.raw_socket)
                        linger = struct.pack("ii", 1, 0)
                        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    cut.set()
                    return
                await client.send(data)

        async with anyio.create_task_group() as tg:
            tg.start_soon(_until_reset, to_server, tg)
            tg.start_soon(_until_reset, to_client, tg)
            tg.start_soon(_cancel_on, cut, tg)


async def _until_reset(pump: Callable[[], Awaitable[None]], tg: anyio.abc.TaskGroup) -> None:
    """``pump``; a side that resets its connection ends this connection, not the proxy."""
    try:
        await pump()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        tg.cancel_scope.cancel()


async def _cancel_on(event: anyio.Event, tg: anyio.abc.TaskGroup) -> None:
    await event.wait()
    tg.cancel_scope.cancel()


@asynccontextmanager
async def cut_tool_calls(
    upstream_port: int, answer: bytes | None = None
) -> AsyncIterator[tuple[CutToolCalls, int]]:
    """A proxy in front of ``upstream_port``; yields it and its own port."""
    proxy = CutToolCalls(upstream_port, answer)

    async def guarded(client: anyio.abc.SocketStream) -> None:
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await proxy._serve(client)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, guarded)
        try:
            yield proxy, listener.extra(SocketAttribute.local_port)
        finally:
            tg.cancel_scope.cancel()
