"""``tools/call``: its params, and which answers mean "your tool catalog may be old".

The spec (server/tools, "Error Handling") answers a call of an unknown tool with
JSON-RPC ``-32602``; servers that predate that, or wrap it, answer a tool error result
(``isError``) whose text says the tool is unknown. Either means the caller acted on a
tool list the server no longer has: the spec allows re-fetching the list before its
TTL on such errors, and freshcache re-lists once and retries at most once
(`freshcache.FreshCache.call_tool`). Sans-IO: the transports send, this decides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .._core import RequestFailed
from ._wire import INVALID_PARAMS

_UNKNOWN_TOOL = re.compile(
    r"(?i)\b(unknown|no such|invalid|unrecognized|missing)\s+tool\b"
    r"|\btool\b[^.]*\b(not found|does not exist|doesn't exist|is not available|no longer)"
)
"""What a server says when the tool it was asked for does not exist (any code)."""


def tool_call_params(name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """``tools/call`` params: the tool's name and its arguments (a plain copy)."""
    return {"name": name, "arguments": dict(arguments or {})}


def catalog_may_be_old(outcome: Mapping[str, Any] | RequestFailed) -> bool:
    """Whether a ``tools/call`` outcome says the caller's tool catalog may be old:
    ``-32602`` (invalid params: an unknown tool), or an error (JSON-RPC or a result
    with ``isError``) whose text says the tool is unknown."""
    if isinstance(outcome, RequestFailed):
        if outcome.code == INVALID_PARAMS:
            return True
        return outcome.code is not None and bool(_UNKNOWN_TOOL.search(outcome.detail))
    if outcome.get("isError") is not True:
        return False
    content = outcome.get("content")
    texts = [
        str(item.get("text", ""))
        for item in (content if isinstance(content, list) else [])
        if isinstance(item, Mapping)
    ]
    return bool(_UNKNOWN_TOOL.search(" ".join(texts)))


__all__ = ["catalog_may_be_old", "tool_call_params"]
