"""The grader through the proxy (docs/proxy.md, "Graded"): the official Python SDK's
client played on the acceptance tables alone (``--client mcp``) and with ``freshcache
proxy`` between it and the reference server (the ``proxied_mcp_driver``). A row whose
server changes a resource while the client's stream is down is old text for the client
alone, and fresh through the proxy, which re-reads after the reconnect."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from freshcache.acceptance.drivers.proxied_mcp_driver import proxy_command

pytestmark = pytest.mark.wire

PROXIED = f"{sys.executable} -m freshcache.acceptance.drivers.proxied_mcp_driver"
ROW = "stream-drop-silent-change"
PLAY = ("--wire", "http", "--only", ROW, "--json")


def _played(*client: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "freshcache._cli", "acceptance", *client, *PLAY],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    (case,) = json.loads(done.stdout)["cases"]
    return case


def test_the_proxy_is_placed_between_the_client_and_the_rows_server() -> None:
    http = {"transport": "http", "url": "http://127.0.0.1:1/mcp", "timeouts": {"read": 2.0}}
    assert proxy_command(http)[-5:] == [
        "freshcache",
        "proxy",
        "--timeout",
        "2.0",
        "http://127.0.0.1:1/mcp",
    ]
    stdio = {"transport": "stdio", "command": ["server", "--flag"]}
    assert proxy_command(stdio)[-3:] == ["--", "server", "--flag"]


def test_a_change_while_the_stream_was_down_is_old_text_alone_and_fresh_through_the_proxy() -> None:
    alone = _played("--client", "mcp")
    assert not alone["passed"]  # the SDK client alone cites v1
    proxied = _played("--client-cmd", PROXIED)
    assert proxied["passed"], proxied["failures"]
    assert proxied["wire"].startswith("http:")
