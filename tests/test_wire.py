"""The wire boundary every transport shares (`freshcache._protocol._wire`): one schema check for
read and list results, one rule for ``requestState`` rounds, one for ``-32022``, one
for change hints found on an answer (invariants 9 and 11)."""

from __future__ import annotations

from typing import Any

import pytest

from freshcache import UnsupportedVersionError
from freshcache._core import (
    ListReply,
    ReadReply,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
)
from freshcache._protocol._client import ClientProtocol, Unclaimed
from freshcache._protocol._wire import (
    MAX_INPUT_ROUNDS,
    ErrorResponse,
    Notification,
    ReadRounds,
    Response,
    list_reply,
    read_reply,
    renegotiated_version,
)

U = "guide://shipping/approval"
SID = "io.modelcontextprotocol/subscriptionId"
CONTENTS = [{"uri": U, "text": "v1"}]


# --------------------------------------------------------------------------- schema


@pytest.mark.parametrize(
    ("result", "field"),
    [
        ({"resultType": "complete"}, "contents"),
        ({"contents": None}, "contents"),
        ({"contents": {"uri": U, "text": "v1"}}, "contents"),
        ({"contents": "v1"}, "contents"),
        ({"contents": [{"text": "v1"}]}, "contents.0.uri"),
        ({"contents": [{"uri": U, "text": 7}]}, "contents.0.text"),
        ({"contents": CONTENTS, "ttlMs": "60000"}, "ttlMs"),
        ({"contents": CONTENTS, "ttlMs": True}, "ttlMs"),
        ({"contents": CONTENTS, "ttlMs": float("nan")}, "ttlMs"),
        ({"contents": CONTENTS, "ttlMs": [60000]}, "ttlMs"),
        ({"contents": CONTENTS, "cacheScope": "shared"}, "cacheScope"),
        ({"contents": CONTENTS, "cacheScope": True}, "cacheScope"),
    ],
    ids=[
        "no-contents",
        "contents-null",
        "contents-an-object",
        "contents-a-string",
        "item-without-uri",
        "text-a-number",
        "ttl-a-string",
        "ttl-a-boolean",
        "ttl-not-a-number",
        "ttl-a-list",
        "scope-unknown",
        "scope-a-boolean",
    ],
)
def test_a_read_result_that_breaks_the_schema_is_a_server_error_naming_the_field(
    result: dict[str, Any], field: str
) -> None:
    reply = read_reply(result)
    assert isinstance(reply, RequestFailed) and reply.kind == "server_error"
    assert f"malformed read result: {field}:" in reply.detail


@pytest.mark.parametrize(
    ("result", "field"),
    [
        ({}, "resources"),
        ({"resources": {"uri": U}}, "resources"),
        ({"resources": [{"name": "x"}]}, "resources.0.uri"),
        ({"resources": [], "ttlMs": "60000"}, "ttlMs"),
        ({"resources": [], "ttlMs": False}, "ttlMs"),
        ({"resources": [], "nextCursor": 2}, "nextCursor"),
        ({"resources": [], "cacheScope": "everyone"}, "cacheScope"),
    ],
    ids=[
        "no-resources",
        "resources-an-object",
        "entry-without-uri",
        "ttl-a-string",
        "ttl-a-boolean",
        "cursor-a-number",
        "scope-unknown",
    ],
)
def test_a_list_result_that_breaks_the_schema_is_a_server_error_naming_the_field(
    result: dict[str, Any], field: str
) -> None:
    page = list_reply(result)
    assert isinstance(page, RequestFailed) and page.kind == "server_error"
    assert f"malformed list result: {field}:" in page.detail


def test_results_in_the_schema_are_taken_as_they_are() -> None:
    reply = read_reply({"contents": CONTENTS, "ttlMs": 60000, "cacheScope": "public"})
    assert isinstance(reply, ReadReply) and reply.contents[0].text == "v1"
    assert (reply.ttl_ms, reply.cache_scope, reply.multi_round_trip) == (60000, "public", False)
    assert read_reply({"contents": [], "ttlMs": 1.5}) == ReadReply((), ttl_ms=1.5)
    page = list_reply({"resources": [{"uri": U}], "nextCursor": "c2", "ttlMs": 0})
    assert isinstance(page, ListReply) and page.next_cursor == "c2" and page.ttl_ms == 0


# --------------------------------------------------------------------------- rounds


def test_request_state_rounds_are_followed_and_their_result_is_marked_never_to_cache() -> None:
    rounds = ReadRounds(U)
    assert rounds.params == {"uri": U}
    assert rounds.take({"resultType": "input_required", "requestState": "s1"}) is None
    assert rounds.params == {"uri": U, "requestState": "s1"}
    reply = rounds.take({"contents": CONTENTS, "ttlMs": 60000})
    assert isinstance(reply, ReadReply) and reply.multi_round_trip
    assert isinstance(ReadRounds(U).take({"contents": CONTENTS}), ReadReply)
    assert not ReadRounds(U).take({"contents": CONTENTS}).multi_round_trip  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("result", "words"),
    [
        ({"resultType": "input_required", "inputRequests": {"q1": {}}}, "q1"),
        ({"resultType": "input_required"}, "neither requestState nor inputRequests"),
    ],
    ids=["asks-for-input", "asks-for-nothing"],
)
def test_a_round_freshcache_cannot_answer_is_a_server_error(
    result: dict[str, Any], words: str
) -> None:
    reply = ReadRounds(U).take(result)
    assert isinstance(reply, RequestFailed) and reply.kind == "server_error"
    assert words in reply.detail


def test_rounds_end_after_a_bounded_number_of_round_trips() -> None:
    rounds = ReadRounds(U)
    outcomes = [
        rounds.take({"resultType": "input_required", "requestState": f"s{n}"})
        for n in range(MAX_INPUT_ROUNDS)
    ]
    assert outcomes[:-1] == [None] * (MAX_INPUT_ROUNDS - 1)
    assert isinstance(outcomes[-1], RequestFailed) and "round trips" in outcomes[-1].detail


# --------------------------------------------------------------------------- versions


def _unsupported(supported: Any) -> ErrorResponse:
    data = {"supported": supported, "requested": "2026-07-28"}
    return ErrorResponse(1, -32022, "Unsupported protocol version", data)


def test_a_version_both_sides_speak_is_retried_once() -> None:
    error = _unsupported(["2099-01-01", "2026-07-28"])
    version = renegotiated_version(
        error, current="2026-07-28", server="s", method="resources/read", retried=False
    )
    assert version == "2026-07-28"
    with pytest.raises(UnsupportedVersionError, match="although it lists it"):
        renegotiated_version(
            error, current="2026-07-28", server="s", method="resources/read", retried=True
        )


@pytest.mark.parametrize(
    "supported", [["2099-01-01"], [], "2026-07-28", None], ids=["other", "none", "a-string", "null"]
)
def test_no_version_in_common_names_both_sides(supported: Any) -> None:
    with pytest.raises(UnsupportedVersionError) as caught:
        renegotiated_version(
            _unsupported(supported),
            current="2026-07-28",
            server="stdio:srv",
            method="server/discover",
            retried=False,
        )
    assert "no version in common" in str(caught.value) and "stdio:srv" in str(caught.value)
    assert caught.value.requested == "2026-07-28"


# --------------------------------------------------------------------------- hints


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        (
            Notification("notifications/resources/updated", {"uri": U, "_meta": {SID: 3}}),
            ResourceUpdated(U, 3),
        ),
        (Notification("notifications/resources/updated", {"uri": U}), ResourceUpdated(U, None)),
        (
            Notification("notifications/resources/updated", {"uri": U, "_meta": {SID: True}}),
            ResourceUpdated(U, None),
        ),
        (Notification("notifications/resources/list_changed", {}), ResourceListChanged(None)),
        (Notification("notifications/resources/updated", {}), None),
        (Notification("notifications/progress", {"progress": 1}), None),
        (Response(1, {}), None),
    ],
    ids=[
        "updated-with-an-id",
        "updated-without-an-id",
        "updated-with-a-boolean-id",
        "list-changed",
        "updated-without-a-uri",
        "progress",
        "a-response",
    ],
)
def test_a_change_hint_on_an_answer_keeps_the_id_it_carries_or_none(
    message: Any, hint: Any
) -> None:
    got = ClientProtocol("test-server").receive_answer(message, 7)
    assert (got.event if isinstance(got, Unclaimed) else None) == hint
