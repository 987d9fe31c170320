"""freshcache against the MCP reference server, ``@modelcontextprotocol/server-everything``.

The server is the npm package (TypeScript SDK 1.x, MCP 2025-11-25), unmodified,
installed on first use (`tests/everything_support.py`), run as ``streamableHttp`` on a
free loopback port and as ``stdio`` under a `StdioSource`. Over HTTP its first answer
to ``server/discover`` is HTTP 400 with ``-32000`` "Bad Request: Server not
initialized": negotiation must fall back to ``initialize``. For each wire: a read,
a real ``notifications/resources/updated`` (its ``toggle-subscriber-updates`` tool
makes it send one for every subscribed URI at once and every 5 s), the server killed
(not fresh) and back (fresh).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from freshcache import FreshCache, HttpSource, StdioSource
from freshcache._core._backoff import BackoffSettings

from .conftest import free_port
from .everything_support import EverythingUnavailable, everything_entry
from .polling import until
from .serve_support import run_cli

pytestmark = [pytest.mark.anyio, pytest.mark.wire]

URI = "demo://resource/static/document/architecture.md"
TOGGLE = {"name": "toggle-subscriber-updates", "arguments": {}}
FAST = BackoffSettings(base=0.01, cap=0.2, quick_death=0.0)
DEADLINE = 30.0


@pytest.fixture(scope="module")
def entry() -> Path:
    try:
        return everything_entry()
    except EverythingUnavailable as exc:
        pytest.skip(f"no server-everything: {exc}")


class HttpServer:
    """server-everything as ``streamableHttp`` on one port; stopped and started by PID."""

    def __init__(self, entry: Path, port: int, log: Path) -> None:
        self.entry, self.port, self.log = entry, port, log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                ["node", str(self.entry), "streamableHttp"],
                env={**os.environ, "PORT": str(self.port)},
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + DEADLINE
        while not _accepts(self.port):
            assert self.process.poll() is None, f"server-everything exited: {self.tail()}"
            assert time.monotonic() < deadline, f"server-everything did not listen: {self.tail()}"
            time.sleep(0.02)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture
def http_server(entry: Path, tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(entry, free_port(), tmp_path / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.kill()


@asynccontextmanager
async def cache_over(source: Any) -> AsyncIterator[FreshCache]:
    async with FreshCache(source, select=[URI], read_timeout=10.0, backoff=FAST) as cache:
        await until(lambda: URI in cache.engine.covered, DEADLINE)
        yield cache


async def _fresh_after_notification(cache: FreshCache, toggle: Any) -> None:
    """Read, make the server send ``resources/updated``, read again: fresh each time."""
    first = await cache.read(URI)
    assert first.state == "fresh" and first.text and "Architecture" in first.text
    hit = await cache.read(URI)
    assert hit.state == "fresh" and hit.server_read is False  # covered: from the cache
    counters = cache.engine.counters
    before, invalidations, reads = (
        counters.notifications,
        counters.invalidations,
        counters.server_reads,
    )
    await toggle()
    try:
        await until(lambda: counters.notifications > before, DEADLINE)
        # The hint was taken in, not ignored: it invalidated the URI ...
        assert counters.invalidations > invalidations
        again = await cache.read(URI)
        assert (again.state, again.text) == ("fresh", first.text)
        # ... and what is handed out now came from a server read sent after it: this
        # read's own, or the re-read the engine starts at once for a selected URI (which
        # this read joined, or found landed: then it is a hit, server_read False).
        assert again.server_read is True or counters.server_reads > reads
    finally:
        await toggle()  # stop the 5 s updates


async def test_server_everything_over_http_negotiates_2025_reads_and_is_notified(
    http_server: HttpServer,
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        source = HttpSource(http_server.url, client=client, timeout=5.0, idle_timeout=10.0)

        async def toggle() -> None:
            outcome, _ = await source._call("tools/call", TOGGLE, None, [])
            assert isinstance(outcome, dict) and not outcome.get("isError"), outcome

        async with cache_over(source) as cache:
            info = cache.server_info
            assert info is not None
            assert (info.protocol_version, info.subscribe, info.name) == (
                "2025-11-25",
                True,
                "mcp-servers/everything",
            )
            await _fresh_after_notification(cache, toggle)


async def test_server_everything_over_http_killed_is_not_fresh_and_back_is_fresh(
    http_server: HttpServer,
) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        source = HttpSource(http_server.url, client=client, timeout=2.0, idle_timeout=10.0)
        async with cache_over(source) as cache:
            assert (await cache.read(URI)).state == "fresh"
            http_server.kill()
            await until(lambda: cache.status(URI).state != "fresh", DEADLINE)
            down = await cache.read(URI)
            assert down.state != "fresh" and down.text is None
            http_server.start()
            await until(lambda: URI in cache.engine.covered, DEADLINE)
            back = await cache.read(URI)
            assert back.state == "fresh" and back.text and "Architecture" in back.text


def _stdio_source(entry: Path, down: Path) -> StdioSource:
    """server-everything over stdio; while ``down`` exists, every new process exits."""
    script = f'test -e "{down}" && exit 1; exec node "{entry}" stdio'
    return StdioSource(["sh", "-c", script], timeout=5.0, restart=FAST, shutdown_timeout=2.0)


async def test_server_everything_over_stdio_reads_and_is_notified(
    entry: Path, tmp_path: Path
) -> None:
    source = _stdio_source(entry, tmp_path / "down")

    async def toggle() -> None:
        answer = await source.send_request("tools/call", TOGGLE, timeout=5.0)
        assert not isinstance(answer, Exception) and getattr(answer, "result", None), answer

    async with cache_over(source) as cache:
        info = cache.server_info
        assert info is not None and (info.protocol_version, info.subscribe) == ("2025-11-25", True)
        await _fresh_after_notification(cache, toggle)


async def test_server_everything_over_stdio_killed_is_not_fresh_and_back_is_fresh(
    entry: Path, tmp_path: Path
) -> None:
    down = tmp_path / "down"
    source = _stdio_source(entry, down)
    async with cache_over(source) as cache:
        assert (await cache.read(URI)).state == "fresh"
        pid = source.pid
        assert pid is not None
        down.touch()
        os.kill(pid, signal.SIGKILL)
        await until(lambda: cache.status(URI).state != "fresh", DEADLINE)
        gone = await cache.read(URI, timeout=2.0)
        assert gone.state != "fresh" and gone.text is None
        down.unlink()
        await until(lambda: source.pid not in (None, pid) and URI in cache.engine.covered, DEADLINE)
        back = await cache.read(URI)
        assert back.state == "fresh" and back.text and "Architecture" in back.text


def test_doctor_finds_server_everything_speaking_2025_over_http_and_stdio(
    http_server: HttpServer, entry: Path
) -> None:
    """Before the fix, doctor said "this URL does not answer MCP" (exit 2) over HTTP."""
    for target in ([http_server.url], ["--", "node", str(entry), "stdio"]):
        done = run_cli("doctor", "--timeout", "10", *target)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "revision    2025-11-25" in done.stdout
        # 2025-11-25 has no listen: doctor says what it checked, a subscribe on the live
        # notification channel.
        assert "subscribe   on the live notification channel" in done.stdout
