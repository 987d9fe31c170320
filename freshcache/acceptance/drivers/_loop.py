"""The driver side of the driver protocol for Python clients (docs/driver-protocol.md).

`serve` reads JSON lines from stdin, runs each request in its own task (a background
read must not block the next request) and writes one answer line per request on
stdout. A driver module supplies a `Driver`: its ``hello`` and how to ``connect`` one
fresh client per row; the `Session` that ``connect`` yields answers the row's requests.
Everything else a Python driver needs (framing, ids, one row at a time, the ``hello``
answer, moving a `VirtualClock`) lives here, so each driver file holds only the calls
into its client's public API.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from typing import Any, BinaryIO, Protocol

import anyio
import anyio.abc

from .._runner import VirtualClock

PROTOCOL_VERSION = 1

BASE_OPS = ("read", "list", "select", "close")
"""The ops every driver answers; the others (`OPTIONAL_OPS`) it names in ``hello``."""
OPTIONAL_OPS = ("status", "advance", "inspect", "look", "catalog")
POLICIES = (
    "subscription_backed",
    "uncovered",
    "stale_on_error",
    "share_public",
    "stale_catalogs_on_error",
    "pushed_bodies",
    "max_list_pages",
)
"""Every row policy a client may have a setting for."""
REVISIONS = ("2026-07-28", "2025-11-25")
"""The MCP revisions the reference server can speak (the ``-2025`` wires)."""


def hello(
    client: str,
    *,
    ops: Sequence[str] = (),
    policies: Sequence[str] = (),
    states: bool = False,
    listens: bool = False,
    principals: bool = False,
    store_entries: bool = False,
    revisions: Sequence[str] = ("2026-07-28",),
    everything: bool = False,
) -> dict[str, Any]:
    """A ``hello`` answer (docs/driver-protocol.md): the client's name and version, and
    what it offers beyond the baseline, which is a client without states or a listen,
    serving one principal, with no policy settings and an unbounded store, over HTTP
    and stdio to a server on 2026-07-28, answering `BASE_OPS` and the optional ``ops``
    named. ``everything``: it offers every op, policy, capability and revision (every
    row can be played through it)."""
    if everything:
        ops, policies, revisions = OPTIONAL_OPS, POLICIES, REVISIONS
        states = listens = principals = store_entries = True
    return {
        "client": client,
        "states": states,
        "transports": ["http", "stdio"],
        "ops": [*BASE_OPS, *ops],
        "listens": listens,
        "principals": principals,
        "policies": list(policies),
        "store_entries": store_entries,
        "revisions": list(revisions),
    }


class OnVirtualClock:
    """A session whose client reads its TTLs off a clock the harness moves (``advance``)."""

    clock: VirtualClock

    async def advance(self, message: dict[str, Any]) -> dict[str, Any]:
        self.clock.advance(float(message["seconds"]))
        return {"ok": True}


class Session(Protocol):
    """One fresh client for one row (the answers are the protocol's answer objects).

    Optional beyond these: the ops named in ``hello`` (``advance(message)``, ...), and
    ``async def cut_off() -> str``, returning (why) once the client can no longer reach
    its server; the loop then sends the harness an ``ended`` notice."""

    async def read(
        self, uri: str, timeout: float | None, principal: str | None
    ) -> dict[str, Any]: ...

    async def list_resources(self) -> dict[str, Any]: ...

    async def select(self, uris: list[str]) -> None: ...


class Driver(Protocol):
    def hello(self) -> dict[str, Any]: ...

    def connect(self, spec: dict[str, Any]) -> AbstractAsyncContextManager[Session]: ...


class _Rows:
    """The one open row: its session, and the task that holds the client's context."""

    def __init__(
        self, driver: Driver, tg: anyio.abc.TaskGroup, notify: Callable[[dict[str, Any]], None]
    ) -> None:
        self.driver, self.tg, self.notify = driver, tg, notify
        self.session: Session | None = None
        self.ended: str | None = None
        """Why the row's client ended before the row closed it (it died mid-row)."""
        self._close: anyio.Event | None = None
        self._closed: anyio.Event | None = None

    async def open(self, spec: dict[str, Any]) -> None:
        if self.session is not None:
            raise ProtocolError("a row is open already: close it first")
        opened, failure = anyio.Event(), []
        self.ended = None
        self._close, self._closed = anyio.Event(), anyio.Event()
        close, closed = self._close, self._closed

        async def hold() -> None:
            try:
                async with self.driver.connect(spec) as session:
                    self.session = session
                    opened.set()
                    async with anyio.create_task_group() as watch:
                        watch.start_soon(self._watch, session, close)
                        await close.wait()
                        watch.cancel_scope.cancel()
            except BaseException as exc:  # the row's client failed to open, run or close
                failure.append(exc)
                if not opened.is_set():
                    opened.set()
                elif not close.is_set():
                    self.ended = _describe(exc)
                if not isinstance(exc, Exception):
                    raise
            finally:
                if opened.is_set() and not close.is_set():
                    if self.ended is None:
                        self.ended = "its context ended"
                    self.notify({"ended": f"the client ended: {self.ended}"})
                self.session = None
                closed.set()

        self.tg.start_soon(hold)
        await opened.wait()
        if failure:
            raise failure[0]

    async def _watch(self, session: Session, close: anyio.Event) -> None:
        """Tell the harness when the row's client can no longer reach its server (a
        session's optional ``cut_off``): it stops waiting for that client to listen."""
        cut_off = getattr(session, "cut_off", None)
        if cut_off is not None:
            why = await cut_off()
            if not close.is_set():
                self.notify({"ended": str(why)})

    async def close(self) -> None:
        if self._close is None or self._closed is None:
            return
        self._close.set()
        await self._closed.wait()
        self._close = self._closed = None


class ProtocolError(Exception):
    """A request the driver cannot take (unknown op, no open row)."""


async def _answer(rows: _Rows, driver: Driver, message: dict[str, Any]) -> dict[str, Any]:
    op = message.get("op")
    if op == "hello":
        return {"protocol": PROTOCOL_VERSION, **driver.hello()}
    if op == "open":
        await rows.open(message)
        return {"ok": True}
    if op == "close":
        await rows.close()
        return {"ok": True}
    session = rows.session
    if session is None and rows.ended is not None:
        # The client died mid-row: it hands nothing any more (what an app would see).
        if op in ("read", "status", "list", "catalog"):
            return {"error": f"the client ended: {rows.ended}"}
        return {"ok": True}
    if session is None:
        raise ProtocolError(f"{op!r} needs an open row")
    if op == "read":
        return await session.read(message["uri"], message.get("timeout"), message.get("principal"))
    if op == "list":
        return await session.list_resources()
    if op == "select":
        await session.select(list(message["uris"]))
        return {"ok": True}
    optional = ("status", "look", "advance", "inspect", "catalog")
    extra = getattr(session, op, None) if op in optional else None
    if extra is None:
        raise ProtocolError(f"unknown or unsupported op {op!r}")
    answer: dict[str, Any] = await extra(message)
    return answer


def _describe(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return f"{type(exc).__name__}: {exc}"


async def _lines(stdin: BinaryIO) -> AsyncIterator[bytes]:
    while line := await anyio.to_thread.run_sync(stdin.readline):
        yield line


async def serve(driver: Driver) -> None:
    """Answer requests on stdin until it closes (the protocol's main loop)."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing but answers may reach the harness's pipe
    lock = anyio.Lock()

    async def reply(message: dict[str, Any]) -> None:
        request_id = message.get("id")
        try:
            answer = await _answer(rows, driver, message)
        except ProtocolError as exc:
            answer = {"protocol_error": str(exc)}
        except Exception as exc:  # the driver's own failure is reported, not fatal
            traceback.print_exc(file=sys.stderr)
            answer = {"protocol_error": f"{type(exc).__name__}: {exc}"}
        async with lock:
            out.write(json.dumps({"id": request_id, **answer}).encode() + b"\n")
            out.flush()

    def notify(notice: dict[str, Any]) -> None:
        """A line without an id: news about the open row, not an answer (no await
        between write and flush, so it never splits another line)."""
        out.write(json.dumps(notice).encode() + b"\n")
        out.flush()

    async with anyio.create_task_group() as tg:
        rows = _Rows(driver, tg, notify)
        async for line in _lines(sys.stdin.buffer):
            if line.strip():
                tg.start_soon(reply, json.loads(line))
        await rows.close()
        tg.cancel_scope.cancel()


def run(driver: Driver) -> None:
    """The entry point of a driver module: ``python -m ...drivers.NAME``."""
    with suppress(KeyboardInterrupt):
        anyio.run(serve, driver)
