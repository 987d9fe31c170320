"""A real host, unmodified: the MCP Inspector's CLI (``@modelcontextprotocol/inspector
--cli``, a 2025-11-25 host, pinned by ``tests/fixtures/inspector/package-lock.json``)
lists and reads through ``freshcache proxy`` before and after an upstream change, and
lists the default ``freshcache serve`` directly (issue 37, item 5: it failed with "the
MCP-Protocol-Version header is required" before serve spoke both revisions).

Installed from the npm registry on first use (``npm ci`` into the tests' cache folder,
as server-everything is); skipped, with the reason, where Node, npm or the registry is
missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.everything_support import cache_root
from tests.polling import scaled
from tests.serve_support import start_serve

pytestmark = [pytest.mark.wire]
PACKAGE = Path(__file__).parent / "fixtures" / "inspector"
ROOT = Path(__file__).resolve().parents[1]


def _inspector() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("the MCP Inspector needs Node and npm on PATH")
    manifest = json.loads((PACKAGE / "package.json").read_text())
    version = manifest["dependencies"]["@modelcontextprotocol/inspector"]
    home = cache_root() / f"inspector-{version}"
    entry = home / "node_modules" / ".bin" / "mcp-inspector"
    if entry.exists():
        return entry
    home.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PACKAGE / name, home / name)
    done = subprocess.run(
        ["npm", "ci", "--silent", "--no-audit", "--no-fund", "--prefix", str(home)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 or not entry.exists():
        pytest.skip(f"npm ci of the MCP Inspector failed: {(done.stderr or done.stdout)[-300:]}")
    return entry


@pytest.fixture(scope="module")
def inspector() -> Path:
    return _inspector()


def _cli(inspector: Path, tmp: Path, *args: str) -> dict[str, object]:
    env = {**os.environ, "MCP_CATALOG_PATH": str(tmp / "catalog.json")}
    done = subprocess.run(
        # Its own 15 s connect budget, stretched by the load: the proxy and its upstream
        # are two interpreters starting.
        [
            str(inspector),
            "--cli",
            "--connect-timeout",
            str(int(scaled(15) * 1000)),
            "-e",
            f"PYTHONPATH={ROOT}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=scaled(90),
        check=False,
        env=env,
        cwd=tmp,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answer: dict[str, object] = json.loads(done.stdout[done.stdout.index("{") :])
    return answer


def test_the_inspector_lists_and_reads_through_the_proxy_before_and_after_a_change(
    inspector: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    page = folder / "page.md"
    page.write_text("first")
    uri = page.resolve().as_uri()
    upstream = [sys.executable, "-m", "freshcache._cli", "serve", str(folder), "--stdio"]
    proxy = ["--", sys.executable, "-m", "freshcache._cli", "proxy", "--", *upstream]
    listed = _cli(inspector, tmp_path, "--method", "resources/list", *proxy)
    assert [r["uri"] for r in listed["resources"]] == [uri]  # type: ignore[attr-defined]
    read = _cli(inspector, tmp_path, "--method", "resources/read", "--uri", uri, *proxy)
    assert read["contents"][0]["text"] == "first"  # type: ignore[index]
    page.write_text("second")
    read = _cli(inspector, tmp_path, "--method", "resources/read", "--uri", uri, *proxy)
    assert read["contents"][0]["text"] == "second"  # type: ignore[index]


def test_the_inspector_lists_the_default_serve(inspector: Path, tmp_path: Path) -> None:
    served = start_serve(tmp_path)
    try:
        listed = _cli(inspector, tmp_path, served.url, "--method", "resources/list")
    finally:
        served.stop()
    uris = [r["uri"] for r in listed["resources"]]  # type: ignore[attr-defined]
    assert "guide://shipping/approval" in uris
