"""``completion/complete`` through ``freshcache proxy``, with a real host (the official
Python SDK client, both revisions, stdio and HTTP) in front of real upstreams (the SDK
stdio server `tests/fixtures/proxy_counter.py`, which offers completions, and
``freshcache serve``, which does not):

- passed through to the upstream owning the prompt (its prefix mapped back) or the
  resource template the ``ref`` names, every time (never cached: the fixture's
  ``total`` counts the completions it was asked for);
- ``-32601`` when that upstream declares no ``completions`` capability;
- the proxy offers ``completions`` to hosts only when some upstream does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import FIXTURES
from tests.polling import scaled
from tests.proxy_support import host

pytestmark = [pytest.mark.anyio, pytest.mark.wire]
TEMPLATE = "counter://runs/{tool}"


def _counter(calls: Path) -> list[str]:
    return [sys.executable, str(FIXTURES / "proxy_counter.py"), str(calls)]


def _serve(folder: Path) -> list[str]:
    folder.mkdir(exist_ok=True)
    (folder / "page.md").write_text("a page")
    return [sys.executable, "-m", "freshcache._cli", "serve", str(folder), "--stdio"]


def _wait() -> list[str]:
    """A handshake waits for the upstreams' discovery up to --timeout (a loaded
    machine starts a Python upstream slowly)."""
    return ["--timeout", str(scaled(15))]


def _prompt(name: str) -> types.PromptReference:
    return types.PromptReference(type="ref/prompt", name=name)


async def _capabilities(h: Any) -> types.ServerCapabilities:
    """What the proxy offered: a 2026-07-28 host asks (``server/discover``; the SDK
    client in that mode sends none on its own), a 2025-11-25 one was told at
    ``initialize``."""
    if h.revision == "2026-07-28":
        await _upstreams_started(h)  # (the SDK client's discover probe waits 10 s at most)
        raw = await h.client.session.send_discover("2026-07-28")
        return types.DiscoverResult.model_validate(raw).capabilities
    return h.client.server_capabilities


async def _upstreams_started(h: Any) -> None:
    """Until every upstream answered a list (until then: an explicit state)."""
    with anyio.fail_after(scaled(60)):
        while True:
            try:
                listed = await h.client.list_tools()
            except MCPError as exc:
                state = exc.error.data["state"]
            else:
                if not (listed.meta or {}).get("freshcache/withheld"):
                    return
                state = "awaiting_fresh_source"
            assert state == "awaiting_fresh_source"


async def _complete(h: Any, ref: Any, name: str, value: str) -> types.Completion:
    return (await h.client.complete(ref, {"name": name, "value": value})).completion


@pytest.mark.parametrize(
    ("revision", "transport"),
    [("2026-07-28", "stdio"), ("2025-11-25", "stdio"), ("2026-07-28", "http")],
)
async def test_a_completion_reaches_the_upstream_every_time(
    tmp_path: Path, revision: str, transport: str
) -> None:
    upstream = ["--", *_counter(tmp_path / "calls.txt")]
    async with host(upstream, revision, transport, tmp_path, *_wait()) as h:
        assert (await _capabilities(h)).completions is not None
        first = await _complete(h, _prompt("greet"), "who", "A")
        assert (first.values, first.total) == (["Ada", "Alan"], 1)
        again = await _complete(h, _prompt("greet"), "who", "A")
        assert (again.values, again.total) == (["Ada", "Alan"], 2)  # asked again, not kept
        template = types.ResourceTemplateReference(type="ref/resource", uri=TEMPLATE)
        assert (await _complete(h, template, "tool", "st")).values == ["stall"]
        with pytest.raises(MCPError) as refused:
            await _complete(h, _prompt("greet"), "nobody", "A")
        assert (refused.value.error.code, refused.value.error.data["state"]) == (
            -32602,
            "not_found",
        )


async def test_several_upstreams_by_prefix_and_one_without_completions(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    counter, serve = _counter(tmp_path / "calls.txt"), _serve(tmp_path / "docs")
    servers = {
        "counter": {"command": counter[0], "args": counter[1:]},
        "docs": {"command": serve[0], "args": serve[1:]},
    }
    config.write_text(json.dumps({"mcpServers": servers}))
    async with host([], "2025-11-25", "stdio", tmp_path, "--config", str(config), *_wait()) as h:
        assert (await _capabilities(h)).completions is not None  # the counter's
        got = await _complete(h, _prompt("counter__greet"), "who", "B")
        assert got.values == ["Bob"]
        template = types.ResourceTemplateReference(type="ref/resource", uri=TEMPLATE)
        assert (await _complete(h, template, "tool", "ti")).values == ["tick"]
        with pytest.raises(MCPError) as none:
            await _complete(h, _prompt("docs__summary"), "topic", "x")
        assert none.value.error.code == -32601
        assert "completions" in none.value.error.message
        with pytest.raises(MCPError) as unknown:
            await _complete(h, _prompt("elsewhere__greet"), "who", "A")
        assert unknown.value.error.code == -32602


@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
async def test_no_completions_offered_when_no_upstream_offers_them(
    tmp_path: Path, revision: str
) -> None:
    upstream = ["--", *_serve(tmp_path / "docs")]
    async with host(upstream, revision, "stdio", tmp_path, *_wait()) as h:
        assert (await _capabilities(h)).completions is None
        with pytest.raises(MCPError) as none:
            await _complete(h, _prompt("summary"), "topic", "x")
        assert none.value.error.code == -32601


async def test_a_server_without_completions_is_sent_none() -> None:
    """`FreshCache.complete` asks nothing of a server whose discovery declared no
    ``completions`` (the reference server): `MethodNotFoundError`, no request sent."""
    from freshcache import FreshCache, HttpSource, MethodNotFoundError
    from freshcache.acceptance import ReferenceServer
    from freshcache.acceptance._http_server import ReferenceHttpServer

    async with (
        ReferenceHttpServer(ReferenceServer()) as http,
        FreshCache(HttpSource(http.url, timeout=scaled(10))) as cache,
    ):
        with pytest.raises(MethodNotFoundError, match="declares no completions"):
            await cache.complete({"type": "ref/prompt", "name": "p"}, {"name": "a", "value": ""})
    methods = [r.message.get("method") for r in http.requests if isinstance(r.message, dict)]
    assert "server/discover" in methods and "completion/complete" not in methods
