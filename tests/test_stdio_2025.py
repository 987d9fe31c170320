"""`StdioSource` against a server on MCP 2025-11-25, a real subprocess on one pipe.

The peer is the reference stdio server with ``--revision 2025-11-25`` (it refuses every
request before ``initialize`` with ``-32600``, as SDK 1.x does, and answers
``server/discover`` with ``-32601``). Checked: what the process received, in order,
and what the cache hands out: negotiation, subscribe per selected URI, a notification,
and a restarted process initialized and subscribed again.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from freshcache import FreshCache, StdioSource
from freshcache.acceptance._settle import wait_for
from freshcache.acceptance._stdio_server import default_reference, save_state, step_to_json
from freshcache.acceptance._stdio_world import ControlChannel
from freshcache.acceptance._steps import ALIASES, ServerSets, text_for

from .polling import scaled
from .test_stdio_source import FAST, SERVER

pytestmark = [pytest.mark.anyio, pytest.mark.wire]

U = ALIASES["selected"]
OTHER = ALIASES["other"]


@asynccontextmanager
async def cache_on(tmp_path: Path) -> AsyncIterator[tuple[FreshCache, StdioSource, Any]]:
    state, control_file = tmp_path / "state.json", tmp_path / "control.json"
    save_state(state, default_reference())
    source = StdioSource(
        [
            *SERVER,
            "--state",
            str(state),
            "--control-file",
            str(control_file),
            "--revision",
            "2025-11-25",
        ],
        timeout=10.0,
        restart=FAST,
        shutdown_timeout=2.0,
    )
    channel = ControlChannel(control_file)

    async def control(op: str, **fields: Any) -> dict[str, Any]:
        with anyio.fail_after(15):
            while (reply := await channel.command(source.pid, {"op": op, **fields})) is None:
                await anyio.sleep(0.01)
        return reply

    try:
        async with FreshCache(source, select=[U], read_timeout=10.0, backoff=FAST) as cache:
            yield cache, source, control
    finally:
        await channel.aclose()


def methods(requests: list[dict[str, Any]]) -> list[str]:
    return [m.get("method", "") for m in requests]


async def test_discover_falls_back_to_initialize_then_subscribe_on_the_one_channel(tmp_path):
    async with cache_on(tmp_path) as (cache, _source, control):
        await wait_for(lambda: U in cache.engine.covered, limit=30, what="the subscribe")
        info = cache.server_info
        assert info is not None and info.protocol_version == "2025-11-25"
        first = await cache.read(U)
        assert (first.state, first.text) == ("fresh", text_for(U, "v1"))
        again = await cache.read(U)
        assert again.server_read is False  # covered by a live subscription
        seen = methods((await control("requests"))["requests"])
    assert seen[:3] == ["server/discover", "initialize", "notifications/initialized"]
    assert "subscriptions/listen" not in seen
    assert seen.count("resources/subscribe") == 1


async def test_a_notification_makes_the_copy_not_fresh_until_the_reread(tmp_path):
    async with cache_on(tmp_path) as (cache, _source, control):
        await wait_for(lambda: U in cache.engine.covered, limit=30)
        await cache.read(U)
        await control("step", step=step_to_json(ServerSets(U, "v2", notify=True)))
        await wait_for(lambda: cache.status(U).text != text_for(U, "v1"), limit=15)
        result = await cache.read(U)
        assert (result.state, result.text) == ("fresh", text_for(U, "v2"))


async def test_a_restarted_process_is_initialized_and_subscribed_again(tmp_path):
    async with cache_on(tmp_path) as (cache, source, control):
        await wait_for(lambda: U in cache.engine.covered, limit=30)
        await cache.read(U)
        pid = source.pid
        await control("step", step=step_to_json(ServerSets(U, "v2", notify=False)))
        await control("die")
        await wait_for(lambda: source.pid not in (None, pid), limit=30, what="a new process")
        await wait_for(lambda: U in cache.engine.covered, limit=30, what="the new subscribe")
        seen = methods((await control("requests"))["requests"])
        result = await cache.read(U)
    # The new process refuses everything before initialize: these answers prove it ran.
    assert seen[:2] == ["initialize", "notifications/initialized"]
    assert "resources/subscribe" in seen
    assert (result.state, result.text) == ("fresh", text_for(U, "v2"))


ANSWERS_EMPTY = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    result = {}
    if message["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {},
                  "serverInfo": {"name": "answers-empty", "version": "1"}}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


async def test_a_discover_answered_with_an_empty_result_falls_back_to_initialize() -> None:
    """``{}`` from ``server/discover`` names no revision: a 2025 server answering every
    method it does not know so. Before: an `AssertionError` out of `start`."""
    source = StdioSource([sys.executable, "-c", ANSWERS_EMPTY], timeout=10.0)
    try:
        info = await source.start()
    finally:
        await source.aclose()
    assert info.reachable and info.name == "answers-empty", info
    assert source.protocol_version == "2025-11-25"


async def test_a_discovery_the_process_was_too_slow_to_answer_is_sent_again(tmp_path):
    """The process starts after the first ``server/discover`` gave up (a server's slow
    start, ``npx`` fetching a package): before, the source kept speaking 2026 to it and
    its listen was refused for the cache's whole life (``-32601``: listening off)."""
    state = tmp_path / "state.json"
    save_state(state, default_reference())
    command = " ".join([*SERVER, "--state", str(state), "--revision", "2025-11-25"])
    source = StdioSource(
        ["sh", "-c", f"sleep 1.5; exec {command}"],
        timeout=1.0,
        restart=FAST,
        shutdown_timeout=2.0,
    )
    async with FreshCache(source, select=[U], read_timeout=10.0, backoff=FAST) as cache:
        await wait_for(lambda: U in cache.engine.covered, limit=scaled(30), what="the subscribe")
        info = cache.server_info  # the discovery at start: it decided nothing
        assert info is not None and not info.revision_decided, info
        assert source.protocol_version == "2025-11-25"
        result = await cache.read(U)
        assert (result.state, result.text) == ("fresh", text_for(U, "v1"))
        assert cache.stream_status == "live"
