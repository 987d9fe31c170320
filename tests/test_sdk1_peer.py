"""The seed rows against the official SDK 1.x server (MCP 2025-11-25), over HTTP and stdio.

The server is `tests/fixtures/sdk1_server.py` in a venv of its own that the tests create
once and reuse (`tests/sdk1_env.py`; the project's test extra keeps SDK 2.x). The first
tests check the peer itself with raw HTTP (it is what SDK 1.x is, not what freshcache
expects); the seed rows then play through freshcache's client.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from freshcache.acceptance import Case, load_cases, play
from tests.table_rows import explain

from .conftest import free_port
from .sdk1_env import Sdk1Unavailable, sdk1_python
from .sdk1_world import FIXTURE, Sdk1HttpWorld, Sdk1StdioWorld, sdk1_unplayable

TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
SEEDS = [c for c in load_cases([TABLES]) if c.id.startswith("seed-")]
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

pytestmark = pytest.mark.wire


@pytest.fixture(scope="session")
def sdk1(request: pytest.FixtureRequest) -> Path:
    """The Python of the SDK 1.x venv (created on first use; skipped if pip cannot)."""
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    root = Path(cache.mkdir("freshcache-sdk1")) if cache is not None else Path(".sdk1-venvs")
    try:
        return sdk1_python(root)
    except Sdk1Unavailable as exc:
        pytest.skip(f"no SDK 1.x peer: {exc}")


@pytest.fixture
def sdk1_http(sdk1: Path, tmp_path: Path) -> Iterator[str]:
    """The fixture over HTTP on a free port (its MCP URL); stopped by PID."""
    port = free_port()
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"resources": {"guide://a": "v1"}}))
    process = subprocess.Popen(
        [str(sdk1), str(FIXTURE), "http", "--port", str(port), "--state", str(state)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.post(f"http://127.0.0.1:{port}/control", json={"op": "state"})
                break
            except httpx.HTTPError:
                assert process.poll() is None, "the SDK 1.x fixture exited"
                assert time.monotonic() < deadline, "the SDK 1.x fixture did not come up"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=10)


def _post(url: str, message: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(url, json=message, headers={**ACCEPT, **headers}, timeout=10)


def test_the_peer_is_sdk_1_and_speaks_only_2025(sdk1: Path, sdk1_http: str) -> None:
    version = subprocess.run(
        [str(sdk1), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    discover = _post(sdk1_http, {"jsonrpc": "2.0", "id": 1, "method": "server/discover"})
    initialize = _post(
        sdk1_http,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "initialize",
            "params": {
                "protocolVersion": "2026-07-28",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        },
    )
    data = [line[6:] for line in initialize.text.splitlines() if line.startswith("data: ")]
    result = json.loads(data[-1])["result"]
    assert version.startswith("1.")
    assert discover.status_code == 400
    assert discover.json()["error"]["code"] == -32600
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
    assert initialize.headers["mcp-session-id"]


def test_every_seed_row_can_be_played_against_the_sdk_1_peer() -> None:
    assert {c.id: sdk1_unplayable(c) for c in SEEDS} == {c.id: None for c in SEEDS}


@pytest.mark.parametrize("case", SEEDS, ids=[c.id for c in SEEDS])
@pytest.mark.anyio
async def test_seed_row_passes_against_the_sdk_1_server_over_http(case: Case, sdk1: Path) -> None:
    world = Sdk1HttpWorld(sdk1)
    report = await play(case, world)
    assert report.passed, f"{explain(report)}\nserver log: {world.log_tail()}"
    assert world.settle_timeouts == 0, f"settle gave up waiting on: {world.last_busy}"


@pytest.mark.parametrize("case", SEEDS, ids=[c.id for c in SEEDS])
@pytest.mark.anyio
async def test_seed_row_passes_against_the_sdk_1_server_over_stdio(case: Case, sdk1: Path) -> None:
    world = Sdk1StdioWorld(sdk1)
    report = await play(case, world)
    assert report.passed, explain(report, world)
    assert world.settle_timeouts == 0, f"settle gave up waiting on: {world.last_busy}"
