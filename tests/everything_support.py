"""The MCP reference server, ``@modelcontextprotocol/server-everything``, for interop tests.

It is installed from the npm registry on first use, like the TypeScript driver's SDK:
``npm ci`` from the lock file in ``tests/fixtures/server_everything/`` into a cache
directory outside the worktree (``$FRESHCACHE_TEST_CACHE``, else
``$XDG_CACHE_HOME/freshcache-tests``, else ``~/.cache/freshcache-tests``), once per
version. `everything_entry` returns its ``dist/index.js``, or raises
`EverythingUnavailable` with the reason (no Node, no npm, the registry unreachable).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

PACKAGE = Path(__file__).parent / "fixtures" / "server_everything"
NAME = "@modelcontextprotocol/server-everything"


class EverythingUnavailable(Exception):
    """server-everything cannot run here; the message says why."""


def version() -> str:
    """The server-everything version the lock file pins."""
    manifest = json.loads((PACKAGE / "package.json").read_text())
    return str(manifest["dependencies"][NAME])


def cache_root() -> Path:
    explicit = os.environ.get("FRESHCACHE_TEST_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "freshcache-tests"


def everything_entry() -> Path:
    """``dist/index.js`` of the installed server (installed now if it is not yet)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise EverythingUnavailable("server-everything needs Node and npm on PATH")
    home = cache_root() / f"server-everything-{version()}"
    entry = home / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist"
    entry = entry / "index.js"
    if entry.exists():
        return entry
    home.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PACKAGE / name, home / name)
    try:
        done = subprocess.run(
            ["npm", "ci", "--silent", "--no-audit", "--no-fund", "--prefix", str(home)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise EverythingUnavailable("npm ci of server-everything took over 300 s") from exc
    if done.returncode != 0 or not entry.exists():
        tail = (done.stderr or done.stdout).strip()[-300:]
        raise EverythingUnavailable(
            f"npm ci of {NAME}@{version()} failed (is the npm registry reachable?): {tail}"
        )
    return entry


__all__ = ["EverythingUnavailable", "everything_entry", "version"]
