"""Each real server framework's "unknown tool" answer, from the server itself: the
official Python SDK 2.x (``Unknown tool: X``), 1.x (the same, from its ``FastMCP``),
fastmcp (``Unknown tool: 'X'``), all as tool error results; freshcache re-lists on
each (issue 34) and says the tool is gone, and a listed tool is answered. The
TypeScript SDK's form is played against its real servers in
`tests/test_typescript_tool_servers.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from freshcache import FreshCache, StdioSource

from .sdk1_env import Sdk1Unavailable, sdk1_python

pytestmark = [pytest.mark.anyio, pytest.mark.wire]

SERVER = Path(__file__).parent / "fixtures" / "pay_tool_server.py"


@pytest.fixture(scope="session")
def sdk1(request: pytest.FixtureRequest) -> Path:
    """The Python of the SDK 1.x venv (created on first use; skipped if pip cannot)."""
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    root = Path(cache.mkdir("freshcache-sdk1")) if cache is not None else Path(".sdk1-venvs")
    try:
        return sdk1_python(root)
    except Sdk1Unavailable as exc:
        pytest.skip(f"no SDK 1.x peer: {exc}")


async def _check(python: str, kind: str) -> None:
    source = StdioSource([python, str(SERVER), kind], timeout=20.0)
    async with FreshCache(source, read_timeout=30.0) as cache:
        tools = await cache.tools()
        assert tools.state == "fresh" and tools.names == ("pay",), tools
        paid = await cache.call_tool("pay", {"amount": 500})
        assert (paid.state, paid.text) == ("answered", "paid 500 cents"), paid
        gone = await cache.call_tool("no_such_tool", {"amount": 500})
        assert gone.state == "unknown_tool" and not gone.retried, gone
        assert gone.catalog is not None and gone.catalog.names == ("pay",)


@pytest.mark.parametrize("kind", ["sdk2", "fastmcp"])
async def test_a_python_frameworks_unknown_tool_answer_re_lists(kind: str) -> None:
    await _check(sys.executable, kind)


async def test_the_sdk_1_unknown_tool_answer_re_lists(sdk1: Path) -> None:
    await _check(str(sdk1), "sdk1")
