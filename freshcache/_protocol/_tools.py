"""``tools/call``: its params, and which answers mean "your tool catalog may be old".

The spec (server/tools, "Error Handling") answers a call of an unknown tool with
JSON-RPC ``-32602``, the same code as invalid arguments; some servers answer a tool
error result (``isError``) whose text says the tool is unknown. Either may mean the
caller acted on a tool list the server no longer has: the spec allows re-fetching the
list before its TTL on such errors. A ``CallToolResult`` means the tool ran, even with
``isError``: it is never sent again. A JSON-RPC error is sent again at most once, and
only when the re-listed entry of that tool differs from the one the caller had
(`tool_changed`); see `freshcache.FreshCache.call_tool`. Sans-IO: the transports
send, this decides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .._core import RequestFailed
from ._wire import HEADER_MISMATCH, INVALID_PARAMS

_UNKNOWN_TOOL = re.compile(
    r"(?i)\b(unknown|no such|invalid|unrecognized|missing)\s+tool\b"
    r"|\btool\b[^.]*\b(not found|does not exist|doesn't exist|is not available|no longer)"
)
"""What a server says in a JSON-RPC error when the tool it was asked for does not exist."""

_UNKNOWN_TOOL_RESULT = re.compile(
    r"(?i)^\W*(unknown|no such|unrecognized)\s+tool\b"
    r"|^\W*tool\s+\S+\s+(not found|does not exist|doesn't exist|is not available)"
)
"""The same in a tool error result, narrower: only a text that *starts* by saying so
(a tool's own failure may mention "tool ... no longer" in passing)."""


def tool_call_params(name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """``tools/call`` params: the tool's name and its arguments (a plain copy)."""
    return {"name": name, "arguments": dict(arguments or {})}


def catalog_may_be_old(outcome: Mapping[str, Any] | RequestFailed) -> bool:
    """Whether a ``tools/call`` outcome says the caller's tool catalog may be old: a
    JSON-RPC ``-32602`` (an unknown tool, or invalid arguments), ``-32020`` (its
    ``Mcp-Param-*`` headers: the spec says list again, then retry), a JSON-RPC error
    whose text says the tool is unknown, or a tool error result that starts by saying so."""
    if isinstance(outcome, RequestFailed):
        if outcome.code in (INVALID_PARAMS, HEADER_MISMATCH):  # -32020: its Mcp-Param-*
            return True
        return outcome.code is not None and bool(_UNKNOWN_TOOL.search(outcome.detail))
    return result_says_unknown_tool(outcome)


def result_says_unknown_tool(result: Mapping[str, Any]) -> bool:
    """Whether a ``CallToolResult`` is a tool error that starts "unknown tool ..."."""
    if result.get("isError") is not True:
        return False
    content = result.get("content")
    texts = [
        str(item.get("text", ""))
        for item in (content if isinstance(content, list) else [])
        if isinstance(item, Mapping)
    ]
    return any(_UNKNOWN_TOOL_RESULT.search(text) for text in texts)


def may_call_again(outcome: Mapping[str, Any] | RequestFailed) -> bool:
    """Whether a call with this outcome may be sent again: only a JSON-RPC error (the
    server refused the request); a ``CallToolResult`` means the tool ran."""
    return isinstance(outcome, RequestFailed)


def tool_changed(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> bool:
    """Whether a tool's catalog entry changed between two listings (absent is ``None``):
    it appeared, or its ``inputSchema`` changed. A tool listed unchanged did not."""
    if after is None:
        return False
    if before is None:
        return True
    return before.get("inputSchema") != after.get("inputSchema")


__all__ = [
    "catalog_may_be_old",
    "may_call_again",
    "result_says_unknown_tool",
    "tool_call_params",
    "tool_changed",
]
