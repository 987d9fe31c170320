"""A fault-injecting MCP server over stdio, for tests and benchmarks.

    python -m freshcache.acceptance._stdio_server [--state FILE] [--control-file FILE]
        [--revision 2026-07-28|2025-11-25|both]

With ``--revision both`` the first request decides which revision the process speaks.
With ``--revision 2025-11-25`` it speaks only that revision (`Protocol2025`): the
client initializes, notifications of the one session come on stdout among the answers,
and the session ends with the process: *stream closes* and *session expires* make it
exit cleanly after what is queued, *stream drops* in the middle of a line.

It serves a `ReferenceServer` through `ReferenceProtocol` on stdin/stdout, one
JSON-RPC message per line (spec basic/transports/stdio), many requests at once, and
exits when stdin ends.

**Control channel.** A TCP listener on 127.0.0.1 (a free port), announced on stderr
as ``freshcache-stdio-server: control 127.0.0.1:PORT pid PID`` and, with
``--control-file``, written there as ``{"pid": ..., "port": ...}``. Each command is
one JSON object on one line and gets one JSON line back (``{"ok": true, ...}``):

- ``state``: what the server has done (reads, lines written, output still queued ...);
- ``step``: one acceptance-table step (``kind`` and ``fields`` of a step type), played
  with `apply_to_reference`, except that on stdio *stream drops* means the process dies
  in the middle of a line and *server goes down* means that, and that new processes
  exit at once until the step *server comes back* is written to the state file;
- ``requests``: every message received so far (for schema checks);
- faults only stdio has: ``die`` (write half a line, exit), ``flood`` (``count``
  ``resources/updated`` to every open subscription, as fast as the pipe takes them),
  ``interleave`` (before the next listen's acknowledgment, write updates to every
  other open subscription), ``write_raw`` (any line: garbage, an over-long line, a
  response for an unknown id), ``write_request`` (a request, which servers must not
  send), ``cancel_listens`` (end every listen with ``notifications/cancelled``), ``exit``.

**State file.** With ``--state``, the reference server is loaded from it at start
and saved after every change, so a restarted process carries on where the last one
died (resources, faults, held reads, read counts); the process that finds ``down`` in
it exits at once with code 3.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from freshcache.testing import ReferenceCatalogs, ReferenceServer, Resource

from ._protocol import (
    DENIED_CODE,
    META_SUBSCRIPTION_ID,
    Accepted,
    CutMidFrame,
    Denied,
    Garbage,
    HangUp,
    ReferenceProtocol,
    Reply,
    Stall,
    Stream,
    StreamItem,
    error,
)
from ._protocol_2025 import BOTH, Protocol2025, ServedSession, speaks_2025
from ._protocol_2025 import REVISION as LEGACY_REVISION
from ._steering import apply_to_reference
from ._steps import ALIASES, NextRead, Notify, ServerChange, ServerSets, text_for

EXIT_DOWN = 3
"""Exit code of a process started while the state file says the server is down."""

ServerStep = ServerSets | Notify | NextRead | ServerChange
_STEP_TYPES: dict[str, type[ServerStep]] = {
    cls.__name__: cls for cls in (ServerSets, Notify, NextRead, ServerChange)
}


class _Lines:
    """Splits stdin into lines; a line past ``limit`` bytes is skipped whole. (Not the
    client's `LineBuffer`: this process imports none of the client.)"""

    def __init__(self, limit: int = 64 * 1024 * 1024) -> None:
        self.limit = limit
        self._pending = bytearray()
        self._skipping = False

    def feed(self, data: bytes) -> list[bytes]:
        *lines, rest = bytes(data).split(b"\n")
        if lines:
            lines[0] = bytes(self._pending) + lines[0]
            if self._skipping:
                lines.pop(0)
            self._pending.clear()
            self._skipping = False
        if not self._skipping:
            self._pending += rest
            if len(self._pending) > self.limit:
                self._pending.clear()
                self._skipping = True
        return [line for line in lines if len(line) <= self.limit]


# --------------------------------------------------------------------------- state file


def default_reference() -> ReferenceServer:
    """The three table resources (``selected``, ``other``, ``extra``) at v1."""
    server = ReferenceServer()
    for uri in ALIASES.values():
        server.set(uri, text_for(uri, "v1"))
    return server


def reference_to_state(server: ReferenceServer) -> dict[str, Any]:
    """What survives a process: everything but open streams and reads in flight."""
    return {
        "resources": [dataclasses.asdict(r) for r in server.resources.values()],
        "down": server.down,
        "listen_supported": server.listen_supported,
        "list_changed_supported": server.list_changed_supported,
        "omit_from_ack": sorted(server.omit_from_ack),
        "faults": {uri: list(queue) for uri, queue in server.faults.items() if queue},
        "sticky_faults": dict(server.sticky_faults),
        "denied_principals": {
            uri: sorted(who, key=str) for uri, who in server.denied_principals.items()
        },
        "denial_envelopes": dict(server.denial_envelopes),
        "local_copies": dict(server.local_copies),
        "page_size": server.page_size,
        "list_ttl_ms": server.list_ttl_ms,
        "later_pages_ttl_ms": server.later_pages_ttl_ms,
        "endless_list": server.endless_list,
        "reads": server.reads,
        "lists": server.lists,
        "early_notifications": list(server.early_notifications),
        "early_bodies": list(server.early_bodies),
        "cursor_epoch": server.cursor_epoch,
        "held": getattr(server, "_held", None) is not None,
        "list_hints": server.list_hints,
        "listen_refusals": server.listen_refusals,
        "acks_held": server.acks_held,
        "catalogs": dataclasses.asdict(server.catalogs),
        "tool_calls": list(server.tool_calls),
        "tools_unknown_once": sorted(server.tools_unknown_once),
        "tools_error_once": sorted(server.tools_error_once),
        "tool_faults": dict(server.tool_faults),
    }


def reference_from_state(state: dict[str, Any]) -> ReferenceServer:
    """The inverse of `reference_to_state`."""
    server = ReferenceServer()
    for item in state.get("resources", []):
        server.resources[item["uri"]] = Resource(**item)
    server.down = bool(state.get("down", False))
    server.listen_supported = bool(state.get("listen_supported", True))
    server.list_changed_supported = bool(state.get("list_changed_supported", True))
    server.omit_from_ack = set(state.get("omit_from_ack", ()))
    server.faults = {uri: deque(queue) for uri, queue in state.get("faults", {}).items()}
    server.sticky_faults = dict(state.get("sticky_faults", {}))
    server.denied_principals = {
        uri: set(who) for uri, who in state.get("denied_principals", {}).items()
    }
    server.denial_envelopes = dict(state.get("denial_envelopes", {}))
    server.local_copies = dict(state.get("local_copies", {}))
    server.page_size = int(state.get("page_size", 100))
    server.list_ttl_ms = int(state.get("list_ttl_ms", 60_000))
    server.later_pages_ttl_ms = state.get("later_pages_ttl_ms")
    server.endless_list = bool(state.get("endless_list", False))
    server.reads = int(state.get("reads", 0))
    server.lists = int(state.get("lists", 0))
    server.early_notifications = list(state.get("early_notifications", ()))
    server.early_bodies = list(state.get("early_bodies", ()))
    server.cursor_epoch = int(state.get("cursor_epoch", 0))
    server.list_hints = int(state.get("list_hints", 0))
    server.listen_refusals = int(state.get("listen_refusals", 0))
    if "catalogs" in state:
        server.catalogs = ReferenceCatalogs(**state["catalogs"])
    server.tool_calls = list(state.get("tool_calls", ()))
    server.tools_unknown_once = set(state.get("tools_unknown_once", ()))
    server.tools_error_once = set(state.get("tools_error_once", ()))
    server.tool_faults = dict(state.get("tool_faults", {}))
    if state.get("held"):
        server.hold_reads()
    if state.get("acks_held"):
        server.hold_acks()
    return server


def load_state(path: Path) -> ReferenceServer:
    return reference_from_state(json.loads(path.read_text()))


def save_state(path: Path, server: ReferenceServer) -> None:
    """Write atomically: a process starting meanwhile reads the old or the new state."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(reference_to_state(server)))
    os.replace(tmp, path)


def step_to_json(step: ServerStep) -> dict[str, Any]:
    """A table step as a control command's payload."""
    return {"kind": type(step).__name__, "fields": dataclasses.asdict(step)}


def step_from_json(payload: dict[str, Any]) -> ServerStep:
    return _STEP_TYPES[payload["kind"]](**payload["fields"])


# --------------------------------------------------------------------------- the server


@dataclasses.dataclass(frozen=True, slots=True)
class _Die:
    partial: bytes
    code: int


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(1, view)
        view = view[written:]


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"


def _updated(subscription_id: str | int, uri: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"_meta": {META_SUBSCRIPTION_ID: subscription_id}, "uri": uri},
    }


class StdioReferenceServer:
    """One process of the fault-injecting stdio server."""

    def __init__(
        self, reference: ReferenceServer, state_path: Path | None, revision: str = "2026-07-28"
    ) -> None:
        self.reference = reference
        self.protocol = ReferenceProtocol(reference)
        self.legacy = Protocol2025(reference) if revision in (LEGACY_REVISION, BOTH) else None
        self._undecided = revision == BOTH
        """Speaking ``both``: the first request decides this process's revision (the
        official SDK's rule, `speaks_2025`); a 2026-07-28 one drops the 2025 protocol."""
        self.session: ServedSession | None = None
        """The 2025-11-25 session this process serves (after ``initialize``)."""
        self._tg: anyio.abc.TaskGroup | None = None
        self.state_path = state_path
        self.lines_written = 0
        self._queue: deque[bytes | _Die] = deque()
        self._queued_lines = 0
        self._writing = 0
        self._wakeup = anyio.Event()
        self._running: dict[tuple[bool, str | int], anyio.CancelScope] = {}
        self._streams: dict[tuple[bool, str | int], Any] = {}
        self._interleave: tuple[str, int] | None = None
        self._server_requests = 0
        self._lines = _Lines()

    # --- output: one writer, so lines never interleave

    def write(self, data: bytes) -> None:
        self._queue.append(data)
        self._queued_lines += data.count(b"\n")
        self._wakeup.set()

    def write_message(self, message: dict[str, Any]) -> None:
        self.write(_line(message))

    def die(self, partial: bytes | None = None, code: int = 1) -> None:
        """Write what is queued, then half a line, then exit (a crash mid-write)."""
        if partial is None:
            sid = next(iter(self.reference.subscribers), "none")
            whole = _line(_updated(sid, "guide://cut"))
            partial = whole[: len(whole) // 2]
        self.save()
        self._queue.append(_Die(partial, code))
        self._wakeup.set()

    async def _writer(self) -> None:
        while True:
            while not self._queue:
                if self._wakeup.is_set():
                    self._wakeup = anyio.Event()
                await self._wakeup.wait()
            batch: list[bytes] = []
            die: _Die | None = None
            while self._queue:
                item = self._queue.popleft()
                if isinstance(item, _Die):
                    die = item
                    break
                batch.append(item)
            data = b"".join(batch)
            lines = data.count(b"\n")
            self._queued_lines -= lines
            self._writing = lines
            try:
                await anyio.to_thread.run_sync(_write_all, data)
                if die is not None:
                    await anyio.to_thread.run_sync(_write_all, die.partial)
            except OSError:  # the client closed our stdout: nobody is listening any more
                self.exit(0)
            self.lines_written += lines
            self._writing = 0
            if die is not None:
                self.exit(die.code)

    def exit(self, code: int) -> None:
        # No save here: the state was saved when the change was made, and a dying
        # process must not overwrite what the world wrote since.
        with contextlib.suppress(OSError):
            sys.stderr.flush()
        os._exit(code)

    @property
    def pending_out(self) -> int:
        """Messages accepted for output and not yet written (streams included)."""
        buffered = 0
        for sub in self._streams.values():
            buffered += sub.send.statistics().current_buffer_used
        return self._queued_lines + self._writing + buffered

    def save(self) -> None:
        if self.state_path is not None:
            save_state(self.state_path, self.reference)

    # --- input

    async def run(self, control_file: Path | None, *, control: bool = True) -> None:
        """Serve until stdin ends; without ``control`` no control channel is opened
        (``freshcache serve --stdio``: nobody injects faults there)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            if control:
                listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
                port = listener.extra(anyio.abc.SocketAttribute.local_port)
                if control_file is not None:
                    tmp = control_file.with_name(f"{control_file.name}.{os.getpid()}.tmp")
                    tmp.write_text(json.dumps({"pid": os.getpid(), "port": port}))
                    os.replace(tmp, control_file)
                print(
                    f"freshcache-stdio-server: control 127.0.0.1:{port} pid {os.getpid()}",
                    file=sys.stderr,
                    flush=True,
                )
                tg.start_soon(listener.serve, self._control_connection)
            tg.start_soon(self._writer)
            while True:
                chunk = await anyio.to_thread.run_sync(os.read, 0, 1 << 16, abandon_on_cancel=True)
                if not chunk:
                    break
                for line in self._lines.feed(chunk):
                    self._take(line, tg)
            # stdin ended: the client is done with us (spec: exit on EOF), once what
            # is queued is written; a client that stopped reading gets 2 s.
            self.die(b"", 0)
            await anyio.sleep(2.0)
            self.exit(0)

    def _take(self, line: bytes, tg: anyio.abc.TaskGroup) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            self.write_message(error(None, -32700, "Parse error"))
            return
        if not isinstance(message, dict):
            self.write_message(error(None, -32600, "Invalid request"))
            return
        if "id" not in message:
            if self.legacy is not None:
                self.legacy.requests.append(message)
                if message.get("method") == "notifications/initialized" and self.session:
                    self.session.initialized = True
                return
            self.protocol.requests.append(message)
            if message.get("method") == "notifications/cancelled":
                params = message.get("params") or {}
                self._cancel(params.get("requestId"))
            return
        tg.start_soon(self._serve_request, message)

    def _cancel(self, request_id: Any) -> None:
        if not isinstance(request_id, (str, int)):
            return
        key = (isinstance(request_id, str), request_id)
        self.reference.unsubscribe(request_id)
        scope = self._running.get(key)
        if scope is not None:
            scope.cancel()

    async def _serve_request(self, message: dict[str, Any]) -> None:
        rid = message["id"]
        key = (isinstance(rid, str), rid)
        with anyio.CancelScope() as scope:
            self._running[key] = scope
            try:
                await self._answer(rid, message)
            except Exception as exc:  # a bug here must answer, not kill the server
                self.write_message(error(rid, -32603, f"reference server error: {exc!r}"))
            finally:
                self._running.pop(key, None)
                self._streams.pop(key, None)

    async def _answer(self, rid: str | int, message: dict[str, Any]) -> None:
        if self._undecided:
            self._undecided = False
            if not speaks_2025(message):
                self.legacy = None
        if message.get("method") == "subscriptions/listen" and self._interleave is not None:
            uri, count = self._interleave
            self._interleave = None
            for sid in list(self.reference.subscribers):
                self.write(_line(_updated(sid, uri)) * count)
        if self.legacy is not None:
            answer = await self.legacy.handle(message, None, self.session)
        else:
            answer = await self.protocol.handle(message)
        self.save()
        match answer:
            case Reply(message=reply, before=before, session_id=opened):
                for message_before in before:  # change hints ahead of the response
                    self.write_message(message_before)
                self.write_message(reply)
                if opened is not None:
                    self._open_session(opened)
            case Denied(request_id=request_id, message=text, data=data):
                self.write_message(error(request_id, DENIED_CODE, f"Forbidden: {text}", data))
            case Stall():
                await anyio.sleep_forever()
            case HangUp():
                self.die(b"")
            case Accepted():
                pass
            case Stream(items=items):
                sub = self.reference.subscribers.get(rid)
                if sub is not None:
                    self._streams[(isinstance(rid, str), rid)] = sub
                if not await self._write_stream(items):
                    await anyio.sleep_forever()  # cut: this process is dying

    def _open_session(self, session_id: str) -> None:
        """After ``initialize`` (2025-11-25): stdout becomes the session's notification
        channel; its end is the session's end, and this process's."""
        assert self.legacy is not None
        assert self._tg is not None
        if self.session is not None:
            self.legacy.end(self.session)
        session = self.session = self.legacy.sessions[session_id]
        stream = self.legacy.notifications(session)
        if stream is None:
            return

        async def pump() -> None:
            if await self._write_stream(stream.items) and self.session is session:
                self.die(b"", 0)  # the channel ended on purpose: so does the session

        self._tg.start_soon(pump)

    async def _write_stream(self, items: AsyncIterator[StreamItem]) -> bool:
        """Write a stream's items as lines; ``False`` when it was cut mid-frame (the
        process dies with the partial line), ``True`` when it ended."""
        generator = cast(AsyncGenerator[Any, None], items)
        async with contextlib.aclosing(generator):
            async for item in generator:
                if isinstance(item, Garbage):
                    self.write(item.raw.encode("utf-8") + b"\n")
                elif isinstance(item, CutMidFrame):
                    self.die(item.partial.encode("utf-8"))
                    return False
                else:
                    self.write_message(item)
        return True

    # --- control

    async def _control_connection(self, stream: anyio.abc.SocketStream) -> None:
        async with stream:
            buffered = BufferedByteReceiveStream(stream)
            while True:
                try:
                    line = await buffered.receive_until(b"\n", 1 << 24)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                    return
                after: Callable[[], None] | None = None
                try:
                    reply, after = self._control(json.loads(line))
                except Exception as exc:  # a bad command is answered, never fatal
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                try:
                    await stream.send(json.dumps(reply).encode("utf-8") + b"\n")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return
                finally:
                    if after is not None:
                        after()

    def state(self) -> dict[str, Any]:
        reference = self.reference
        return {
            "ok": True,
            "pid": os.getpid(),
            "lines_written": self.lines_written,
            "pending_out": self.pending_out,
            "reads": reference.reads,
            "lists": reference.lists,
            "catalog_lists": sum(reference.catalogs.lists.values()),
            "tool_calls": len(reference.tool_calls),
            "reads_in_flight": reference.reads_in_flight,
            "subscribers": len(reference.subscribers),
            "down": reference.down,
            "held": getattr(reference, "_held", None) is not None,
            "listens": [sorted(sub.requested) for sub in reference.subscribers.values()],
            "acks_held": reference.acks_held,
        }

    def _control(self, command: dict[str, Any]) -> tuple[dict[str, Any], Callable[[], None] | None]:
        op = command.get("op")
        after: Callable[[], None] | None = None
        match op:
            case "state":
                pass
            case "requests":
                protocol = self.legacy if self.legacy is not None else self.protocol
                return {"ok": True, "requests": protocol.requests}, None
            case "step":
                step = step_from_json(command["step"])
                match step:
                    case ServerChange(what="drop_stream"):
                        after = self.die
                    case ServerChange(what="down"):
                        self.reference.down = True
                        after = self.die
                    case _:
                        apply_to_reference(self.reference, step, command.get("principal"))
                self.save()
            case "die":
                partial = command.get("partial")
                code = int(command.get("code", 1))
                after = lambda: self.die(None if partial is None else partial.encode("utf-8"), code)  # noqa: E731
            case "exit":
                code = int(command.get("code", 0))
                after = lambda: self.die(b"", code)  # noqa: E731
            case "flood":
                uri, count = str(command["uri"]), int(command["count"])
                for sid in list(self.reference.subscribers):
                    self.write(_line(_updated(sid, uri)) * count)
            case "interleave":
                self._interleave = (str(command["uri"]), int(command.get("count", 1)))
            case "write_raw":
                self.write(str(command["line"]).encode("utf-8") + b"\n")
            case "write_request":
                self._server_requests += 1
                self.write_message(
                    {
                        "jsonrpc": "2.0",
                        "id": f"server-{self._server_requests}",
                        "method": str(command.get("method", "sampling/createMessage")),
                        "params": {},
                    }
                )
            case "cancel_listens":
                for sid in list(self.reference.subscribers):
                    self.write_message(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/cancelled",
                            "params": {
                                "requestId": sid,
                                "reason": "server shutting the stream down",
                            },
                        }
                    )
                    self._cancel(sid)
            case _:
                return {"ok": False, "error": f"unknown op {op!r}"}, None
        return self.state(), after


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m freshcache.acceptance._stdio_server",
        description="A fault-injecting MCP server over stdio (freshcache tests).",
    )
    parser.add_argument(
        "--state", type=Path, help="load the server from this file; save every change"
    )
    parser.add_argument("--control-file", type=Path, help="write the control port here")
    parser.add_argument(
        "--revision",
        choices=("2026-07-28", LEGACY_REVISION, BOTH),
        default="2026-07-28",
        help="the MCP revision to speak (only that one; both: the first request decides)",
    )
    args = parser.parse_args(argv)
    state_path: Path | None = args.state
    if state_path is not None and state_path.exists():
        reference = load_state(state_path)
    else:
        reference = default_reference()
        if state_path is not None:
            save_state(state_path, reference)
    if reference.down:
        print(
            "freshcache-stdio-server: the reference server is down; exiting",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(EXIT_DOWN)
    server = StdioReferenceServer(reference, state_path, args.revision)
    anyio.run(server.run, args.control_file)


if __name__ == "__main__":
    main()
