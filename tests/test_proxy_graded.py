"""The grader through the proxy (docs/proxy.md, "Graded"): the official Python SDK's
client played on the acceptance tables alone (``--client mcp``) and with ``freshcache
proxy`` between it and the reference server (the ``proxied_mcp_driver``). A row whose
server changes a resource (or a catalog) while the client's stream is down is old
text for the client alone, and fresh through the proxy, which re-reads after the
reconnect; a row that pins a state is graded on the state the proxy's error carries.
The harness waits on the proxy's progress (its status socket), so a row through the
proxy takes about as long as one without it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from freshcache.acceptance.drivers.proxied_mcp_driver import STATUS_VARIABLE, proxy_command

pytestmark = pytest.mark.wire

PROXIED = f"{sys.executable} -m freshcache.acceptance.drivers.proxied_mcp_driver"
OLD_ALONE = ("stream-drop-silent-change", "catalog-stream-drop-relisted")
"""Old text, then an old catalog, after the client's stream came back (alone)."""
STATED = "stream-down-read-unreachable"
"""``awaiting_fresh_source (unreachable)``: a state, not just an error."""


def _played(*client: str) -> dict[str, dict]:
    rows = [arg for row in (*OLD_ALONE, STATED) for arg in ("--only", row)]
    play = ("acceptance", *client, "--wire", "http", *rows, "--json")
    done = subprocess.run(
        [sys.executable, "-m", "freshcache._cli", *play],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return {case["id"]: case for case in json.loads(done.stdout)["cases"]}


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
    command = proxy_command(stdio, "/tmp/x/status.sock")
    assert command[-3:] == ["--", "server", "--flag"]
    assert f"{STATUS_VARIABLE}=/tmp/x/status.sock" in command[: command.index("-m")]


def test_rows_the_client_fails_alone_pass_through_the_proxy_and_a_state_is_graded() -> None:
    alone = _played("--client", "mcp")
    for row in OLD_ALONE:
        assert not alone[row]["passed"], row  # the SDK client alone cites v1
    assert not alone[STATED]["passed"]  # an error, without the state the row pins
    proxied = _played("--client-cmd", PROXIED)
    for row, case in proxied.items():
        assert case["passed"], (row, case["failures"])
        assert case["wire"].startswith("http:")
