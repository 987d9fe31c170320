"""Drivers shipped with freshcache: each lets ``freshcache acceptance --client NAME``
play the tables through one MCP client (docs/driver-protocol.md).

A driver is a small program speaking the driver protocol on its stdin and stdout; the
Python ones are modules run with the current interpreter, the TypeScript one is a
Node script. `command_for` says how to start one, or why it cannot start here.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class Shipped:
    name: str
    what: str
    module: str | None = None
    """The Python module to run (``None`` for the Node driver)."""
    needs: str | None = None
    """The Python package the driver imports (checked before it starts)."""


SHIPPED = {
    "freshcache": Shipped("freshcache", "freshcache's FreshCache", "freshcache_driver"),
    "mcp": Shipped(
        "mcp", "the official Python SDK's mcp.Client with its response cache", "mcp_driver", "mcp"
    ),
    "fastmcp": Shipped(
        "fastmcp", "fastmcp's Client with its response cache", "fastmcp_driver", "fastmcp"
    ),
    "typescript": Shipped(
        "typescript", "the official TypeScript SDK's Client with its response cache"
    ),
}


class Unavailable(Exception):
    """A shipped driver that cannot run on this machine, and why."""


def command_for(name: str) -> list[str]:
    """The argv that starts the shipped driver ``name``; raises `Unavailable` with the
    reason where it cannot run (its package or Node missing)."""
    shipped = SHIPPED[name]
    if shipped.module is not None:
        if shipped.needs and importlib.util.find_spec(shipped.needs) is None:
            raise Unavailable(f"the {name} driver needs the {shipped.needs!r} package")
        return [sys.executable, "-m", f"{__name__}.{shipped.module}"]
    node = shutil.which("node")
    if node is None:
        raise Unavailable("the typescript driver needs Node.js (no 'node' on PATH)")
    script = HERE / "typescript" / "driver.mjs"
    if not (HERE / "typescript" / "node_modules" / "@modelcontextprotocol" / "client").is_dir():
        raise Unavailable(
            f"the typescript driver needs its SDK installed: npm ci --prefix {HERE / 'typescript'}"
        )
    return [node, str(script)]
