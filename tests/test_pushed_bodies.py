"""Pushed bodies (``embedResources``, SEP-3119) and structured denials (SEP-2643).

The engine decides whether a body a ``resources/updated`` carried may make its URI
fresh; the protocol layer reads bodies only off listens that asked for them, and reads
the authorization denial envelope of an error. The acceptance rows
(``acceptance_tables/13-pushed-and-denials.md``) play the same rules over every wire;
these tests pin each rule on its own, and the end-to-end test runs a real HTTP server.
"""

from __future__ import annotations

import json

import pytest

from freshcache import FreshCache, HttpSource, Policy, Remediation
from freshcache._core import (
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    ReadResource,
    RequestFailed,
    ResourceContents,
    ResourceUpdated,
    StreamLost,
)
from freshcache._middleware._store import MemoryStore
from freshcache._protocol._client import ClientProtocol, ForSubscription, decode
from freshcache._protocol._wire import DenialRules, failure_from_error, pushed_contents
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from tests.polling import until

U = "guide://shipping/approval"
V = "guide://shipping/rates"
SID = "s1"


def body(text: str, uri: str = U) -> tuple[ResourceContents, ...]:
    return (ResourceContents(uri, text=text, mime_type="text/plain"),)


def make(*, pushed: bool = True, uris: tuple[str, ...] = (U,)) -> FreshnessEngine:
    """An engine with ``uris`` selected, read at v1 and covered by live stream ``s1``."""
    engine = FreshnessEngine(
        store=MemoryStore(), policy=Policy(pushed_bodies=pushed), clock=lambda: 100.0
    )
    engine.select(uris)
    engine.handle(ListenStarted(SID, frozenset(uris), True))
    engine.handle(ListenAcknowledged(SID, frozenset(uris), True))
    for uri in uris:
        engine.finish_read(engine.begin_read(uri, None), ReadReply(body("v1", uri), ttl_ms=60_000))
    return engine


# --------------------------------------------------------------------------- engine


def test_a_body_on_the_acknowledged_stream_that_covers_the_uri_makes_it_fresh_unread() -> None:
    engine = make()
    reads_before = engine.counters.server_reads
    decisions = engine.handle(ResourceUpdated(U, SID, body("v2")))
    assert decisions == []  # no re-read: the body is the newest change heard of
    hit = engine.lookup(U, None)
    assert hit is not None and hit.text == "v2" and hit.server_read is False
    assert engine.counters.server_reads == reads_before
    assert engine.counters.pushed_bodies == 1


@pytest.mark.parametrize(
    ("name", "event"),
    [
        ("no-subscription-id", ResourceUpdated(U, None, body("v2"))),
        ("unknown-subscription", ResourceUpdated(U, "nobody-opened-this", body("v2"))),
    ],
)
def test_an_untrusted_body_only_invalidates(name: str, event: ResourceUpdated) -> None:
    engine = make()
    decisions = engine.handle(event)
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "invalidated"
    assert decisions == [ReadResource(U, None, "resources/updated")]
    assert engine.counters.pushed_bodies == 0 and engine.counters.pushed_bodies_refused == 1


def test_a_body_before_the_acknowledgment_only_invalidates() -> None:
    engine = make()
    engine.handle(ListenStarted("s2", frozenset({U}), True))  # a second stream, not acked yet
    engine.handle(ResourceUpdated(U, "s2", body("v2")))
    assert engine.lookup(U, None) is None
    assert engine.counters.untrusted_messages == 1


def test_a_body_from_a_stream_that_does_not_cover_the_uri_only_invalidates() -> None:
    engine = make(uris=(U, V))
    engine.handle(ListenStarted("s2", frozenset({V}), False))
    engine.handle(ListenAcknowledged("s2", frozenset({V}), False))
    engine.handle(ResourceUpdated(U, "s2", body("v2")))  # s2 is trusted, but not for U
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "invalidated"


def test_a_body_is_refused_when_the_caller_did_not_opt_in() -> None:
    engine = make(pushed=False)
    engine.handle(ResourceUpdated(U, SID, body("v2")))
    assert engine.lookup(U, None) is None


def test_a_body_on_a_request_answer_only_invalidates() -> None:
    engine = make()
    engine.handle_hint(ResourceUpdated(U, SID, body("v2")))
    assert engine.lookup(U, None) is None


def test_a_body_does_not_end_a_denial_of_the_principal() -> None:
    engine = make()
    engine.handle(ResourceUpdated(U, SID))
    engine.finish_read(engine.begin_read(U, None), RequestFailed("denied", "no"))
    engine.handle(ResourceUpdated(U, SID, body("v2")))
    assert engine.lookup(U, None) is None


def test_a_read_in_flight_before_the_body_cannot_overwrite_it() -> None:
    engine = make()
    ticket = engine.begin_read(U, None)  # sent before the change
    engine.handle(ResourceUpdated(U, SID, body("v2")))
    assert engine.finish_read(ticket, ReadReply(body("v1"), ttl_ms=60_000)) is None
    hit = engine.lookup(U, None)
    assert hit is not None and hit.text == "v2"


def test_the_pushed_copy_is_fresh_only_while_its_stream_covers_it() -> None:
    engine = make()
    engine.handle(ResourceUpdated(U, SID, body("v2")))
    engine.handle(ResourceUpdated(U, SID))  # a later plain change outdates it
    assert engine.lookup(U, None) is None
    engine.handle(ResourceUpdated(U, SID, body("v3")))
    engine.handle(StreamLost(SID, "gone"))
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "stream_lost"


# --------------------------------------------------------------------------- protocol


def _claimed(protocol: ClientProtocol, params: dict[str, object]) -> ResourceUpdated:
    params = {"_meta": {"io.modelcontextprotocol/subscriptionId": 7}, **params}
    frame = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": params}
    received = protocol.receive(decode(json.dumps(frame)))
    assert isinstance(received, ForSubscription)
    assert isinstance(received.event, ResourceUpdated)
    return received.event


CONTENTS = [{"uri": U, "mimeType": "text/plain", "text": "v2"}]


def test_a_listen_asks_for_bodies_only_when_opted_in() -> None:
    protocol = ClientProtocol("test")
    plain = protocol.listen(1, frozenset({U}), True)
    assert "embedResources" not in plain.message["params"]["notifications"]
    protocol.embed_resources = True
    asked = protocol.listen(2, frozenset({U}), True)
    assert asked.message["params"]["notifications"]["embedResources"] is True


def test_a_body_is_read_only_off_a_listen_that_asked_for_it() -> None:
    protocol = ClientProtocol("test")
    protocol.listen(7, frozenset({U}), True)
    assert _claimed(protocol, {"uri": U, "contents": CONTENTS}).contents is None
    protocol.embed_resources = True
    protocol.listen(7, frozenset({U}), True)
    assert _claimed(protocol, {"uri": U, "contents": CONTENTS}).contents == body("v2")


@pytest.mark.parametrize(
    "contents",
    [
        "v2",
        [],
        [{"uri": U}],  # neither text nor blob
        [{"uri": U, "text": 2}],
        [{"uri": "guide://elsewhere", "text": "v2"}],  # not this URI's body
    ],
    ids=["not-a-list", "empty", "no-text", "text-not-a-string", "another-uri"],
)
def test_a_malformed_body_leaves_a_plain_change_hint(contents: object) -> None:
    assert pushed_contents({"uri": U, "contents": contents}) is None
    protocol = ClientProtocol("test")
    protocol.embed_resources = True
    protocol.listen(7, frozenset({U}), True)
    event = _claimed(protocol, {"uri": U, "contents": contents})
    assert event.uri == U and event.contents is None


# --------------------------------------------------------------------------- denials


def _envelope(hints: object = None) -> dict[str, object]:
    authorization: dict[str, object] = {
        "reason": "insufficient_authorization",
        "authorizationContextId": "authzctx_1",
    }
    if hints is not None:
        authorization["remediationHints"] = hints
    return {"authorization": authorization}


def test_an_envelope_without_hints_is_denied_with_remediation_unavailable() -> None:
    failed = failure_from_error(-32099, "no", data=_envelope(), denial=DenialRules())
    assert failed.kind == "denied"
    assert failed.remediation == Remediation(
        available=False, context_id="authzctx_1", reason="insufficient_authorization"
    )


def test_an_envelope_with_hints_carries_them_read_only() -> None:
    hint = {"type": "url", "url": "https://example.invalid/approve", "extra": [1]}
    failed = failure_from_error(
        -32042, "approve", data=_envelope([hint, {"no": "type"}]), denial=DenialRules()
    )
    remediation = failed.remediation
    assert failed.kind == "denied" and remediation is not None and remediation.available
    assert len(remediation.hints) == 1 and remediation.hints[0]["url"] == hint["url"]
    with pytest.raises(TypeError):
        remediation.hints[0]["url"] = "https://evil.invalid"  # type: ignore[index]
    hint["url"] = "changed after"  # the caller's copy is not the server's dict
    assert remediation.hints[0]["url"] == "https://example.invalid/approve"


@pytest.mark.parametrize(
    "data",
    [None, {"authorization": "no"}, {"authorization": {"remediationHints": []}}],
    ids=["none", "not-an-object", "no-reason"],
)
def test_without_a_usable_envelope_the_code_decides(data: object) -> None:
    failed = failure_from_error(-32603, "boom", data=data, denial=DenialRules())
    assert failed.kind == "server_error" and failed.remediation is None


def test_the_engine_hands_the_remediation_to_the_caller() -> None:
    engine = make()
    engine.handle(ResourceUpdated(U, SID))
    remediation = Remediation(available=True, hints=({"type": "url"},))
    result = engine.finish_read(
        engine.begin_read(U, None), RequestFailed("denied", "no", remediation=remediation)
    )
    assert result is not None and result.state == "denied"
    assert result.remediation is remediation
    assert result.text is None


# --------------------------------------------------------------------------- end to end


@pytest.mark.anyio
async def test_over_http_a_pushed_body_serves_the_new_text_without_a_read() -> None:
    server = ReferenceServer()
    server.set(U, "v1")
    async with ReferenceHttpServer(server) as http:
        policy = Policy(pushed_bodies=True)
        async with FreshCache(HttpSource(http.url), select=[U], policy=policy) as cache:
            await until(lambda: cache.status(U).text == "v1")
            reads = server.reads
            server.set(U, "v2", notify=True)
            await until(lambda: cache.status(U).text == "v2")
            result = await cache.read(U)
            assert result.state == "fresh" and result.text == "v2"
            assert result.server_read is False and server.reads == reads
