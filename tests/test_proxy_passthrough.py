"""``freshcache proxy`` passing through what it cannot cache, and guarding tool calls, with
a real host (the official Python SDK client, both revisions) in front of a real upstream
(an official-SDK stdio server, `tests/fixtures/proxy_counter.py`):

- ``prompts/get`` reaches the upstream every time (`FreshCache.get_prompt`: computed,
  never cached); an unknown prompt or a missing argument is ``-32602``;
- ``resources/list`` carries each resource as the upstream described it (title,
  description, size, annotations: the schema's ``Resource``);
- a tool that needs input first (``input_required``, basic/patterns/mrtr) is relayed to
  a 2026-07-28 host, which answers and retries through the proxy; a 2025-11-25 host gets
  a JSON-RPC error saying so;
- a tool whose definition changed after this host listed it is refused with
  ``tool_changed`` (its new definition in the error's data), never run with the old
  arguments; listed again, the call runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import FIXTURES
from tests.polling import scaled, until
from tests.proxy_support import host, running_proxy

pytestmark = [pytest.mark.anyio, pytest.mark.wire]
REVISIONS = ["2026-07-28", "2025-11-25"]


def _counter(calls: Path) -> list[str]:
    return ["--", sys.executable, str(FIXTURES / "proxy_counter.py"), str(calls)]


async def _first_tools(h: Any) -> dict[str, Any]:
    """The tools, once the upstream has started (until then: an explicit state)."""
    with anyio.fail_after(scaled(60)):
        while True:
            try:
                return {t.name: t for t in (await h.client.list_tools()).tools}
            except MCPError as exc:
                state = exc.error.data["state"]
            assert state == "awaiting_fresh_source"


async def _sign_as_ada(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada"})


@pytest.mark.parametrize("revision", REVISIONS)
async def test_prompts_descriptions_and_input_required(tmp_path: Path, revision: str) -> None:
    calls = tmp_path / "calls.txt"
    options = {"elicitation_callback": _sign_as_ada}
    async with host(_counter(calls), revision, "stdio", tmp_path, client_options=options) as h:
        await _first_tools(h)
        assert [p.name for p in (await h.client.list_prompts()).prompts] == ["greet"]
        got = await h.client.get_prompt("greet", {"who": "Ada"})
        assert got.messages[0].content.text == "Greet Ada (after 0 runs)"
        await h.client.call_tool("tick", {})
        again = await h.client.get_prompt("greet", {"who": "Ada"})
        assert again.messages[0].content.text == "Greet Ada (after 1 runs)"  # not cached
        with pytest.raises(MCPError) as missing:
            await h.client.get_prompt("greet", {})
        assert (missing.value.error.code, missing.value.error.data["state"]) == (
            -32602,
            "not_found",
        )

        (listed,) = (await h.client.list_resources()).resources
        assert (listed.uri, listed.name, listed.title) == (
            "counter://calls",
            "calls",
            "Calls so far",
        )
        assert listed.description == "How many times a counted tool ran"
        assert (listed.mime_type, listed.size) == ("text/plain", 4)
        assert listed.annotations is not None and listed.annotations.priority == 0.5

        if revision == "2026-07-28":
            signed = await h.client.call_tool("sign", {})
            assert signed.content[0].text == "signed by Ada"
        else:
            with pytest.raises(MCPError) as needs_input:
                await h.client.call_tool("sign", {})
            data = needs_input.value.error.data
            assert data["state"] == "input_required"
            assert data["inputRequests"]["name"]["method"] == "elicitation/create"
            assert "2026-07-28 hosts only" in needs_input.value.error.message


@pytest.mark.parametrize(
    ("revision", "transport"),
    [("2026-07-28", "stdio"), ("2025-11-25", "stdio"), ("2026-07-28", "http")],
)
async def test_a_tool_changed_since_the_host_listed_it_is_refused_not_run(
    tmp_path: Path, revision: str, transport: str
) -> None:
    calls = tmp_path / "calls.txt"
    async with (
        host(_counter(calls), revision, transport, tmp_path) as h,
        anyio.create_task_group() as tg,
    ):
        tools = await _first_tools(h)
        await h.subscribe(tg, "counter://calls")  # (2026: a listen, which hears list changes)
        assert tools["tick"].input_schema.get("required") is None
        assert (await h.client.call_tool("reshape", {})).content[0].text == "tick reshaped"
        await h.heard_of("tools")

        with pytest.raises(MCPError) as refused:
            await h.client.call_tool("tick", {})  # built from the definition it listed
        data = refused.value.error.data
        assert data["state"] == "tool_changed"
        assert data["definition"]["inputSchema"]["required"] == ["step"]
        assert not calls.exists()  # nothing ran

        await h.client.list_tools()
        ticked = await h.client.call_tool("tick", {"step": 1})
        assert ticked.content[0].text == "tick 1"
        await until(lambda: calls.read_text().splitlines() == ["tick"])
        tg.cancel_scope.cancel()


async def test_get_prompt_through_http_and_sdk_client_sources(tmp_path: Path) -> None:
    """`FreshCache.get_prompt` on the other sources (`HttpSource`, `McpClientSource`),
    with the proxy over HTTP as their server: passed through, every time."""
    from freshcache import FreshCache, HttpSource, McpClientSource

    calls = tmp_path / "calls.txt"
    with running_proxy(tmp_path, "--http", "127.0.0.1:0", *_counter(calls)) as (_, url):
        assert url is not None
        for source in (HttpSource(url, timeout=scaled(20)), McpClientSource.connect(url)):
            async with FreshCache(source, read_timeout=scaled(30)) as cache:
                with anyio.fail_after(scaled(60)):
                    while (got := await cache.get_prompt("greet", {"who": "Bo"})).state != (
                        "answered"
                    ):
                        assert got.state == "unavailable"  # the upstream still starting
                assert got.result is not None
                assert got.result["messages"][0]["content"]["text"].startswith("Greet Bo")
                missing = await cache.get_prompt("greet", {})
                assert missing.state == "not_found"
