"""The reference server speaking MCP 2025-11-25, driven with raw HTTP and raw stdio.

These pin what the server side of the 2025 wires does, independent of freshcache's
client: the lifecycle (initialize, initialized), sessions (Mcp-Session-Id, 400 without
one, 404 once expired, DELETE), the GET notification stream, subscribe/unsubscribe,
refused subscriptions, a server without notifications, and the SDK 1.x answers to a
2026 client (``server/discover``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.acceptance._settle import wait_for
from freshcache.acceptance._stdio_server import default_reference, save_state

pytestmark = pytest.mark.anyio

URI = "guide://shipping/approval"
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _server() -> ReferenceServer:
    server = ReferenceServer()
    server.set(URI, "v1")
    return server


def _request(request_id: int, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _initialize(request_id: int = 1, version: str = "2025-11-25") -> dict[str, Any]:
    return _request(
        request_id,
        "initialize",
        protocolVersion=version,
        capabilities={},
        clientInfo={"name": "test", "version": "0"},
    )


def _messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a JSON or SSE answer."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return [response.json()]
    return [
        json.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]


class Session:
    """A hand-written 2025-11-25 HTTP client session (no freshcache code)."""

    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url
        self.id: str | None = None
        self.version = "2025-11-25"

    async def open(self) -> dict[str, Any]:
        response = await self.client.post(self.url, json=_initialize(), headers=ACCEPT)
        assert response.status_code == 200
        self.id = response.headers["mcp-session-id"]
        result = _messages(response)[-1]["result"]
        self.version = result["protocolVersion"]
        notified = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert notified.status_code == 202
        return dict(result)

    @property
    def headers(self) -> dict[str, str]:
        assert self.id is not None
        return {**ACCEPT, "mcp-session-id": self.id, "mcp-protocol-version": self.version}

    async def post(self, message: dict[str, Any]) -> httpx.Response:
        return await self.client.post(self.url, json=message, headers=self.headers)

    async def call(self, request_id: int, method: str, **params: Any) -> dict[str, Any]:
        response = await self.post(_request(request_id, method, **params))
        assert response.status_code == 200, response.text
        return _messages(response)[-1]


@pytest.fixture
async def http() -> AsyncIterator[ReferenceHttpServer]:
    async with ReferenceHttpServer(_server(), revision="2025-11-25") as served:
        yield served


async def test_initialize_opens_a_session_with_the_negotiated_version_and_capabilities(
    http: ReferenceHttpServer,
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        session = Session(client, http.url)
        result = await session.open()
        assert result["protocolVersion"] == "2025-11-25"
        assert result["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
        answer = await session.call(2, "resources/read", uri=URI)
    contents = answer["result"]["contents"]
    assert contents[0]["text"] == "v1"
    assert "ttlMs" not in answer["result"] and "_meta" not in answer["result"]
    assert http.legacy is not None and http.legacy.sessions[session.id or ""].initialized


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26"], ids=["2025-06", "2025-03"])
async def test_an_older_2025_version_is_accepted_and_a_2026_one_is_answered_with_2025(
    http: ReferenceHttpServer, version: str
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        accepted = await client.post(http.url, json=_initialize(1, version), headers=ACCEPT)
        offered = await client.post(http.url, json=_initialize(2, "2026-07-28"), headers=ACCEPT)
    assert _messages(accepted)[-1]["result"]["protocolVersion"] == version
    assert _messages(offered)[-1]["result"]["protocolVersion"] == "2025-11-25"


async def test_a_2026_discover_without_a_session_gets_what_sdk_1_answers(
    http: ReferenceHttpServer,
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.post(http.url, json=_request(1, "server/discover"), headers=ACCEPT)
        session = Session(client, http.url)
        await session.open()
        in_session = await session.call(2, "server/discover")
    assert response.status_code == 400
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": "server-error",
        "error": {"code": -32600, "message": "Bad Request: Missing session ID"},
    }
    assert in_session["error"]["code"] == -32601


async def test_a_subscribed_uri_is_notified_on_the_get_stream_and_an_unsubscribed_one_is_not(
    http: ReferenceHttpServer,
) -> None:
    server = http.server
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as client:
        session = Session(client, http.url)
        await session.open()
        got: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:

            async def listen() -> None:
                headers = {"accept": "text/event-stream", "mcp-session-id": session.id or ""}
                async with client.stream("GET", http.url, headers=headers) as response:
                    assert response.status_code == 200
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            got.append(json.loads(line[6:]))

            tg.start_soon(listen)
            await wait_for(lambda: server.subscribers, limit=5.0, what="the GET stream")
            assert (await session.call(2, "resources/subscribe", uri=URI))["result"] == {}
            server.set("guide://other", "v1")
            server.set(URI, "v2", notify=True)
            server.set("guide://other", "v2", notify=True)
            await wait_for(lambda: got, limit=5.0, what="a notification")
            assert (await session.call(3, "resources/unsubscribe", uri=URI))["result"] == {}
            server.set(URI, "v3", notify=True)
            server.notify_list_changed()
            await wait_for(lambda: len(got) >= 2, limit=5.0, what="list_changed")
            tg.cancel_scope.cancel()
    assert got == [
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": URI}},
        {"jsonrpc": "2.0", "method": "notifications/resources/list_changed", "params": {}},
    ]


async def test_a_session_that_expired_gets_404_and_a_new_initialize_opens_another(
    http: ReferenceHttpServer,
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        session = Session(client, http.url)
        await session.open()
        old = session.id
        http.server.end_sessions()
        expired = await session.post(_request(2, "resources/read", uri=URI))
        await session.open()
        again = await session.call(3, "resources/read", uri=URI)
    assert expired.status_code == 404
    assert expired.json()["error"] == {"code": -32600, "message": "Session not found"}
    assert session.id != old and again["result"]["contents"][0]["text"] == "v1"


async def test_delete_ends_the_session_and_a_wrong_protocol_version_header_is_refused(
    http: ReferenceHttpServer,
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        session = Session(client, http.url)
        await session.open()
        wrong = await client.post(
            http.url,
            json=_request(2, "resources/read", uri=URI),
            headers={**session.headers, "mcp-protocol-version": "2026-07-28"},
        )
        deleted = await client.delete(http.url, headers=session.headers)
        after = await session.post(_request(3, "resources/read", uri=URI))
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == -32600
    assert deleted.status_code == 200
    assert after.status_code == 404


async def test_a_refused_subscription_and_a_server_without_notifications() -> None:
    server = _server()
    server.omit_from_ack.add(URI)
    async with (
        ReferenceHttpServer(server, revision="2025-11-25") as http,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        session = Session(client, http.url)
        await session.open()
        refused = await session.call(2, "resources/subscribe", uri=URI)
        server.listen_supported = False
        bare = Session(client, http.url)
        caps = await bare.open()
        no_method = await bare.call(2, "resources/subscribe", uri=URI)
        get = await client.get(
            http.url, headers={"accept": "text/event-stream", "mcp-session-id": bare.id or ""}
        )
    assert refused["error"]["code"] == -32602
    assert caps["capabilities"]["resources"] == {}
    assert no_method["error"]["code"] == -32601
    assert get.status_code == 405


def test_the_stdio_server_speaks_2025_on_one_channel(tmp_path: Any) -> None:
    state = tmp_path / "state.json"
    save_state(state, default_reference())
    lines = [
        _request(1, "resources/read", uri=URI),
        _initialize(2),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        _request(3, "server/discover"),
        _request(4, "resources/subscribe", uri=URI),
        _request(5, "resources/read", uri=URI),
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "freshcache.acceptance._stdio_server",
            "--state",
            str(state),
            "--revision",
            "2025-11-25",
        ],
        input=stdin.encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    answers = {m["id"]: m for m in map(json.loads, done.stdout.decode().splitlines()) if "id" in m}
    assert answers[1]["error"]["code"] == -32600  # before initialize
    assert answers[2]["result"]["protocolVersion"] == "2025-11-25"
    assert answers[3]["error"]["code"] == -32601
    assert answers[4]["result"] == {}
    assert answers[5]["result"]["contents"][0]["text"] == f"{URI} @ v1"
