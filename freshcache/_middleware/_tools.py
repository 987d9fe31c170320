"""``FreshCache.call_tool``: a tool call that revalidates the tool catalog on error.

A ``tools/call`` answered "unknown tool" or ``-32602`` (`catalog_may_be_old`, the
protocol's rule) may mean the caller acted on a tool list the server no longer has.
The cache then re-lists once (``invalidate_catalog("tools")`` and ``tools()``: a walk
sent after the error). It sends the call again at most once, and only when the server
refused it with a JSON-RPC error (a ``CallToolResult``, even ``isError``, means the
tool ran: never twice) and the new, fresh catalog shows the tool changed against the
catalog held before the call (it appeared, or its ``inputSchema`` changed:
`tool_changed`). ``-32602`` also means invalid arguments: for a tool listed unchanged
the server's error is reported as is. The caller gets an answer, or an explicit
state: the tool is gone from the new catalog (``unknown_tool``, with that catalog),
the catalog could not be proved fresh (its state and reason), never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._core import Catalog, RequestFailed, StreamEvent
from .._core._frozen import frozen
from .._errors import ConfigurationError
from .._protocol._tools import catalog_may_be_old, may_call_again, tool_changed
from .._sources._http import excluded_tool, learned_tool
from .._sources._tools import call_tool
from ._setup import checked_deadline

if TYPE_CHECKING:
    from .._sources._source import Source

ToolCallState = Literal[
    "answered",
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
    error has ``is_error``). ``unknown_tool``: the server says there is no such tool,
    and the catalog re-listed after it (``catalog``, fresh) does not have it.
    ``awaiting_fresh_source`` (or an opted-in ``stale``): the re-list that the error
    asked for gave no fresh catalog; ``reason`` says why. ``denied``: the server
    refused this principal. ``not_found``: the server refused the call's params
    (``-32602``: invalid arguments, or "unknown tool" for a tool its new list shows
    unchanged); ``detail`` is the server's message. ``unavailable``: the call got no
    answer (``reason``: ``unreachable``, ``timeout``, ``server_error``).
    ``invalid_tool``: the server's definition of the tool breaks the ``x-mcp-header``
    rules (2026-07-28 over HTTP); it was left out of the catalog (`Catalog.excluded`)
    and the call was not sent (``detail`` says why).
    """

    name: str
    state: ToolCallState
    result: Mapping[str, Any] | None = None
    reason: str | None = None
    catalog: Catalog | None = None
    """The tool catalog re-listed after an "unknown tool" answer, when there was one."""
    retried: bool = False
    """Whether the call was sent again after the re-list."""
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


class ToolCalls:
    """`FreshCache.call_tool` (a mixin: the cache provides what is declared here)."""

    source: Source
    principal: str | None
    read_timeout: float

    if TYPE_CHECKING:  # provided by `FreshCache` and its catalog methods

        def _feed_hints(self, hints: tuple[StreamEvent, ...]) -> None: ...
        def invalidate_catalog(self, kind: str) -> None: ...
        def catalog_status(self, kind: str, *, principal: str | None = None) -> Catalog: ...
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
    ) -> ToolCall:
        """Call tool ``name`` on the server; on "unknown tool" / ``-32602`` re-list the
        tool catalog once and retry at most once (see the module docstring)."""
        check_tool_call(name, arguments)
        deadline = checked_deadline(timeout, self.read_timeout)
        who = principal if principal is not None else self.principal
        refused = excluded_tool(self.source, name, who)
        if refused is not None:  # never call a tool left out of the catalog
            return ToolCall(name, "invalid_tool", detail=refused)
        held = self.catalog_status("tools", principal=principal)
        known = held.state in ("fresh", "stale")  # a list the caller may have acted on
        before = _entry(held, name)
        if before is not None:  # its Mcp-Param-* headers follow the definition the caller saw
            learned_tool(self.source, who, before)
        outcome = await self._send_tool_call(name, arguments, who, deadline)
        if not catalog_may_be_old(outcome):
            return _judged(name, outcome)
        self.invalidate_catalog("tools")  # the spec allows re-fetching before the TTL
        catalog = await self.tools(timeout=deadline, principal=principal)
        if catalog.state != "fresh":  # a stale (opted-in) list is no ground to call on
            return ToolCall(
                name, catalog.state, reason=catalog.reason, catalog=catalog, detail=catalog.detail
            )
        after = _entry(catalog, name)
        if after is None:
            listed = ", ".join(catalog.names) or "none"
            detail = f"the server has no tool {name!r} any more; its tools now: {listed}"
            return ToolCall(name, "unknown_tool", catalog=catalog, detail=detail)
        if (
            not may_call_again(outcome)
            or not known
            or not tool_changed(before, after)
        ):
            return _judged(name, outcome, catalog=catalog)  # the server's answer, as is
        outcome = await self._send_tool_call(name, arguments, who, deadline)
        return _judged(name, outcome, catalog=catalog, retried=True)

    async def _send_tool_call(
        self, name: str, arguments: Mapping[str, Any] | None, who: str | None, deadline: float
    ) -> dict[str, Any] | RequestFailed:
        outcome, hints = await call_tool(self.source, name, arguments, who, deadline)
        if hints:
            self._feed_hints(hints)  # a change heard on the way counts (invariant 9)
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


def _entry(catalog: Catalog, name: str) -> Mapping[str, Any] | None:
    """Tool ``name``'s item in ``catalog`` (``None``: not listed)."""
    return next((item for item in catalog.items if item.get("name") == name), None)


def _judged(
    name: str,
    outcome: dict[str, Any] | RequestFailed,
    *,
    catalog: Catalog | None = None,
    retried: bool = False,
) -> ToolCall:
    if isinstance(outcome, RequestFailed):
        state: ToolCallState = "unavailable"
        if outcome.kind == "denied" or outcome.kind == "not_found":
            state = outcome.kind
        reason = None if state != "unavailable" else outcome.kind
        return ToolCall(
            name, state, reason=reason, catalog=catalog, retried=retried, detail=_why(outcome)
        )
    return ToolCall(name, "answered", result=frozen(outcome), catalog=catalog, retried=retried)


def _why(outcome: dict[str, Any] | RequestFailed) -> str:
    if isinstance(outcome, RequestFailed):
        return outcome.detail or outcome.kind
    return ToolCall("", "answered", result=outcome).text or "an error result"


__all__ = ["ToolCall", "ToolCallState", "ToolCalls", "check_tool_call"]
