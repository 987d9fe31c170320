"""``freshcache proxy`` with a real host (the official Python SDK client, both revisions,
over stdio and Streamable HTTP) in front of real upstreams (the official SDK fixture
server over HTTP, an SDK stdio server that counts tool runs): invariant 18.

- read; a change -> the host is told and reads the new text; the tool list changed ->
  the host is told and its next list is the new one (every revision x transport);
- the upstream killed -> the host's read is an error whose data names the state, not
  the old text; changed while it was down, then restarted -> the host is told and
  reads the new text;
- several upstreams from an ``mcpServers`` file: prefixed names mapped back, a tool
  call runs once (also one that never answers: not sent again), a tool gone from the
  list is an error naming the current tools and every host hears ``tools/list_changed``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import FIXTURES, SdkServer, free_port, stop_process
from tests.polling import scaled, until
from tests.proxy_support import fleet_replicas_subscribed, host, replace_text

pytestmark = [pytest.mark.anyio, pytest.mark.wire]
U = "guide://shipping/approval"
REVISIONS = ["2026-07-28", "2025-11-25"]
TRANSPORTS = ["stdio", "http"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("revision", REVISIONS)
async def test_a_host_reads_and_hears_every_change(
    sdk_server: SdkServer, tmp_path: Path, revision: str, transport: str
) -> None:
    async with (
        host([sdk_server.url], revision, transport, tmp_path) as h,
        anyio.create_task_group() as tg,
    ):
        first = await h.client.read_resource(U)
        assert first.contents[0].text.startswith("Shipping approval v1")
        await h.subscribe(tg, U)

        mark = h.mark()
        sdk_server.control("set", uri=U, text="Shipping approval v2")
        await h.heard_of(f"updated {U}", since=mark)
        again = await h.client.read_resource(U)
        assert again.contents[0].text == "Shipping approval v2"

        before = {tool.name for tool in (await h.client.list_tools()).tools}
        mark = h.mark()
        sdk_server.control("tools", names=["deployed_just_now"])
        await h.heard_of("tools", since=mark)
        after = {tool.name for tool in (await h.client.list_tools()).tools}
        assert after == before | {"deployed_just_now"}
        tg.cancel_scope.cancel()


def _start_upstream(port: int, seed: dict[str, object] | None, tmp: Path) -> SdkServer:
    """The SDK fixture on ``port`` (so a restart is the same server to the proxy)."""
    extra = []
    if seed is not None:
        seed_file = tmp / f"seed-{time.monotonic_ns()}.json"
        seed_file.write_text(json.dumps(seed))
        extra = ["--state-file", str(seed_file)]
    process = subprocess.Popen(
        [sys.executable, str(FIXTURES / "sdk_server.py"), "http", "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    server = SdkServer(f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}/control", process)
    deadline = time.monotonic() + scaled(30)
    while True:
        try:
            server.state()
            return server
        except httpx.HTTPError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_process(process)
                raise
            time.sleep(0.05)


@pytest.mark.parametrize(
    ("revision", "transport"), [("2026-07-28", "stdio"), ("2025-11-25", "http")]
)
async def test_an_outage_the_host_never_saw_is_told(
    tmp_path: Path, revision: str, transport: str
) -> None:
    port = free_port()
    upstream = _start_upstream(port, None, tmp_path)
    try:
        async with (
            host([upstream.url], revision, transport, tmp_path, "--timeout", "2") as h,
            anyio.create_task_group() as tg,
        ):
            assert "v1" in (await h.client.read_resource(U)).contents[0].text
            await h.subscribe(tg, U)
            await h.client.read_resource(U)

            mark = h.mark()
            stop_process(upstream.process)  # the host does not look: it is told
            await h.heard_of(f"updated {U}", since=mark)
            with pytest.raises(MCPError) as refused:
                await h.client.read_resource(U)
            assert refused.value.error.data["state"] == "awaiting_fresh_source"
            assert "v1" not in json.dumps(refused.value.error.data)

            mark = h.mark()
            seed = {
                "resources": {
                    U: "Shipping approval v2, changed while the proxy's upstream was down"
                }
            }
            upstream = _start_upstream(port, seed, tmp_path)
            await h.heard_of(f"updated {U}", since=mark)
            after = await h.client.read_resource(U)
            assert after.contents[0].text == seed["resources"][U]
            tg.cancel_scope.cancel()
    finally:
        stop_process(upstream.process)


async def test_several_upstreams_prefixed_and_a_call_runs_once(
    sdk_server: SdkServer, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.txt"
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "docs": {"url": sdk_server.url},
                    "counter": {
                        "command": sys.executable,
                        "args": [str(FIXTURES / "proxy_counter.py"), str(calls)],
                    },
                }
            },
            indent=2,
        )
    )
    args = ["--config", str(config), "--timeout", "3"]
    async with host([], "2025-11-25", "stdio", tmp_path, *args) as h:
        wanted = {"docs__set_resource", "counter__tick", "counter__stall"}
        with anyio.fail_after(scaled(30)):
            while True:  # an upstream still starting is left out of the list (and named)
                listed = await h.client.list_tools()
                if wanted <= {tool.name for tool in listed.tools}:
                    break
                assert listed.meta["freshcache/withheld"][0]["upstream"] == "counter"

        ticked = await h.client.call_tool("counter__tick", {})
        assert ticked.content[0].text == "tick 1"
        stalled = await h.client.call_tool("counter__stall", {})
        assert stalled.is_error
        assert "may have run" in stalled.content[0].text
        assert calls.read_text().splitlines() == ["tick", "stall"]  # each sent once

        mark = h.mark()
        with pytest.raises(MCPError) as gone:
            await h.client.call_tool("counter__vanished", {})
        assert "counter__tick" in gone.value.error.message
        await h.heard_of("tools", since=mark)

        listed = {r.uri for r in (await h.client.list_resources()).resources}
        assert {U, "counter://calls"} <= listed
        assert (await h.client.read_resource("counter://calls")).contents[0].text == "2"
        assert "v1" in (await h.client.read_resource(U)).contents[0].text
    assert calls.read_text().splitlines() == ["tick", "stall"]


async def test_a_denied_or_missing_resource_is_an_error_naming_its_state(
    sdk_server: SdkServer, tmp_path: Path
) -> None:
    sdk_server.control("deny", uri=U)
    async with host([sdk_server.url], "2026-07-28", "stdio", tmp_path) as h:
        with pytest.raises(MCPError) as denied:
            await h.client.read_resource(U)
        assert denied.value.error.data["state"] == "denied"
        with pytest.raises(MCPError) as missing:
            await h.client.read_resource("guide://nowhere")
        assert missing.value.error.data["state"] == "not_found"
        assert missing.value.error.code == -32602


@pytest.mark.parametrize("revision", REVISIONS)
async def test_in_front_of_freshcache_serve_over_stdio(tmp_path: Path, revision: str) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    page = folder / "page.md"
    page.write_text("first")
    uri = page.resolve().as_uri()
    upstream = [
        "--",
        sys.executable,
        "-m",
        "freshcache._cli",
        "serve",
        str(folder),
        "--stdio",
        "--poll",
    ]
    async with host(upstream, revision, "stdio", tmp_path) as h, anyio.create_task_group() as tg:
        assert (await h.client.read_resource(uri)).contents[0].text == "first"
        await h.subscribe(tg, uri)
        mark = h.mark()
        replace_text(page, "second")
        await h.heard_of(f"updated {uri}", since=mark)
        assert (await h.client.read_resource(uri)).contents[0].text == "second"
        tg.cancel_scope.cancel()


async def test_an_upstream_that_never_answers_is_a_state_not_a_dead_proxy(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    async with host([dead], "2026-07-28", "stdio", tmp_path, "--timeout", "1") as h:
        with pytest.raises(MCPError) as listed:
            await h.client.list_tools()
        assert listed.value.error.data["state"] == "awaiting_fresh_source"
        assert listed.value.error.data["upstreams"][0]["reason"] in ("unreachable", "timeout")
        with pytest.raises(MCPError) as read:
            await h.client.read_resource(U)
        assert read.value.error.data["reason"] in ("unreachable", "timeout")
        with pytest.raises(MCPError):
            await h.client.list_tools()  # and it is still there to answer


async def test_two_replicas_on_one_fleet(
    sdk_server: SdkServer, valkey: Any, tmp_path: Path
) -> None:
    fleet = ["--fleet", valkey.url]
    async with (
        host([sdk_server.url], "2026-07-28", "stdio", tmp_path, *fleet) as one,
        host([sdk_server.url], "2025-11-25", "http", tmp_path, *fleet) as two,
        anyio.create_task_group() as tg,
    ):
        assert "v1" in (await one.client.read_resource(U)).contents[0].text
        assert "v1" in (await two.client.read_resource(U)).contents[0].text
        await one.subscribe(tg, U)
        mark = one.mark()
        sdk_server.control("set", uri=U, text="Shipping approval v2")
        await one.heard_of(f"updated {U}", since=mark)
        assert (await two.client.read_resource(U)).contents[0].text == "Shipping approval v2"
        assert (await one.client.read_resource(U)).contents[0].text == "Shipping approval v2"
        tg.cancel_scope.cancel()


async def test_two_replicas_tell_nothing_at_the_listeners_new_stream(
    sdk_server: SdkServer, valkey: Any, tmp_path: Path
) -> None:
    """The fleet's listener loses its upstream stream and listens again, nothing changed:
    neither replica (the one that leads, the one that follows it over the fleet) tells
    its host "updated" for it. The tool list's change after it is the barrier: each
    replica hears of it after the new stream's acknowledgment (the fleet channel is in
    order) and tells its hosts in order, so a notice for the re-proof comes first."""
    async with fleet_replicas_subscribed(sdk_server.url, valkey.url, tmp_path, U) as hosts:
        marks = [h.mark() for h in hosts]
        sdk_server.control("set", uri=U, text="Shipping approval v2")
        for h, since in zip(hosts, marks, strict=True):
            await h.heard_of(f"updated {U}", since=since)
            assert (await h.client.read_resource(U)).contents[0].text == "Shipping approval v2"
        marks = [h.mark() for h in hosts]
        reads = sdk_server.reads(U)
        sdk_server.control("drop_listeners")
        # The listener's new stream is acknowledged and re-reads U once for the fleet.
        await until(lambda: sdk_server.reads(U) > reads, scaled(30))
        sdk_server.control("tools", names=["deployed_after_the_new_stream"])
        for h, since in zip(hosts, marks, strict=True):
            await h.heard_of("tools", since=since)
            heard = h.heard[since:]
            assert f"updated {U}" not in heard[: heard.index("tools")], heard
            assert (await h.client.read_resource(U)).contents[0].text == "Shipping approval v2"
