"""`SdkStdioWorld`: acceptance rows over stdio against the official `mcp` SDK server.

The cache reaches ``tests/fixtures/sdk_stdio_server.py`` (the SDK fixture of
``tests/fixtures/sdk_server.py`` served over stdio) through a `StdioSource`; the world
steers it with MCP tool calls on that same pipe, and edits its state file while it is
down. The words map as in `freshcache.testing.StdioWorld`: *stream drops* is the
process dying in the middle of a line, *server goes down* is that plus every new
process exiting at once until *server comes back*, a *local copy* is played by a
read function between the cache and the source, and a principal other than the
cache's cannot be denied on stdio (one authorization context per process).

``settle`` uses the pipe itself as a barrier: the answer to a ``control state`` tool
call comes after every line the server wrote before it, and the reader routes lines in
order; two quiet answers in a row, with nothing new in between, end the wait.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from freshcache._core import RequestFailed
from freshcache._core._backoff import BackoffSettings
from freshcache._stdio import StdioSource
from freshcache._tables import Case, Setup, VirtualClock, World
from freshcache._tables._steps import ALIASES, NextRead, Notify, ServerChange, ServerSets, text_for
from freshcache._wire import ErrorResponse, Response
from freshcache.testing._stdio_world import LocalCopyLoader

FIXTURE = Path(__file__).parent / "fixtures" / "sdk_stdio_server.py"


class SdkStdioWorld(World):
    """Rows over stdio against the official-SDK fixture server."""

    name = "sdk-stdio"

    def __init__(
        self, *, request_timeout: float = 1.0, read_timeout: float = 8.0, settle_limit: float = 20.0
    ) -> None:
        self.clock = VirtualClock()
        self.request_timeout = request_timeout
        self.read_timeout = read_timeout
        self.settle_limit = settle_limit
        self.principal: str | None = None
        self.listen_supported = True
        self.down = False
        self.settle_timeouts = 0
        self.last_busy: str | None = None
        self._reads = 0
        self._dir: Path | None = None
        self.source: StdioSource
        self.loader: LocalCopyLoader

    def unplayable(self, case: Case) -> str | None:
        return None

    @property
    def state_file(self) -> Path:
        assert self._dir is not None
        return self._dir / "state.json"

    # ------------------------------------------------------------------ life

    async def start(self, setup: Setup) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="freshcache-sdk-stdio-"))
        self.principal = setup.principal
        self.listen_supported = setup.listen
        uris = [ALIASES[a] for a in ("selected", "other", "extra")]
        seed = {
            "resources": {uri: text_for(uri, "v1") for uri in uris},
            "ttl": {uri: [setup.ttl_ms, setup.scope] for uri in uris},
            "list_ttl": [60_000, "private"],
            "ack_exclude": sorted(setup.ack_omits),
            "listen": setup.listen,
            "list_changes": setup.list_changed,
            "page_size": setup.page_size,
            "later_pages_ttl": setup.later_pages_ttl_ms,
        }
        self.state_file.write_text(json.dumps(seed))
        self.source = StdioSource(
            [sys.executable, str(FIXTURE), "--state", str(self.state_file)],
            timeout=self.request_timeout,
            restart=BackoffSettings(base=0.05, cap=0.2, quick_death=0.0, max_per_hour=1_000_000),
        )
        await self._warm_up()
        self.loader = LocalCopyLoader(self.source)
        self.cache = self.make_cache(
            self.loader, setup, read_timeout=self.read_timeout, ack_timeout=self.read_timeout
        )
        await self.cache.__aenter__()
        await self.reach_seed_situation(setup)

    async def _warm_up(self) -> None:
        """Start the server before the cache: request timeouts then measure the server,
        not the interpreter starting up."""
        with anyio.fail_after(self.settle_limit * 2):
            while not (await self.source.start()).reachable:
                await anyio.sleep(0.05)

    async def stop(self) -> None:
        try:
            await self.cache.__aexit__(None, None, None)
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)

    # ------------------------------------------------------------------ steps

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        if self.down:
            self._edit_state(step)
            return
        match step:
            case ServerSets(uri=uri, version=version, notify=True):
                await self.tool("set_resource", uri=uri, text=text_for(uri, version))
            case ServerSets(uri=uri, version=version, notify=False):
                await self.control("set", uri=uri, text=text_for(uri, version), notify=False)
            case Notify(kind="updated", uri=uri, count=count):
                await self.control("notify_raw", uri=uri, count=count)
            case Notify(kind="list_changed"):
                await self.control("list_changed")
            case Notify(kind="updated_before_ack", uri=uri):
                await self.tool("notify_before_ack", uri=uri)
            case Notify(kind="foreign", uri=uri):
                await self.tool("notify_foreign", uri=uri)
            case Notify(kind="garbage"):
                await self.tool("write_raw", line="{not json")
            case NextRead(uri=uri, fault="local_copy", sticky=sticky):
                if sticky:
                    self.loader.always.add(uri)
                else:
                    self.loader.once[uri] = self.loader.once.get(uri, 0) + 1
            case NextRead(uri=uri, fault=fault, sticky=sticky):
                if fault is None:
                    self.loader.always.discard(uri)
                    self.loader.once.pop(uri, None)
                await self.control("fault", uri=uri, fault=fault, sticky=sticky)
            case ServerChange(what="deny" | "allow", principal=who) if who not in (
                None,
                self.principal,
            ):
                pass  # one authorization context per stdio process
            case ServerChange(what="deny", uri=uri):
                await self.tool("set_denied", uri=uri, denied=True)
            case ServerChange(what="allow", uri=uri):
                await self.tool("set_denied", uri=uri, denied=False)
            case ServerChange(what="drop_stream"):
                await self._kill("drop")
            case ServerChange(what="down"):
                await self._kill("go_down")
                self.down = True
            case ServerChange(what="up"):
                pass  # it was not down
            case ServerChange(what="close_stream"):
                await self.tool("close_listeners")
            case ServerChange(
                what="hold_reads"
                | "release_reads"
                | "remove"
                | "hide"
                | "invalidate_cursors" as what,
                uri=uri,
            ):
                await self.control(what, uri=uri)
            case _:
                raise AssertionError(f"unhandled step {step!r}")

    async def _kill(self, tool: str) -> None:
        """A tool that ends the process: no answer comes; wait until the source saw it go."""
        before = self.source.pid
        await self.source.send_request("tools/call", {"name": tool, "arguments": {}}, timeout=1.0)
        with anyio.fail_after(self.settle_limit):
            while self.source.pid == before:
                await anyio.sleep(0.005)

    def _edit_state(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        state = json.loads(self.state_file.read_text())
        match step:
            case ServerChange(what="up"):
                state["down"] = False
                self.down = False
            case ServerSets(uri=uri, version=version):
                state.setdefault("resources", {})[uri] = text_for(uri, version)
            case ServerChange(what="hold_reads"):
                state["held"] = True
            case ServerChange(what="release_reads"):
                state["held"] = False
            case _:
                raise AssertionError(f"{step!r} while the SDK server is down is not supported")
        self.state_file.write_text(json.dumps(state))

    async def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        """Call a fixture tool on the cache's own pipe; its JSON answer (``{}`` for "ok")."""
        answer = await self.source.send_request(
            "tools/call", {"name": name, "arguments": arguments}
        )
        match answer:
            case Response(result=result):
                text = result["content"][0]["text"]
                if result.get("isError"):
                    raise RuntimeError(f"the fixture tool {name} failed: {text}")
                parsed: dict[str, Any] = json.loads(text) if text.startswith("{") else {}
                return parsed
            case ErrorResponse(code=code, message=message):
                raise RuntimeError(f"the fixture refused {name}: {message} ({code})")
            case RequestFailed(detail=detail):
                raise RuntimeError(f"the fixture did not answer {name}: {detail}")

    async def control(self, op: str, **fields: Any) -> dict[str, Any]:
        """One op of the fixture's /control vocabulary, over stdio."""
        return await self.tool("control", op=op, **fields)

    # ------------------------------------------------------------------ settling

    async def settle(self) -> None:
        previous: tuple[Any, ...] | None = None
        busy: str | None = "not looked yet"
        with anyio.move_on_after(self.settle_limit):
            while True:
                for _ in range(10):
                    await anyio.lowlevel.checkpoint()
                state = await self._state()
                busy = self._busy(state)
                if busy is None:
                    counters = self.cache.engine.counters
                    snapshot = (
                        json.dumps(state, sort_keys=True),
                        counters.notifications,
                        counters.untrusted_messages,
                        counters.acknowledgments,
                    )
                    if snapshot == previous:
                        break
                    busy, previous = "a second quiet look", snapshot
                    await anyio.sleep(0.01)
                    continue
                previous = None
                await anyio.sleep(0.005)
        if busy is not None:
            self.settle_timeouts += 1
            self.last_busy = busy
        if self.down:
            self._reads = sum(json.loads(self.state_file.read_text()).get("reads", {}).values())

    async def _state(self) -> dict[str, Any] | None:
        if self.down or self.source.pid is None:
            return None
        try:
            state = await self.control("state")
        except RuntimeError:
            return None
        self._reads = sum(state["reads"].values())
        return state

    def _busy(self, state: dict[str, Any] | None) -> str | None:
        """What the world still waits for (``None``: settled)."""
        cache = self.cache
        stats = self.source.stats()
        if cache.relisting:
            return "a re-list"
        if stats.backlog:
            return f"{stats.backlog} messages not yet taken by the cache"
        held = int(state["held_reads"]) if state is not None else 0
        if cache.pending_reads > held:
            return f"{cache.pending_reads} server reads ({held} held by the server)"
        if self.down:
            return None
        if state is None:
            return "the server process (re)starting"
        if state["backlog"]:
            return f"{state['backlog']} events buffered in the server"
        if (
            self.listen_supported
            and cache.selected
            and cache.stream_status not in ("live", "unsupported", "disabled")
        ):
            return f"the stream ({cache.stream_status})"
        return None

    def server_reads(self) -> int:
        return self._reads
