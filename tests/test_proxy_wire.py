"""``freshcache proxy`` in front of the reference server over real HTTP (in this process,
so a test sees every request the proxy sent upstream): a host's ``traceparent`` reaches
the upstream read it caused; each HTTP host's credentials go upstream as its own
principal, and a denial of one host is not the other's; ``--meta-tools`` lists the
fresh catalog and calls through it, once; the re-read an upstream acknowledgment
causes is not told to hosts as a change."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from tests.polling import scaled, until
from tests.proxy_support import host, running_proxy

pytestmark = [pytest.mark.anyio, pytest.mark.wire]
U = "guide://shipping/approval"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


@asynccontextmanager
async def upstream() -> AsyncIterator[tuple[ReferenceServer, ReferenceHttpServer]]:
    server = ReferenceServer()
    server.set(U, "v1")
    server.set_catalog("tools", [{"name": "search", "inputSchema": {"type": "object"}}])
    async with ReferenceHttpServer(server) as http:
        yield server, http


def _reads(http: ReferenceHttpServer) -> list[dict[str, Any]]:
    return [
        r.message
        for r in http.requests
        if isinstance(r.message, dict) and r.message.get("method") == "resources/read"
    ]


async def test_a_hosts_traceparent_reaches_the_upstream_read_it_caused(tmp_path: Path) -> None:
    async with upstream() as (_, http), host([http.url], "2026-07-28", "stdio", tmp_path) as h:
        result = await h.client.read_resource(U, meta={"traceparent": TRACEPARENT})
        assert result.contents[0].text == "v1"
    sent = [m["params"]["_meta"].get("traceparent", "") for m in _reads(http)]
    assert any(TRACE in traceparent for traceparent in sent), sent


@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
async def test_an_upstream_acknowledgment_is_not_told_to_hosts_as_a_change(
    tmp_path: Path, revision: str
) -> None:
    """The host reads (the proxy selects the URI upstream) and subscribes; only then is
    the proxy's upstream stream acknowledged. The re-read that ack causes (invariant 4)
    is no change: the host is not told of one (it would read the text it had). The
    next real change is told, once, and read."""
    async with upstream() as (server, http):
        server.hold_acks()
        async with (
            host([http.url], revision, "stdio", tmp_path) as h,
            anyio.create_task_group() as tg,
        ):
            assert (await h.client.read_resource(U)).contents[0].text == "v1"
            await h.subscribe(tg, U)
            await until(lambda: server.subscribers, scaled(20))  # the proxy's listen
            reads = server.reads
            server.release_acks()
            await until(lambda: server.reads > reads, scaled(20))  # the ack's re-read ...
            assert (await h.client.read_resource(U)).contents[0].text == "v1"  # ... landed
            mark = h.mark()
            server.set(U, "v2", notify=True)
            await h.heard_of(f"updated {U}", since=mark)
            assert (await h.client.read_resource(U)).contents[0].text == "v2"
            assert [item for item in h.heard if item.startswith("updated")] == [f"updated {U}"]
            tg.cancel_scope.cancel()


async def test_each_http_host_reads_as_its_own_principal(tmp_path: Path) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with upstream() as (server, http):
        server.denied_principals[U] = {"bob"}
        with running_proxy(tmp_path, "--http", "127.0.0.1:0", http.url) as (_, url):
            assert url is not None

            def as_(web: Any) -> Any:
                transport = streamable_http_client(url, http_client=web)
                return Client(transport, mode="2026-07-28", read_timeout_seconds=scaled(20))

            async with (
                httpx2.AsyncClient(headers={"Authorization": "Bearer alice"}) as alice_web,
                httpx2.AsyncClient(headers={"Authorization": "Bearer bob"}) as bob_web,
                as_(alice_web) as alice,
                as_(bob_web) as bob,
            ):
                assert (await alice.read_resource(U)).contents[0].text == "v1"
                with pytest.raises(MCPError) as refused:
                    await bob.read_resource(U)
                assert refused.value.error.data["state"] == "denied"
                assert (await alice.read_resource(U)).contents[0].text == "v1"
    who = {
        r.headers.get("authorization")
        for r in http.requests
        if r.message and r.message.get("method") == "resources/read"
    }
    assert {"Bearer alice", "Bearer bob"} <= who


async def test_meta_tools_list_the_fresh_catalog_and_call_through_it_once(tmp_path: Path) -> None:
    async with (
        upstream() as (server, http),
        host([http.url], "2025-11-25", "stdio", tmp_path, "--meta-tools") as h,
    ):
        names = {tool.name for tool in (await h.client.list_tools()).tools}
        assert names == {"search", "freshcache_list_tools", "freshcache_call_tool"}
        server.set_catalog("tools", [{"name": "lookup", "inputSchema": {"type": "object"}}])
        listed = await h.client.call_tool("freshcache_list_tools", {})
        assert '"lookup"' in listed.content[0].text
        assert '"search"' not in listed.content[0].text
        called = await h.client.call_tool(
            "freshcache_call_tool", {"name": "lookup", "arguments": {"q": "x"}}
        )
        assert called.content[0].text == 'lookup called with {"q": "x"}'
    assert server.tool_calls == ["lookup"]


async def test_a_host_with_its_own_credentials_hears_the_tool_list_change(
    tmp_path: Path,
) -> None:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.proxy_support import Host

    async with upstream() as (server, http):
        with running_proxy(tmp_path, "--http", "127.0.0.1:0", http.url) as (_, url):
            assert url is not None
            async with (
                httpx2.AsyncClient(headers={"Authorization": "Bearer carol"}) as web,
                Client(
                    streamable_http_client(url, http_client=web),
                    mode="2026-07-28",
                    read_timeout_seconds=scaled(20),
                ) as client,
                anyio.create_task_group() as tg,
            ):
                carol = Host(client, "2026-07-28")
                assert [t.name for t in (await client.list_tools()).tools] == ["search"]
                await carol.subscribe(tg, U)
                mark = carol.mark()
                server.set_catalog("tools", [{"name": "lookup", "inputSchema": {"type": "object"}}])
                await carol.heard_of("tools", since=mark)
                assert [t.name for t in (await client.list_tools()).tools] == ["lookup"]
                tg.cancel_scope.cancel()
