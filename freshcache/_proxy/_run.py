"""The ``freshcache proxy`` command: the upstreams, then stdio or HTTP until told to stop.

Stdout is the wire on stdio, so every line of its own goes to stderr. SIGINT and
SIGTERM end it cleanly (listen streams closed, upstream caches and stdio children let
go) with exit status 128 + the signal; a host that closes stdin ends it with 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel

from .._errors import ConfigurationError
from ._config import Upstream
from ._server import Proxy
from ._status import STATUS_VARIABLE, serve_status


def main(args: argparse.Namespace, upstreams: list[Upstream]) -> int:
    http = _address(args.http) if args.http is not None else None
    signum: int | None = anyio.run(_serve, upstreams, args, http)
    return 0 if signum is None else 128 + signum


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdecimal() or int(port) > 65535:
        raise ConfigurationError(f"--http {text!r}: give HOST:PORT, as in 127.0.0.1:8080")
    return host.strip("[]"), int(port)


def _say(line: str) -> None:
    print(f"freshcache proxy: {line}", file=sys.stderr, flush=True)


async def _serve(
    upstreams: list[Upstream], args: argparse.Namespace, http: tuple[str, int] | None
) -> int | None:
    stopped_by: list[int] = []
    names = ", ".join(u.name for u in upstreams)
    async with anyio.create_task_group() as tg:
        stop = _Stop(tg.cancel_scope)
        await tg.start(_on_signal, stopped_by, stop)
        proxy_of = Proxy(
            upstreams, timeout=args.timeout, meta_tools=args.meta_tools, fleet=args.fleet
        )
        async with proxy_of as proxy:
            server = proxy.server()
            if status := os.environ.get(STATUS_VARIABLE):
                tg.start_soon(serve_status, proxy, status)  # the grader's look (opt-in)
            if http is None:
                _say(f"on stdio, in front of {names}")
                await _stdio(server)
            else:
                web = _Uvicorn(server, *http)
                stop.gently = web.stop
                _say(f"serving {web.url} in front of {names}")
                await web.serve()
        tg.cancel_scope.cancel()
    if stopped_by:
        _say("stopped")
    return stopped_by[0] if stopped_by else None


class _Stop:
    """What a signal does: the HTTP server's own shutdown once it runs, else cancel."""

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.gently: Any = None

    def __call__(self) -> None:
        if self.gently is not None:
            self.gently()
        else:
            self.scope.cancel()


async def _on_signal(
    stopped_by: list[int], stop: _Stop, *, task_status: Any = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            stopped_by.append(int(signum))
            stop()
            return


# ---------------------------------------------------------------------- stdio


async def _stdio(server: Any) -> None:
    from mcp.server.stdio import stdio_server

    send, checked = anyio.create_memory_object_stream[str](16)
    async with (
        _stdin_lines() as lines,
        stdio_server(stdin=cast(Any, checked)) as (read, write),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_screen, lines, send, write)
        await server.run(read, write, server.create_initialization_options())
        tg.cancel_scope.cancel()


async def _screen(lines: Any, send: Any, write: Any) -> None:
    """Every line the SDK could not take as a JSON-RPC message gets a JSON-RPC error
    (-32700 not JSON, -32600 not a valid message) instead of silence; the rest go on."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    async with send:
        async for line in lines:
            if not line.strip():
                continue
            try:
                types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValueError:
                code, message, rid = _refusal(line)
                error = types.ErrorData(code=code, message=message)
                reply = types.JSONRPCError(jsonrpc="2.0", id=rid, error=error)
                await write.send(SessionMessage(reply))
                continue
            await send.send(line)


def _refusal(line: str) -> tuple[int, str, Any]:
    try:
        parsed = json.loads(line)
    except ValueError:
        return -32700, "Parse error: the line is not JSON", None
    rid = parsed.get("id") if isinstance(parsed, dict) else None
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        rid = None
    return -32600, "Invalid Request: not a JSON-RPC 2.0 message MCP accepts", rid


@contextlib.asynccontextmanager
async def _stdin_lines() -> Any:
    """Stdin's lines from a daemon thread: a signal can end the proxy while the host
    keeps its end of the pipe open (a worker thread blocked on a read would hold the
    event loop's exit until the next line)."""
    send, receive = anyio.create_memory_object_stream[str](16)
    token = anyio.lowlevel.current_token()

    def read() -> None:
        try:
            for line in _lines(sys.stdin.fileno()):
                anyio.from_thread.run(send.send, line, token=token)
        except (RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # the loop is gone or the proxy stopped reading
        with contextlib.suppress(RuntimeError):
            anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=read, name="freshcache-proxy-stdin", daemon=True).start()
    try:
        yield receive
    finally:
        receive.close()


def _lines(fd: int) -> Iterator[str]:
    """Lines read with ``os.read`` (no buffered reader whose lock a daemon thread could
    hold when the interpreter exits)."""
    pending = b""
    while chunk := os.read(fd, 65536):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            yield raw.decode("utf-8", errors="replace") + "\n"
    if pending:
        yield pending.decode("utf-8", errors="replace")


# ---------------------------------------------------------------------- HTTP


class _Uvicorn:
    """The SDK's Streamable HTTP app on uvicorn, on a socket bound before it starts (so
    ``--http 127.0.0.1:0`` can say which port it got); the proxy handles the signals."""

    def __init__(self, server: Any, host: str, port: int) -> None:
        import uvicorn

        app = server.streamable_http_app(host=host)
        self._server = _quiet_server()(uvicorn.Config(app, log_level="warning", lifespan="on"))
        try:
            self._socket = socket.create_server((host, port))
            # Accepted connections inherit it (Linux): no Nagle wait on a reply's last bytes.
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise ConfigurationError(
                f"--http {host}:{port}: cannot listen there ({exc.strerror})"
            ) from None
        bound = self._socket.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound}/mcp"

    async def serve(self) -> None:
        with self._socket:
            await self._server.serve(sockets=[self._socket])

    def stop(self) -> None:
        self._server.should_exit = True


def _quiet_server() -> type:
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # the proxy's own receiver handles SIGINT and SIGTERM

    return QuietServer
