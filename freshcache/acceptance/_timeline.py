"""A case's timeline: what the cache heard, sent and got, as it happened.

Recorded from the run itself, never reconstructed: `RecordingSource` sits between the
cache and the world's real source (HTTP, stdio, in-memory) and notes each
notification the cache is handed, each read it sends and each answer that lands; the
cache's own state-change feed (`FreshCache.changes`) adds what the cache made of them;
the runner adds the steps and the results. The bare-engine world notes the same
events where it feeds the engine. Times are milliseconds since the first step.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol

from freshcache import (
    CatalogChange,
    CatalogKind,
    ChangesDropped,
    ChangesMissed,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    Partition,
    ReadReply,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
    Source,
    SourceWrapper,
    StateChanges,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)

from ._steps import ALIASES

_NAMES = {uri: alias for alias, uri in ALIASES.items()}


def alias_of(uri: str) -> str:
    """A URI as the tables spell it: an alias where there is one."""
    return _NAMES.get(uri, uri)


@dataclass(slots=True)
class Timeline:
    """Events of one case, each with its time since `begin` (before it: since creation)."""

    started: float = field(default_factory=time.perf_counter)
    events: list[tuple[float, str]] = field(default_factory=list)
    recording: bool = False

    def begin(self) -> None:
        """The first step is about to run: the clock starts, events count from now."""
        self.started = time.perf_counter()
        self.recording = True

    def note(self, what: str, who: str = "") -> None:
        """Note ``what`` happened; ``who``: the cache it happened to, where a world has
        several (``worker 2`` on the fleet wire), put before it."""
        if self.recording:
            line = f"{who}: {what}" if who else what
            self.events.append(((time.perf_counter() - self.started) * 1000, line))

    def as_json(self) -> list[dict[str, Any]]:
        return [{"ms": round(ms, 3), "event": what} for ms, what in self.events]


def heard(event: StreamEvent) -> str | None:
    """What a stream event says, for the timeline (``None``: not worth a line)."""
    match event:
        case ResourceUpdated(uri=uri):
            return f"heard resources/updated {alias_of(uri)}"
        case ResourceListChanged():
            return "heard resources/list_changed"
        case ListenAcknowledged(resource_uris=uris):
            honoured = ", ".join(sorted(alias_of(u) for u in uris)) or "nothing"
            return f"stream acknowledged ({honoured})"
        case StreamLost(detail=detail):
            return f"stream lost ({_clip(detail)})" if detail else "stream lost"
        case StreamClosed():
            return "stream closed by the server"
        case ListenUnsupported():
            return "listen unsupported"
        case UntrustedMessage(detail=detail):
            return f"untrusted message ({_clip(detail)})"
        case ChangesMissed():
            return "changes may have been missed"
        case ListenStarted():
            return "listen sent"
    return None


def _clip(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def answer(uri: str, reply: ReadReply | RequestFailed) -> str:
    """A read's answer, for the timeline: ``read landed selected: v2``."""
    if isinstance(reply, RequestFailed):
        detail = f": {_clip(reply.detail, 60)}" if reply.detail else ""
        return f"read landed {alias_of(uri)}: failed ({reply.kind}{detail})"
    texts = [c.text for c in reply.contents if c.text is not None]
    if not texts:
        return f"read landed {alias_of(uri)}: {len(reply.contents)} contents, no text"
    prefix = f"{uri} @ "
    label = texts[0][len(prefix) :] if texts[0].startswith(prefix) else repr(texts[0][:40])
    return f"read landed {alias_of(uri)}: {label}"


class RecordingSource(SourceWrapper):
    """The world's source as the cache sees it, noting what passes (see module doc);
    ``who`` names the cache in each line where a world has several."""

    def __init__(self, inner: Source, timeline: Timeline, who: str = "") -> None:
        super().__init__(inner)
        self.timeline = timeline
        self.who = who

    def _note(self, what: str) -> None:
        self.timeline.note(what, self.who)

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        self._note(f"read sent {alias_of(uri)}")
        reply = await self.inner.read_resource(uri, principal)
        self._note(answer(uri, reply))
        for hint in reply.hints:
            said = heard(hint)
            if said is not None:
                self._note(f"{said} (on the answer)")
        return reply

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        self._note("list page sent" if cursor is None else "next list page sent")
        reply = await self.inner.list_resources(cursor, principal)
        if isinstance(reply, RequestFailed):
            self._note(f"list page landed: failed ({reply.kind})")
        else:
            self._note(f"list page landed: {len(reply.resources)} resources")
        return reply

    async def listen(
        self, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        stream = self.inner.listen(uris, list_changed)
        try:
            async for event in stream:
                said = heard(event)
                if said is not None:
                    self._note(said)
                yield event
        finally:
            await stream.aclose()


class SlowLaterPages(SourceWrapper):
    """Each list page after the first (``resources/list`` and catalogs) lands
    ``seconds`` after it was asked for, on the clock the cache decides TTLs by: what a
    slow server's later pages do to a walk's window (``given later list pages take``)."""

    def __init__(self, inner: Source, clock: Advancing, seconds: float) -> None:
        super().__init__(inner)
        self.clock = clock
        self.seconds = seconds

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        reply = await self.inner.list_resources(cursor, principal)
        if cursor is not None:
            self.clock.advance(self.seconds)
        return reply

    async def list_catalog(
        self, kind: CatalogKind, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        reply = await super().list_catalog(kind, cursor, principal)
        if cursor is not None:
            self.clock.advance(self.seconds)
        return reply


class Advancing(Protocol):
    """A clock a world moves (`VirtualClock`)."""

    def advance(self, seconds: float) -> None: ...


async def note_changes(changes: StateChanges, timeline: Timeline, who: str = "") -> None:
    """Note every state change the cache reports until the feed is closed."""
    async with changes:
        async for change in changes:
            if isinstance(change, ChangesDropped):
                timeline.note(f"cache: {change.count} state changes dropped", who)
                continue
            reason = f" ({change.reason})" if change.reason else ""
            if isinstance(change, CatalogChange):
                timeline.note(
                    f"cache: the {change.kind} catalog is {change.new_state}{reason}", who
                )
                continue
            timeline.note(f"cache: {alias_of(change.uri)} is {change.new_state}{reason}", who)
