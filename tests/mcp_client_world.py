"""`McpClientWorld`: acceptance rows played through `McpClientSource` against the
official-SDK fixture server (tests/fixtures/sdk_server.py), over HTTP or stdio.

Three ways of holding the SDK client:

- ``http-borrowed``: the world enters ``mcp.Client(url)`` itself, with the SDK's
  default response cache on, and hands it to ``McpClientSource(client)``;
- ``http-owned``: ``McpClientSource.connect(url)`` builds and replaces its own clients
  (the only way to live through a server that goes down, python-sdk#3560);
- ``stdio``: the world enters ``mcp.Client(StdioServerParameters(...))``; the fixture
  is steered through its MCP tools on the same client.

The fixture is not the reference server: it publishes every change it makes, cannot
hold a read and then release it, cannot fail one read only, and no transport can
make a server answer "from a local copy". `unplayable` names what a row needs that
this world cannot do; the runner reports such rows as skipped with that reason.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import anyio
import httpx

from freshcache import BackoffSettings, FreshCache, McpClientSource, Policy
from freshcache.acceptance import Case, Setup, VirtualClock, World
from freshcache.acceptance._settle import wait_for
from freshcache.acceptance._steps import (
    ALIASES,
    Given,
    NextRead,
    Notify,
    ServerChange,
    ServerSets,
    TimePasses,
    text_for,
)
from tests.conftest import FIXTURES
from tests.sdk_world import SdkPeer

Mode = Literal["http-borrowed", "http-owned", "stdio"]

HOLD_MS = 60_000
"""How long a "held" read sleeps in the fixture (the cache is stopped long before)."""


class McpClientWorld(World):
    """A `FreshCache` over `McpClientSource`, the SDK fixture as the server."""

    def __init__(self, mode: Mode, peer: SdkPeer | None = None) -> None:
        """``peer``: an HTTP fixture shared by the rows (reset at each start, started
        again if a row left it down) instead of one started for this row."""
        self.mode = mode
        self.name = f"mcp-client-{mode}"
        self.clock = VirtualClock()  # unused: this world runs on real time
        self.shared = peer is not None
        self.fixture: SdkPeer | None = peer
        self.client: Any = None
        self.texts: dict[str, str] = {}
        self.ttls: dict[str, tuple[int, str]] = {}
        self.ack_exclude: set[str] = set()
        self.down = False
        self.holding = False
        self.long_reads = False
        self._reads = 0
        self._probes = 0
        self._http: httpx.AsyncClient | None = None
        self._entered = False

    # ------------------------------------------------------------------ what it can play

    def unplayable(self, case: Case) -> str | None:
        http = self.mode != "stdio"
        silent_ok = {
            g.arg for g in case.row.steps if isinstance(g, Given) and g.what == "ack_omits"
        }
        if any(isinstance(s, NextRead) and s.fault == "local_copy" for s in case.row.steps):
            return (
                "McpClientSource never answers from a local copy: every read goes to the "
                "server (see test_the_sdk_cache_alone_would_hand_back_the_old_copy)"
            )
        down = False
        for step in case.row.steps:
            match step:
                case Given(what="ack_omits" | "not_cached" | "ttl" | "also_selected"):
                    pass
                case Given(what=what) if what in ("no_listen", "no_list_changed", "page_size"):
                    return f"the SDK fixture always serves listen, list changes, one list page ({what})"
                case Given():
                    if step.what in ("principal", "store_entries", "later_pages_ttl"):
                        return f"not expressible against the SDK fixture ({step.what})"
                case TimePasses():
                    return "runs on real time: the fixture's ttlMs cannot be fast-forwarded"
                case ServerSets(notify=False, uri=uri) if not down and uri not in silent_ok:
                    return "the SDK fixture publishes every change it makes (no silent change)"
                case Notify(kind="updated_before_ack" | "foreign" | "garbage"):
                    return "the official SDK client drops frames before the ack / with foreign ids"
                case NextRead(fault="timeout", sticky=True) if http:
                    pass
                case NextRead():
                    return f"the SDK fixture cannot fail reads this way ({step.fault}, sticky={step.sticky})"
                case ServerChange(what="down" | "up"):
                    if self.mode != "http-owned":
                        return (
                            "a server that goes down kills an mcp.Client held by the caller "
                            "(python-sdk#3560): only McpClientSource.connect lives through it"
                        )
                    down = step.what == "down"
                case ServerChange(what="hold_reads" | "drop_stream") if not http:
                    return f"the stdio fixture has no tool to {step.what.replace('_', ' ')}"
                case ServerChange(what="hold_reads"):
                    self.long_reads = True
                case ServerChange(
                    what="drop_stream"
                    | "close_stream"
                    | "expire_session"
                    | "deny"
                    | "allow"
                    | "remove"
                ):
                    if step.principal is not None:
                        return "the SDK fixture has one principal"
                case ServerChange():
                    return f"the SDK fixture cannot {step.what.replace('_', ' ')}"
        return None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, setup: Setup) -> None:
        try:
            await self._start(setup)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.stop()
            raise

    async def _start(self, setup: Setup) -> None:
        if setup.listen is False or setup.principal is not None:
            raise AssertionError("unplayable() lets no such row through")
        self.ack_exclude = set(setup.ack_omits)
        for alias in ("selected", "other", "extra"):
            uri = ALIASES[alias]
            self.texts[uri] = text_for(uri, "v1")
            self.ttls[uri] = (setup.ttl_ms, setup.scope)
        read_timeout = 30.0 if self.long_reads else 1.0
        if self.mode == "stdio":
            from mcp import Client, StdioServerParameters

            params = StdioServerParameters(
                command=sys.executable, args=[str(FIXTURES / "sdk_server.py"), "stdio"]
            )
            self.client = Client(params, read_timeout_seconds=read_timeout)
            await self.client.__aenter__()
            await self._apply_state()
            source = McpClientSource(self.client)
        else:
            if self.fixture is None:
                self.fixture = SdkPeer()
            self._http = httpx.AsyncClient(timeout=10.0)
            if self.fixture.alive:
                await self.control("reset")
            else:
                await anyio.to_thread.run_sync(self.fixture.start)
            await self._apply_state()
            if self.mode == "http-borrowed":
                from mcp import Client

                # The SDK's response cache stays on: the source must not be fooled by it.
                self.client = Client(self.fixture.url, read_timeout_seconds=read_timeout)
                await self.client.__aenter__()
                source = McpClientSource(self.client)
            else:
                source = McpClientSource.connect(
                    self.fixture.url, read_timeout_seconds=read_timeout
                )
        self.cache = FreshCache(
            source,
            select=setup.selected,
            policy=Policy(**setup.policy),
            read_timeout=5.0,
            ack_timeout=5.0,
            backoff=BackoffSettings(base=0.05, cap=0.25, quick_death=0.0, max_per_hour=10_000),
        )
        await self.cache.__aenter__()
        self._entered = True
        await self.reach_seed_situation(setup)

    async def stop(self) -> None:
        try:
            if self._entered:
                self._entered = False
                await self.cache.__aexit__(None, None, None)
        finally:
            try:
                client, self.client = self.client, None
                if client is not None:
                    await client.__aexit__(None, None, None)
            finally:
                http, self._http = self._http, None
                if http is not None:
                    await http.aclose()
                if self.fixture is not None and not self.shared:
                    self.fixture.kill()
                    self.fixture.stop()

    # ------------------------------------------------------------------ steering the fixture

    async def control(self, op: str, **fields: Any) -> dict[str, Any]:
        """One fixture operation: ``POST /control`` over HTTP, the matching tool on stdio."""
        if self.mode != "stdio":
            assert self._http is not None and self.fixture is not None
            response = await self._http.post(self.fixture.control_url, json={"op": op, **fields})
            response.raise_for_status()
            result: dict[str, Any] = response.json()
            return result
        import json

        match op:
            case "set":
                tool, args = "set_resource", {"uri": fields["uri"], "text": fields["text"]}
            case "notify":  # same text again: the fixture publishes updated, nothing changes
                uri = fields["uri"]
                tool, args = "set_resource", {"uri": uri, "text": self.texts.get(uri, "")}
            case "list_changed":  # a new resource: the fixture publishes list_changed
                self._probes += 1
                tool = "set_resource"
                args = {"uri": f"guide://probe/{self._probes}", "text": "probe"}
            case "deny" | "allow":
                tool, args = "set_denied", {"uri": fields["uri"], "denied": op == "deny"}
            case "ttl":
                tool = "set_ttl"
                args = {"uri": fields["uri"], "ttl_ms": fields["ttl_ms"], "scope": fields["scope"]}
            case "ack_exclude":
                tool, args = "set_ack_exclude", {"uris": fields["uris"]}
            case "delete":
                tool, args = "delete_resource", {"uri": fields["uri"]}
            case "close_listeners" | "state":
                tool, args = ("get_state" if op == "state" else op), {}
            case _:
                raise AssertionError(f"no stdio tool for {op}")
        done = await self.client.call_tool(tool, args)
        if op == "state":
            state: dict[str, Any] = json.loads(done.content[0].text)
            return state
        return {}

    async def _apply_state(self) -> None:
        for uri, (ttl_ms, scope) in self.ttls.items():
            await self.control("ttl", uri=uri, ttl_ms=ttl_ms, scope=scope)
        await self.control("ack_exclude", uris=sorted(self.ack_exclude))
        for uri, text in self.texts.items():
            await self.control("set", uri=uri, text=text)

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        engine = self.cache.engine
        expect_notification = False
        match step:
            case ServerSets(uri=uri, version=version):
                self.texts[uri] = text_for(uri, version)
                if not self.down:
                    expect_notification = uri in engine.covered
                    await self._counted(expect_notification, "set", uri=uri, text=self.texts[uri])
            case Notify(kind="updated", uri=uri, count=count):
                for _ in range(count):
                    await self._counted(uri in engine.covered, "notify", uri=uri)
            case Notify(kind="list_changed"):
                await self._counted(self.cache.stream_status == "live", "list_changed")
            case NextRead(uri=uri, fault="timeout"):
                await self.control("slow", uri=uri, ms=HOLD_MS)
                self.holding = True
            case ServerChange(what="hold_reads"):
                for uri in self.texts:
                    await self.control("slow", uri=uri, ms=HOLD_MS)
                self.holding = True
            case ServerChange(what="drop_stream"):
                await self.control("drop_listeners")
            case ServerChange(what="close_stream" | "expire_session"):
                await self.control("close_listeners")
            case ServerChange(what="deny", uri=uri):
                await self.control("deny", uri=uri)
            case ServerChange(what="allow", uri=uri):
                await self.control("allow", uri=uri)
            case ServerChange(what="remove", uri=uri):
                self.texts.pop(uri, None)
                await self.control("delete", uri=uri)
            case ServerChange(what="down"):
                assert self.fixture is not None
                self.down = True
                self.fixture.kill()
            case ServerChange(what="up"):
                assert self.fixture is not None
                await anyio.to_thread.run_sync(self.fixture.start)
                self.down = False
                # A new process: it holds only its built-in resources until told.
                await self._apply_state()
            case _:
                raise AssertionError(f"unplayable() lets no {step!r} through")

    async def _counted(self, expect: bool, op: str, **fields: Any) -> None:
        """Do ``op``; when the stream covers what it touches, wait for the notification."""
        counters = self.cache.engine.counters
        before = counters.notifications
        await self.control(op, **fields)
        if expect:
            await wait_for(
                lambda: counters.notifications != before, limit=5.0, what="the notification"
            )

    settle_limit = 10.0
    settle_pause = 0.01
    settle_turns = 0
    QUIET_LOOKS = 5  # looks (about 50 ms) in a row with nothing going on

    async def settle(self) -> None:
        """Wait (bounded) until nothing moves: reads landed, the stream is back up."""
        self._last: tuple[object, ...] = ()
        self._quiet = 0
        await super().settle()
        if not self.down:
            state = await self.control("state")
            self._reads = sum(int(n) for n in state.get("reads", {}).values())

    async def _look(self) -> str | None:
        cache = self.cache
        counters = cache.engine.counters
        snapshot = (
            cache.stream_status,
            cache.pending_reads,
            cache.queued_reads,
            counters.server_reads,
            counters.notifications,
            counters.acknowledgments,
            counters.stream_losses,
        )
        due = cache.pending_reads + cache.queued_reads
        busy = cache.relisting or (due > 0 and not self.holding)
        reconnecting = (
            not self.down
            and bool(cache.selected)
            and cache.stream_status not in ("live", "unsupported", "disabled")
        )
        if busy or reconnecting or snapshot != self._last:
            self._quiet, self._last = 0, snapshot
        else:
            self._quiet += 1
        if self._quiet < self.QUIET_LOOKS:
            return f"{self._quiet} quiet looks of {self.QUIET_LOOKS}"
        return None

    def server_reads(self) -> int:
        return self._reads


__all__ = ["McpClientWorld"]
