"""`Proxy`: an MCP server (the official SDK's lowlevel `Server`) whose every answer comes
from a `FreshCache` per upstream, through freshcache's public API only.

- ``resources/read``: a ``fresh`` result, or a JSON-RPC error whose ``data`` carries
  the state and reason (`withheld`); never old text.
- catalogs (``tools/list``, ``prompts/list``, ``resources/templates/list``,
  ``resources/list``): fresh catalogs merged across upstreams, tool and prompt names
  under each upstream's prefix; an upstream whose catalog is not fresh is left out
  and named in the result's ``_meta`` (all of them not fresh: an error).
- ``tools/call``: the prefix mapped back, sent through `FreshCache.call_tool` (at most
  once); a tool no upstream has any more is an error naming the current tools, and
  every host is sent ``tools/list_changed``.
- ``completion/complete``: passed through to the upstream owning the ``ref``
  (`Completions`, never cached); ``completions`` offered only when some upstream does.
- changes: each upstream cache's `FreshCache.changes` feed, judged by `Notices`, told
  through `Hosts`.
- principals: a host's ``Authorization`` header (HTTP) is its own principal upstream
  (`Principals`); over stdio, and to stdio upstreams, there is one.

Every answer carries ``ttlMs: 0``: the proxy is the cache, so a host's own response
cache (the SDK client's honours ``ttlMs``) must not keep a copy the proxy could not
withdraw.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import (
    FRESH,
    NOT_FOUND,
    BackoffSettings,
    ChangesDropped,
    FreshCache,
    FreshCacheError,
    HttpSource,
    MethodNotFoundError,
    StateChange,
    StdioSource,
    __version__,
)
from ._complete import Completions
from ._config import Upstream
from ._hosts import Hosts
from ._notices import Notices

log = logging.getLogger("freshcache.proxy")

NOT_FRESH = -32000
"""The error code of a read, list or call the proxy could not answer fresh (its
``data`` says the state and reason); ``not_found`` is ``-32602``, as servers say it."""
DENIED = -32003
"""``denied``: the upstream refused this host's principal (no code is reserved)."""

_LIST_KINDS = {"tools": "tools", "prompts": "prompts", "resource_templates": "resources"}
"""Catalog -> the ``*/list_changed`` that tells hosts of it."""

RECONNECT = BackoffSettings(base=0.25, cap=5.0, max_per_hour=120, cooldown=300.0)
"""A proxy serves hosts for days: it re-listens within seconds of an upstream's return,
and a server that keeps dropping its streams costs it five minutes, not two hours."""

UNCACHED = {"ttlMs": 0, "cacheScope": "private", "resultType": "complete"}
"""What every read and list answer says of itself on 2026-07-28 (a 2025-11-25 answer
has none of these fields: the SDK leaves them out)."""

READ_URIS = 1024
"""How many URIs hosts read (without subscribing) stay selected upstream."""

META_TOOLS = ("freshcache_list_tools", "freshcache_call_tool")


PRINCIPALS = 4096
"""How many hosts' credentials the proxy keeps (the most recently used): a principal's
credentials are sent upstream only for its own requests (the proxy's background
re-reads and re-lists are its own, without any host's), and every request of a host
puts its credentials back first, so only a request outlived by this many others'
could go without them (the upstream would refuse it: denied, never another's text)."""


class Principals:
    """A host's credentials <-> the principal its reads are cached under upstream."""

    def __init__(self) -> None:
        self._headers: dict[str, str] = {}
        """Principal -> credentials, least recently used first (`PRINCIPALS`)."""

    def of(self, authorization: str | None) -> str | None:
        if not authorization:
            return None
        principal = "host-" + hashlib.sha256(authorization.encode()).hexdigest()[:24]
        headers = self._headers
        headers.pop(principal, None)
        headers[principal] = authorization
        if len(headers) > PRINCIPALS:
            del headers[next(iter(headers))]
        return principal

    def headers(self, principal: str | None) -> Mapping[str, str]:
        header = self._headers.get(principal or "")
        return {"Authorization": header} if header else {}


class Link:
    """One upstream and its cache."""

    def __init__(self, spec: Upstream, cache: FreshCache) -> None:
        self.spec = spec
        self.name = spec.name
        self.prefix = spec.prefix
        self.cache = cache

    def principal(self, who: str | None) -> str | None:
        """A stdio upstream has one identity: every host reads as the one principal."""
        return who if self.spec.is_http else None


class _ProxyServer(Server[Any]):
    """The SDK server, advertising ``listChanged`` to 2025-11-25 hosts on every transport
    (the HTTP session manager asks for the default options)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        every = NotificationOptions(
            prompts_changed=True, resources_changed=True, tools_changed=True
        )
        return super().create_initialization_options(
            notification_options or every, experimental_capabilities, extensions
        )


class Proxy:
    """The upstream caches, the hosts, and the handlers between them."""

    def __init__(
        self,
        upstreams: list[Upstream],
        *,
        timeout: float = 5.0,
        meta_tools: bool = False,
        fleet: str | None = None,
    ) -> None:
        self.principals = Principals()
        self.timeout = timeout
        self.meta_tools = meta_tools
        self.links = [
            Link(
                u,
                FreshCache(self._source(u), read_timeout=timeout, backoff=RECONNECT, fleet=fleet),
            )
            for u in upstreams
        ]
        self.notices = Notices()
        self.hosts = Hosts(self._reselect)
        self.completions = Completions(self.links, self._owner, self._who, timeout)
        self._owners: dict[str, Link] = {}
        """URI -> the upstream that listed it (several upstreams only)."""
        self._read_uris: dict[str, None] = {}
        """The `READ_URIS` URIs hosts read most recently, least recent first: selected
        too, so the proxy hears of their changes (a host that never subscribed still
        gets fresh text)."""

    def _source(self, spec: Upstream) -> Any:
        if spec.url is not None:
            return HttpSource(
                spec.url, headers=spec.headers, auth=self.principals.headers, timeout=self.timeout
            )
        return StdioSource(
            list(spec.command),
            env={**os.environ, **spec.env},
            cwd=spec.cwd,
            timeout=self.timeout,
            name=spec.name,
        )

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Proxy:
        self._stack = AsyncExitStack()
        await self._stack.__aenter__()
        for link in self.links:
            await self._stack.enter_async_context(link.cache)
        self._tg = tg = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(tg.cancel_scope.cancel)
        for link in self.links:
            tg.start_soon(self._watch, link)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.hosts.close()
        await self._stack.__aexit__(*exc_info)

    def server(self) -> Server[Any]:
        """The SDK server whose handlers are this proxy's."""
        # Handlers answer plain dicts (the SDK takes them as results: `HandlerResult`).
        handlers: dict[str, Any] = {
            "on_read_resource": self._read,
            "on_list_resources": self._list_resources,
            "on_list_resource_templates": self._list_templates,
            "on_subscribe_resource": self._subscribe,
            "on_unsubscribe_resource": self._unsubscribe,
            "on_subscriptions_listen": self.hosts.listen,
            "on_list_tools": self._list_tools,
            "on_call_tool": self._call_tool,
            "on_list_prompts": self._list_prompts,
            "on_get_prompt": self._get_prompt,
            "on_completion": self.completions.complete,
        }
        server = _ProxyServer(
            "freshcache-proxy",
            version=__version__,
            instructions="freshcache proxy: fresh answers or an explicit error, never old ones.",
            **handlers,
        )
        server.middleware.append(self.hosts.middleware)
        server.middleware.append(self.completions.middleware)
        return server

    # ------------------------------------------------------------------ changes

    async def _watch(self, link: Link) -> None:
        async with link.cache.changes() as feed:
            async for change in feed:
                if isinstance(change, ChangesDropped):
                    await self._tell_everything()
                    continue
                key: tuple[str, str, str]
                if isinstance(change, StateChange):
                    key = ("uri", link.name, change.uri)
                else:
                    key = ("list", link.name, change.kind)
                if self.notices.change(
                    key, change.new_state, change.new_version, change.reason, change.reproof
                ):
                    await self._tell(key)
                elif change.reason == "stream_lost":
                    self._tg.start_soon(self._prove_later, key)

    async def _prove_later(self, key: tuple[str, str, str]) -> None:
        """After a stream loss, give the re-read the proxy's timeout; what had no fresh
        outcome by then cannot be proven, and its hosts are told (`Notices.unproven`)."""
        await anyio.sleep(self.timeout)
        if self.notices.unproven(key):
            await self._tell(key)

    async def _tell(self, key: tuple[str, str, str]) -> None:
        if key[0] == "uri":
            await self.hosts.resource_updated(key[2])
        else:
            await self.hosts.list_changed(_LIST_KINDS[key[2]])

    async def _tell_everything(self) -> None:
        lists: set[str] = set()
        for key in self.notices.everything():
            assert isinstance(key, tuple)
            if key[0] == "uri":
                await self.hosts.resource_updated(key[2])
            else:
                lists.add(_LIST_KINDS[key[2]])
        for kind in sorted(lists):
            await self.hosts.list_changed(kind)

    def _reselect(self) -> None:
        """Hosts' subscriptions, or the URIs read lately, changed: each upstream selects
        the URIs it serves."""
        wanted: dict[str, list[str]] = {link.name: [] for link in self.links}
        for uri in self.hosts.subscribed:
            for link in self._candidates(uri):
                wanted[link.name].append(uri)
                self.notices.watch(("uri", link.name, uri))
        for uri in self._read_uris:
            if uri not in self.hosts.subscribed:
                for link in self._candidates(uri):
                    wanted[link.name].append(uri)
        for link in self.links:
            link.cache.select(wanted[link.name])

    # ------------------------------------------------------------------ resources

    def _who(self, ctx: Any) -> str | None:
        request = ctx.request
        headers = getattr(request, "headers", None)
        return self.principals.of(headers.get("authorization") if headers is not None else None)

    def _candidates(self, uri: str) -> list[Link]:
        if len(self.links) == 1:
            return self.links
        owner = self._owners.get(uri)
        return [owner] if owner is not None else self.links

    async def _read(self, ctx: Any, params: types.ReadResourceRequestParams) -> dict[str, Any]:
        uri, who = str(params.uri), self._who(ctx)
        result: Any = None
        for link in self._candidates(uri):
            try:
                result = await link.cache.read(uri, principal=link.principal(who))
            except FreshCacheError as exc:
                raise _error(
                    NOT_FRESH, uri, "awaiting_fresh_source", "server_error", str(exc)
                ) from None
            if result.state != NOT_FOUND:
                break
        if uri in self._read_uris:
            del self._read_uris[uri]
            self._read_uris[uri] = None  # read again: the most recent now
        else:
            self._read_uris[uri] = None
            if len(self._read_uris) > READ_URIS:
                del self._read_uris[next(iter(self._read_uris))]
            self._reselect()
        self.notices.given(("uri", link.name, uri), result.version, result.state)
        if result.state != FRESH:
            raise withheld(uri, result.state, result.reason, result.detail)
        return {"contents": [_content(item) for item in result.contents], **UNCACHED}

    async def _subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> dict[str, Any]:
        await self.hosts.subscribe(ctx, str(params.uri))
        return {}

    async def _unsubscribe(
        self, ctx: Any, params: types.UnsubscribeRequestParams
    ) -> dict[str, Any]:
        await self.hosts.unsubscribe(ctx, str(params.uri))
        return {}

    async def _list_resources(self, ctx: Any, params: Any) -> dict[str, Any]:
        who = self._who(ctx)
        items: list[dict[str, Any]] = []
        seen: set[str] = set()
        left_out = []
        for link in self.links:
            listed = await link.cache.list_resources(principal=link.principal(who))
            if listed.state != FRESH:
                left_out.append(_state(link, listed.state, listed.reason, listed.detail))
                continue
            for info in listed.resources:
                if info.uri in seen:
                    continue  # the first upstream (config order) serves a URI two list
                seen.add(info.uri)
                self._owners[info.uri] = link
                items.append(_resource(info))
        return _merged("resources", items, left_out)

    async def _list_templates(self, ctx: Any, params: Any) -> dict[str, Any]:
        return await self._catalog(ctx, "resource_templates", "resourceTemplates")

    # ------------------------------------------------------------------ catalogs

    async def _list_prompts(self, ctx: Any, params: Any) -> dict[str, Any]:
        return await self._catalog(ctx, "prompts", "prompts")

    async def _get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> dict[str, Any]:
        """Passed through (`FreshCache.get_prompt`: computed, never cached)."""
        name = params.name
        owner = self._owner(name)
        if owner is None:
            data = {"state": "not_found", "reason": None, "prompt": name}
            raise MCPError(code=-32602, message=f"freshcache: no prompt {name!r}", data=data)
        link, upstream_name = owner
        try:
            got = await link.cache.get_prompt(
                upstream_name,
                params.arguments,
                principal=link.principal(self._who(ctx)),
                **_continuation(params),
            )
        except MethodNotFoundError as exc:  # an upstream without prompts/get
            raise MCPError(code=-32601, message=str(exc)) from None
        if got.state == "answered":
            return {**thawed(got.result or {}), "resultType": "complete"}
        if got.state == "input_required":
            return _input_required(ctx, name, got.input_requests, got.request_state)
        raise _error(_code(got.state), name, got.state, got.reason, got.detail, key="prompt")

    async def _list_tools(self, ctx: Any, params: Any) -> dict[str, Any]:
        """``tools/list``: remembered as what this host builds its calls from now."""
        listed = await self._tools_now(ctx)
        shown = {str(tool["name"]): tool for tool in listed["tools"]}
        self.hosts.remember_tools(ctx, self._who(ctx), shown)
        return listed

    async def _tools_now(self, ctx: Any) -> dict[str, Any]:
        listed = await self._catalog(ctx, "tools", "tools")
        if self.meta_tools:
            listed["tools"] = [*listed["tools"], *_meta_tool_items()]
        return listed

    async def _catalog(self, ctx: Any, kind: str, field: str) -> dict[str, Any]:
        who = self._who(ctx)
        items: list[dict[str, Any]] = []
        left_out = []
        for link in self.links:
            method = getattr(link.cache, kind)
            try:
                catalog = await method(principal=link.principal(who))
            except MethodNotFoundError:
                continue  # this upstream has no such list
            except FreshCacheError as exc:
                left_out.append(_state(link, "awaiting_fresh_source", "server_error", str(exc)))
                continue
            self.notices.given(("list", link.name, kind), catalog.version, catalog.state)
            if catalog.state != FRESH:
                left_out.append(_state(link, catalog.state, catalog.reason, catalog.detail))
                continue
            for item in catalog.items:
                entry = thawed(item)
                if kind != "resource_templates" and link.prefix:
                    entry["name"] = link.prefix + str(entry.get("name", ""))
                items.append(entry)
        return _merged(field, items, left_out)

    def _owner(self, name: str) -> tuple[Link, str] | None:
        """The upstream of a tool or prompt the host names, and its name there."""
        if len(self.links) == 1 and not self.links[0].prefix:
            return self.links[0], name
        for link in self.links:
            if link.prefix and name.startswith(link.prefix) and len(name) > len(link.prefix):
                return link, name[len(link.prefix) :]
        return None

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> dict[str, Any]:
        name, arguments = params.name, dict(params.arguments or {})
        if self.meta_tools and name == META_TOOLS[0]:
            listed = await self._list_tools(ctx, None)
            return _text_result(json.dumps(listed["tools"][: -len(META_TOOLS)], indent=1))
        if self.meta_tools and name == META_TOOLS[1]:
            name, arguments = str(arguments.get("name", "")), dict(arguments.get("arguments") or {})
        owner = self._owner(name)
        if owner is None:
            raise await self._unknown_tool(ctx, name, None)
        link, upstream_name = owner
        who = link.principal(self._who(ctx))
        seen = self._seen(ctx, name, upstream_name)
        if seen is not None:  # judged against a fresh list: a change heard is re-listed
            await link.cache.tools(principal=who)
        call = await link.cache.call_tool(
            upstream_name, arguments, principal=who, seen=seen, **_continuation(params)
        )
        if call.state == "answered":
            return {**thawed(call.result or {}), "resultType": "complete"}
        if call.state == "input_required":
            return _input_required(ctx, name, call.input_requests, call.request_state)
        if call.state in ("unknown_tool", "tool_changed"):
            # Nothing ran: the host's list is old.
            changed = call.state == "tool_changed"
            raise await self._unknown_tool(ctx, name, call.detail, changed=changed)
        if call.state == "may_have_run":
            # Sent, and its answer lost: it may have run, and it is never sent again
            # (invariant 16).
            text = (
                f"freshcache: the call to {name!r} got no answer ({call.reason}); it may have "
                "run, and it was not sent again"
            )
            result = _text_result(text)
            result["isError"] = True
            result["_meta"] = {"freshcache/state": call.state, "freshcache/reason": call.reason}
            return result
        raise _error(_code(call.state), name, call.state, call.reason, call.detail, key="tool")

    def _seen(self, ctx: Any, name: str, upstream_name: str) -> dict[str, Any] | None:
        """The definition of ``name`` this host was last handed (``tools/list``), as its
        upstream lists it: what the host built the call's arguments from (``None``: it
        never listed it, or its record was dropped (`TOOL_RECORDS`): a call refused as
        an unknown tool is then not sent again)."""
        shown = self.hosts.tool_seen(ctx, self._who(ctx), name)
        return None if shown is None else {**shown, "name": upstream_name}

    async def _unknown_tool(
        self, ctx: Any, name: str, detail: str | None, *, changed: bool = False
    ) -> MCPError:
        """A tool the host's list showed is gone or changed: name the current tools, tell
        every host."""
        await self.hosts.list_changed("tools")
        try:
            tools = (await self._tools_now(ctx))["tools"]
        except MCPError:
            tools = []
        names = [str(t.get("name")) for t in tools]
        now = f"the tools now: {', '.join(names) or 'none'}"
        message = (
            f"tool {name!r} changed its definition; list the tools again ({now})"
            if changed
            else f"no tool {name!r} any more; {now}"
        )
        state = "tool_changed" if changed else "unknown_tool"
        data = {"state": state, "tool": name, "tools": names, "detail": detail}
        if changed:  # the definition to rebuild the call from
            data["definition"] = next((t for t in tools if t.get("name") == name), None)
        return MCPError(code=-32602, message=message, data=data)


# ---------------------------------------------------------------------- answers


def withheld(uri: str, state: str, reason: str | None, detail: str | None) -> MCPError:
    """The JSON-RPC error a read that is not fresh gets."""
    return _error(_code(state), uri, state, reason, detail)


def _code(state: str) -> int:
    """The JSON-RPC error code of a state that is not an answer."""
    return -32602 if state == NOT_FOUND else DENIED if state == "denied" else NOT_FRESH


def _error(
    code: int, name: str, state: str, reason: str | None, detail: str | None, key: str = "uri"
) -> MCPError:
    because = f" ({reason})" if reason else ""
    data = {"state": state, "reason": reason, key: name}
    if detail:
        data["detail"] = detail
    return MCPError(code=code, message=f"freshcache: {name} is {state}{because}", data=data)


def _state(link: Link, state: str, reason: str | None, detail: str | None) -> dict[str, Any]:
    out = {"upstream": link.name, "state": state, "reason": reason}
    if detail:
        out["detail"] = detail
    return out


def _merged(
    field: str, items: list[dict[str, Any]], left_out: list[dict[str, Any]]
) -> dict[str, Any]:
    if left_out and not items:
        first = left_out[0]
        raise MCPError(
            code=NOT_FRESH,
            message=f"freshcache: {field} is {first['state']} ({first['reason']})",
            data={"state": first["state"], "reason": first["reason"], "upstreams": left_out},
        )
    result: dict[str, Any] = {field: items, **UNCACHED}
    if left_out:
        result["_meta"] = {"freshcache/withheld": left_out}
    return result


_CAPABILITY_OF = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
"""An input request's method -> the client capability a host must have declared for it."""


def _continuation(params: Any) -> dict[str, Any]:
    """A host's retry of an ``input_required`` request: its ``requestState`` and
    ``inputResponses``, as JSON, for `FreshCache.call_tool` / `get_prompt`."""
    sent = params.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {
        "request_state": sent.get("requestState"),
        "input_responses": sent.get("inputResponses"),
    }


def _input_required(
    ctx: Any, name: str, asked: Mapping[str, Any] | None, state: str | None
) -> dict[str, Any]:
    """An upstream needs input before ``name`` can complete (basic/patterns/mrtr).

    Relayed to a 2026-07-28 host as the ``InputRequiredResult`` itself: it answers the
    requests and retries with ``requestState`` and ``inputResponses``, which the proxy
    passes upstream. A request the host did not declare the capability for, and any
    2025-11-25 host (whose revision asks for input with server-to-client requests,
    which the proxy does not make), get a JSON-RPC error saying so."""
    requests = thawed(asked or {})
    data: dict[str, Any] = {"state": "input_required", "reason": None, "name": name}
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        data["inputRequests"] = requests
        message = (
            f"freshcache: {name} needs input first (an input_required result), which the proxy "
            f"relays to 2026-07-28 hosts only; this host speaks {ctx.protocol_version}"
        )
        raise MCPError(code=NOT_FRESH, message=message, data=data)
    declared = ctx.session.client_capabilities
    methods = {str(item.get("method")) for item in requests.values() if isinstance(item, dict)}
    needed = {_CAPABILITY_OF.get(method, method) for method in methods}
    lacking = sorted(c for c in needed if getattr(declared, c, None) is None)
    if lacking:
        data["inputRequests"] = requests
        message = (
            f"freshcache: {name} needs input this host did not declare it can give "
            f"({', '.join(lacking)})"
        )
        raise MCPError(code=NOT_FRESH, message=message, data=data)
    result: dict[str, Any] = {"resultType": "input_required"}
    if asked is not None:
        result["inputRequests"] = requests
    if state is not None:
        result["requestState"] = state
    return result


def _resource(info: Any) -> dict[str, Any]:
    """A ``Resource`` as the upstream listed it (title, description, size, annotations,
    icons, ``_meta``), its ``uri`` and a ``name`` (the schema requires one) made sure."""
    entry: dict[str, Any] = thawed(info.item) if info.item is not None else {}
    entry["uri"] = info.uri
    entry["name"] = info.name or info.uri
    if info.mime_type:
        entry["mimeType"] = info.mime_type
    return entry


def _content(item: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"uri": item.uri}
    if item.mime_type is not None:
        out["mimeType"] = item.mime_type
    if item.blob is not None:
        out["blob"] = item.blob
    else:
        out["text"] = item.text or ""
    if item.annotations is not None:
        out["annotations"] = thawed(item.annotations)
    if item.meta is not None:
        out["_meta"] = thawed(item.meta)
    return out


def thawed(value: Any) -> Any:
    """A plain JSON copy of a frozen (read-only) value freshcache handed out."""
    if isinstance(value, Mapping):
        return {str(k): thawed(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [thawed(v) for v in value]
    return value


def _text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "resultType": "complete"}


def _meta_tool_items() -> list[dict[str, Any]]:
    return [
        {
            "name": META_TOOLS[0],
            "description": "List the tools the upstream servers have now (a fresh catalog).",
            "inputSchema": {"type": "object", "properties": {}},
        },
        {
            "name": META_TOOLS[1],
            "description": "Call a tool by the name freshcache_list_tools shows now.",
            "inputSchema": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
                "required": ["name"],
            },
        },
    ]


__all__ = ["Proxy", "withheld"]
