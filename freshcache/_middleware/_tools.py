"""``FreshCache.call_tool``: a tool call runs at most once, against the definition the
caller saw.

A tool can pay, delete, send. So:

- **Sent once.** The call goes out once; an answer lost after it was sent (a broken
  stream, a cut, no answer in time) is ``may_have_run``, never a second send
  (`freshcache._protocol._reissue`).
- **Re-listed only on the protocol's own signal** (`refused_as_unknown`): the server
  refused the call because it has no such tool. A tool's own failure, whatever its
  words, is the answer.
- **Never arguments against a definition the caller did not see.** After that refusal
  the tool catalog is listed again (the spec allows re-fetching before the TTL); the
  call is sent once more only if the new, fresh catalog lists the tool exactly as the
  caller saw it (``seen``: the tool item, the catalog, or its version it built the
  arguments from; without ``seen`` that is not known, so never), and only after a
  JSON-RPC refusal: a tool error result, even one saying the tool is unknown, is a
  result and is never sent again. Listed otherwise, the answer is ``tool_changed``
  with the new ``tool``: the caller (the model) rebuilds the call. Not listed:
  ``unknown_tool``. The re-list not fresh: its state and reason.
- **Nor a first send against a change already heard.** When the newest tool catalog
  the cache holds (fresh, or the last one listed while no change was heard since) lists
  the tool otherwise than ``seen`` (or not at all), the answer is ``tool_changed``
  (``unknown_tool``) at once, nothing sent.
- **One deadline.** ``timeout`` bounds the whole call, re-list and second send included.
- **Input required** (basic/patterns/mrtr): ``input_required`` carries what the server
  asks for and its ``request_state``; call again with ``request_state=`` (and
  ``input_responses=``) to continue. It is never ``answered``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from .._core import Catalog, RequestFailed
from .._core._frozen import frozen
from .._errors import ConfigurationError
from .._protocol._tools import (
    ToolAnswer,
    ToolRefused,
    ToolReply,
    input_required,
    refused_as_unknown,
    same_definition,
    tool_call_params,
)
from ._passthrough import check_continuation, continuation, send_once
from ._setup import checked_deadline

if TYPE_CHECKING:
    from .._core import FreshnessEngine, StreamEvent
    from .._sources._source import Source
    from ._telemetry import Telemetry

ToolCallState = Literal[
    "answered",
    "may_have_run",
    "input_required",
    "tool_changed",
    "unknown_tool",
    "denied",
    "not_found",
    "unavailable",
    "awaiting_fresh_source",
    "stale",
    "invalid_tool",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """What one `FreshCache.call_tool` came to.

    ``answered``: the server's ``CallToolResult`` is in ``result`` (read-only; a tool
    error has ``is_error``). ``may_have_run``: the call was sent and its answer lost
    or unusable (``reason``: ``unreachable``, ``timeout``, ``server_error``): the tool
    may have run; it was not sent again. ``input_required``: the server needs input before the call
    can complete (``input_requests``, ``request_state``: continue with
    ``call_tool(name, arguments, request_state=..., input_responses=...)``).
    ``tool_changed``: the fresh catalog the cache holds (nothing sent), or the one
    re-listed after the server refused the call as an unknown tool, lists it with a
    definition other than the one the caller built its arguments from (``tool``, the new
    one; ``catalog``): nothing ran, rebuild the call. ``unknown_tool``: that fresh
    catalog (``catalog``) does not have it.
    ``awaiting_fresh_source`` (or an opted-in ``stale``): the re-list gave no fresh
    catalog; ``reason`` says why. ``denied``: the server refused this principal.
    ``not_found``: the server refused the call's params (``-32602``); ``detail`` is its
    message. ``unavailable``: no result: ``unreachable`` (the call never reached the
    server), ``server_error`` (the server answered an error, its message in ``detail``),
    ``timeout`` (no time was left to send it).
    ``invalid_tool``: the server's definition of the tool breaks the ``x-mcp-header``
    rules (2026-07-28 over HTTP); it was left out of the catalog (`Catalog.excluded`)
    and the call was not sent (``detail`` says why).
    """

    name: str
    state: ToolCallState
    result: Mapping[str, Any] | None = None
    reason: str | None = None
    catalog: Catalog | None = None
    """The fresh tool catalog the answer was judged against: re-listed after an "unknown
    tool" refusal, or held when it already showed the tool changed (nothing sent)."""
    retried: bool = False
    """Whether the call was sent a second time (after a refusal as unknown, the tool
    listed again exactly as the caller saw it)."""
    tool: Mapping[str, Any] | None = None
    """``tool_changed``: the tool as the server lists it now."""
    input_requests: Mapping[str, Any] | None = None
    """``input_required``: what the server asks for (``inputRequests``), if anything."""
    request_state: str | None = None
    """``input_required``: the ``requestState`` to echo when continuing the call."""
    detail: str | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """True when the server answered the call (a tool error is still an answer)."""
        return self.state == "answered"

    @property
    def is_error(self) -> bool:
        """The answer's ``isError`` (a tool execution error)."""
        return self.result is not None and self.result.get("isError") is True

    @property
    def text(self) -> str | None:
        """The answer's text content, joined by newlines; ``None`` without any."""
        if self.result is None:
            return None
        items = self.result.get("content") or ()
        texts = [str(i["text"]) for i in items if isinstance(i, Mapping) and "text" in i]
        return "\n".join(texts) if texts else None


Seen = Mapping[str, Any] | Catalog | str | None
"""What the caller built a call's arguments from: the tool's catalog item, the catalog,
or that catalog's ``version`` (``None``: not known, so a refused call is never sent
again)."""


class ToolCalls:
    """`FreshCache.call_tool` (a mixin: the cache provides what is declared here)."""

    source: Source
    principal: str | None
    read_timeout: float

    if TYPE_CHECKING:  # provided by `FreshCache` and its catalog methods
        telemetry: Telemetry
        engine: FreshnessEngine

        def _feed_hints(self, hints: tuple[StreamEvent, ...]) -> None: ...
        def invalidate_catalog(self, kind: str) -> None: ...
        async def tools(
            self, *, timeout: float | None = None, principal: str | None = None
        ) -> Catalog: ...

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        principal: str | None = None,
        seen: Seen = None,
        request_state: str | None = None,
        input_responses: Mapping[str, Any] | None = None,
    ) -> ToolCall:
        """Call tool ``name`` once; on a refusal as an unknown tool re-list the tool
        catalog and send once more only to a tool listed exactly as the caller saw it
        (see the module docstring). ``timeout`` bounds it all."""
        check_tool_call(name, arguments)
        check_continuation(request_state, input_responses)
        budget = checked_deadline(timeout, self.read_timeout)
        with self.telemetry.tool_span(name) as span:
            call = await self._call_tool(
                name,
                tool_call_params(
                    name, arguments, request_state=request_state, input_responses=input_responses
                ),
                anyio.current_time() + budget,
                principal,
                seen,
            )
            self.telemetry.tool_result(span, call.state, call.reason, call.is_error)
        return call

    async def _call_tool(
        self,
        name: str,
        params: dict[str, Any],
        end: float,
        principal: str | None,
        seen: Seen,
    ) -> ToolCall:
        who = principal if principal is not None else self.principal
        held = self.engine.catalogs.last_held("tools", who)  # fresh or not since
        saw = seen_definition(name, seen, held)
        # The fresh catalog, else the one last listed if no change was heard since (a
        # list without ttlMs expires at once): no I/O. After a change heard, neither.
        catalogs = self.engine.catalogs
        known = self.engine.catalog_lookup("tools", who) or catalogs.unchanged("tools", who)
        if saw is not None and known is not None and name not in known.excluded:
            changed = _changed(name, saw, known)
            if changed is not None:  # a change already heard: never sent with old arguments
                return changed
        # Mcp-Param-* headers follow the definition seen, else the one held.
        shown = saw if saw is not None or held is None else _entry(held, name)
        outcome = await self._send_tool_call(name, params, who, end, shown)
        if isinstance(outcome, ToolRefused):  # a tool left out of the catalog: never sent
            return ToolCall(name, "invalid_tool", detail=outcome.detail)
        answer = outcome if isinstance(outcome, RequestFailed) else outcome.result
        if not refused_as_unknown(name, answer):
            return _judged(name, outcome)
        # Refused before it ran: the caller's catalog may be old (spec server/tools).
        self.invalidate_catalog("tools")
        left = end - anyio.current_time()
        catalog = await self.tools(timeout=max(left, 1e-3), principal=principal)
        if catalog.state != "fresh":  # a stale (opted-in) list is no ground to call on
            return ToolCall(
                name, catalog.state, reason=catalog.reason, catalog=catalog, detail=catalog.detail
            )
        now = _entry(catalog, name)
        if now is None:
            listed = ", ".join(catalog.names) or "none"
            detail = f"the server has no tool {name!r} any more; its tools now: {listed}"
            return ToolCall(name, "unknown_tool", catalog=catalog, detail=detail)
        if not same_definition(saw, now):
            detail = (
                f"the server refused {name!r} as unknown and now lists it with a definition "
                "the arguments were not built from (or `seen=` did not say which): not sent "
                "again; rebuild the call from `tool`"
            )
            return ToolCall(name, "tool_changed", catalog=catalog, tool=now, detail=detail)
        if not isinstance(outcome, RequestFailed):
            # A tool error result, even one saying "unknown tool", is a result: never
            # sent again (only a JSON-RPC refusal says the tool did not run).
            return _judged(name, outcome, catalog=catalog)
        if end - anyio.current_time() <= 0:
            detail = f"tools/call {name!r}: no time left to send it again after the re-list"
            return ToolCall(name, "unavailable", reason="timeout", catalog=catalog, detail=detail)
        outcome = await self._send_tool_call(name, params, who, end, now)
        if isinstance(outcome, ToolRefused):
            return ToolCall(name, "invalid_tool", catalog=catalog, detail=outcome.detail)
        return _judged(name, outcome, catalog=catalog, retried=True)

    async def _send_tool_call(
        self,
        name: str,
        params: dict[str, Any],
        who: str | None,
        end: float,
        saw: Mapping[str, Any] | None,
    ) -> ToolAnswer:
        """One send, by ``end`` (`send_once`). ``saw``: the definition the caller built
        it from (the source's headers follow it)."""
        label = f"tools/call {name!r}"
        outcome = await send_once(
            "tools/call", label, lambda: self.source.call_tool(params, who, saw), end, self.source
        )
        if outcome.hints:
            self._feed_hints(outcome.hints)  # a change heard on the way counts (invariant 9)
        return outcome


def check_tool_call(name: object, arguments: object) -> None:
    """A caller's ``call_tool`` arguments, checked before anything is sent (async and
    sync alike): a tool's name is a non-empty string, its arguments a mapping or ``None``."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"call_tool() takes a tool name (a non-empty str), got {name!r}")
    if arguments is not None and not isinstance(arguments, Mapping):
        raise ConfigurationError(
            f"call_tool() takes the tool's arguments as a mapping or None, got {arguments!r}"
        )


def seen_definition(name: str, seen: object, held: Catalog | None) -> Mapping[str, Any] | None:
    """The definition of tool ``name`` the caller built its arguments from (``None``:
    unknown, so a refused call is never sent again). ``held``: the catalog last
    settled, fresh or not since, which a ``seen`` version must name."""
    if isinstance(seen, Catalog):
        return _entry(seen, name)
    if isinstance(seen, str):
        return _entry(held, name) if held is not None and seen == held.version else None
    if isinstance(seen, Mapping):
        if seen.get("name") != name:
            raise ConfigurationError(
                f"call_tool({name!r}, seen=...) takes that tool's catalog item, "
                f"got one named {seen.get('name')!r}"
            )
        return seen
    if seen is None:
        return None  # what the arguments were built from is not known: never sent again
    raise ConfigurationError(
        "call_tool(seen=...) takes the tool's catalog item, the tool Catalog or its "
        f"version, got {seen!r}"
    )


def _changed(name: str, saw: Mapping[str, Any], known: Catalog) -> ToolCall | None:
    """The answer without a send when the fresh catalog ``known`` lists tool ``name``
    otherwise than the caller saw it, or not at all (``None``: as seen, send)."""
    now = _entry(known, name)
    if now is None:
        listed = ", ".join(known.names) or "none"
        detail = f"the server has no tool {name!r} any more; its tools now: {listed}; not sent"
        return ToolCall(name, "unknown_tool", catalog=known, detail=detail)
    if same_definition(saw, now):
        return None
    detail = (
        f"the server now lists {name!r} with a definition the arguments were not built "
        "from: not sent; rebuild the call from `tool`"
    )
    return ToolCall(name, "tool_changed", catalog=known, tool=now, detail=detail)


def _entry(catalog: Catalog, name: str) -> Mapping[str, Any] | None:
    """Tool ``name``'s item in ``catalog`` (``None``: not listed)."""
    return next((item for item in catalog.items if item.get("name") == name), None)


def _judged(
    name: str,
    outcome: ToolReply | RequestFailed,
    *,
    catalog: Catalog | None = None,
    retried: bool = False,
) -> ToolCall:
    if isinstance(outcome, RequestFailed):
        state: ToolCallState = "unavailable"
        if outcome.lost:
            state = "may_have_run"
        elif outcome.kind == "denied" or outcome.kind == "not_found":
            state = outcome.kind
        reason = None if state in ("denied", "not_found") else outcome.kind
        detail = outcome.detail or outcome.kind
        if outcome.lost and "may have run" not in detail:
            detail += "; the call was sent and its answer lost: it may have run (not sent again)"
        return ToolCall(name, state, reason=reason, catalog=catalog, retried=retried, detail=detail)
    result = outcome.result
    if input_required(result):
        asked = continuation(result)
        if isinstance(asked, str):
            detail = f"tools/call: {asked}"
            return ToolCall(name, "may_have_run", reason="server_error", detail=detail)
        return ToolCall(
            name,
            "input_required",
            catalog=catalog,
            retried=retried,
            input_requests=asked[0],
            request_state=asked[1],
            detail="the server needs input before the call can complete",
        )
    kind = result.get("resultType", "complete")
    if kind != "complete":
        detail = f"tools/call: an unusable result (resultType {kind!r}); the tool may have run"
        return ToolCall(name, "may_have_run", reason="server_error", detail=detail)
    return ToolCall(name, "answered", result=frozen(result), catalog=catalog, retried=retried)


__all__ = [
    "Seen",
    "ToolCall",
    "ToolCallState",
    "ToolCalls",
    "check_continuation",
    "check_tool_call",
]
