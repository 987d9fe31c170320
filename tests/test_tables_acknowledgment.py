"""The vocabulary of acknowledgment and bookkeeping rows, and the known-failing list."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from freshcache.acceptance import EngineWorld, ReferenceServer, load_cases, parse_text, play
from freshcache.acceptance import _runner as runner
from freshcache.acceptance._steps import (
    Given,
    Notify,
    Observe,
    ReadUnselected,
    ServerChange,
    parse_expect,
    parse_step,
)

TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
HEADER = "| id | source | steps | expect |\n|---|---|---|---|\n"


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("hold acks", ServerChange("hold_acks")),
        ("release acks", ServerChange("release_acks")),
        ("given acks held", Given("acks_held")),
        (
            "read selected within 0.3s",
            Observe("read", "guide://shipping/approval", timeout=0.3),
        ),
        ("read 40 distinct unselected uris", ReadUnselected(40)),
        ("notify updated 12 never-read uris", Notify("updated_unread", count=12)),
    ],
    ids=["hold", "release", "given-held", "read-deadline", "read-many", "notify-many"],
)
def test_acknowledgment_and_bookkeeping_phrases_parse(phrase, expected):
    assert parse_step(phrase) == expected


def test_tracked_uris_is_an_expectation():
    expect = parse_expect("tracked uris at most 4")
    assert (expect.what, expect.number) == ("tracked_uris_at_most", 4)


@pytest.mark.anyio
async def test_a_held_acknowledgment_waits_for_release_and_reaches_the_stream():
    server = ReferenceServer()
    server.hold_acks()
    registered = server.subscribe("s1", frozenset({"u://a"}), True)
    assert registered is not None
    sub, receive = registered
    assert server.listens_for(frozenset({"u://a"}))
    assert not sub.acknowledged
    with pytest.raises(anyio.WouldBlock):
        receive.receive_nowait()
    server.release_acks()
    assert sub.acknowledged
    # A listen for resource list changes covers the templates catalog too.
    catalogs = frozenset({"resource_templates"})
    assert receive.receive_nowait() == ("ack", (frozenset({"u://a"}), True, catalogs))
    # Released: the next listen is acknowledged at once again.
    again = server.subscribe("s2", frozenset(), False)
    assert again is not None
    assert again[1].receive_nowait()[0] == "ack"
    for sid, stream in (("s1", receive), ("s2", again[1])):
        server.unsubscribe(sid)
        stream.close()


def _case(row: str):
    cases, problems = parse_text(HEADER + row + "\n", "known.md")
    assert not problems, problems
    (case,) = cases
    return case


FAILS = "| known-x | s | server sets selected v2 and notifies; read selected | fresh v1 |"
PASSES = "| known-y | s | read selected | fresh v1 |"


@pytest.mark.anyio
async def test_a_known_failing_row_that_still_fails_passes_and_says_why(monkeypatch):
    monkeypatch.setitem(runner.KNOWN_FAILING, "known-x", "issue 0 defect 0")
    report = await play(_case(FAILS), EngineWorld())
    assert report.passed
    assert report.known_failure is not None
    assert report.known_failure.startswith("issue 0 defect 0: text is")


@pytest.mark.anyio
async def test_a_known_failing_row_that_passes_fails_until_taken_off_the_list(monkeypatch):
    monkeypatch.setitem(runner.KNOWN_FAILING, "known-y", "issue 0 defect 0")
    report = await play(_case(PASSES), EngineWorld())
    assert not report.passed
    assert "take it off that list" in report.failures[0]


def test_every_known_failing_id_names_a_shipped_row():
    ids = {c.id for c in load_cases([TABLES])}
    assert set(runner.KNOWN_FAILING) <= ids
