"""`StdioWorld`: acceptance rows played over a real stdio subprocess.

The cache talks to ``python -m freshcache.acceptance._stdio_server`` through a
`StdioSource`; the world steers that server through its loopback control port and a
state file (see the server's docstring). How the table's words map to stdio:

- *stream drops*: the server process dies in the middle of writing a line (stdio has
  no way to break one subscription and keep the channel). The source restarts it;
  the cache re-listens and re-reads, exactly as after a dropped HTTP stream.
- *server goes down*: the process dies the same way, and every process started
  until *server comes back* exits at once (the state file says ``down``): the
  command no longer starts. Server-side steps while it is down edit the state file,
  which the next process loads.
- *reads of X return local copy*: a local copy is something a user's read function
  hands back instead of asking the server; the wire cannot carry it. The world puts
  such a function (`LocalCopyLoader`) between the cache and the source.
- principals: a stdio process serves one authorization context, so the server sees
  every read as the cache's own principal; denying *another* principal cannot be
  expressed on stdio and is not sent (those rows only check the client side).

``settle`` waits, within a deadline, until the server has nothing queued, every line
it wrote has been read and routed, the cache has no server read in flight or queued beyond
those the server holds, and the stream is live when it can be.
"""

from __future__ import annotations

import abc
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.buffered import BufferedByteReceiveStream

from freshcache import (
    BackoffSettings,
    Partition,
    ReadReply,
    RequestFailed,
    ResourceContents,
    SourceWrapper,
    StdioSource,
)
from freshcache.testing import ReferenceServer

from ._format import Case
from ._runner import Setup, VirtualClock, World, load_factor, unplayable_on_2025
from ._settle import wait_for
from ._stdio_server import load_state, save_state, step_to_json
from ._steering import apply_to_reference, configure_reference
from ._steps import NextRead, Notify, ServerChange, ServerSets

ServerStep = ServerSets | Notify | NextRead | ServerChange


def one_authorization_context(case: Case) -> str | None:
    """Why ``case`` cannot be played over stdio, a driver's too (``None``: it can): it
    denies another principal than the one the process serves and checks the denial."""
    others = {
        step.principal
        for step in case.row.steps
        if isinstance(step, ServerChange)
        and step.what in ("deny", "allow")
        and step.principal is not None
    }
    lifted = any(isinstance(s, ServerChange) and s.what == "allow" for s in case.row.steps)
    if others and (lifted or any(e.state == "denied" for e in case.row.expect)):
        return (
            f"a stdio process has one authorization context: {', '.join(sorted(others))} "
            "cannot be denied while another principal is served"
        )
    return None


class StdioStats(Protocol):
    """What a world reads of `StdioSource.stats()`."""

    @property
    def pid(self) -> int | None: ...

    @property
    def lines_from_current(self) -> int: ...


SERVER_MODULE = "freshcache.acceptance._stdio_server"


class LocalCopyLoader(SourceWrapper):
    """A user's read function over a source, as the tables' *local copy* steps need it.

    Normally it reads from the server and remembers what it got; when told to, it
    hands back that remembered copy instead (``from_server=False``), which the cache
    must never take for a server read (invariant 1, seed case 3).
    """

    def __init__(self, source: StdioSource) -> None:
        super().__init__(source)
        self.once: dict[str, int] = {}
        self.always: set[str] = set()
        self.copies: dict[str, tuple[ResourceContents, ...]] = {}

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        if self.once.get(uri) or uri in self.always:
            if self.once.get(uri):
                self.once[uri] -= 1
            await anyio.lowlevel.checkpoint()
            copy = self.copies.get(uri) or (ResourceContents(uri, text="", mime_type="text/plain"),)
            return ReadReply(copy, from_server=False)
        reply = await self.inner.read_resource(uri, principal)
        if isinstance(reply, ReadReply):
            self.copies[uri] = reply.contents
        return reply


class ControlChannel:
    """Commands to the fault server's control port (one connection per process)."""

    def __init__(self, control_file: Path) -> None:
        self.control_file = control_file
        self._pid: int | None = None
        self._stream: anyio.abc.SocketStream | None = None
        self._buffered: BufferedByteReceiveStream | None = None

    async def command(
        self, pid: int | None, payload: dict[str, Any], *, timeout: float = 5.0
    ) -> dict[str, Any] | None:
        """Send ``payload`` to process ``pid``; ``None`` when that process cannot be reached."""
        if pid is None:
            return None
        try:
            with anyio.fail_after(timeout):
                if self._pid != pid or self._stream is None:
                    await self.aclose()
                    try:
                        info = json.loads(self.control_file.read_text())
                    except (OSError, ValueError):
                        return None
                    if info.get("pid") != pid:
                        return None  # that process has not announced its port yet
                    self._stream = await anyio.connect_tcp("127.0.0.1", int(info["port"]))
                    self._buffered = BufferedByteReceiveStream(self._stream)
                    self._pid = pid
                assert self._buffered is not None
                await self._stream.send(json.dumps(payload).encode("utf-8") + b"\n")
                line = await self._buffered.receive_until(b"\n", 1 << 26)
        except (
            OSError,
            TimeoutError,
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
        ):
            await self.aclose()
            return None
        reply: dict[str, Any] = json.loads(line)
        if not reply.get("ok", False):
            raise RuntimeError(f"the stdio fault server refused {payload!r}: {reply.get('error')}")
        return reply

    async def aclose(self) -> None:
        stream, self._stream, self._buffered, self._pid = self._stream, None, None, None
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()


class StdioProcessWorld(World):
    """What every stdio world shares, whichever server process it runs: the temporary
    directory, warm-up, *local copy* steps, waiting for a process to go, and ``settle``.

    A subclass says how the server is launched (`_launch`) and steered (`act`), what
    its state looks like (`_server_state`, `_server_busy`, `_held_reads`) and how reads
    are counted (`_note_reads`).
    """

    temp_prefix = "freshcache-stdio-"
    settle_pause = 0.003
    """Seconds between two looks while `settle` waits."""

    def __init__(self, *, request_timeout: float, read_timeout: float, settle_limit: float) -> None:
        self.clock = VirtualClock()
        self.request_timeout = request_timeout
        self.timeout_now = request_timeout
        """The row's request deadline: `request_timeout`, stretched by the load
        (`load_factor`) unless the row times a request out on purpose."""
        self.read_timeout = read_timeout * load_factor()
        self.settle_limit = settle_limit
        self.principal: str | None = None
        self.listen_supported = True
        self.down = False
        self.settle_timeouts = 0
        """How often `settle` gave up waiting (tests assert none)."""
        self.last_busy: str | None = None
        """What `settle` was still waiting for when it last gave up."""
        self._reads = 0
        self._dir: Path | None = None
        self.source: StdioSource
        self.loader: LocalCopyLoader

    def unplayable(self, case: Case) -> str | None:
        if any(step == ServerChange("fall_silent") for step in case.row.steps):
            return (
                "stdio has no keep-alives (SSE comment lines are HTTP's); a mute process is "
                "noticed when it exits"
            )
        legacy = getattr(self, "revision", "2026-07-28") != "2026-07-28"
        if legacy and any(step == ServerChange("hold_unsubscribes") for step in case.row.steps):
            return (
                "the stdio world settles once the process has answered every request: a "
                "held unsubscribe never lets it (the ledger's rule is the same code as on "
                "HTTP; tests/test_one_judge.py plays it over stdio)"
            )
        return one_authorization_context(case)

    # ------------------------------------------------------------------ life

    @property
    def state_file(self) -> Path:
        assert self._dir is not None
        return self._dir / "state.json"

    async def start(self, setup: Setup) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix=self.temp_prefix))
        self.principal = setup.principal
        self.listen_supported = setup.listen
        self.timeout_now = self.request_timeout * (1.0 if setup.deadline_row else load_factor())
        self.source = self._launch(setup)
        await self._warm_up()
        self.loader = LocalCopyLoader(self.source)
        self.cache = self.make_cache(
            self.loader, setup, read_timeout=self.read_timeout, ack_timeout=self.read_timeout
        )
        await self.cache.__aenter__()
        await self.reach_seed_situation(setup)

    @abc.abstractmethod
    def _launch(self, setup: Setup) -> StdioSource:
        """Write the row's starting state to `state_file`; the source that runs the server."""

    def _stdio_source(self, command: list[str], **options: Any) -> StdioSource:
        """A source over ``command`` that restarts a dead server at once."""
        return StdioSource(
            command,
            timeout=self.timeout_now,
            restart=BackoffSettings(base=0.05, cap=0.2, quick_death=0.0, max_per_hour=1_000_000),
            **options,
        )

    async def _warm_up(self) -> None:
        """Start the server before the cache: request timeouts then measure the server,
        not the interpreter starting up."""
        with anyio.fail_after(self.settle_limit * 2):
            while not (await self.source.start()).reachable:  # noqa: ASYNC110 - a retry
                await anyio.sleep(0.05)

    async def stop(self) -> None:
        try:
            await self.cache.__aexit__(None, None, None)
        finally:
            await self._close_control()
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)

    async def _close_control(self) -> None:
        """Close whatever steers the server besides the source (nothing by default)."""

    # ------------------------------------------------------------------ steps

    def _play_client_side(self, step: ServerStep) -> ServerStep | None:
        """Play the part of ``step`` that stdio leaves to the client: *local copy*
        reads, and a principal other than the cache's (one authorization context per
        process). The step left for the server, or ``None`` when nothing is left."""
        match step:
            case NextRead(uri=uri, fault="local_copy", sticky=sticky):
                if sticky:
                    self.loader.always.add(uri)
                else:
                    self.loader.once[uri] = self.loader.once.get(uri, 0) + 1
                return None
            case NextRead(uri=uri, fault=None):
                self.loader.always.discard(uri)
                self.loader.once.pop(uri, None)
            case ServerChange(what="deny" | "allow", principal=who) if who not in (
                None,
                self.principal,
            ):
                return None  # another principal cannot be denied
            case ServerChange(what="deny" | "allow", uri=uri, principal=_):
                return ServerChange(step.what, uri, None)
            case _:
                pass
        return step

    async def _wait_until_gone(self, pid: int | None) -> None:
        """Wait until the source has seen process ``pid`` go: only then is the loss on its
        way to the cache, and the state file ours to edit."""
        source = self.source
        await wait_for(
            lambda: source.pid != pid, limit=self.settle_limit, pause=0.005, what=f"pid {pid} to go"
        )

    # ------------------------------------------------------------------ settling

    settle_turns = 10

    async def settle(self) -> None:
        await super().settle()
        await self._note_reads()

    async def _look(self) -> str | None:
        """What the world still waits for (``None``: settled)."""
        return self._busy(await self._server_state())

    def _busy(self, state: dict[str, Any] | None) -> str | None:
        """What the world still waits for (``None``: settled)."""
        cache = self.cache
        stats = self.source.stats()
        if cache.relisting:
            return "a re-list"
        if stats.backlog:
            return f"{stats.backlog} messages not yet taken by the cache"
        held = self._held_reads(state) if state is not None else 0
        if (due := cache.pending_reads + cache.queued_reads) > held:
            return f"{due} server reads in flight or queued ({held} held by the server)"
        if self.down:
            return None
        if (busy := self._server_busy(state, stats)) is not None:
            return busy
        listening = self.listen_supported and cache.stream_status not in ("unsupported", "disabled")
        acks_held = state is not None and bool(state.get("acks_held"))
        listens = None if state is None else state.get("listens")  # SDK servers do not say
        if listens is not None and cache.selected and (listening or acks_held):
            # The server answers the control port and stdin in either order: after a
            # new selection the old stream is still live until the server has read the
            # new listen. Settled only once the server holds a listen for it.
            if sorted(cache.selected) not in listens:
                return "a listen for the current selection"
            if acks_held:
                return None  # acks held: an open listen is all there is to wait for
        if listening and cache.selected and cache.stream_status != "live":
            return f"the stream ({cache.stream_status})"
        return None

    @abc.abstractmethod
    async def _server_state(self) -> dict[str, Any] | None:
        """The running server's state (``None`` while it is down or cannot answer)."""

    @abc.abstractmethod
    def _held_reads(self, state: dict[str, Any]) -> int:
        """Reads the server holds, from its state."""

    @abc.abstractmethod
    def _server_busy(self, state: dict[str, Any] | None, stats: StdioStats) -> str | None:
        """What the running server has not yet delivered (``None``: nothing)."""

    @abc.abstractmethod
    async def _note_reads(self) -> None:
        """Update the count `server_reads` returns, once a `settle` is over."""

    def server_reads(self) -> int:
        return self._reads


class StdioWorld(StdioProcessWorld):
    """Acceptance rows over ``python -m freshcache.acceptance._stdio_server`` (see module doc).

    With ``revision="2025-11-25"`` (the ``stdio-2025`` wire) the process speaks only that
    revision: the cache initializes it, subscribes per URI, and a restarted process is
    initialized and subscribed again; *stream closes* and *session expires* end the
    process cleanly (its one session is over).
    """

    name = "stdio"

    def __init__(
        self,
        *,
        request_timeout: float = 0.5,
        read_timeout: float = 5.0,
        settle_limit: float = 15.0,
        python: str = sys.executable,
        revision: str = "2026-07-28",
    ) -> None:
        super().__init__(
            request_timeout=request_timeout, read_timeout=read_timeout, settle_limit=settle_limit
        )
        self.python = python
        if revision != "2026-07-28":
            self.name = "stdio-2025"
            self.revision = revision
        self._control: ControlChannel | None = None

    # ------------------------------------------------------------------ life

    def _launch(self, setup: Setup) -> StdioSource:
        control_file = self.state_file.parent / "control.json"
        self._control = ControlChannel(control_file)
        reference = ReferenceServer()
        configure_reference(reference, setup)
        save_state(self.state_file, reference)
        return self._stdio_source(
            [
                self.python,
                "-m",
                SERVER_MODULE,
                "--state",
                str(self.state_file),
                "--control-file",
                str(control_file),
                "--revision",
                self.revision,
            ],
            shutdown_timeout=2.0,
            name="freshcache stdio fault server",
        )

    def unplayable(self, case: Case) -> str | None:
        reason = super().unplayable(case)
        if reason is None and self.revision != "2026-07-28":
            return unplayable_on_2025(case)
        return reason

    async def _close_control(self) -> None:
        if self._control is not None:
            await self._control.aclose()

    # ------------------------------------------------------------------ steps

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        left = self._play_client_side(step)
        if left is None:
            return
        step = left
        if self.down:
            self._edit_state(step)
            if isinstance(step, ServerChange) and step.what == "up":
                self.down = False
            return
        if isinstance(step, ServerChange) and step.what == "up":
            return  # it was not down
        ends: tuple[str, ...] = ("down", "drop_stream")
        if self.revision != "2026-07-28":
            ends = (*ends, "close_stream", "expire_session")  # the session is the process
        dies = isinstance(step, ServerChange) and step.what in ends
        before = self.source.pid
        await self._send_step(step, once=dies)
        if isinstance(step, ServerChange) and step.what == "down":
            self.down = True
        if dies:
            await self._wait_until_gone(before)

    async def _send_step(self, step: ServerStep, *, once: bool) -> None:
        assert self._control is not None
        payload = {"op": "step", "step": step_to_json(step), "principal": None}
        with anyio.fail_after(self.settle_limit):
            while True:
                pid = self.source.pid
                reply = await self._control.command(pid, payload)
                if reply is not None or (once and pid is not None):
                    return
                await anyio.sleep(0.01)

    def _edit_state(self, step: ServerStep) -> None:
        """A server-side step while no process runs: change what the next one loads."""
        reference = load_state(self.state_file)
        match step:
            case ServerChange(what="up"):
                reference.down = False
            case ServerChange(what="down" | "drop_stream" | "close_stream" | "expire_session"):
                pass
            case _:
                apply_to_reference(reference, step, None)
        save_state(self.state_file, reference)

    async def command(self, op: str, **fields: Any) -> dict[str, Any] | None:
        """Any control command to the running server (tests use the stdio-only faults)."""
        assert self._control is not None
        return await self._control.command(self.source.pid, {"op": op, **fields})

    # ------------------------------------------------------------------ settling

    async def _server_state(self) -> dict[str, Any] | None:
        if self.down or self._control is None:
            return None
        return await self._control.command(self.source.pid, {"op": "state"}, timeout=2.0)

    def _held_reads(self, state: dict[str, Any]) -> int:
        return int(state["reads_in_flight"])

    def _server_busy(self, state: dict[str, Any] | None, stats: StdioStats) -> str | None:
        if state is None or state["pid"] != stats.pid:
            return "the server process (re)starting"
        if state["pending_out"]:
            return f"{state['pending_out']} messages queued in the server"
        if state["lines_written"] != stats.lines_from_current:
            return f"{state['lines_written'] - stats.lines_from_current} lines in the pipe"
        return None

    async def _note_reads(self) -> None:
        state = await self._server_state()
        if state is not None:
            self._reads = int(state["reads"])
            self._tool_calls = int(state.get("tool_calls", 0))
        else:
            with contextlib.suppress(OSError, ValueError):
                saved = load_state(self.state_file)
                self._reads, self._tool_calls = saved.reads, len(saved.tool_calls)

    _tool_calls = 0

    def tool_calls(self) -> int | None:
        """``tools/call`` requests the server process received (noted as reads are)."""
        return self._tool_calls


__all__ = ["ControlChannel", "LocalCopyLoader", "StdioProcessWorld", "StdioWorld"]
