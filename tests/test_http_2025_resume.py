"""A 2025-11-25 answer stream closed before its answer is resumed, never re-sent.

Spec 2025-11-25 basic/transports, "Sending Messages to the Server" 6 and "Resumability
and Redelivery": a server that set an event id MAY close the connection before the
answer (after a ``retry`` field); the client waits that long and resumes with a GET
carrying ``Last-Event-ID``, where the server replays the answer. The peer here is a
small server of this test's own on 127.0.0.1 (the reference server never closes an
answer's stream early): each ``tools/call`` answers with a priming event (``id``,
``retry: 50``) and closes; a GET with that id gets the answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

from freshcache import FreshCache, HttpSource

pytestmark = [pytest.mark.anyio, pytest.mark.wire]

TOOL = {"name": "pay", "inputSchema": {"type": "object"}}


class ClosingServer:
    """2025-11-25 over HTTP/1.1, one request per connection; what it was sent is kept."""

    def __init__(self, *, replays: bool) -> None:
        self.replays = replays
        self.calls = 0
        self.resumes: list[str] = []
        self.pending: Any = None
        self.url = ""

    async def handle(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            raw = b""
            while b"\r\n\r\n" not in raw:
                raw += await stream.receive()
            head, _, body = raw.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            method = lines[0].split()[0]
            headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
            while len(body) < int(headers.get("content-length", "0")):
                body += await stream.receive()
            if method == "GET":
                await self.get(stream, headers.get("last-event-id"))
            elif method == "POST":
                await self.post(stream, json.loads(body))
            else:
                await stream.send(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")

    async def post(self, stream: anyio.abc.SocketStream, message: dict[str, Any]) -> None:
        rid, method = message.get("id"), message.get("method")
        if rid is None:
            return await stream.send(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "closing", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        elif method == "tools/call":
            self.calls += 1
            self.pending = rid
            frame = b"id: call-1\nretry: 50\ndata: \n\n"
            return await stream.send(_head("text/event-stream") + frame)  # closed, no answer
        else:
            error = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}}
            return await stream.send(_json(error))
        await stream.send(_json({"jsonrpc": "2.0", "id": rid, "result": result}))

    async def get(self, stream: anyio.abc.SocketStream, last_id: str | None) -> None:
        if last_id is None or not self.replays:
            return await stream.send(
                b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n"
            )
        self.resumes.append(last_id)
        answer = {
            "jsonrpc": "2.0",
            "id": self.pending,
            "result": {"content": [{"type": "text", "text": "paid"}]},
        }
        await stream.send(
            _head("text/event-stream")
            + b"id: call-2\ndata: "
            + json.dumps(answer).encode()
            + b"\n\n"
        )


def _head(content_type: str) -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nmcp-session-id: s1\r\n"
        "connection: close\r\n\r\n"
    ).encode()


def _json(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: s1\r\n"
        + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )


@asynccontextmanager
async def serving(server: ClosingServer) -> AsyncIterator[ClosingServer]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    server.url = f"http://127.0.0.1:{port}/mcp"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


def source(server: ClosingServer) -> HttpSource:
    return HttpSource(server.url, timeout=10.0)  # (the url is known once it serves)


async def test_a_tool_calls_closed_answer_stream_is_resumed_and_answered_once() -> None:
    server = ClosingServer(replays=True)
    async with serving(server), FreshCache(source(server), read_timeout=10.0) as cache:
        call = await cache.call_tool("pay", {})
    assert (call.state, call.text) == ("answered", "paid"), call
    assert (server.calls, server.resumes) == (1, ["call-1"])


async def test_a_server_that_cannot_resume_leaves_the_call_may_have_run_not_resent() -> None:
    server = ClosingServer(replays=False)
    async with serving(server), FreshCache(source(server), read_timeout=10.0) as cache:
        call = await cache.call_tool("pay", {})
    assert call.state == "may_have_run", call
    assert "resumed from event 'call-1': HTTP 405" in (call.detail or ""), call
    assert server.calls == 1
