"""The default ``freshcache serve`` speaks 2026-07-28 and 2025-11-25 at once, as real
servers do (issue 37, item 5): a 2025-11-25 host (the official SDK client's ``legacy``
mode: ``initialize``, no ``MCP-Protocol-Version`` on it, no ``_meta``; what the MCP
Inspector CLI sends) and a 2026-07-28 one both read, list and hear a change, over
HTTP and stdio. ``--revision`` still pins one."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from freshcache.acceptance._protocol_2025 import speaks_2025
from tests.polling import scaled
from tests.proxy_support import ENV, MODES, Host, replace_text
from tests.serve_support import cli, start_serve

pytestmark = [pytest.mark.anyio, pytest.mark.wire]


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
async def test_the_default_serve_answers_each_host_in_its_revision(
    tmp_path: Path, revision: str, transport: str
) -> None:
    from mcp import Client, StdioServerParameters

    folder = tmp_path / "docs"
    folder.mkdir()
    page = folder / "page.md"
    page.write_text("first")
    uri = page.resolve().as_uri()
    served = None
    if transport == "http":
        served = start_serve(tmp_path, str(folder), "--poll")
        target: object = served.url
    else:
        target = StdioServerParameters(
            command=sys.executable,
            args=[*cli("serve", str(folder), "--stdio", "--poll")[1:]],
            env=ENV,
        )
    holder: list[Host] = []

    async def on_message(message: object) -> None:
        if holder:
            await holder[0].on_message(message)

    try:
        async with (
            Client(
                target,
                mode=MODES[revision],
                read_timeout_seconds=scaled(20),
                message_handler=on_message,
            ) as client,  # type: ignore[arg-type]
            anyio.create_task_group() as tg,
        ):
            assert client.protocol_version == revision
            host = Host(client, revision)
            holder.append(host)
            assert (await client.read_resource(uri)).contents[0].text == "first"
            assert uri in {r.uri for r in (await client.list_resources()).resources}
            await host.subscribe(tg, uri)
            mark = host.mark()
            replace_text(page, "second")
            await host.heard_of(f"updated {uri}", since=mark)
            assert (await client.read_resource(uri)).contents[0].text == "second"
            tg.cancel_scope.cancel()
    finally:
        if served is not None:
            served.stop()


@pytest.mark.parametrize(
    ("message", "header", "session", "method", "legacy"),
    [
        ({"method": "initialize", "params": {}}, None, None, "POST", True),
        ({"method": "resources/read", "params": {"uri": "u"}}, "2025-11-25", "s1", "POST", True),
        ({"method": "tools/list", "params": {}}, None, None, "POST", True),
        (None, None, "s1", "GET", True),
        (
            {
                "method": "resources/read",
                "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
            },
            "2026-07-28",
            None,
            "POST",
            False,
        ),
        (
            {
                "method": "server/discover",
                "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
            },
            None,
            None,
            "POST",
            False,
        ),
        ("not json", None, None, "POST", False),
    ],
)
def test_which_revision_a_request_speaks(
    message: object, header: str | None, session: str | None, method: str, legacy: bool
) -> None:
    assert (
        speaks_2025(message, version_header=header, session_id=session, http_method=method)
        is legacy
    )
