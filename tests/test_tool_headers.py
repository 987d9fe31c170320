"""``x-mcp-header``: ``Mcp-Param-*`` headers and tools excluded for invalid annotations.

Spec 2026-07-28, basic/transports/streamable-http "Custom Headers from Tool Parameters"
and server/tools "x-mcp-header". The rules live in `freshcache._protocol._tool_headers`;
these tests check them alone (every constraint, every encoding example of the spec) and
through `HttpSource` against the reference server on loopback (what the wire carries).
The official conformance scenarios ``http-custom-headers`` and
``http-invalid-tool-headers`` play them again (tests/test_conformance_client.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from freshcache import FreshCache, HttpSource, Policy
from freshcache._protocol._tool_headers import (
    ToolHeaders,
    header_map,
    header_problem,
    param_headers,
)
from freshcache._protocol._wire import decode_header_value
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.acceptance._protocol import Reply, error


def tool(name: str, properties: dict[str, Any], **schema: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object", "properties": properties, **schema}}


def annotated(header: Any, kind: Any = "string") -> dict[str, Any]:
    return {"type": kind, "x-mcp-header": header}


pytestmark = pytest.mark.anyio

REGION = tool("execute_sql", {"region": annotated("Region"), "query": {"type": "string"}})


# ---------------------------------------------------------------------- validity


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"value": annotated("")}, "non-empty"),
        ({"value": annotated(7)}, "non-empty string"),
        ({"value": annotated("My Region")}, "token"),
        ({"value": annotated("Region:Primary")}, "token"),
        ({"value": annotated("Région")}, "token"),
        ({"value": annotated("Region\t1")}, "token"),
        ({"value": annotated("Region\r\nX-Evil: 1")}, "token"),
        ({"a": annotated("Region"), "b": annotated("Region")}, "repeats"),
        ({"a": annotated("MyField"), "b": annotated("myfield")}, "repeats"),
        ({"data": annotated("Data", "object")}, "type 'object'"),
        ({"items": {**annotated("Items", "array"), "items": {"type": "string"}}}, "type 'array'"),
        ({"nil": annotated("Nil", "null")}, "type 'null'"),
        ({"ratio": annotated("Ratio", "number")}, "type 'number'"),
        ({"either": annotated("Either", ["string", "null"])}, "type ["),
        ({"untyped": {"x-mcp-header": "Untyped"}}, "type None"),
        ({"list": {"type": "array", "items": annotated("Item")}}, "not reachable"),
        ({"one": {"oneOf": [annotated("One")]}}, "not reachable"),
        ({"all": {"allOf": [annotated("All")]}}, "not reachable"),
        ({"cond": {"if": annotated("If"), "then": {}}}, "not reachable"),
    ],
    ids=[
        "empty",
        "not-a-string",
        "space",
        "colon",
        "non-ascii",
        "tab",
        "crlf",
        "duplicate-same-case",
        "duplicate-other-case",
        "object",
        "array",
        "null",
        "number",
        "type-union",
        "no-type",
        "under-items",
        "under-oneOf",
        "under-allOf",
        "under-if",
    ],
)
def test_an_annotation_that_breaks_a_rule_makes_the_tool_invalid(schema, why):
    problem = header_problem(tool("t", schema))
    assert problem is not None and why in problem


def test_annotations_outside_a_properties_chain_make_the_tool_invalid():
    under_defs = tool("t", {"a": {"$ref": "#/$defs/A"}}, **{"$defs": {"A": annotated("A")}})
    at_root = {"name": "t", "inputSchema": {"type": "object", "x-mcp-header": "Root"}}
    for bad in (under_defs, at_root):
        assert "not reachable" in (header_problem(bad) or "")


def test_valid_annotations_nested_through_properties_and_lookalikes_that_are_data():
    nested = tool(
        "t",
        {
            "target": {"type": "object", "properties": {"zone": annotated("Zone")}},
            "x-mcp-header": {"type": "string"},  # a property *named* x-mcp-header
            "opts": {"type": "object", "default": {"x-mcp-header": "NotAnAnnotation"}},
            "n": annotated("Count", "integer"),
            "flag": annotated("Flag", "boolean"),
        },
    )
    assert header_problem(nested) is None
    assert header_map(nested) == (
        (("target", "zone"), "Zone"),
        (("n",), "Count"),
        (("flag",), "Flag"),
    )
    assert header_problem({"name": "plain", "inputSchema": {"type": "object"}}) is None


# ---------------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("value", "header"),
    [
        ("us-west1", "us-west1"),
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", "=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
        ("us west 1", "us west 1"),
        ("in\tside", "=?base64?aW4Jc2lkZQ==?="),
        ("", ""),
    ],
    ids=[
        "plain",
        "non-ascii",
        "edge-spaces",
        "newline",
        "sentinel",
        "inner-spaces",
        "tab",
        "empty",
    ],
)
def test_string_values_are_encoded_as_the_spec_examples(value, header):
    assert param_headers(header_map(REGION), {"region": value}) == {"Mcp-Param-Region": header}
    assert decode_header_value(header) == value


def test_primitives_are_spelled_as_the_spec_says_and_absent_or_null_values_send_nothing():
    schema = tool(
        "t",
        {
            "n": annotated("N", "integer"),
            "yes": annotated("Yes", "boolean"),
            "no": annotated("No", "boolean"),
            "gone": annotated("Gone"),
            "nil": annotated("Nil"),
            "odd": annotated("Odd"),
        },
    )
    headers = param_headers(
        header_map(schema),
        {"n": 42.0, "yes": True, "no": False, "nil": None, "odd": {"a": 1}},
    )
    assert headers == {"Mcp-Param-N": "42", "Mcp-Param-Yes": "true", "Mcp-Param-No": "false"}
    assert param_headers(header_map(schema), {"n": -7}) == {"Mcp-Param-N": "-7"}


def test_a_page_is_sorted_into_kept_and_excluded_tools_per_principal():
    book = ToolHeaders()
    invalid = tool("bad", {"v": annotated("")})
    kept, excluded = book.learn("alice", [REGION, invalid])
    assert [t["name"] for t in kept] == ["execute_sql"]
    assert [name for name, _ in excluded] == ["bad"]
    assert book.excluded("alice", "bad") is not None
    assert book.excluded("bob", "bad") is not None  # the last listing by anyone counts
    assert book.excluded("alice", "execute_sql") is None
    params = {"name": "execute_sql", "arguments": {"region": "eu", "query": "q"}}
    assert book.for_call("alice", params) == {"Mcp-Param-Region": "eu"}
    book.learn("bob", [tool("execute_sql", {"region": annotated("Zone")})])
    assert book.for_call("bob", params) == {"Mcp-Param-Zone": "eu"}
    assert book.for_call("alice", params) == {"Mcp-Param-Region": "eu"}  # its own listing


# ---------------------------------------------------------------------- over HTTP

INVALID = tool("invalid_dup", {"a": annotated("Region"), "b": annotated("region")})


@asynccontextmanager
async def serving(
    revision: str = "2026-07-28", server: ReferenceServer | None = None, hook: Any = None
) -> AsyncIterator[tuple[ReferenceHttpServer, Callable[[], HttpSource]]]:
    if server is None:
        server = ReferenceServer()
        server.catalogs.set("tools", [REGION, INVALID])
    async with (
        ReferenceHttpServer(server, revision=revision, hook=hook) as http,  # type: ignore[arg-type]
        httpx.AsyncClient(trust_env=False) as client,
    ):
        yield http, lambda: HttpSource(http.url, client=client, timeout=5.0, idle_timeout=2.0)


def calls(http: ReferenceHttpServer) -> list[Any]:
    return [r for r in http.requests if r.message and r.message.get("method") == "tools/call"]


@pytest.mark.wire
async def test_a_tool_call_over_http_mirrors_its_annotated_arguments_into_mcp_param_headers():
    async with serving() as (http, make), FreshCache(make(), read_timeout=5.0) as cache:
        catalog = await cache.tools()
        assert catalog.state == "fresh" and catalog.names == ("execute_sql",)
        call = await cache.call_tool("execute_sql", {"region": "Hello, 世界", "query": "SELECT 1"})
        assert call.state == "answered", call
    (sent,) = calls(http)
    assert sent.headers["mcp-param-region"] == "=?base64?SGVsbG8sIOS4lueVjA==?="
    assert "mcp-param-query" not in sent.headers
    assert sent.headers["mcp-name"] == "execute_sql"


@pytest.mark.wire
async def test_a_tool_with_invalid_annotations_is_excluded_with_its_reason_and_never_called():
    async with serving() as (http, make), FreshCache(make(), read_timeout=5.0) as cache:
        catalog = await cache.tools()
        assert "invalid_dup" not in catalog.names
        assert "repeats" in catalog.excluded["invalid_dup"]
        call = await cache.call_tool("invalid_dup", {"a": "x", "b": "y"})
        assert call.state == "invalid_tool" and not call.ok
        assert call.detail is not None and "never called" in call.detail
    assert calls(http) == []


@pytest.mark.wire
async def test_a_2025_session_keeps_annotated_tools_and_sends_no_param_headers():
    """The rules are 2026-07-28's: a 2025-11-25 server never asked for them."""
    async with serving("2025-11-25") as (http, make), FreshCache(make(), read_timeout=5.0) as cache:
        catalog = await cache.tools()
        assert set(catalog.names) == {"execute_sql", "invalid_dup"} and not catalog.excluded
        call = await cache.call_tool("execute_sql", {"region": "eu", "query": "q"})
        assert call.state == "answered", call
    (sent,) = calls(http)
    assert not [h for h in sent.headers if h.startswith("mcp-param-")]


def test_user_headers_may_not_set_mcp_param_headers():
    from freshcache import ConfigurationError

    with pytest.raises(ConfigurationError):
        HttpSource("http://127.0.0.1:1/mcp", headers={"Mcp-Param-Region": "eu"})


def validating(server: ReferenceServer) -> Any:
    """A hook that refuses a ``tools/call`` as a spec server does (streamable-http,
    "Server Behavior for Custom Headers"): each top-level ``x-mcp-header`` argument of
    the tool's *current* definition must come as its header (``-32020``, HTTP 400)."""

    async def hook(request: Any) -> Any:
        message = request.message or {}
        if message.get("method") != "tools/call":
            return None
        params = message["params"]
        (current,) = [t for t in server.catalogs.items["tools"] if t["name"] == params["name"]]
        for prop, schema in current["inputSchema"]["properties"].items():
            value = params.get("arguments", {}).get(prop)
            header = request.headers.get("mcp-param-" + schema.get("x-mcp-header", "").lower())
            if (
                "x-mcp-header" in schema
                and value is not None
                and (header is None or decode_header_value(header) != str(value))
            ):
                return Reply(error(message["id"], -32020, f"Mcp-Param for {prop!r}"), 400)
        return None

    return hook


@pytest.mark.wire
async def test_a_call_refused_for_its_param_headers_relists_and_the_next_send_has_the_new_ones():
    """The spec's client behaviour on ``-32020`` (the server refused before running the
    tool): list the tools again; the send after the re-list carries the headers of the
    new definition. Whether freshcache sends it at once (``answered``, ``retried``) or
    hands the changed tool back for the caller to rebuild the call (``tool_changed``,
    issue 34 item 3) is `FreshCache.call_tool`'s rule; both are explicit states."""
    server = ReferenceServer()
    server.catalogs.set("tools", [REGION])
    async with (
        serving(server=server, hook=validating(server)) as (http, make),
        # the held list counts as the one the caller acted on without a listen covering it
        FreshCache(make(), read_timeout=5.0, policy=Policy(uncovered="ttl")) as cache,
    ):
        assert (await cache.tools()).state == "fresh"
        renamed = tool("execute_sql", {"region": annotated("Zone"), "query": {"type": "string"}})
        server.catalogs.set("tools", [renamed])  # unannounced
        call = await cache.call_tool("execute_sql", {"region": "eu", "query": "q"})
        assert call.state in ("answered", "tool_changed"), call
        if call.state == "tool_changed":  # the caller rebuilds its call on the new tool
            call = await cache.call_tool("execute_sql", {"region": "eu", "query": "q"})
            assert call.state == "answered", call
    first, second = calls(http)
    assert first.headers.get("mcp-param-region") == "eu" and "mcp-param-zone" not in first.headers
    assert second.headers.get("mcp-param-zone") == "eu"


@pytest.mark.wire
async def test_a_param_header_refusal_is_an_explicit_state_never_an_exception():
    """Called before any listing: no header known, the server refuses (``-32020``), the
    re-list learns the tool; the caller gets an explicit state (the server's word, or
    the tool to rebuild the call on), and the next call goes with its headers."""
    server = ReferenceServer()
    server.catalogs.set("tools", [REGION])
    async with (
        serving(server=server, hook=validating(server)) as (http, make),
        FreshCache(make(), read_timeout=5.0) as cache,
    ):
        call = await cache.call_tool("execute_sql", {"region": "eu", "query": "q"})
        assert call.state in ("not_found", "tool_changed") and call.catalog is not None, call
        assert call.catalog.state == "fresh"  # the tools were listed again
        again = await cache.call_tool("execute_sql", {"region": "eu", "query": "q"})
        assert again.state == "answered", again
    assert [c.headers.get("mcp-param-region") for c in calls(http)] == [None, "eu"]


@pytest.mark.wire
async def test_the_headers_follow_the_catalog_the_caller_holds_even_if_its_source_never_listed():
    """A fleet follower's source never lists: the catalog comes from another worker's
    walk. The call's headers come from the definition the caller saw."""
    async with serving() as (http, make):
        source = make()
        async with FreshCache(source, read_timeout=5.0, policy=Policy(uncovered="ttl")) as cache:
            assert (await cache.tools()).state == "fresh"
            source.binding.tool_headers = ToolHeaders()  # as if another worker had listed
            call = await cache.call_tool("execute_sql", {"region": "eu", "query": "q"})
            assert call.state == "answered", call
    (sent,) = calls(http)
    assert sent.headers.get("mcp-param-region") == "eu"
