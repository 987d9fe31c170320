"""Walking ``resources/list`` page by page (spec server/resources, pagination).

Each page is its own cache entry with its own ``ttlMs`` (`ListPages` in the core);
this walk asks the engine for fresh pages, fetches the others, and starts again from
the first page when the engine says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio

from ._core import (
    AWAITING_FRESH_SOURCE,
    FRESH,
    FreshnessEngine,
    Partition,
    RequestFailed,
    ResourceInfo,
    StreamEvent,
)
from ._errors import ProtocolError
from ._source import Source
from ._telemetry import Telemetry


@dataclass(frozen=True, slots=True)
class ListResult:
    """The answer to `FreshCache.list_resources`."""

    state: str
    """``fresh``, ``awaiting_fresh_source``, ``denied`` or ``not_found``."""
    resources: tuple[ResourceInfo, ...] = ()
    reason: str | None = None
    server_read: bool = False
    detail: str | None = None


async def walk_list(
    engine: FreshnessEngine,
    source: Source,
    telemetry: Telemetry,
    feed_hints: Callable[[tuple[StreamEvent, ...]], None],
    partition: Partition,
) -> ListResult:
    """Every page of ``resources/list``, from the cache where a page is fresh; from the
    first page again when the engine says a change or a refused cursor overtook it."""
    for _ in range(engine.policy.max_rereads):
        resources: list[ResourceInfo] = []
        cursor: str | None = None
        server_read = False
        restarted = False
        seen: set[str | None] = set()
        while True:
            page = engine.lookup_list_page(cursor, partition)
            if page is None:
                ticket = engine.begin_list(cursor, partition)
                server_read = True
                with telemetry.request("resources/list") as span:
                    try:
                        reply = await source.list_resources(cursor, partition)
                    except (anyio.get_cancelled_exc_class(), ProtocolError):
                        raise
                    except Exception as exc:
                        reply = RequestFailed("server_error", f"source raised {exc!r}")
                    if isinstance(reply, RequestFailed):
                        telemetry.request_failed(span, reply)
                feed_hints(reply.hints)
                judged = engine.finish_list(ticket, reply)
                if judged is None:
                    restarted = True  # from the top (the engine said why)
                    break
                if isinstance(judged, RequestFailed):
                    return _list_failure(judged)
                page = judged
            resources.extend(page.resources)
            seen.add(cursor)
            cursor = page.next_cursor
            if cursor is None or cursor in seen:
                break
        if not restarted:
            return ListResult(FRESH, tuple(resources), server_read=server_read)
    return ListResult(AWAITING_FRESH_SOURCE, reason="invalidated", server_read=True)


def _list_failure(failure: RequestFailed) -> ListResult:
    match failure.kind:
        case "denied" | "not_found":
            return ListResult(
                failure.kind, reason=failure.kind, server_read=True, detail=failure.detail
            )
        case _:
            return ListResult(
                AWAITING_FRESH_SOURCE, reason=failure.kind, server_read=True, detail=failure.detail
            )
