"""The sans-IO SSE parser (WHATWG event-stream rules, as MCP's Streamable HTTP uses them)."""

from __future__ import annotations

from contextlib import aclosing

import anyio
import pytest
from httpx_sse._decoders import SSEDecoder, SSELineDecoder
from hypothesis import given, settings
from hypothesis import strategies as st

from freshcache._sources._sse import (
    SilenceRule,
    SseComment,
    SseEnd,
    SseEvent,
    SseLimits,
    SseOversized,
    SseParser,
    SseSilent,
    read_stream,
)


def feed_all(chunks: list[bytes], limit: int = 1 << 20) -> list[object]:
    parser = SseParser(max_frame_bytes=limit)
    out: list[object] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    out.extend(parser.end())
    return out


def events(items: list[object]) -> list[tuple[str, str]]:
    return [(i.event, i.data) for i in items if isinstance(i, SseEvent)]


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (b"data: a\r\n\r\n", [("", "a")]),
        (b"data: a\n\n", [("", "a")]),
        (b"data: a\r\r", [("", "a")]),
        (b"data:a\ndata:  b\n\n", [("", "a\n b")]),
        (b"event: message\ndata: {}\n\n", [("message", "{}")]),
        (b"data\n\n", [("", "")]),
        (b"\xef\xbb\xbfdata: bom\n\n", [("", "bom")]),
        (b"event: x\n\ndata: y\n\n", [("", "y")]),
        (b": only a comment\n\n", []),
        (b"id: 1\nretry: 10\nfoo: bar\ndata: z\n\n", [("", "z")]),
        (b"data: caf\xc3\xa9 \xff\n\n", [("", "caf\u00e9 \ufffd")]),
    ],
    ids=[
        "crlf",
        "lf",
        "lone-cr",
        "multi-line-data",
        "event-type",
        "field-without-colon",
        "bom",
        "no-data-no-event",
        "comment-only",
        "ignored-fields",
        "utf8-and-invalid-bytes",
    ],
)
def test_the_standard_framing_rules_hold(stream, expected):
    assert events(feed_all([stream])) == expected


def test_comments_are_reported_as_keep_alives():
    items = feed_all([b":\r\n\r\n: ping\r\n\r\ndata: x\r\n\r\n"])
    assert [i.text for i in items if isinstance(i, SseComment)] == ["", "ping"]


def test_a_crlf_split_between_reads_is_one_line_end():
    parser = SseParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n") == []
    assert events(parser.feed(b"\r\n")) == [("", "a")]


def test_the_end_of_the_stream_tells_a_cut_frame_from_a_clean_end():
    clean, cut = SseParser(), SseParser()
    clean.feed(b"data: a\n\n")
    cut.feed(b'data: a\n\ndata: {"half')
    assert clean.end() == [] and clean.cut is False
    assert cut.end() == [] and cut.cut is True


def test_a_lone_cr_at_the_very_end_still_ends_the_last_line():
    parser = SseParser()
    assert parser.feed(b"data: a\r\r") == []  # the last CR might start a CRLF ...
    assert events(parser.end()) == [("", "a")]  # ... until the stream ends
    assert parser.cut is False


def test_a_frame_over_the_limit_stops_the_parser_even_without_a_line_end():
    parser = SseParser(max_frame_bytes=64)
    items = parser.feed(b"data: " + b"x" * 100)
    assert items == [SseOversized(64, 106)]
    assert parser.failed and parser.feed(b"\n\ndata: later\n\n") == []


def test_many_small_lines_add_up_to_the_frame_limit():
    parser = SseParser(max_frame_bytes=64)
    items = parser.feed(b"data: 0123456789\n" * 5)
    assert isinstance(items[-1], SseOversized)


def test_frames_under_the_limit_pass_one_after_another():
    items = feed_all([b"data: 0123456789\n\n" * 100], limit=64)
    assert len(events(items)) == 100


_TEXT = st.text(
    st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)), max_size=20
)
_EVENT = st.tuples(
    st.sampled_from(["", "message", "ping"]), st.lists(_TEXT, min_size=1, max_size=3)
)
_STREAM = st.lists(st.one_of(_EVENT, st.builds(lambda t: ("#", [t]), _TEXT)), max_size=8)


def _render(parts: list[tuple[str, list[str]]], end: str) -> bytes:
    out = []
    for kind, lines in parts:
        if kind == "#":
            out.append(f":{lines[0]}{end}{end}")
            continue
        if kind:
            out.append(f"event: {kind}{end}")
        out.extend(f"data: {line}{end}" for line in lines)
        out.append(end)
    return "".join(out).encode()


@given(
    parts=_STREAM,
    end=st.sampled_from(["\r\n", "\n", "\r"]),
    cuts=st.lists(st.integers(0, 400), max_size=6),
)
@settings(max_examples=300, deadline=None)
def test_any_split_of_a_stream_gives_the_events_of_the_whole(parts, end, cuts):
    stream = _render(parts, end)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    expected = [(kind, "\n".join(lines)) for kind, lines in parts if kind != "#"]
    assert events(feed_all([stream])) == expected
    assert events(feed_all(chunks)) == expected


@given(parts=_STREAM, end=st.sampled_from(["\r\n", "\n", "\r"]))
@settings(max_examples=200, deadline=None)
def test_on_well_formed_streams_it_agrees_with_httpx_sse(parts, end):
    stream = _render(parts, end)
    lines, decoder = SSELineDecoder(), SSEDecoder()
    theirs = []
    for line in [*lines.decode(stream.decode()), *lines.flush()]:
        sse = decoder.decode(line)
        if sse is not None:
            theirs.append((sse.event, sse.data))
    ours = [(kind or "message", data) for kind, data in events(feed_all([stream]))]
    assert ours == theirs  # httpx-sse names the default event type "message"


# ------------------------------------------------------------- the long-lived read loop


async def read_all(chunks: list[bytes], limits: SseLimits, *, keep_open: bool = False):
    """What `read_stream` makes of ``chunks``; with ``keep_open`` the body then goes
    quiet instead of ending (only the silence rule can end it)."""
    send, receive = anyio.create_memory_object_stream[bytes](len(chunks))
    for chunk in chunks:
        send.send_nowait(chunk)
    if not keep_open:
        send.close()
    try:
        async with aclosing(read_stream(aiter(receive), limits)) as items:
            with anyio.fail_after(30):
                return [item async for item in items]
    finally:
        send.close()
        receive.close()


@pytest.mark.anyio
async def test_the_read_loop_ends_with_the_end_of_the_body_and_says_if_it_was_cut():
    clean = await read_all([b"data: a\n\n: ka\n\n"], SseLimits())
    assert clean == [SseEvent("a", size=9), SseComment("ka"), SseEnd(cut=False)]
    cut = await read_all([b"data: a\n\ndata: b"], SseLimits())
    assert cut == [SseEvent("a", size=9), SseEnd(cut=True)]


@pytest.mark.anyio
async def test_the_read_loop_stops_at_an_oversized_frame():
    items = await read_all([b"data: " + b"x" * 300 + b"\n\n", b"data: after\n\n"], SseLimits(256))
    assert len(items) == 1 and isinstance(items[0], SseOversized)


@pytest.mark.anyio
async def test_silence_ends_the_read_loop_only_once_keep_alives_have_set_a_rhythm():
    floor = 0.05
    items = await read_all(
        [b"data: a\n\n", b": ka\n\n: ka\n\n"], SseLimits(silence_floor=floor), keep_open=True
    )
    assert items[:3] == [SseEvent("a", size=9), SseComment("ka"), SseComment("ka")]
    assert len(items) == 4 and isinstance(items[3], SseSilent)
    assert items[3].limit >= floor and items[3].limit == max(floor, 3 * items[3].longest)


def test_the_silence_rule_waits_for_two_keep_alives_and_uses_the_longest_interval():
    rule = SilenceRule(misses=3, floor=1.0)
    rule.keepalive(10.0)
    assert rule.limit() is None
    rule.keepalive(12.0)
    rule.keepalive(12.5)
    assert rule.longest == 2.0 and rule.limit() == 6.0
    assert SilenceRule(misses=1, floor=5.0).limit() is None
