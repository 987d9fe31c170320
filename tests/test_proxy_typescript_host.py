"""``freshcache proxy`` with the official TypeScript SDK 2.x client as the host
(``@modelcontextprotocol/client``, driven by ``tests/fixtures/ts_host.mjs``), over stdio
(the client starts the proxy, as a host does) and Streamable HTTP, in both of the
client's negotiation modes: ``auto`` (it probes ``server/discover`` and speaks
2026-07-28, subscribing with ``subscriptions/listen``) and ``legacy`` (2025-11-25,
``resources/subscribe``). Upstreams: the official SDK fixture server over HTTP and an
SDK stdio server that counts its tool runs, behind one proxy (``--config``).

Each test: read; a change -> the host is told and re-reads the new text; the tool list
changed -> the host is told and its next list is the new one; a tool call runs once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, SdkServer
from tests.polling import scaled, until_sync
from tests.proxy_support import ENV, proxy_command, running_proxy
from tests.typescript_support import typescript_ready

pytestmark = pytest.mark.wire
U = "guide://shipping/approval"
HOST = FIXTURES / "ts_host.mjs"


@pytest.fixture(scope="module")
def _typescript() -> None:
    reason = typescript_ready()
    if reason is not None:
        pytest.skip(f"no TypeScript SDK client: {reason}")


class TsHost:
    """``node ts_host.mjs``: steps go to its stdin, its JSON lines are collected."""

    def __init__(self, mode: str, target: list[str], tmp: Path) -> None:
        self.err = tmp / "ts_host.err"
        with self.err.open("wb") as stderr:
            self.process = subprocess.Popen(
                [str(shutil.which("node")), str(HOST), mode, *target],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=ENV,
                text=True,
            )
        self.lines: list[dict[str, Any]] = []
        self.next_id = 0
        self.reader = threading.Thread(target=self._collect, daemon=True)
        self.reader.start()
        self.hello = self._wait(lambda line: "ready" in line)

    def _collect(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(json.loads(line))

    def _wait(self, match: Any) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        def seen() -> bool:
            found.extend(line for line in self.lines if match(line))
            if not found and self.process.poll() is not None:
                raise AssertionError(f"the TypeScript host ended: {self.err.read_text()!r}")
            return bool(found)

        until_sync(seen, scaled(30))
        return found[0]

    def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        """One step, and its answer (an ``error`` key: the client's error)."""
        self.next_id += 1
        ident = self.next_id
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"id": ident, "op": op, **fields}) + "\n")
        self.process.stdin.flush()
        return self._wait(lambda line: line.get("id") == ident)

    def heard(self) -> list[str]:
        return [line["heard"] for line in list(self.lines) if "heard" in line]

    def heard_of(self, item: str, since: int) -> None:
        until_sync(lambda: item in self.heard()[since:], scaled(30))

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()  # the script closes its client: the proxy's stdin ends
        try:
            self.process.wait(timeout=scaled(15))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _config(sdk_server: SdkServer, tmp: Path) -> tuple[list[str], Path]:
    calls = tmp / "calls.txt"
    config = tmp / "mcp.json"
    servers = {
        "docs": {"url": sdk_server.url},
        "counter": {
            "command": sys.executable,
            "args": [str(FIXTURES / "proxy_counter.py"), str(calls)],
        },
    }
    config.write_text(json.dumps({"mcpServers": servers}))
    return ["--config", str(config), "--timeout", "5"], calls


@pytest.mark.usefixtures("_typescript")
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(("mode", "revision"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_the_typescript_client_reads_hears_and_calls_once(
    sdk_server: SdkServer, tmp_path: Path, mode: str, revision: str, transport: str
) -> None:
    args, calls = _config(sdk_server, tmp_path)
    if transport == "stdio":
        proxy = None
        h = TsHost(mode, ["stdio", *proxy_command(*args)], tmp_path)
    else:
        proxy = running_proxy(tmp_path, "--http", "127.0.0.1:0", *args)
        _, url = proxy.__enter__()
        h = TsHost(mode, ["http", str(url)], tmp_path)
    try:
        assert h.hello["protocolVersion"] == revision, h.hello

        wanted = {"docs__set_resource", "counter__tick"}
        listed: list[str] = []

        def all_listed() -> bool:  # an upstream still starting is left out of the list
            listed[:] = h.ask("tools").get("names", [])
            return wanted <= set(listed)

        until_sync(all_listed, scaled(30))

        assert h.ask("read", uri=U)["text"].startswith("Shipping approval v1")
        subscribed = h.ask("subscribe", uri=U)
        want = "subscriptions/listen" if revision == "2026-07-28" else "resources/subscribe"
        assert subscribed.get("ok") == want, subscribed

        mark = len(h.heard())
        sdk_server.control("set", uri=U, text="Shipping approval v2")
        h.heard_of(f"updated {U}", since=mark)
        assert h.ask("read", uri=U)["text"] == "Shipping approval v2"

        mark = len(h.heard())
        sdk_server.control("tools", names=["deployed_just_now"])
        h.heard_of("tools", since=mark)
        after = h.ask("tools")["names"]
        assert set(after) == set(listed) | {"docs__deployed_just_now"}

        ticked = h.ask("call", name="counter__tick")
        assert ticked == {"id": ticked["id"], "text": "tick 1", "isError": False}
        assert h.ask("read", uri="counter://calls")["text"] == "1"
    finally:
        h.close()
        if proxy is not None:
            proxy.__exit__(None, None, None)
    assert calls.read_text().splitlines() == ["tick"]  # sent upstream once
