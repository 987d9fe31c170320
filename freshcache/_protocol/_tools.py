"""``tools/call``: its params, and what its answers mean (sans-IO; the transports send).

A tool can pay, delete, send: a call runs at most once, against the definition the
caller built its arguments from.

- **Lost answers.** ``tools/call`` is never re-issued after its answer was lost
  (`freshcache._protocol._reissue`); such an outcome is `RequestFailed.lost`: the
  tool may have run.
- **"Unknown tool", and only that, says the caller's catalog may be old**
  (`refused_as_unknown`): a JSON-RPC ``-32602`` whose message names the called tool as
  unknown (spec server/tools, "Error Handling": ``Unknown tool: NAME``), or a tool
  error result whose whole text does, in the forms real servers produce: the Python
  SDK 1.x and 2.x (``Unknown tool: NAME``), fastmcp (``Unknown tool: 'NAME'``), the
  TypeScript SDK (``MCP error -32602: Tool NAME not found`` / ``... disabled``); the
  name may be quoted, and the error's own code named first (``invalid params: ...``). A
  tool's own failure that mentions "not found" (``-32603`` "tool pay failed: customer
  record not found") is not: the tool ran, or may have.
- **Refused before it ran.** Only the JSON-RPC refusal may be followed by one more
  send (`FreshCache.call_tool` decides when); a result, even a tool error saying the
  tool is unknown, is final.
- **Left out, never sent.** A source refuses to send a call of a tool it left out of
  the catalog (`ToolRefused`), and learns what it needs to send a call (its
  ``Mcp-Param-*`` headers) from the definition the caller saw, handed to
  `Source.call_tool` as ``tool``.
- **Input required.** A ``resultType: "input_required"`` result (basic/patterns/mrtr)
  is not an answer: the server asks for input (``inputRequests``) and/or hands back a
  ``requestState`` to echo in a continuation of the call (`tool_call_params`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._core import RequestFailed, StreamEvent
from ._wire import HEADER_MISMATCH, INVALID_PARAMS


@dataclass(frozen=True, slots=True)
class ToolReply:
    """The result a ``tools/call`` got (``CallToolResult`` or ``input_required``), or a
    request passed through (`Source.forward`: ``prompts/get``), and the change hints its
    answer carried on the way (invariant 9)."""

    result: dict[str, Any]
    hints: tuple[StreamEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolRefused:
    """A ``tools/call`` the source refused to send: the tool was left out of the
    catalog by a protocol rule (its ``x-mcp-header`` annotations are invalid,
    2026-07-28 over HTTP). Nothing was sent; ``detail`` says why."""

    detail: str
    hints: tuple[StreamEvent, ...] = ()


ToolAnswer = ToolReply | RequestFailed | ToolRefused
"""What one ``tools/call`` came to on a source (`Source.call_tool`)."""


def tool_answer(
    outcome: dict[str, Any] | RequestFailed, hints: tuple[StreamEvent, ...]
) -> ToolReply | RequestFailed:
    """A ``tools/call`` outcome with the change hints its answer carried."""
    if isinstance(outcome, RequestFailed):
        return replace(outcome, hints=outcome.hints + hints) if hints else outcome
    return ToolReply(outcome, hints)


def plain(value: Any) -> Any:
    """``value`` as plain JSON types: mappings (a catalog's read-only ones too) become
    dicts, tuples and lists lists; what freshcache hands out can be sent back as is."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def tool_call_params(
    name: str,
    arguments: Mapping[str, Any] | None,
    *,
    request_state: str | None = None,
    input_responses: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``tools/call`` params: the tool's name and its arguments (plain copies); a
    continuation of an ``input_required`` call echoes its ``requestState`` exactly and
    carries the ``inputResponses`` (mrtr: neither when the server sent none)."""
    params: dict[str, Any] = {"name": name, "arguments": plain(arguments or {})}
    if request_state is not None:
        params["requestState"] = request_state
    if input_responses is not None:
        params["inputResponses"] = plain(input_responses)
    return params


def _unknown_forms(name: str) -> re.Pattern[str]:
    called = re.escape(name)
    quoted = rf"(?:{called}|'{called}'|\"{called}\"|`{called}`)"
    return re.compile(
        r"(?:MCP error -32602:\s*|invalid params:\s*)?"
        rf"(?:unknown tool:?\s*{quoted}|tool\s+{quoted}\s+(?:not found|disabled)"
        rf"|tool not found:\s*{quoted})\.?",
        re.IGNORECASE,
    )


def refused_as_unknown(name: str, outcome: Mapping[str, Any] | RequestFailed) -> bool:
    """Whether the server refused the call of ``name`` because it has no such tool (the
    module docstring): the one signal that the caller's tool catalog may be old."""
    forms = _unknown_forms(name)
    if isinstance(outcome, RequestFailed):
        if outcome.code == HEADER_MISMATCH:  # -32020, its Mcp-Param-*: the spec says list again
            return True
        return outcome.code == INVALID_PARAMS and bool(forms.fullmatch(outcome.detail.strip()))
    if outcome.get("isError") is not True:
        return False
    texts = _texts(outcome)
    return len(texts) == 1 and bool(forms.fullmatch(texts[0].strip()))


def input_required(outcome: Mapping[str, Any] | RequestFailed) -> bool:
    """Whether a ``tools/call`` result asks for input before the call can complete."""
    return isinstance(outcome, Mapping) and outcome.get("resultType") == "input_required"


def _texts(result: Mapping[str, Any]) -> list[str]:
    content = result.get("content")
    return [
        str(item.get("text", ""))
        for item in (content if isinstance(content, (list, tuple)) else [])
        if isinstance(item, Mapping) and item.get("type", "text") == "text"
    ]


def same_definition(seen: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> bool:
    """Whether a tool is listed now exactly as the caller saw it (every field: a changed
    description can change what the arguments mean as much as a changed schema)."""
    return seen is not None and now is not None and plain(seen) == plain(now)


__all__ = [
    "ToolAnswer",
    "ToolRefused",
    "ToolReply",
    "input_required",
    "plain",
    "refused_as_unknown",
    "same_definition",
    "tool_answer",
    "tool_call_params",
]
