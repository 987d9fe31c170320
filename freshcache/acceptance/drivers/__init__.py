"""Drivers shipped with freshcache: each lets ``freshcache acceptance --client NAME``
play the tables through one MCP client (docs/driver-protocol.md).

A driver is a small program speaking the driver protocol on its stdin and stdout; the
Python ones are modules run with the current interpreter, the TypeScript one is a
Node script. `command_for` says how to start one, or why it cannot start here.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
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
    if not _typescript_sdk_installed():
        raise Unavailable(
            f"the typescript driver needs its SDK installed: npm ci --prefix {HERE / 'typescript'}"
        )
    return [node, str(script)]


def _typescript_sdk_installed() -> bool:
    return (HERE / "typescript" / "node_modules" / "@modelcontextprotocol" / "client").is_dir()


def prepare(name: str, say: Callable[[str], None]) -> None:
    """Make the shipped driver ``name`` runnable where only a step of ours is missing:
    the TypeScript SDK is installed from the driver's lock file on first use (it lives
    next to the driver, inside the installed package, so a reinstall of freshcache
    removes it and the next use installs it again). ``say`` gets one line first.
    Raises `Unavailable` when the install fails; does nothing when Node or npm is
    missing (`command_for` says so)."""
    if name != "typescript" or _typescript_sdk_installed():
        return
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return
    folder = HERE / "typescript"
    say(f"installing the TypeScript SDK for --client typescript, once: npm ci --prefix {folder}")
    try:
        done = subprocess.run(
            [npm, "ci", "--silent", "--no-audit", "--no-fund", "--prefix", str(folder)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"npm ci --prefix {folder} did not finish: {exc}") from None
    if done.returncode != 0:
        tail = " ".join(done.stderr.split())[-200:]
        raise Unavailable(f"npm ci --prefix {folder} failed (exit {done.returncode}): {tail}")
