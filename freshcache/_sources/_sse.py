"""Server-sent events, sans-IO: bytes in, events out.

Implements the event-stream interpretation of the WHATWG HTML standard (§9.2.6) for
the Streamable HTTP transport of MCP 2026-07-28, where every answer to a POST may be
an SSE stream and ``subscriptions/listen`` always is one. Lines end in CRLF, LF or a
lone CR, and a CRLF may be split across two reads; a leading byte-order mark is
dropped; ``data`` lines of one event are joined with LF; comment lines (``:``) are the
spec's keep-alives and are reported as such, never as malformed input; an event
still incomplete when the stream ends is discarded.

Why not httpx-sse: its decoder has the same line rules, but it buffers an unbounded
line (a hostile server can grow memory without limit), hides comments (so a caller
cannot tell keep-alives from silence) and cannot say whether the stream ended in the
middle of a frame. This parser bounds every frame by ``max_frame_bytes``, reports
comments, and knows what is pending. It never raises on input; "need more" is an
empty list.

The parser is sans-IO. `read_stream` is the one read loop over it for a long-lived
stream (the 2026 listen stream, the 2025 GET stream): it needs a clock, because a
stream that falls silent after keep-alives is gone (`SilenceRule`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

import anyio

from .._core._counters import Tally

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its ``data`` (lines joined by LF) and type."""

    data: str
    event: str = ""
    """The ``event:`` field; empty means the default type, ``message``."""
    id: str | None = None
    size: int = 0
    """Bytes the frame took on the wire (for limits and metrics)."""


@dataclass(frozen=True, slots=True)
class SseComment:
    """A comment line: a keep-alive."""

    text: str


@dataclass(frozen=True, slots=True)
class SseOversized:
    """A frame grew past the limit; the parser accepts nothing after it."""

    limit: int
    size: int


SseItem = SseEvent | SseComment | SseOversized


@dataclass(frozen=True, slots=True)
class SseSilent:
    """The stream fell silent once keep-alives had set a rhythm (`SilenceRule`)."""

    limit: float
    longest: float

    def __str__(self) -> str:
        return f"no byte for {self.limit:.2f}s after keep-alives every {self.longest:.2f}s or so"


@dataclass(frozen=True, slots=True)
class SseEnd:
    """The body ended; ``cut``: in the middle of a frame (which is discarded)."""

    cut: bool


StreamItem = SseItem | SseSilent | SseEnd


class SseParser:
    """Incremental event-stream parser; feed it bytes as they arrive."""

    def __init__(self, *, max_frame_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._bom_checked = False
        self._failed = False
        self._frame_bytes = 0  # bytes of complete lines of the event being collected
        self._data: list[bytes] = []
        self._event = b""
        self._id: bytes | None = None
        self._last_id: bytes | None = None
        self.cut = False
        """Set by `end`: the stream ended in the middle of a frame (which is discarded)."""
        self.retry_ms: int | None = None
        """The last ``retry`` field: how long the server asks a client to wait before it
        reconnects (2025-11-25 resumes an answer's stream; 2026-07-28 never does)."""

    @property
    def pending(self) -> bool:
        """Whether a frame has started and not ended (bytes that no event used yet)."""
        return bool(self._buf) or self._frame_bytes > 0

    @property
    def last_id(self) -> str | None:
        """The last event id the stream set (a priming event's too): a `Last-Event-ID`."""
        return None if self._last_id is None else self._last_id.decode("utf-8", "replace")

    @property
    def failed(self) -> bool:
        """True once a frame went over the limit."""
        return self._failed

    def feed(self, data: bytes) -> list[SseItem]:
        """Take the next bytes of the stream; return the items they complete."""
        if self._failed or not data:
            return []
        buf = self._buf
        split_cr = buf.endswith(b"\r")
        buf += data
        if not self._bom_checked:
            if len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                return []  # might still become a BOM
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
            self._bom_checked = True
        if split_cr or b"\n" in data or b"\r" in data:
            return self._drain(final=False)
        # No line ended: only the limit needs checking (and nothing is copied).
        if self._frame_bytes + len(buf) > self.max_frame_bytes:
            size = self._frame_bytes + len(buf)
            self._fail()
            return [SseOversized(self.max_frame_bytes, size)]
        return []

    def end(self) -> list[SseItem]:
        """The stream ended: return what a final lone CR completes, and set `cut` when
        a frame was left unfinished (it is discarded, as the standard says)."""
        out = [] if self._failed else self._drain(final=True)
        self.cut = self.pending and not self._failed
        self._buf.clear()
        self._reset_event()
        return out

    def _drain(self, *, final: bool) -> list[SseItem]:
        buf = self._buf
        out: list[SseItem] = []
        # bytes.splitlines splits on exactly the standard's terminators: CRLF, LF, CR.
        lines = bytes(buf).splitlines(keepends=True)
        keep = b""
        if lines and not lines[-1].endswith(b"\n") and not (final and lines[-1].endswith(b"\r")):
            keep = lines.pop()  # an unfinished line, or a CR that may be half a CRLF
        for line in lines:
            body = line[:-2] if line.endswith(b"\r\n") else line[:-1]
            item = self._line(body, len(line))
            if item is not None:
                out.append(item)
                if isinstance(item, SseOversized):
                    self._fail()
                    return out
        buf[:] = keep
        if self._frame_bytes + len(keep) > self.max_frame_bytes:
            out.append(SseOversized(self.max_frame_bytes, self._frame_bytes + len(keep)))
            self._fail()
        return out

    # ------------------------------------------------------------------ internals

    def _line(self, line: bytes, width: int) -> SseItem | None:
        if not line:
            return self._dispatch(width)
        self._frame_bytes += width
        if self._frame_bytes > self.max_frame_bytes:
            return SseOversized(self.max_frame_bytes, self._frame_bytes)
        if line.startswith(b"data:"):  # by far the most common line: straight through
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            return None
        if line[0] == 0x3A:  # ":" starts a comment
            return SseComment(line[1:].decode("utf-8", "replace").lstrip(" "))
        field, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._data.append(value)
        elif field == b"event":
            self._event = value
        elif field == b"id" and b"\x00" not in value:
            self._id = value
        elif field == b"retry" and value.isdigit():
            self.retry_ms = int(value)
        return None  # unknown fields are ignored

    def _dispatch(self, width: int) -> SseEvent | None:
        size = self._frame_bytes + width
        data, event, event_id = self._data, self._event, self._id
        self._reset_event()
        if event_id is not None:
            self._last_id = event_id
        if not data:
            return None  # a comment-only or empty frame dispatches nothing
        return SseEvent(
            data=b"\n".join(data).decode("utf-8", "replace"),
            event=event.decode("utf-8", "replace"),
            id=None if self._last_id is None else self._last_id.decode("utf-8", "replace"),
            size=size,
        )

    def _reset_event(self) -> None:
        self._frame_bytes = 0
        self._data = []
        self._event = b""
        self._id = None

    def _fail(self) -> None:
        self._failed = True
        self._buf.clear()
        self._reset_event()


@dataclass(frozen=True, slots=True)
class SseLimits:
    """What a long-lived SSE stream may do: how large a frame, how long a silence."""

    max_frame_bytes: int = 4 * 1024 * 1024
    keepalive_misses: int = 3
    silence_floor: float = 5.0


class SilenceRule:
    """When a stream's silence means it is gone (the keep-alive rule).

    Once two keep-alives have shown the server's rhythm, no byte for ``misses`` of
    its intervals (the longest of the last few, so one slow beat does not trip it),
    but never less than ``floor`` seconds, is a loss. Before that there is no limit
    here (the idle timeout still applies).
    """

    __slots__ = ("floor", "intervals", "last", "misses")

    def __init__(self, misses: int, floor: float) -> None:
        self.misses = misses
        self.floor = floor
        self.last: float | None = None
        self.intervals: deque[float] = deque(maxlen=4)

    def keepalive(self, now: float) -> None:
        if self.last is not None:
            self.intervals.append(now - self.last)
        self.last = now

    @property
    def longest(self) -> float:
        return max(self.intervals, default=0.0)

    def limit(self) -> float | None:
        if not self.intervals:
            return None
        return max(self.floor, self.misses * self.longest)


async def read_stream(
    chunks: AsyncIterator[bytes], limits: SseLimits
) -> AsyncGenerator[StreamItem, None]:
    """The items of a long-lived SSE body as its bytes arrive: events, keep-alives
    (`SseComment`), and last one of `SseOversized`, `SseSilent` or `SseEnd`.

    The silence clock runs only while waiting for bytes, not while the consumer
    handles an item."""
    parser = SseParser(max_frame_bytes=limits.max_frame_bytes)
    silence = SilenceRule(limits.keepalive_misses, limits.silence_floor)
    while True:
        limit = silence.limit()
        chunk: bytes | None = None
        if limit is None:  # no rhythm yet: nothing to time (a cancel scope costs)
            chunk = await anext(chunks, None)
        else:
            with anyio.move_on_after(limit) as waited:
                chunk = await anext(chunks, None)
            if waited.cancelled_caught:
                yield SseSilent(limit, silence.longest)
                return
        for item in parser.feed(chunk) if chunk is not None else parser.end():
            if isinstance(item, SseComment):
                silence.keepalive(anyio.current_time())
            yield item
            if isinstance(item, SseOversized):
                return
        if chunk is None:
            yield SseEnd(parser.cut)
            return


@dataclass(slots=True)
class StreamStats:
    """What one open listen stream has carried so far (introspection, tests)."""

    uris: frozenset[str]
    list_changed: bool
    acknowledged: bool = False
    frames: int = 0
    """SSE events taken in and handed on (their stream events were consumed)."""
    keepalives: int = 0


@dataclass(slots=True)
class HttpStats(Tally):
    """Running totals of one `HttpSource`, for status output and tests."""

    requests: int = 0
    retries: int = 0
    frames: int = 0
    keepalives: int = 0
    untrusted: int = 0
    """Messages that could not be trusted: malformed, wrong id, out of order."""
    oversized: int = 0
    idle_timeouts: int = 0
    silent_losses: int = 0
    """Listen streams given up because they fell silent after keep-alives."""
    streams_opened: int = 0
    streams_lost: int = 0
    streams_closed: int = 0
    resumed: int = 0
    """Answer streams resumed with ``Last-Event-ID`` after they ended early (2025-11-25)."""


__all__ = [
    "HttpStats",
    "SilenceRule",
    "SseComment",
    "SseEnd",
    "SseEvent",
    "SseItem",
    "SseLimits",
    "SseOversized",
    "SseParser",
    "SseSilent",
    "StreamItem",
    "StreamStats",
    "read_stream",
]
