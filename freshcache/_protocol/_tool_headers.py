"""``x-mcp-header``: tool parameters mirrored into ``Mcp-Param-*`` HTTP headers (2026-07-28).

Spec pages (2026-07-28): basic/transports/streamable-http, "Custom Headers from Tool
Parameters", and server/tools, "x-mcp-header". A server may mark a tool parameter with
``"x-mcp-header": "Region"``; a client on Streamable HTTP then sends the argument's
value as ``Mcp-Param-Region`` with every ``tools/call`` of that tool, so an
intermediary can route on it without parsing the body. Sans-IO: the HTTP transport
sends what `ToolHeaders` says.

The rules, once:

- **Which definitions are valid** (`header_problem`): every ``x-mcp-header`` value is a
  non-empty HTTP field-name token (RFC 9110 ``1*tchar``: no space, colon, control
  character or non-ASCII), unique among the schema's annotations ignoring case, on a
  property whose ``type`` is exactly ``"string"``, ``"integer"`` or ``"boolean"``, and
  reachable from the schema root through ``properties`` keys only (never through
  ``items``, ``oneOf``/``anyOf``/``allOf``/``not``, ``if``/``then``/``else``, ``$ref``
  or ``$defs``). A tool that breaks any of them is left out of the catalog (the spec's
  "MUST exclude the invalid tool from the result of tools/list"), with the reason, and
  is never called; the other tools of the page stay.
- **Which headers a call carries** (`param_headers`): for each annotation, the value at
  its property path in the arguments; none when the path is absent or ``null`` (the
  spec: omit); a string as is, an integer in decimal (an integral float such as
  ``42.0`` too), a boolean as ``true``/``false``. A value of any other type is the
  caller's invalid argument: no header is made up for it (a validating server refuses
  the call with ``-32020`` before running it). Every value is encoded as ``Mcp-Name`` is
  (`encode_header_value`: plain visible ASCII as is, else ``=?base64?...?=``).

`ToolHeaders` is what one connection learned from its ``tools/list`` pages: per
principal and tool, the annotations to mirror or why the tool was excluded (the last
listing of that name by any principal when this one never listed it: a public catalog
is walked once and shared). The spec lets other transports (stdio) ignore
``x-mcp-header``; freshcache applies it on HTTP 2026-07-28 sessions only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._wire import encode_header_value

ANNOTATION = "x-mcp-header"
HEADER_PREFIX = "Mcp-Param-"

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
"""RFC 9110 §5.1 field name: ``1*tchar``."""

_PRIMITIVE = ("string", "integer", "boolean")
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})
"""Keywords whose values are instances, not schemas: an ``x-mcp-header`` key inside
one is data, not an annotation."""

Path = tuple[str, ...]
HeaderMap = tuple[tuple[Path, str], ...]
"""A valid tool's annotations: (property path, header name suffix), in schema order."""


def header_problem(tool: Mapping[str, Any]) -> str | None:
    """Why ``tool``'s ``x-mcp-header`` annotations are invalid, or ``None`` when they
    are valid (or there are none)."""
    schema = tool.get("inputSchema")
    if not isinstance(schema, Mapping):
        return None
    found: list[tuple[Path, Mapping[str, Any]]] = []
    misplaced = _collect(schema, (), True, found)
    if misplaced is not None:
        return misplaced
    seen: dict[str, str] = {}
    for path, node in found:
        where = _where(path)
        value = node[ANNOTATION]
        if not isinstance(value, str) or value == "":
            return f"x-mcp-header on {where} is {value!r}: it must be a non-empty string"
        if not _TOKEN.match(value):
            return (
                f"x-mcp-header {value!r} on {where} is not an HTTP field-name token "
                "(letters, digits and !#$%&'*+-.^_`|~ only)"
            )
        folded = value.lower()
        if folded in seen:
            return (
                f"x-mcp-header {value!r} on {where} repeats {seen[folded]!r} "
                "(header names are case-insensitive)"
            )
        seen[folded] = value
        kind = node.get("type")
        if kind not in _PRIMITIVE:
            return (
                f"x-mcp-header {value!r} is on {where} of type {kind!r}: only string, "
                "integer and boolean parameters may be mirrored"
            )
    return None


def header_map(tool: Mapping[str, Any]) -> HeaderMap:
    """The annotations of a tool `header_problem` found valid."""
    schema = tool.get("inputSchema")
    if not isinstance(schema, Mapping):
        return ()
    found: list[tuple[Path, Mapping[str, Any]]] = []
    _collect(schema, (), True, found)
    return tuple((path, str(node[ANNOTATION])) for path, node in found)


def param_headers(headers: HeaderMap, arguments: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers of one ``tools/call`` (module docstring)."""
    out: dict[str, str] = {}
    for path, name in headers:
        text = _header_text(_at(arguments, path))
        if text is not None:
            out[HEADER_PREFIX + name] = encode_header_value(text)
    return out


class ToolHeaders:
    """What one connection learned of its tools' annotations (module docstring),
    bounded to ``limit`` entries (the oldest are forgotten first)."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._known: dict[tuple[object, str], HeaderMap | str] = {}
        """(principal or `_ANY`, tool name) -> its header map, or why it was excluded."""

    def learn(
        self, principal: object, tools: Iterable[Mapping[str, Any]]
    ) -> tuple[list[Mapping[str, Any]], tuple[tuple[str, str], ...]]:
        """Sort one ``tools/list`` page's tools into those kept and those excluded
        (name, reason), remembering both for later calls."""
        kept: list[Mapping[str, Any]] = []
        excluded: list[tuple[str, str]] = []
        for tool in tools:
            name = tool.get("name")
            problem = header_problem(tool)
            known: HeaderMap | str = problem if problem is not None else header_map(tool)
            if isinstance(name, str):
                self._remember((principal, name), known)
                self._remember((_ANY, name), known)
            if problem is None:
                kept.append(tool)
            elif isinstance(name, str):
                excluded.append((name, problem))
        return kept, tuple(excluded)

    def excluded(self, principal: object, name: str) -> str | None:
        """Why tool ``name`` was left out of ``principal``'s catalog, else ``None``."""
        known = self._lookup(principal, name)
        return known if isinstance(known, str) else None

    def for_call(self, principal: object, params: Mapping[str, Any]) -> dict[str, str]:
        """The ``Mcp-Param-*`` headers of a ``tools/call`` with ``params``."""
        name = params.get("name")
        known = self._lookup(principal, name) if isinstance(name, str) else None
        if not known or isinstance(known, str):
            return {}
        arguments = params.get("arguments")
        return param_headers(known, arguments if isinstance(arguments, Mapping) else None)

    def _lookup(self, principal: object, name: str) -> HeaderMap | str | None:
        known = self._known.get((principal, name))
        return known if known is not None else self._known.get((_ANY, name))

    def _remember(self, key: tuple[object, str], known: HeaderMap | str) -> None:
        self._known.pop(key, None)
        self._known[key] = known
        while len(self._known) > self.limit:
            del self._known[next(iter(self._known))]


class _Any:
    """The key of the last listing of a tool by any principal."""


_ANY = _Any()


def excluded_detail(name: str, reason: str) -> str:
    """What a caller of an excluded tool is told."""
    return (
        f"tool {name!r} was left out of the tool catalog and is never called: "
        f"its definition breaks the x-mcp-header rules ({reason})"
    )


def param_mismatch(message: str) -> str:
    """A ``tools/call`` refused with ``-32020``: its ``Mcp-Param-*`` headers are not the
    ones the tool now asks for (its annotations changed since freshcache last listed
    it, or it was never listed). The spec (streamable-http, "Client Behavior"): list
    the tools again, then retry with the new headers."""
    return (
        f"the server refused the call's Mcp-Param-* headers (-32020): {message}. "
        "The tool's x-mcp-header parameters are not the ones last listed"
    )


# ---------------------------------------------------------------------- helpers


def _collect(
    node: Any, path: Path, reachable: bool, found: list[tuple[Path, Mapping[str, Any]]]
) -> str | None:
    """Gather the annotated property schemas under ``node`` into ``found``; the reason
    when an annotation sits where it may not (not reachable by ``properties`` alone)."""
    if isinstance(node, (list, tuple)):  # a frozen catalog item holds tuples
        for item in node:
            problem = _collect(item, path, False, found)
            if problem is not None:
                return problem
        return None
    if not isinstance(node, Mapping):
        return None
    if ANNOTATION in node:
        if not reachable or not path:
            where = "the schema root" if not path else f"a subschema under {_where(path)}"
            return (
                f"x-mcp-header on {where} is not reachable from the root through 'properties' alone"
            )
        found.append((path, node))
    for key, value in node.items():
        if key == ANNOTATION or key in _DATA_KEYWORDS:
            continue
        if key == "properties" and isinstance(value, Mapping):
            for prop, sub in value.items():
                problem = _collect(sub, (*path, str(prop)), reachable, found)
                if problem is not None:
                    return problem
            continue
        problem = _collect(value, path, False, found)
        if problem is not None:
            return problem
    return None


def _where(path: Path) -> str:
    return "property " + ".".join(repr(p) for p in path)


def _at(arguments: Mapping[str, Any] | None, path: Path) -> Any:
    node: Any = arguments
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _header_text(value: Any) -> str | None:
    """A primitive argument as header text; ``None`` for absent, ``null`` or any other
    type (no header)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return None


__all__ = [
    "ANNOTATION",
    "HEADER_PREFIX",
    "HeaderMap",
    "ToolHeaders",
    "excluded_detail",
    "header_map",
    "header_problem",
    "param_headers",
    "param_mismatch",
]
