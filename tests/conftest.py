"""Shared fixtures: the official-SDK peer server and a Valkey, started by the tests on
loopback; and which acceptance rows this run need not play again
(``FRESHCACHE_PLAYED_TABLES``)."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.polling import scaled

PLAYED_TABLES = "FRESHCACHE_PLAYED_TABLES"
"""The JUnit report (``--junit``) of a ``freshcache acceptance`` run on this checkout
just before this one (CI's first step, `.ci/run`): a table test marked
``table_row(WIRE)`` is not collected for a row that run played and passed on WIRE
(no failure, no skip, no settle that gave up). Unset: every row plays here."""


def played_rows(report: Path) -> set[tuple[str, str]]:
    """(wire, case id) of every row the report says was played and passed cleanly."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError) as exc:
        raise pytest.UsageError(f"{PLAYED_TABLES}={report}: not a JUnit report ({exc})") from exc
    played: set[tuple[str, str]] = set()
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            clean = all(case.find(tag) is None for tag in ("failure", "error", "skipped"))
            if clean and case.find("properties/property[@name='settle_gave_up']") is None:
                played.add((str(suite.get("name")), str(case.get("name"))))
    return played


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    report = os.environ.get(PLAYED_TABLES)
    if not report:
        return
    played = played_rows(Path(report))
    again: list[pytest.Item] = []
    keep: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("table_row")
        callspec = getattr(item, "callspec", None)
        case = None if callspec is None else callspec.params.get("case")
        wire = None if marker is None else marker.args[0]
        (again if case is not None and (wire, case.id) in played else keep).append(item)
    if again:
        config.hook.pytest_deselected(items=again)
        items[:] = keep


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    report = os.environ.get(PLAYED_TABLES)
    if report and not hasattr(config, "workerinput"):
        terminalreporter.write_line(
            f"table rows not played again: the {len(played_rows(Path(report)))} rows "
            f"`freshcache acceptance` played and passed in this run ({PLAYED_TABLES}={report})"
        )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test's timeout (pytest-timeout's 120 s, or the test's own marker) stretched by
    the load per core when it starts: a net for a hung test, not a budget that a loaded
    machine's slowness can exhaust. Runs before pytest-timeout reads the marker."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        base = marker.args[0]
    elif marker is not None:
        base = marker.kwargs.get("timeout")
    else:
        base = getattr(item.config, "_env_timeout", None)
    if isinstance(base, (int, float)) and base > 0:
        item.add_marker(pytest.mark.timeout(scaled(float(base))), append=False)
    yield


FIXTURES = Path(__file__).parent / "fixtures"
MCP_SCHEMA = Path(__file__).parent / "data" / "mcp-2026-07-28" / "schema.json"
"""The MCP 2026-07-28 JSON schema, vendored from upstream (see tests/data/README.md)."""


def _ports() -> Iterator[int]:
    """This process's ports, endlessly: a block below the kernel's range for outgoing
    connections' own ports (``ip_local_port_range``), one block per pytest-xdist worker,
    from a random start (a run right after another does not meet its ports closing)."""
    try:
        ceiling = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ceiling = 32768  # no /proc: below Linux's default range and IANA's (macOS, Windows)
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    span = (ceiling - 10_000) // workers
    if span < 64:
        while True:
            yield 0  # no room below the range: the kernel's choice
    low = 10_000 + (worker % workers) * span
    offset = random.SystemRandom().randrange(span)  # whatever a test seeded
    while True:
        for step in range(span):
            yield low + (offset + step) % span


_PORTS = _ports()


def free_port() -> int:
    """A free TCP port on 127.0.0.1, for a server to bind right after. Not one the kernel
    hands out for port 0: between this check and the server's bind it could hand the same
    one to another worker's server, or to an outgoing connection as its own port (a
    ``python -m http.server`` once exited so in CI, "did not start")."""
    for port in _PORTS:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise AssertionError("unreachable: the ports never end")


@dataclass
class SdkServer:
    """A running `tests/fixtures/sdk_server.py` (official mcp SDK) over HTTP."""

    url: str
    control_url: str
    process: subprocess.Popen[bytes]

    def control(self, op: str, **fields: Any) -> dict[str, Any]:
        """Steer the fixture (see the fixture's docstring for the ops)."""
        response = httpx.post(self.control_url, json={"op": op, **fields}, timeout=10.0)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def state(self) -> dict[str, Any]:
        return self.control("state")

    def reads(self, uri: str) -> int:
        return int(self.state()["reads"].get(uri, 0))


def start_sdk_server(*extra: str, timeout: float = 30.0) -> SdkServer:
    """Start the SDK fixture on a free loopback port; wait until it answers (``timeout``
    stretched by the machine's load: the interpreter imports the SDK first)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(FIXTURES / "sdk_server.py"), "http", "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    server = SdkServer(f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}/control", process)
    deadline = time.monotonic() + scaled(timeout)
    while True:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"SDK fixture server exited with {process.returncode}: {err}")
        try:
            server.state()
            return server
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                stop_process(process)  # reaped: no "still running" warning in a later test
                raise
            time.sleep(0.05)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    if process.stderr is not None:
        process.stderr.close()


@pytest.fixture(scope="module")
def _module_sdk_server() -> Iterator[list[SdkServer]]:
    """The module's official-SDK fixture server (in a one-item list: a test that stops it
    gets a new one for the next test)."""
    held = [start_sdk_server()]
    try:
        yield held
    finally:
        stop_process(held[0].process)


@pytest.fixture
def sdk_server(_module_sdk_server: list[SdkServer]) -> SdkServer:
    """An official-SDK fixture server over HTTP on 127.0.0.1, in its starting state: one
    per module (per xdist worker), reset before each test (resources, faults, denials,
    read counts; open listen streams end), started again if the last test stopped it."""
    server = _module_sdk_server[0]
    if server.process.poll() is not None:
        stop_process(server.process)
        server = _module_sdk_server[0] = start_sdk_server()
    else:
        server.control("reset")
    return server


@pytest.fixture(scope="session")
def mcp_schema() -> dict[str, Any]:
    """The official 2026-07-28 JSON schema, vendored in `tests/data/`."""
    schema: dict[str, Any] = json.loads(MCP_SCHEMA.read_text(encoding="utf-8"))
    return schema


def schema_validator(schema: dict[str, Any], definition: str) -> Any:
    """A jsonschema validator for one definition of the MCP schema."""
    import jsonschema

    return jsonschema.Draft202012Validator(
        {
            "$ref": f"#/$defs/{definition}",
            "$defs": schema.get("$defs", schema.get("definitions", {})),
        }
    )


@pytest.fixture
def valkey() -> Iterator[Any]:
    """A real Valkey server of its own on a free loopback port (`tests/valkey_support.py`),
    stopped by PID after the test; a module that plays on other stores overrides it."""
    from tests.valkey_support import Valkey

    server = Valkey()
    server.start()
    try:
        yield server
    finally:
        server.stop()
