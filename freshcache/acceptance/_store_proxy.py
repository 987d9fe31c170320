"""A TCP relay between one fleet worker and the Valkey/Redis server, that can be cut.

The fleet rows need a worker that vanishes without a word and a store that goes away
and comes back, on any store the command is given (one it may not stop). Each worker
reaches the store through its own relay on 127.0.0.1: *cutting* it resets every
connection and refuses new ones, which is what a dead process or an unreachable
store looks like from either side; *resuming* lets connections through again.
"""

from __future__ import annotations

import contextlib

import anyio
import anyio.abc
from anyio.abc import SocketStream


class StoreRelay:
    """Relays ``127.0.0.1:port`` to ``host:upstream_port`` until cut."""

    def __init__(self, host: str, upstream_port: int) -> None:
        self.host, self.upstream_port = host, upstream_port
        self.port = 0
        self.cut = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._listener: anyio.abc.Listener[SocketStream]
        self._open: set[SocketStream] = set()

    async def __aenter__(self) -> StoreRelay:
        self._listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = int(self._listener.extra(anyio.abc.SocketAttribute.local_port))
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._listener.serve, self._relay)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        await self._listener.aclose()
        await self.sever()

    async def sever(self) -> None:
        """Cut: reset every open connection and refuse new ones until `resume`."""
        self.cut = True
        for stream in list(self._open):
            with contextlib.suppress(Exception):
                await stream.aclose()
        self._open.clear()

    def resume(self) -> None:
        self.cut = False

    async def _relay(self, client: SocketStream) -> None:
        async with client:
            if self.cut:
                return
            try:
                upstream = await anyio.connect_tcp(self.host, self.upstream_port)
            except OSError:
                return
            async with upstream:
                self._open |= {client, upstream}
                try:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._pump, client, upstream, tg.cancel_scope)
                        tg.start_soon(self._pump, upstream, client, tg.cancel_scope)
                finally:
                    self._open -= {client, upstream}

    @staticmethod
    async def _pump(source: SocketStream, sink: SocketStream, scope: anyio.CancelScope) -> None:
        try:
            async for chunk in source:
                await sink.send(chunk)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            scope.cancel()
