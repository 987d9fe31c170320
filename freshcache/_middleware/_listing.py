"""Walking ``resources/list`` page by page (spec server/resources, pagination): the
I/O around the core's `ListWalk`, which decides which page to fetch and when to start
again."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from .._core import FreshnessEngine, ListResult, ListWalk, Partition, RequestFailed, StreamEvent
from .._errors import ProtocolError
from .._sources._source import Source
from ._telemetry import Telemetry


async def walk_list(
    engine: FreshnessEngine,
    source: Source,
    telemetry: Telemetry,
    feed_hints: Callable[[tuple[StreamEvent, ...]], None],
    partition: Partition,
) -> ListResult:
    """Every page of ``resources/list``, from the cache where a page is fresh."""
    walk = ListWalk(engine, partition)
    while (ticket := walk.next_page()) is not None:
        with telemetry.request("resources/list") as span:
            try:
                reply = await source.list_resources(ticket.cursor, partition)
            except (anyio.get_cancelled_exc_class(), ProtocolError):
                raise
            except Exception as exc:
                reply = RequestFailed("server_error", f"source raised {exc!r}")
            if isinstance(reply, RequestFailed):
                telemetry.request_failed(span, reply)
        feed_hints(reply.hints)
        walk.landed(ticket, reply)
    assert walk.result is not None
    return walk.result
