"""The MCP reference server, ``@modelcontextprotocol/server-everything``, for interop tests
(and ``@modelcontextprotocol/server-memory``, a TypeScript SDK tools-only server, the same way).

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


MEMORY_PACKAGE = Path(__file__).parent / "fixtures" / "server_memory"
MEMORY_NAME = "@modelcontextprotocol/server-memory"


def version(package: Path = PACKAGE, name: str = NAME) -> str:
    """The version the lock file of ``package`` pins."""
    manifest = json.loads((package / "package.json").read_text())
    return str(manifest["dependencies"][name])


def cache_root() -> Path:
    explicit = os.environ.get("FRESHCACHE_TEST_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "freshcache-tests"


def everything_entry() -> Path:
    """``dist/index.js`` of the installed server-everything (installed now if not yet)."""
    return npm_entry(PACKAGE, NAME)


def memory_entry() -> Path:
    """``dist/index.js`` of the installed server-memory (installed now if not yet)."""
    return npm_entry(MEMORY_PACKAGE, MEMORY_NAME)


def claude_code_entry() -> Path:
    """Claude Code's ``claude`` (its ``mcp list`` health check is a host's own check)."""
    folder = Path(__file__).parent / "fixtures" / "claude_code"
    return npm_entry(folder, "@anthropic-ai/claude-code", "bin/claude.exe")


def npm_entry(package: Path, name: str, entry: str = "dist/index.js") -> Path:
    """``entry`` (a path inside npm package ``name``), installed from the lock file in
    ``package`` into the cache directory, once per version."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise EverythingUnavailable(f"{name} needs Node and npm on PATH")
    home = cache_root() / f"{name.rsplit('/', 1)[-1]}-{version(package, name)}"
    path = home / "node_modules" / name / entry
    if path.exists():
        return path
    home.mkdir(parents=True, exist_ok=True)
    for file in ("package.json", "package-lock.json"):
        shutil.copyfile(package / file, home / file)
    try:
        done = subprocess.run(
            ["npm", "ci", "--silent", "--no-audit", "--no-fund", "--prefix", str(home)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise EverythingUnavailable(f"npm ci of {name} took over 300 s") from exc
    if done.returncode != 0 or not path.exists():
        tail = (done.stderr or done.stdout).strip()[-300:]
        raise EverythingUnavailable(
            f"npm ci of {name}@{version(package, name)} failed (is the npm registry "
            f"reachable?): {tail}"
        )
    return path


__all__ = [
    "EverythingUnavailable",
    "claude_code_entry",
    "everything_entry",
    "memory_entry",
    "version",
]
