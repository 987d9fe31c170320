"""The official Python SDK's client (`mcp_driver`) with ``freshcache proxy`` between it and
the row's server: the grader through the proxy (docs/proxy.md, "Graded").

Each row's client runs ``freshcache proxy`` over stdio as its server, and the proxy
reaches the row's server the way the harness says (its URL, or its command after
``--``), with ``--timeout`` the row's read timeout. Everything else is `McpDriver`'s.
Run: ``freshcache acceptance --client-cmd 'python -m
freshcache.acceptance.drivers.proxied_mcp_driver'``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ._loop import run
from .mcp_driver import McpDriver, McpSession


def proxy_command(spec: dict[str, Any]) -> list[str]:
    """``freshcache proxy`` in front of the row's server (this interpreter, this
    ``PYTHONPATH``: the SDK starts a stdio server with a minimal environment)."""
    upstream = [spec["url"]] if spec["transport"] == "http" else ["--", *spec["command"]]
    timeout = spec.get("timeouts", {}).get("read", 2.0)
    proxy = [sys.executable, "-m", "freshcache", "proxy", "--timeout", str(timeout)]
    path = os.environ.get("PYTHONPATH")
    return [*(["env", f"PYTHONPATH={path}"] if path else []), *proxy, *upstream]


class ProxiedMcpDriver(McpDriver):
    def hello(self) -> dict[str, Any]:
        said = super().hello()
        said["client"] = f"{said['client']} through freshcache proxy"
        return said

    @asynccontextmanager
    async def connect(self, spec: dict[str, Any]) -> AsyncIterator[McpSession]:
        proxied = {**spec, "transport": "stdio", "command": proxy_command(spec)}
        async with super().connect(proxied) as session:
            yield session


if __name__ == "__main__":
    run(ProxiedMcpDriver())
