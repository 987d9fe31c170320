"""A real host's own health check, unmodified: Claude Code's ``claude mcp list`` connects
to each server configured for a project (no model, no login) and says whether it
answered. A ``freshcache proxy`` entry, set up the way docs/proxy.md says, is
connected; a proxy that cannot start (its config file is missing: exit 2) is reported
as failed, so the check can fail.

Claude Code is installed from the npm registry on first use (``npm ci`` of the lock file
in ``tests/fixtures/claude_code`` into the tests' cache folder, as server-everything
is); skipped, with the reason, where Node, npm or the registry is missing. Its
configuration is written to a home of the test's own (``HOME``), never the user's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.everything_support import EverythingUnavailable, claude_code_entry
from tests.polling import scaled

pytestmark = [pytest.mark.wire]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def claude() -> Path:
    try:
        return claude_code_entry()
    except EverythingUnavailable as exc:
        pytest.skip(str(exc))


def _claude(claude: Path, home: Path, project: Path, *args: str) -> str:
    env = {
        **os.environ,
        "HOME": str(home),
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    done = subprocess.run(
        [str(claude), *args],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
        env=env,
        cwd=project,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_claude_code_health_check_shows_the_proxy_connected(claude: Path, tmp_path: Path) -> None:
    home, project, folder = tmp_path / "home", tmp_path / "project", tmp_path / "docs"
    for made in (home, project, folder):
        made.mkdir()
    (folder / "page.md").write_text("first")
    python, path = sys.executable, f"PYTHONPATH={ROOT}"
    serve = [python, "-m", "freshcache", "serve", str(folder), "--stdio"]
    proxy = [python, "-m", "freshcache", "proxy"]
    _claude(claude, home, project, "mcp", "add", "docs", "-e", path, "--", *proxy, "--", *serve)
    missing = str(tmp_path / "no-such-config.json")
    _claude(
        claude, home, project, "mcp", "add", "broken", "-e", path, "--", *proxy, "--config", missing
    )
    listed = {
        line.split(":", 1)[0]: line
        for line in _claude(claude, home, project, "mcp", "list").splitlines()
        if line.startswith(("docs:", "broken:"))
    }
    assert "Connected" in listed["docs"], listed
    assert "Connected" not in listed["broken"] and "Failed" in listed["broken"], listed
