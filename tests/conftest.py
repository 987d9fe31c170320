"""Shared fixtures: the official-SDK peer server, started by the tests on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MCP_SCHEMA = Path(__file__).parent / "data" / "mcp-2026-07-28" / "schema.json"
"""The MCP 2026-07-28 JSON schema, vendored from upstream (see tests/data/README.md)."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    """Start the SDK fixture on a free loopback port; wait until it answers."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(FIXTURES / "sdk_server.py"), "http", "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    server = SdkServer(f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}/control", process)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"SDK fixture server exited with {process.returncode}: {err}")
        try:
            server.state()
            return server
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                process.kill()
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


@pytest.fixture
def sdk_server() -> Iterator[SdkServer]:
    """A fresh official-SDK fixture server over HTTP on 127.0.0.1 (one per test)."""
    server = start_sdk_server()
    try:
        yield server
    finally:
        stop_process(server.process)


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
