"""Acceptance worlds against the official SDK 1.x server (MCP 2025-11-25).

The peer is `tests/fixtures/sdk1_server.py`, run by the Python of its own venv
(`tests/sdk1_env.py`), one process per row: over HTTP on a free loopback port
(`Sdk1HttpWorld`, stopped by PID) and over stdio (`Sdk1StdioWorld`, the source runs
it). The worlds steer it through its ``/control`` ops. The words map as for the
project's own server: *server goes down* kills the process (HTTP: SIGKILL, and it
comes back on the same port knowing no session; stdio: new processes exit at once
until *server comes back*), *ack omits X* is a refused ``resources/subscribe``, a
*local copy* over HTTP is an answer with ``Age``, over stdio a read function
between the cache and the source.

``settle`` is bounded and waits for facts: no read in flight but held ones, the
stream live for the selection, and two looks in a row at which neither the server
(reads, notifications sent, sessions and their subscriptions) nor the cache's
counters moved.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx

from freshcache._core._backoff import BackoffSettings
from freshcache._sources._stdio import StdioSource, StdioStats
from freshcache.acceptance import Case, Setup
from freshcache.acceptance._http_world import LoopbackHttpWorld
from freshcache.acceptance._stdio_world import StdioProcessWorld
from freshcache.acceptance._steps import (
    ALIASES,
    Given,
    NextRead,
    Notify,
    ServerChange,
    ServerSets,
    text_for,
)

from .conftest import FIXTURES, free_port

FIXTURE = FIXTURES / "sdk1_server.py"

_GIVENS = {"ack_omits", "also_selected", "not_cached"}
_FAULTS = {"timeout", "denied", "not_found", "server_error", "local_copy", None}
_CHANGES = {"down", "up", "hold_reads", "release_reads", "deny", "allow"}


def sdk1_unplayable(case: Case) -> str | None:
    """What the SDK 1.x fixture cannot be steered to do (the seed rows all play)."""
    for step in case.row.steps:
        match step:
            case Given(what=what) if what not in _GIVENS:
                return f"the SDK 1.x fixture has no setting for {what}"
            case NextRead(fault=fault) if fault not in _FAULTS:
                return f"the SDK 1.x fixture answers from typed models (no {fault})"
            case ServerChange(what=what, principal=None) if what not in _CHANGES:
                return f"the SDK 1.x fixture cannot {what.replace('_', ' ')}"
            case ServerChange(principal=who) if who is not None:
                return "the SDK 1.x fixture has one principal"
            case Notify(kind=kind) if kind not in ("updated", "list_changed"):
                return f"the SDK 1.x fixture sends only well-formed notifications ({kind})"
            case _:
                pass
    return None


def seed_state(setup: Setup) -> dict[str, Any]:
    """The fixture's starting state for a row (its ``--state`` file)."""
    uris = [ALIASES[a] for a in ("selected", "other", "extra")]
    return {
        "resources": {uri: text_for(uri, "v1") for uri in uris},
        "ack_exclude": sorted(setup.ack_omits),
        "denied": [],
        "faults": {},
        "sticky": {},
        "served": {},
        "reads": {},
        "down": False,
    }


async def control(client: httpx.AsyncClient, url: str, op: str, **fields: Any) -> dict[str, Any]:
    response = await client.post(url, json={"op": op, **fields})
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def _server_step(step: ServerSets | Notify | NextRead | ServerChange) -> tuple[str, dict[str, Any]]:
    """The control op (and its fields) a server-side step is."""
    match step:
        case ServerSets(uri=uri, version=version, notify=notify):
            return "set", {"uri": uri, "text": text_for(uri, version), "notify": notify}
        case Notify(kind="updated", uri=uri, count=count):
            return "notify_raw", {"uri": uri, "count": count}
        case Notify(kind="list_changed"):
            return "list_changed", {}
        case NextRead(uri=uri, fault=fault, sticky=sticky):
            return "fault", {"uri": uri, "fault": fault, "sticky": sticky}
        case ServerChange(what="deny" | "allow" as what, uri=uri):
            return what, {"uri": uri}
        case ServerChange(what="hold_reads" | "release_reads" as what):
            return what, {}
        case _:
            raise AssertionError(f"unplayable step {step!r}")


class _Quiet:
    """Two looks in a row with nothing new: the peer and the cache have settled."""

    def __init__(self) -> None:
        self.last: object = None

    def settled(self, snapshot: object) -> bool:
        if snapshot == self.last:
            return True
        self.last = snapshot
        return False


class Sdk1HttpWorld(LoopbackHttpWorld):
    """A `FreshCache` over `HttpSource` against the SDK 1.x fixture over HTTP."""

    name = "sdk1-http"
    revision = "2025-11-25"
    settle_pause = 0.01

    def __init__(self, python: Path, *, request_timeout: float = 1.5) -> None:
        super().__init__(read_timeout=4.0, idle_timeout=30.0, settle_timeout=10.0)
        self.python = python
        self.request_timeout = request_timeout
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.control_url = f"http://127.0.0.1:{self.port}/control"
        self.process: subprocess.Popen[bytes] | None = None
        self.state_file: Path
        self.log_file: Path
        self._control: httpx.AsyncClient
        self._down = False
        self._reads = 0
        self._quiet = _Quiet()

    def unplayable(self, case: Case) -> str | None:
        return sdk1_unplayable(case)

    async def start(self, setup: Setup) -> None:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="freshcache-sdk1-http-"))
        self._stack.callback(lambda: __import__("shutil").rmtree(folder, ignore_errors=True))
        self.state_file = folder / "state.json"
        self.log_file = folder / "server.log"
        self.state_file.write_text(json.dumps(seed_state(setup)))
        self.principal = setup.principal
        self._control = httpx.AsyncClient(trust_env=False, timeout=10.0)
        self._stack.push_async_callback(self._control.aclose)
        self._stack.push_async_callback(self._kill)
        await self._launch()
        await self._connect(
            self.url,
            setup,
            timeout=self.request_timeout,
            ack_timeout=4.0,
            backoff=BackoffSettings(base=0.01, cap=0.1, quick_death=0.0),
        )

    def _spawn(self) -> subprocess.Popen[bytes]:
        command = [str(self.python), str(FIXTURE), "http", "--port", str(self.port)]
        with open(self.log_file, "ab") as log:
            return subprocess.Popen(
                [*command, "--state", str(self.state_file)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    async def _launch(self, timeout: float = 30.0) -> None:
        self.process = await anyio.to_thread.run_sync(self._spawn)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the SDK 1.x fixture exited: {self.log_tail()}")
            try:
                await control(self._control, self.control_url, "state")
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(0.05)

    async def _kill(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(process.wait)

    def log_tail(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    async def stop(self) -> None:
        # The stack is closed even when the release is cancelled (a case past its
        # deadline stops its world inside the cancelled scope): a task group left
        # open there ended the run with "RuntimeError: ... cancel scope ...".
        try:
            if not self._down:
                await self._op("release_reads")
        finally:
            await self._stack.aclose()

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        match step:
            case ServerChange(what="down"):
                await self._look()  # count the reads before they stop being reachable
                self._down = True
                await self._kill()
            case ServerChange(what="up"):
                await self._launch()
                self._down = False
            case ServerSets(uri=uri, version=version) if self._down:
                state = json.loads(self.state_file.read_text())  # what the next process loads
                state["resources"][uri] = text_for(uri, version)
                self.state_file.write_text(json.dumps(state))
            case _:
                op, fields = _server_step(step)
                await self._op(op, **fields)

    async def _op(self, op: str, **fields: Any) -> dict[str, Any]:
        if self._down:
            raise AssertionError(f"{op} while the SDK 1.x fixture is down")
        return await control(self._control, self.control_url, op, **fields)

    async def _look(self) -> str | None:
        state = None if self._down else await self._op("state")
        cache = self.cache
        if state is not None:
            self._reads = sum(state["reads"].values())
        held = state["held_reads"] if state is not None else 0
        if (busy := self._reads_busy(held)) is not None:
            return busy
        if state is None:
            return None
        if cache.selected and cache.stream_status != "live" and not state["held"]:
            return f"the stream is {cache.stream_status}"
        counters = cache.engine.counters
        snapshot = (json.dumps(state, sort_keys=True), counters.notifications)
        return None if self._quiet.settled(snapshot) else "a second quiet look"

    def server_reads(self) -> int:
        return self._reads


class Sdk1StdioWorld(StdioProcessWorld):
    """A `FreshCache` over `StdioSource` running the SDK 1.x fixture."""

    name = "sdk1-stdio"
    revision = "2025-11-25"
    temp_prefix = "freshcache-sdk1-stdio-"
    settle_pause = 0.01

    def __init__(self, python: Path) -> None:
        super().__init__(request_timeout=1.5, read_timeout=8.0, settle_limit=20.0)
        self.python = python
        self.control_port = free_port()
        self.control_url = f"http://127.0.0.1:{self.control_port}/control"
        self._control = httpx.AsyncClient(trust_env=False, timeout=5.0)
        self._quiet = _Quiet()

    def unplayable(self, case: Case) -> str | None:
        return sdk1_unplayable(case) or super().unplayable(case)

    def _launch(self, setup: Setup) -> StdioSource:
        self.state_file.write_text(json.dumps(seed_state(setup)))
        command = [str(self.python), str(FIXTURE), "stdio"]
        command += ["--control-port", str(self.control_port), "--state", str(self.state_file)]
        return self._stdio_source(command, name="SDK 1.x fixture")

    async def _close_control(self) -> None:
        await self._control.aclose()

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        left = self._play_client_side(step)
        if left is None:
            return
        step = left
        if self.down:
            self._edit_state(step)
            return
        match step:
            case ServerChange(what="down"):
                before = self.source.pid
                self.down = True
                await self._op("go_down")
                await self._wait_until_gone(before)
            case ServerChange(what="up"):
                pass  # it was not down
            case _:
                op, fields = _server_step(step)
                await self._op(op, **fields)

    def _edit_state(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        state = json.loads(self.state_file.read_text())
        match step:
            case ServerChange(what="up"):
                state["down"] = False
                self.down = False
            case ServerSets(uri=uri, version=version):
                state["resources"][uri] = text_for(uri, version)
            case _:
                raise AssertionError(f"{step!r} while the SDK 1.x fixture is down")
        self.state_file.write_text(json.dumps(state))

    async def _op(self, op: str, **fields: Any) -> dict[str, Any] | None:
        with anyio.fail_after(self.settle_limit):
            while True:
                try:
                    return await control(self._control, self.control_url, op, **fields)
                except httpx.HTTPError:
                    if op in ("state", "go_down"):
                        return None
                    await anyio.sleep(0.02)  # the process is starting

    async def settle(self) -> None:
        self._quiet = _Quiet()
        await super().settle()

    async def _look(self) -> str | None:
        state = await self._server_state()
        busy = self._busy(state)
        if busy is not None:
            return busy
        counters = self.cache.engine.counters
        snapshot = (json.dumps(state, sort_keys=True), counters.notifications)
        return None if self._quiet.settled(snapshot) else "a second quiet look"

    async def _server_state(self) -> dict[str, Any] | None:
        if self.down or self.source.pid is None:
            return None
        return await self._op("state")

    def _held_reads(self, state: dict[str, Any]) -> int:
        return int(state["held_reads"])

    def _server_busy(self, state: dict[str, Any] | None, stats: StdioStats) -> str | None:
        if state is None or state["pid"] != stats.pid:
            return "the server process (re)starting"
        return None

    async def _note_reads(self) -> None:
        state = None if self.down else await self._server_state()
        if state is None:
            state = json.loads(self.state_file.read_text())
        self._reads = sum(state["reads"].values())
