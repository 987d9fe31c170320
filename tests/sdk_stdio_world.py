"""`SdkStdioWorld`: acceptance rows over stdio against the official `mcp` SDK server.

The cache reaches ``tests/fixtures/sdk_stdio_server.py`` (the SDK fixture of
``tests/fixtures/sdk_server.py`` served over stdio) through a `StdioSource`; the world
steers it with MCP tool calls on that same pipe, and edits its state file while it is
down. The words map as in `freshcache.acceptance.StdioWorld`: *stream drops* is the
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
import sys
from pathlib import Path
from typing import Any

from freshcache._core import RequestFailed
from freshcache._protocol._wire import ErrorResponse, Response
from freshcache._sources._stdio import StdioSource, StdioStats
from freshcache.acceptance import Case, Setup
from freshcache.acceptance._stdio_world import StdioProcessWorld
from freshcache.acceptance._steps import (
    NextRead,
    Notify,
    ServerChange,
    ServerSets,
    odd_answer,
    text_for,
    unread_uri,
)

from .sdk_world import cannot_hold_acks, fixture_seed

FIXTURE = Path(__file__).parent / "fixtures" / "sdk_stdio_server.py"


class SdkStdioWorld(StdioProcessWorld):
    """Rows over stdio against the official-SDK fixture server."""

    name = "sdk-stdio"

    def unplayable(self, case: Case) -> str | None:
        for step in case.row.steps:
            if odd_answer(step) is not None:
                return (
                    f"the SDK server answers from typed models: it cannot shape an answer "
                    f"that way ({odd_answer(step)})"
                )
        return cannot_hold_acks(case) or super().unplayable(case)

    temp_prefix = "freshcache-sdk-stdio-"
    settle_pause = 0.005

    def __init__(
        self, *, request_timeout: float = 1.0, read_timeout: float = 8.0, settle_limit: float = 20.0
    ) -> None:
        super().__init__(
            request_timeout=request_timeout, read_timeout=read_timeout, settle_limit=settle_limit
        )
        self._quiet: tuple[Any, ...] | None = None

    # ------------------------------------------------------------------ life

    def _launch(self, setup: Setup) -> StdioSource:
        seed = fixture_seed(setup)
        seed["list_ttl"] = [60_000, "private"]
        self.state_file.write_text(json.dumps(seed))
        return self._stdio_source([sys.executable, str(FIXTURE), "--state", str(self.state_file)])

    # ------------------------------------------------------------------ steps

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        if self.down:
            self._edit_state(step)
            return
        match self._play_client_side(step):
            case None:
                pass
            case ServerSets(uri=uri, version=version, notify=True):
                await self.tool("set_resource", uri=uri, text=text_for(uri, version))
            case ServerSets(uri=uri, version=version, notify=False):
                await self.control("set", uri=uri, text=text_for(uri, version), notify=False)
            case Notify(kind="updated", uri=uri, count=count):
                await self.control("notify_raw", uri=uri, count=count)
            case Notify(kind="list_changed"):
                await self.control("list_changed")
            case Notify(kind="updated_unread", count=count):
                for n in range(count):
                    await self.control("notify_raw", uri=unread_uri(n), count=1)
            case Notify(kind="updated_before_ack", uri=uri):
                await self.tool("notify_before_ack", uri=uri)
            case Notify(kind="foreign", uri=uri):
                await self.tool("notify_foreign", uri=uri)
            case Notify(kind="garbage"):
                await self.tool("write_raw", line="{not json")
            case NextRead(uri=uri, fault=fault, sticky=sticky):
                await self.control("fault", uri=uri, fault=fault, sticky=sticky)
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
            case ServerChange(what="close_stream" | "expire_session"):
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
        await self._wait_until_gone(before)

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
        self._quiet = None
        await super().settle()

    async def _look(self) -> str | None:
        """Settled only after two quiet answers in a row with nothing new in between."""
        state = await self._server_state()
        busy = self._busy(state)
        if busy is not None:
            self._quiet = None
            return busy
        counters = self.cache.engine.counters
        snapshot = (
            json.dumps(state, sort_keys=True),
            counters.notifications,
            counters.untrusted_messages,
            counters.acknowledgments,
        )
        if snapshot == self._quiet:
            return None
        self._quiet = snapshot
        return "a second quiet look"

    async def _server_state(self) -> dict[str, Any] | None:
        if self.down or self.source.pid is None:
            return None
        try:
            state = await self.control("state")
        except RuntimeError:
            return None
        self._reads = sum(state["reads"].values())
        return state

    def _held_reads(self, state: dict[str, Any]) -> int:
        return int(state["held_reads"])

    def _server_busy(self, state: dict[str, Any] | None, stats: StdioStats) -> str | None:
        if state is None:
            return "the server process (re)starting"
        if state["backlog"]:
            return f"{state['backlog']} events buffered in the server"
        return None

    async def _note_reads(self) -> None:
        if self.down:
            self._reads = sum(json.loads(self.state_file.read_text()).get("reads", {}).values())
