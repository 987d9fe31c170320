"""`SdkHttpWorld`: acceptance rows over real HTTP against the official-SDK peer.

The peer is `tests/fixtures/sdk_server.py` (the official `mcp` SDK 2.x lowlevel server
under uvicorn) running as a subprocess on one loopback port. The world steers it with
the fixture's ``/control`` ops; "server goes down" kills the process (SIGKILL, an
abrupt loss for every connection) and "comes back" starts it again on the same port
with the state the rows gave it (``--state-file``).

What the SDK server cannot be made to do, the world does not pretend: rows that need
a notification before the acknowledgment, a foreign subscription id or a malformed
frame are reported by `unplayable` with the reason (the project's own HTTP server
plays them, `freshcache.acceptance.HttpWorld`).

`settle` is bounded by a deadline and waits on facts the fixture reports: reads that
reached the handler and are held, notifications started per stream (acks included)
against the frames the source took in, buffered events, and streams the client must
see end after a drop or close.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import httpx

from freshcache._core._backoff import BackoffSettings
from freshcache.acceptance import Case, Setup
from freshcache.acceptance._http_world import LoopbackHttpWorld
from freshcache.acceptance._steps import (
    ALIASES,
    Given,
    NextRead,
    Notify,
    ServerChange,
    ServerSets,
    odd_answer,
    text_for,
    unread_uri,
)

from .conftest import FIXTURES, free_port


def cannot_hold_acks(case: Case) -> str | None:
    """Why an SDK server cannot play ``case``: it holds an acknowledgment back."""
    for step in case.row.steps:
        if isinstance(step, Given) and step.what == "acks_held":
            return "the SDK's ListenHandler acknowledges a listen at once; it cannot hold it"
        if isinstance(step, ServerChange) and step.what in ("hold_acks", "release_acks"):
            return "the SDK's ListenHandler acknowledges a listen at once; it cannot hold it"
    return None


_CANNOT_NOTIFY = {
    "updated_before_ack": "the SDK's ListenHandler always sends the acknowledgment first; "
    "it has no way to send a notification before it",
    "foreign": "the SDK stamps every frame with the stream's own subscription id; it cannot "
    "send one with an id nobody asked for",
    "garbage": "the SDK serializes every frame from a typed model; it cannot send a malformed one",
}


class SdkPeer:
    """The official-SDK fixture as a restartable subprocess on one loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.control_url = f"http://127.0.0.1:{self.port}/control"
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="freshcache-sdk-peer-")
        self.log_path = Path(self._dir.name) / "server.log"
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, seed: dict[str, Any] | None = None, timeout: float = 30.0) -> None:
        """Start the fixture (blocking) and wait, bounded, until it answers."""
        command = [
            sys.executable,
            str(FIXTURES / "sdk_server.py"),
            "http",
            "--port",
            str(self.port),
        ]
        if seed is not None:
            state_file = Path(self._dir.name) / "state.json"
            state_file.write_text(json.dumps(seed))
            command += ["--state-file", str(state_file)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.starts += 1
        deadline = time.monotonic() + timeout
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"the SDK fixture exited with {self.process.returncode}: {self.log_tail()}"
                    )
                try:
                    client.post(self.control_url, json={"op": "state"}).raise_for_status()
                    return
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        self.kill()
                        raise
                    time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: every connection breaks at once, like a crashed server."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self._dir.cleanup()

    def log_tail(self, size: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""


class SdkHttpWorld(LoopbackHttpWorld):
    """A `FreshCache` over `HttpSource` against the official-SDK fixture server."""

    name = "sdk-http"
    settle_pause = 0.005

    def __init__(
        self,
        peer: SdkPeer,
        *,
        read_timeout: float = 3.0,
        request_timeout: float = 1.5,
        idle_timeout: float = 30.0,
        settle_timeout: float = 8.0,
    ) -> None:
        # The SDK answers a slow read with silence (no keep-alive before it commits to SSE
        # at 15 s), so a read that "times out" is caught by the request timeout; its listen
        # streams ping every 15 s, so the idle timeout must be longer than that.
        super().__init__(
            read_timeout=read_timeout, idle_timeout=idle_timeout, settle_timeout=settle_timeout
        )
        self.peer = peer
        self.request_timeout = request_timeout
        self.seed: dict[str, Any] = {}
        """The fixture's state as the row set it: what a restarted server comes back with."""
        self._control: httpx.AsyncClient
        self._down = False
        self._closing: set[str | int] = set()
        self._reads = 0
        self._reads_before_restarts = 0

    def unplayable(self, case: Case) -> str | None:
        for step in case.row.steps:
            if isinstance(step, Notify) and step.kind in _CANNOT_NOTIFY:
                return _CANNOT_NOTIFY[step.kind]
            if odd_answer(step) is not None:
                return (
                    f"the SDK server answers from typed models: it cannot shape an answer "
                    f"that way ({odd_answer(step)})"
                )
            if step == ServerChange("fall_silent"):
                return "the SDK server cannot be made to keep a stream open and mute"
        return cannot_hold_acks(case)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, setup: Setup) -> None:
        self.principal = setup.principal
        self.seed = fixture_seed(setup)
        self.seed["hidden"] = []
        self.seed["denied_for"] = {}
        self._control = httpx.AsyncClient(trust_env=False, timeout=10.0)
        self._stack.push_async_callback(self._control.aclose)
        if self.peer.alive:
            await self._op("reset", **self.seed)
        else:
            await anyio.to_thread.run_sync(self.peer.start, self.seed)
        await self._connect(
            self.peer.url,
            setup,
            timeout=self.request_timeout,
            ack_timeout=3.0,
            backoff=BackoffSettings(base=0.005, cap=0.05, quick_death=0.0),
        )

    async def stop(self) -> None:
        # The stack is closed even when the release is cancelled (a case past its
        # deadline stops its world inside the cancelled scope): a task group left
        # open there ended the run with "RuntimeError: ... cancel scope ...".
        try:
            if not self._down:
                await self._op("release_reads")
        finally:
            await self._stack.aclose()

    # ------------------------------------------------------------------ steps

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        seed = self.seed
        match step:
            case ServerSets(uri=uri, version=version, notify=notify):
                seed["resources"][uri] = text_for(uri, version)
                await self._op("set", uri=uri, text=text_for(uri, version), notify=notify)
            case Notify(kind="updated", uri=uri, count=count):
                await self._op("notify_raw", uri=uri, count=count)
            case Notify(kind="list_changed"):
                await self._op("list_changed")
            case Notify(kind="updated_unread", count=count):
                for n in range(count):
                    await self._op("notify_raw", uri=unread_uri(n), count=1)
            case Notify():
                raise AssertionError(f"unplayable step {step!r}")  # unplayable() screens these
            case NextRead(uri=uri, fault=fault, sticky=sticky):
                await self._op("fault", uri=uri, fault=fault, sticky=sticky)
            case ServerChange(what="down"):
                state = await self._op("state")
                self._reads_before_restarts += _total_reads(state)
                self._closing |= set(self.source.streams)
                self._down = True
                await anyio.to_thread.run_sync(self.peer.kill)
            case ServerChange(what="up"):
                await anyio.to_thread.run_sync(self.peer.start, seed)
                self._down = False
            case ServerChange(what="drop_stream"):
                self._closing |= set(self.source.streams)
                await self._op("drop_listeners")
            case ServerChange(what="close_stream" | "expire_session"):
                # A 2026 server has no session: its end is the stream's graceful end.
                self._closing |= set(self.source.streams)
                await self._op("close_listeners")
            case ServerChange(what="hold_reads" | "release_reads" as what):
                await self._op(what)
            case ServerChange(what="remove", uri=uri):
                seed["resources"].pop(uri, None)
                await self._op("remove", uri=uri)
            case ServerChange(what="hide", uri=uri):
                seed["hidden"].append(uri)
                await self._op("hide", uri=uri)
            case ServerChange(what="deny", uri=uri, principal=who):
                who = who or self.principal
                seed["denied_for"].setdefault(uri, []).append(who)
                await self._op("deny_principal", uri=uri, principal=who)
            case ServerChange(what="allow", uri=uri, principal=who):
                who = who or self.principal
                seed["denied_for"][uri] = [p for p in seed["denied_for"].get(uri, []) if p != who]
                await self._op("allow_principal", uri=uri, principal=who)
            case ServerChange(what="invalidate_cursors"):
                await self._op("invalidate_cursors")
            case _:
                raise AssertionError(f"unhandled step {step!r}")

    async def _look(self) -> str | None:
        state = None if self._down else await self._op("state")
        if state is not None:
            self._reads = self._reads_before_restarts + _total_reads(state)
        return self.busy(state)

    def busy(self, state: dict[str, Any] | None) -> str | None:
        """What the cache has not taken in yet (``None``: settled)."""
        cache, streams = self.cache, self.source.streams
        held = state["held_reads"] if state is not None else 0
        if (busy := self._reads_busy(held)) is not None:
            return busy
        self._closing &= set(streams)
        if self._closing:
            return f"streams {sorted(map(str, self._closing))} have not ended at the client yet"
        if state is None:
            return None
        for sid, stream in streams.items():
            if not stream.acknowledged:
                return f"stream {sid} waits for its acknowledgment"
            started = state["frames"].get(str(sid), 0)
            if started > stream.frames:
                return f"stream {sid}: {started} frames sent, {stream.frames} taken in"
        if state["backlog"]:
            return f"{state['backlog']} events buffered at the server"
        if (
            state["listen"]
            and cache.selected
            and cache.stream_status != "unsupported"
            and self._selection_unacknowledged()
        ):
            return "no acknowledged stream for the current selection yet"
        return None

    def server_reads(self) -> int:
        """Reads that reached the fixture's handler (as of the last `settle`)."""
        return self._reads

    async def _op(self, op: str, **fields: Any) -> dict[str, Any]:
        if self._down:
            return {}
        response = await self._control.post(self.peer.control_url, json={"op": op, **fields})
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result


def fixture_seed(setup: Setup) -> dict[str, Any]:
    """The SDK fixture's starting state for a row (its ``--state`` / ``reset`` format)."""
    uris = [ALIASES[a] for a in ("selected", "other", "extra")]
    return {
        "resources": {uri: text_for(uri, "v1") for uri in uris},
        "ttl": {uri: [setup.ttl_ms, setup.scope] for uri in uris},
        "ack_exclude": sorted(setup.ack_omits),
        "listen": setup.listen,
        "list_changes": setup.list_changed,
        "page_size": setup.page_size,
        "later_pages_ttl": setup.later_pages_ttl_ms,
    }


def _total_reads(state: dict[str, Any]) -> int:
    return sum(int(n) for n in state.get("reads", {}).values())
