"""Worlds whose client is any MCP client, driven over the driver protocol
(docs/driver-protocol.md): the runner, the steps and the judging are the wire worlds'.

The reference server is the one the wire worlds steer: `ReferenceHttpServer` on
loopback (`ClientHttpWorld`) or the stdio fault server (`ClientStdioWorld`), whose
command the client under test runs itself, each on 2026-07-28 or, for a client whose
driver names it, 2025-11-25. The client lives in a driver subprocess
(`DriverProcess`); each row opens one fresh client there and closes it after.

Settling is the one thing a black box makes hard: the harness cannot see what the
client has taken in. It waits until the server side is quiet (nothing queued, the
selection listened for if the client listens), then asks the driver (``look``) when
the driver can say; otherwise it waits until the server has seen nothing new for
`quiet` seconds, the protocol's one timing assumption.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from freshcache import Catalog, ListResult, ReadResult, ResourceInfo
from freshcache.testing import ReferenceServer

from ._driver import DriverError, DriverProcess, Hello
from ._format import Case
from ._http_server import ReferenceHttpServer
from ._http_world import act_on_http_server, revision_of
from ._runner import (
    DEADLINE_ROW_SECONDS,
    Said,
    Setup,
    VirtualClock,
    World,
    fleet_unplayable,
    load_factor,
    unplayable_on_2025,
)
from ._settle import wait_for
from ._steering import apply_to_reference, configure_reference
from ._steps import (
    Given,
    NextRead,
    Notify,
    Observe,
    ServerChange,
    ServerSets,
    TimePasses,
    catalog_kind,
    catalog_version_of,
    text_for,
)

ServerStep = ServerSets | Notify | NextRead | ServerChange

_INSPECTED = ("stream", "untrusted", "tracked_uris_at_most")

CLOSE_WAIT = 10.0
"""Seconds a row's close may take before its driver counts as hung."""

READ_SECONDS = 2.0
"""How long a read may wait (the ``read`` hint) before `load_factor` stretches it; on
stdio more (`ClientStdioWorld.read_timeout`): a read there may wait for a new process."""


def client_unplayable(case: Case, hello: Hello, transport: str) -> str | None:
    """Why ``case`` cannot be driven through the client ``hello`` describes (``None``:
    it can). Each reason names what the row needs and the client did not offer."""
    if transport not in hello.transports:
        return f"the client has no {transport} transport"
    if (fleet := fleet_unplayable(case, fleet_world=False)) is not None:
        return fleet
    for step in case.row.steps:
        match step:
            case Observe(how="status") if "status" not in hello.ops:
                return "the row looks without I/O (status); the client offers no such look"
            case Observe(how="catalog") if "catalog" not in hello.ops:
                return "the row asks for a catalog (tools, prompts, templates); no catalog op"
            case Observe(how="catalog_status"):
                return "the row looks at a catalog without I/O (freshcache's catalog_status)"
            case Observe(how="mutate_catalog"):
                return "the row mutates what the client handed out, inside the client's process"
            case Observe(how="context"):
                return "the row reads an agent step's snapshot (freshcache's context())"
            case Observe(how="call_tool"):
                return "the row calls a tool (freshcache's call_tool); drivers have no tool-call op"
            case Observe(principal=who) if who is not None and not hello.principals:
                return f"the row reads as principal {who}; the client serves one principal"
            case TimePasses() if "advance" not in hello.ops:
                return "the row moves the clock; the client's clock cannot be moved (advance)"
            case Given(what="principal") if not hello.principals:
                return "the row names a principal; the client serves one unnamed principal"
            case Given(what="store_entries") if not hello.store_entries:
                return "the row bounds the store; the client's store has no bound to set"
            case ServerChange(what="fall_silent"):
                return "the harness cannot see a client's keep-alive counters"
            case Given(what="later_pages_delay"):
                return "the row moves the client's clock while a walk waits on a page"
            case NextRead(fault="local_copy") if transport == "stdio":
                return "a local copy on stdio is a read function inside the client"
            case _:
                pass
    needed = _policies(case)
    if missing := needed - hello.policies:
        return f"the row sets policy {', '.join(sorted(missing))}; the client has no such setting"
    for expect in case.row.expect:
        if expect.what == "stream" and expect.word == "live" and hello.listens:
            continue  # seen from the server: a listen open for the selection
        if expect.what == "remediation":
            return "the row checks a denial's remediation; the driver protocol carries none"
        if expect.what in _INSPECTED and "inspect" not in hello.ops:
            return f"the row checks the client's {expect.what.replace('_', ' ')}; it reports none"
    return None


def _policies(case: Case) -> set[str]:
    setup = Setup.from_givens([s for s in case.row.steps if isinstance(s, Given)])
    return set(setup.policy)


class _Inspected:
    """The client's own view, as ``inspect`` last reported it (for `check`)."""

    def __init__(self) -> None:
        self.stream_status = "unknown"
        self.engine = self
        self.counters = self
        self.untrusted_messages = 0
        self.tracked_uris = 0


class ClientWorld(World):
    """What the client worlds share: the driver, one row's open client, the requests."""

    transport = "http"
    quiet = 0.15
    """Seconds without anything new at the server that count as settled, for a driver
    that cannot say itself (no ``look``)."""

    def __init__(
        self, driver: DriverProcess, hello: Hello, *, revision: str = "2026-07-28"
    ) -> None:
        self.driver = driver
        self.hello = hello
        self.revision = revision
        wire = self.transport if revision == "2026-07-28" else f"{self.transport}-2025"
        self.name = f"{wire}:{hello.client.split()[0]}"
        self.clock = VirtualClock()
        self.settle_limit = 5.0
        self.principal: str | None = None
        self.selected: tuple[str, ...] = ()
        self.inspected = _Inspected()
        self._opened = False
        self._last_seen: object = None
        self._last_change = 0.0

    def unplayable(self, case: Case) -> str | None:
        if self.revision not in self.hello.revisions:
            return f"the client's driver names no MCP {self.revision} among its revisions"
        reason = client_unplayable(case, self.hello, self.transport)
        if reason is None and self.transport == "stdio":
            from ._stdio_world import one_authorization_context

            reason = one_authorization_context(case)
        if reason is None and self.revision != "2026-07-28":
            return unplayable_on_2025(case)
        return reason

    def read_timeout(self) -> float:
        return READ_SECONDS * load_factor()

    async def open_client(self, setup: Setup, **where: Any) -> None:
        """Open the row's client in the driver and reach the seed situation."""
        self.principal = setup.principal
        self.selected = tuple(setup.selected)
        policy = dict(setup.policy)
        await self.driver.request(
            "open",
            wait=60.0,
            select=list(setup.selected),
            principal=setup.principal,
            policy=policy,
            store_entries=setup.store_entries,
            timeouts=self.timeouts(setup),
            **where,
        )
        self._opened = True
        await self.reach_seed_situation(setup)

    def timeouts(self, setup: Setup) -> dict[str, float]:
        """Hints for the client: how long a read may wait, and when a silent request
        counts as timed out (the rows' *times out* are requests never answered; a
        deadline row gets a short idle deadline, `DEADLINE_ROW_SECONDS`, and the
        read hint of HTTP on stdio too: it restarts no server process, and a client
        with one timeout sits out this one on each read the row times out)."""
        idle = DEADLINE_ROW_SECONDS if setup.deadline_row else 3.0 * load_factor()
        request = 0.5 if setup.deadline_row else 0.5 * load_factor()
        read = READ_SECONDS * load_factor() if setup.deadline_row else self.read_timeout()
        return {"read": read, "request": request, "idle": idle}

    async def close_client(self) -> None:
        """Close the row's client, even when the row ran out of time (shielded, bounded);
        a close that does not finish leaves `row_open` set: the driver must be restarted."""
        if self._opened:
            with contextlib.suppress(DriverError), anyio.move_on_after(CLOSE_WAIT, shield=True):
                await self.driver.request("close", wait=CLOSE_WAIT)
                self._opened = False

    @property
    def row_open(self) -> bool:
        """Whether the driver may still hold this row's client (its close did not finish)."""
        return self._opened

    # ------------------------------------------------------------------ observing

    async def read(
        self,
        uri: str,
        *,
        principal: str | None = None,
        timeout: float | None = None,
        worker: int | None = None,
    ) -> ReadResult | Said:
        before = await self.reads_now()
        answer = await self.driver.request(
            "read", wait=60.0, uri=uri, principal=principal, timeout=timeout
        )
        return self._said(uri, answer, await self.reads_now() > before)

    async def status(
        self, uri: str, *, principal: str | None = None, worker: int | None = None
    ) -> ReadResult | Said:
        answer = await self.driver.request("status", uri=uri, principal=principal)
        return self._said(uri, answer, False)

    async def reads_now(self) -> int:
        """Reads the server has answered, counted now (`server_reads` may lag)."""
        return self.server_reads()

    def _said(self, uri: str, answer: dict[str, Any], seen: bool) -> ReadResult | Said:
        """The answer as an observation; ``seen``: the harness saw the server answer a
        read during the call (used when the driver does not say)."""
        server_read = answer.get("server_read")
        if server_read is None:
            server_read = seen
        if answer.get("state") is not None:
            return ReadResult(
                answer["state"],
                uri,
                reason=answer.get("reason"),
                text=answer.get("text"),
                server_read=bool(server_read),
                detail=answer.get("detail"),
            )
        text = answer.get("text")
        error = answer.get("error")
        if text is None and error is None:
            error = "neither text nor an error"
        return Said(uri, text if error is None else None, error, bool(server_read))

    async def lists_now(self) -> int:
        """List pages the server has been asked for, counted now."""
        raise NotImplementedError

    async def list_resources(self, *, worker: int | None = None) -> ListResult:
        # A list's server read is a list page asked for, not a resources/read.
        before = await self.lists_now()
        answer = await self.driver.request("list", wait=60.0)
        seen = await self.lists_now() > before
        resources = tuple(ResourceInfo(uri) for uri in answer.get("uris", ()))
        state = answer.get("state")
        if state is None:
            state = "withheld" if "error" in answer else "cited"
        server_read = answer.get("server_read")
        return ListResult(
            state,
            resources,
            reason=answer.get("reason"),
            server_read=bool(seen if server_read is None else server_read),
            detail=answer.get("error"),
        )

    async def catalog_lists_now(self) -> int:
        """Catalog pages the server has been asked for, counted now."""
        raise NotImplementedError

    async def catalog(
        self, kind: str, *, principal: str | None = None, worker: int | None = None
    ) -> Catalog | Said:
        """A catalog as the client hands it over: its items' names with a state, or (a
        client without states) the names it would offer as current, or an error."""
        before = await self.catalog_lists_now()
        answer = await self.driver.request("catalog", wait=60.0, kind=kind, principal=principal)
        seen = await self.catalog_lists_now() > before
        server_read = answer.get("server_read")
        server_read = bool(seen if server_read is None else server_read)
        names = tuple(str(n) for n in answer.get("names", ()))
        if answer.get("state") is not None:
            return Catalog(
                catalog_kind(kind),
                answer["state"],
                answer.get("reason"),
                items=tuple({"name": name} for name in names),
                server_read=server_read,
                detail=answer.get("error"),
            )
        error = answer.get("error")
        if error is None and "names" not in answer:
            error = "neither names nor an error"
        label = catalog_version_of(names) or "(unversioned)"
        text = None if error is not None else text_for(kind, label)
        return Said(kind, text, error, server_read)

    async def select(self, uris: Sequence[str]) -> None:
        self.selected = tuple(uris)
        await self.driver.request("select", uris=list(uris))

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.driver.request("advance", seconds=seconds)

    def observed(self) -> _Inspected:
        return self.inspected

    # ------------------------------------------------------------------ settling

    async def settle(self) -> None:
        await super().settle()
        if "inspect" not in self.hello.ops:
            listening = self.server_listening()
            self.inspected.stream_status = "live" if listening else "not listening (at the server)"
        elif self._opened:
            view = await self.driver.request("inspect")
            self.inspected.stream_status = str(view.get("stream", "unknown"))
            self.inspected.untrusted_messages = int(view.get("untrusted_messages", 0))
            self.inspected.tracked_uris = int(view.get("tracked_uris", 0))

    async def _look(self) -> str | None:
        busy = self.server_busy()
        if busy is not None and self.driver.client_ended is None:
            # A client the driver says can no longer reach its server takes nothing
            # more in and opens no listen: the server side is not waited for.
            return busy
        if "look" in self.hello.ops:
            answer = await self.driver.request("look", server=self.server_view())
            busy = answer.get("busy")
            return None if busy is None else str(busy)
        seen = self.server_signature()
        now = time.monotonic()
        if seen != self._last_seen:
            self._last_seen, self._last_change = seen, now
        if now - self._last_change < self.quiet * load_factor():
            return "the server saw something new a moment ago"
        return None

    def server_busy(self) -> str | None:
        """What the server side has not finished (``None``: nothing)."""
        raise NotImplementedError

    def server_view(self) -> dict[str, Any]:
        """What the server did, for a driver's ``look``."""
        raise NotImplementedError

    def server_listening(self) -> bool:
        """Whether the server has a listen open for the current selection."""
        raise NotImplementedError

    def server_signature(self) -> object:
        """A value that changes whenever the server sees or sends something."""
        raise NotImplementedError

    def _wants_listen(self, server: ReferenceServer) -> bool:
        return bool(
            self.hello.listens and server.listen_supported and not server.down and self.selected
        )


class ClientHttpWorld(ClientWorld):
    """The client under test reaches `ReferenceHttpServer` on loopback by its URL."""

    transport = "http"

    def __init__(
        self, driver: DriverProcess, hello: Hello, *, revision: str = "2026-07-28"
    ) -> None:
        super().__init__(driver, hello, revision=revision)
        self.server = ReferenceServer()
        self.http: ReferenceHttpServer
        self._stack = AsyncExitStack()

    async def start(self, setup: Setup) -> None:
        configure_reference(self.server, setup)
        self.http = await self._stack.enter_async_context(
            ReferenceHttpServer(
                self.server, keepalive_interval=0.1, revision=revision_of(self.revision)
            )
        )
        try:
            await self.open_client(setup, transport="http", url=self.http.url)
        except BaseException:
            # `stop` is not called for a world that did not start: the server's task
            # group must be left here, in the task that entered it.
            await self._stack.aclose()
            raise

    async def stop(self) -> None:
        self.server.release_reads()
        try:
            await self.close_client()
        finally:
            await self._stack.aclose()

    async def act(self, step: ServerStep) -> None:
        await act_on_http_server(self.http, step, self.principal)

    def server_reads(self) -> int:
        return self.server.reads

    async def lists_now(self) -> int:
        return self.server.lists

    async def catalog_lists_now(self) -> int:
        return sum(self.server.catalogs.lists.values())

    def server_busy(self) -> str | None:
        server = self.server
        for sid, sub in server.subscribers.items():
            if queued := sub.send.statistics().current_buffer_used:
                return f"stream {sid}: {queued} frames queued at the server"
        if self._wants_listen(server) and not server.listens_for(frozenset(self.selected)):
            return "no listen for the current selection is open yet"
        return None

    def server_listening(self) -> bool:
        return self.server.listens_for(frozenset(self.selected))

    def server_view(self) -> dict[str, Any]:
        server = self.server
        return {
            "reads_held": server.reads_in_flight,
            "frames_written": {str(k): v for k, v in self.http.frames_written.items()},
            "channel_frames_written": self.http.channel_frames_written,
            "acks_held": server.acks_held,
            "wants_stream": server.listen_supported and not server.down and not server.acks_held,
        }

    def server_signature(self) -> object:
        server = self.server
        http = self.http
        frames = sum(http.frames_written.values()) + http.channel_frames_written
        return (server.reads, frames, len(server.subscribers))


class ClientStdioWorld(ClientWorld):
    """The client under test runs the stdio fault server itself, from the command the
    harness gives it; the harness steers that server through its control port."""

    transport = "stdio"

    def __init__(
        self,
        driver: DriverProcess,
        hello: Hello,
        *,
        python: str = sys.executable,
        revision: str = "2026-07-28",
    ) -> None:
        super().__init__(driver, hello, revision=revision)
        self.python = python
        # A process restart takes seconds on a loaded machine; a client that never
        # restarts its server is not waited for as long.
        self.settle_limit = 15.0 if "look" in hello.ops else 5.0
        self.down = False
        self.listen_supported = True
        self._dir: Path | None = None
        self._control: Any = None
        self._state: dict[str, Any] | None = None
        self._reads = 0
        self._lists = 0
        self._catalog_lists = 0
        self._control_lock = anyio.Lock()  # a background read asks for the state too
        self._gone: set[int] = set()
        """Server processes that exited (a driver's ``look`` waits until its client saw it)."""

    def read_timeout(self) -> float:
        return 5.0 * load_factor()

    async def _command(
        self, pid: int | None, payload: dict[str, Any], timeout: float = 5.0
    ) -> dict[str, Any] | None:
        async with self._control_lock:
            reply: dict[str, Any] | None = await self._control.command(
                pid, payload, timeout=timeout
            )
            return reply

    @property
    def _files(self) -> tuple[Path, Path]:
        assert self._dir is not None
        return self._dir / "state.json", self._dir / "control.json"

    async def start(self, setup: Setup) -> None:
        from ._stdio_server import save_state
        from ._stdio_world import SERVER_MODULE, ControlChannel

        self._dir = Path(tempfile.mkdtemp(prefix="freshcache-client-stdio-"))
        state_file, control_file = self._files
        self._control = ControlChannel(control_file)
        self.listen_supported = setup.listen
        reference = ReferenceServer()
        configure_reference(reference, setup)
        save_state(state_file, reference)
        command = [
            self.python,
            "-m",
            SERVER_MODULE,
            "--state",
            str(state_file),
            "--control-file",
            str(control_file),
            "--revision",
            self.revision,
        ]
        try:
            await self.open_client(setup, transport="stdio", command=command)
        except BaseException:
            await self.stop()  # not called for a world that did not start
            raise

    async def stop(self) -> None:
        import shutil

        try:
            await self.close_client()
        finally:
            if self._control is not None:
                await self._control.aclose()
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)

    def _pid(self) -> int | None:
        """The server process the client runs now (it announces itself in the control file)."""
        import json

        try:
            pid = int(json.loads(self._files[1].read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None
        return pid if _alive(pid) else None

    async def act(self, step: ServerStep) -> None:
        from ._stdio_server import load_state, save_state, step_to_json

        match step:
            case ServerChange(what="deny" | "allow", principal=who) if who not in (
                None,
                self.principal,
            ):
                return  # one authorization context per process: another cannot be denied
            case ServerChange(what="deny" | "allow", uri=uri):
                step = ServerChange(step.what, uri, None)
            case _:
                pass
        pid = None if self.down else self._pid()
        if pid is None:
            # No server process runs (down, or the client never restarted it): the step
            # changes what the next process loads.
            reference = load_state(self._files[0])
            match step:
                case ServerChange(what="up"):
                    reference.down = False
                    self.down = False
                case ServerChange(what="down"):
                    reference.down = True
                    self.down = True
                case ServerChange(what="drop_stream" | "close_stream" | "expire_session"):
                    pass
                case _:
                    apply_to_reference(reference, step, None)
            save_state(self._files[0], reference)
            return
        ends: tuple[str, ...] = ("down", "drop_stream")
        if self.revision != "2026-07-28":
            ends = (*ends, "close_stream", "expire_session")  # the session is the process
        dies = isinstance(step, ServerChange) and step.what in ends
        await self._command(pid, {"op": "step", "step": step_to_json(step), "principal": None})
        if step == ServerChange("down"):
            self.down = True
        if dies:
            self._gone.add(pid)
            await wait_for(
                lambda: not _alive(pid), limit=self.settle_limit, what=f"pid {pid} to go"
            )

    async def _server_state(self) -> dict[str, Any] | None:
        if self.down or self._control is None:
            return None
        return await self._command(self._pid(), {"op": "state"}, timeout=2.0)

    async def _look(self) -> str | None:
        self._state = await self._server_state()
        if self._state is not None:
            self._reads = int(self._state["reads"])
        return await super()._look()

    def server_reads(self) -> int:
        return self._reads

    async def reads_now(self) -> int:
        state = await self._server_state()
        if state is not None:
            self._reads = int(state["reads"])
        return self._reads

    async def lists_now(self) -> int:
        state = await self._server_state()
        if state is not None:
            self._lists = int(state["lists"])
        return self._lists

    async def catalog_lists_now(self) -> int:
        state = await self._server_state()
        if state is not None:
            self._catalog_lists = int(state["catalog_lists"])
        return self._catalog_lists

    def server_busy(self) -> str | None:
        state = self._state
        if self.down:
            return None
        if state is None:
            return "the server process (re)starting" if self.hello.listens else None
        if state["pending_out"]:
            return f"{state['pending_out']} messages queued in the server"
        if state.get("acks_held"):
            return None
        if (
            self.hello.listens
            and self.listen_supported
            and self.selected
            and sorted(self.selected) not in state["listens"]
        ):
            return "a listen for the current selection"
        return None

    def server_listening(self) -> bool:
        state = self._state
        return state is not None and sorted(self.selected) in state["listens"]

    def server_view(self) -> dict[str, Any]:
        state = self._state
        gone = sorted(self._gone)
        if state is None:
            return {"reads_held": 0, "wants_stream": False, "gone_pids": gone, "down": self.down}
        return {
            "gone_pids": gone,
            "reads_held": int(state["reads_in_flight"]),
            "pid": state["pid"],
            "lines_written": state["lines_written"],
            "acks_held": bool(state.get("acks_held")),
            "wants_stream": self.listen_supported and not state.get("acks_held"),
        }

    def server_signature(self) -> object:
        state = self._state or {}
        return (state.get("pid"), state.get("reads"), state.get("lines_written"))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


__all__ = ["ClientHttpWorld", "ClientStdioWorld", "ClientWorld", "client_unplayable"]
