"""What the proxy keeps per 2026-07-28 HTTP principal is bounded (`TOOL_RECORDS` tool
lists, `PRINCIPALS` credentials, least recently used dropped first), and a dropped
tool record fails safe: the host's next call is judged as a host's that never listed
(``seen=None``: sent once, and after an "unknown tool" refusal never sent again).

The handlers are called in this process with a request context as the SDK builds it
for a 2026-07-28 HTTP request (its ``Authorization`` header); the upstream's catalog
is stood in for (a fresh copy per listing, as `Proxy._catalog` thaws one), so the
measure is the proxy's own bookkeeping.
"""

from __future__ import annotations

import gc
import tracemalloc
from types import SimpleNamespace
from typing import Any

import pytest

from freshcache._proxy._config import Upstream
from freshcache._proxy._hosts import TOOL_RECORDS
from freshcache._proxy._server import PRINCIPALS, Proxy

pytestmark = pytest.mark.anyio

TOOLS = [
    {
        "name": f"tool_{n}",
        "description": "d" * 400,
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    for n in range(20)
]


def _ctx(who: int) -> Any:
    request = SimpleNamespace(headers={"authorization": f"Bearer host-{who}"})
    return SimpleNamespace(protocol_version="2026-07-28", request=request, session=None)


def _proxy() -> Proxy:
    proxy = Proxy([Upstream("docs", url="http://127.0.0.1:9/mcp")])

    async def tools_now(ctx: Any) -> dict[str, Any]:
        return {"tools": [{**tool, "inputSchema": dict(tool["inputSchema"])} for tool in TOOLS]}

    proxy._tools_now = tools_now  # type: ignore[method-assign]
    return proxy


async def _list_as(proxy: Proxy, hosts: range) -> int:
    for who in hosts:
        await proxy._list_tools(_ctx(who), None)
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def test_many_principals_keep_the_memory_bounded() -> None:
    proxy = _proxy()
    bound = max(TOOL_RECORDS, PRINCIPALS)
    tracemalloc.start()
    try:
        at_bound = await _list_as(proxy, range(bound))
        after = await _list_as(proxy, range(bound, 5 * bound))  # four times as many more
    finally:
        tracemalloc.stop()
    assert len(proxy.hosts._by_principal) == TOOL_RECORDS
    assert len(proxy.principals._headers) == PRINCIPALS
    # Unbounded, each principal kept its own copy of the list (some 10 kB): 160 MB more.
    assert after - at_bound < 1_000_000, (at_bound, after)


async def test_a_dropped_record_is_judged_as_a_host_that_never_listed() -> None:
    proxy = _proxy()
    first = _ctx(0)
    await proxy._list_tools(first, None)
    seen = proxy._seen(first, "tool_3", "tool_3")
    assert seen is not None and seen["description"] == "d" * 400
    await proxy._list_tools(_ctx(1), None)
    assert proxy._seen(first, "tool_3", "tool_3") is not None  # used: kept over others
    await _list_as(proxy, range(2, TOOL_RECORDS + 1))
    assert proxy._seen(first, "tool_3", "tool_3") is not None  # the most recently used
    assert proxy._seen(_ctx(1), "tool_3", "tool_3") is None  # dropped: as never listed
    assert proxy._seen(_ctx(TOOL_RECORDS * 9), "tool_3", "tool_3") is None  # never listed
    assert len(proxy.hosts._by_principal) == TOOL_RECORDS  # (a look makes no record)
