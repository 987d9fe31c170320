"""The proxy's hosts: who subscribed to what, and telling them (both revisions).

A 2026-07-28 host listens (``subscriptions/listen``): its stream is the SDK's
`ListenHandler` over one in-process bus, which stamps, filters and acknowledges; the
proxy publishes each change on the bus once. A 2025-11-25 host has a session
(``initialize``): it subscribes with ``resources/subscribe`` and hears on the session's
own channel (the stdio pipe, or the HTTP session's GET stream), so the proxy keeps
each session it has seen, and what it subscribed to, until its connection closes.

What hosts subscribed to, counted over both, is what the upstream caches select
(`Hosts.subscribed`): the URIs they keep covered by their own streams and re-read
after a reconnect.

The tools each host was last handed (`Hosts.remember_tools`) are what its calls are
judged by (``seen=``): a 2025-11-25 connection keeps its own until it closes; a
2026-07-28 request has no session, so those are kept per principal, the
`TOOL_RECORDS` most recently used at most (a principal is a host's credentials, and
credentials come and go: nothing says when one is gone for good).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

log = logging.getLogger("freshcache.proxy")

TOOL_RECORDS = 1024
"""How many 2026-07-28 principals' tool lists the proxy remembers; the least recently
used is dropped first. A principal whose record was dropped calls as a host that never
listed does (`Hosts.tool_seen` is ``None``, so ``seen=None``: sent once, and after an
"unknown tool" refusal never sent again, see `FreshCache.call_tool`). Principals that
list the same tools share one record, so the bound is on principals, not on copies."""

_LIST_EVENTS: dict[str, Any] = {
    "tools": ToolsListChanged,
    "prompts": PromptsListChanged,
    "resources": ResourcesListChanged,
}
_LEGACY_METHODS = {
    "tools": "send_tool_list_changed",
    "prompts": "send_prompt_list_changed",
    "resources": "send_resource_list_changed",
}


class _Session:
    """One 2025-11-25 host connection: its session object and its subscriptions."""

    __slots__ = ("session", "uris")

    def __init__(self, session: Any) -> None:
        self.session = session
        self.uris: set[str] = set()


class Hosts:
    """Every host connection the proxy knows, and what each subscribed to."""

    def __init__(self, on_subscriptions: Callable[[], None]) -> None:
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus)
        self._sessions: dict[int, _Session] = {}
        self.subscribed: Counter[str] = Counter()
        """URI -> how many subscriptions (listen streams and 2025 sessions) name it."""
        self._changed = on_subscriptions
        self._by_connection: dict[int, Mapping[str, Any]] = {}
        """A 2025-11-25 connection's tools, by the connection's id, until it closes."""
        self._by_principal: dict[str | None, Mapping[str, Any]] = {}
        """A 2026-07-28 principal's tools, least recently used first (`TOOL_RECORDS`)."""
        self.tool_records = TOOL_RECORDS
        self._last_tools: Mapping[str, Any] | None = None

    # ------------------------------------------------------------------ who is there

    async def middleware(self, ctx: Any, call_next: Any) -> Any:
        """A `ServerMiddleware`: remember each 2025 session the moment it speaks."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and ctx.request_id is not None:
            self._session(ctx)
        return await call_next(ctx)

    def _session(self, ctx: Any) -> _Session:
        connection = getattr(ctx.session, "_connection", None)
        key = id(connection) if connection is not None else id(ctx.session)
        known = self._sessions.get(key)
        if known is None:
            known = self._sessions[key] = _Session(ctx.session)
            if connection is not None:
                connection.exit_stack.callback(self._gone, key)
        return known

    def _gone(self, key: int) -> None:
        session = self._sessions.pop(key, None)
        if session is not None and session.uris:
            self.subscribed.subtract(session.uris)
            self.subscribed += Counter()  # drop the zeros
            self._changed()

    def remember_tools(self, ctx: Any, principal: str | None, tools: Mapping[str, Any]) -> None:
        """This host was handed ``tools`` (``tools/list``), by the name it knows: what it
        builds its calls from now. A 2025-11-25 session keeps its own while its
        connection lasts; a 2026-07-28 request stands alone (no session), so those
        hosts share one per principal (over stdio: the one host), `TOOL_RECORDS` at most."""
        record = self._shared(tools)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            records = self._by_principal
            records.pop(principal, None)
            records[principal] = record
            while len(records) > self.tool_records:
                del records[next(iter(records))]  # the least recently used
            return
        connection = getattr(ctx.session, "_connection", None)
        key = id(connection if connection is not None else ctx.session)
        if key not in self._by_connection and connection is not None:
            connection.exit_stack.callback(self._by_connection.pop, key, None)
        self._by_connection[key] = record

    def tool_seen(self, ctx: Any, principal: str | None, name: str) -> Any:
        """The definition of tool ``name`` this host was last handed, or ``None``: it
        never listed it, or its record was dropped (the same to `FreshCache.call_tool`)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            record = self._by_principal.pop(principal, None)
            if record is None:
                return None
            self._by_principal[principal] = record  # used now: the most recent
        else:
            connection = getattr(ctx.session, "_connection", None)
            key = id(connection if connection is not None else ctx.session)
            record = self._by_connection.get(key)
            if record is None:
                return None
        return record.get(name)

    def _shared(self, tools: Mapping[str, Any]) -> Mapping[str, Any]:
        """``tools`` as a read-only record, the very record of the last listing when it
        is the same (hosts listing one catalog hold one copy of it)."""
        last = self._last_tools
        if last is not None and last == tools:
            return last
        self._last_tools = record = MappingProxyType(dict(tools))
        return record

    # ------------------------------------------------------------------ subscriptions

    async def subscribe(self, ctx: Any, uri: str) -> None:
        """``resources/subscribe`` (2025-11-25)."""
        session = self._session(ctx)
        if uri not in session.uris:
            session.uris.add(uri)
            self.subscribed[uri] += 1
            self._changed()

    async def unsubscribe(self, ctx: Any, uri: str) -> None:
        session = self._session(ctx)
        if uri in session.uris:
            session.uris.discard(uri)
            self.subscribed[uri] -= 1
            self.subscribed += Counter()
            self._changed()

    async def listen(self, ctx: Any, params: Any) -> Any:
        """``subscriptions/listen`` (2026-07-28): the SDK's handler, its URIs selected
        while the stream is open."""
        uris = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
        self.subscribed.update(uris)
        if uris:
            self._changed()
        try:
            return await self._listen(ctx, params)
        finally:
            self.subscribed.subtract(uris)
            self.subscribed += Counter()
            if uris:
                self._changed()

    def close(self) -> None:
        """End every listen stream gracefully (the proxy is stopping)."""
        self._listen.close()

    # ------------------------------------------------------------------ telling

    async def resource_updated(self, uri: str) -> None:
        """Tell the hosts subscribed to ``uri`` that it changed."""
        log.debug("hosts told: %s updated", uri)
        await self.bus.publish(ResourceUpdated(uri=uri))
        for session in list(self._sessions.values()):
            if uri in session.uris:
                await _quietly(session.session.send_resource_updated(uri))

    async def list_changed(self, kind: str) -> None:
        """Tell every host that a list (``tools``, ``prompts``, ``resources``) changed."""
        log.debug("hosts told: %s/list_changed", kind)
        await self.bus.publish(_LIST_EVENTS[kind]())
        for session in list(self._sessions.values()):
            await _quietly(getattr(session.session, _LEGACY_METHODS[kind])())


async def _quietly(sending: Any) -> None:
    """A notification to a host that went away is dropped (the SDK says the same)."""
    try:
        await sending
    except Exception as exc:  # a closed pipe or stream: that host is gone
        log.debug("a host could not be told: %r", exc)


__all__ = ["TOOL_RECORDS", "Hosts"]
