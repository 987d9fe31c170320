"""One ``tools/call`` through a source's own connection (`FreshCache.call_tool`).

A source moves the bytes; `freshcache._protocol._tools` decides what the answer means.
`HttpSource` and `StdioSource` send it on the channel they read and list on (the same
``_meta``, headers, session and renegotiation); `McpClientSource` through its SDK
client; a wrapper (`SourceWrapper`) through what it wraps; any other source through
its own ``call_tool(name, arguments, principal)`` when it has one (an in-memory
server). A source with none cannot call tools and says so as a failure, never by
raising: neither does a source's own ``call_tool`` that raises (``server_error``)
nor any call past the caller's ``timeout`` (``timeout``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from .._core import Partition, RequestFailed, StreamEvent
from .._protocol._tools import tool_call_params
from ._source import SourceWrapper

if TYPE_CHECKING:  # a source of a transport exists only once its module is loaded
    from ._http import HttpSource
    from ._mcp_client import McpClientSource
    from ._stdio import StdioSource

ToolOutcome = tuple[dict[str, Any] | RequestFailed, tuple[StreamEvent, ...]]
"""A ``tools/call`` result (or why there is none) and the change hints its answer carried."""


async def call_tool(
    source: object,
    name: str,
    arguments: Mapping[str, Any] | None,
    principal: Partition,
    timeout: float,
) -> ToolOutcome:
    """Send one ``tools/call`` for ``principal`` through ``source``, within ``timeout``
    seconds."""
    outcome: ToolOutcome | None = None
    with anyio.move_on_after(timeout):
        outcome = await _send(source, name, arguments, principal, timeout)
    if outcome is None:
        detail = f"tools/call {name!r} got no answer within {timeout:g}s"
        return RequestFailed("timeout", detail), ()
    return outcome


async def _send(
    source: object,
    name: str,
    arguments: Mapping[str, Any] | None,
    principal: Partition,
    timeout: float,
) -> ToolOutcome:
    while isinstance(source, SourceWrapper):
        source = source.inner
    params = tool_call_params(name, arguments)
    if _is_a(source, "_http", "HttpSource"):
        http: HttpSource = source  # type: ignore[assignment]
        hints: list[StreamEvent] = []
        result, _ = await http._call("tools/call", params, principal, hints)
        return result, tuple(hints)
    if _is_a(source, "_stdio", "StdioSource"):
        stdio: StdioSource = source  # type: ignore[assignment]
        answer = await stdio.send_request("tools/call", params, timeout=timeout)
        return stdio._outcome("tools/call", answer), stdio._take_hints()
    if _is_a(source, "_mcp_client", "McpClientSource"):
        return await _sdk_call(source, params), ()  # type: ignore[arg-type]
    caller = getattr(source, "call_tool", None)
    if callable(caller):
        try:
            outcome: dict[str, Any] | RequestFailed = await caller(
                params["name"], params["arguments"], principal
            )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            return RequestFailed("server_error", f"{type(source).__name__}.call_tool: {exc!r}"), ()
        return outcome, ()
    return RequestFailed("server_error", f"{type(source).__name__} cannot call tools"), ()


def _is_a(source: object, module: str, name: str) -> bool:
    """Whether ``source`` is the transport ``name`` of ``module``, without importing a
    transport the program never loaded (no source of it can exist then)."""
    loaded = sys.modules.get(f"{__package__}.{module}")
    return loaded is not None and isinstance(source, getattr(loaded, name))


async def _sdk_call(
    source: McpClientSource, params: dict[str, Any]
) -> dict[str, Any] | RequestFailed:
    async def call(client: Any) -> dict[str, Any]:
        result = await client.call_tool(params["name"], params["arguments"])
        dumped: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True)
        return dumped

    outcome: dict[str, Any] | RequestFailed = await source._request(call)
    return outcome


__all__ = ["ToolOutcome", "call_tool"]
