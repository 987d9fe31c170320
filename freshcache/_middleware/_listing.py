"""Walking ``resources/list`` page by page (spec server/resources, pagination): the
I/O around the core's `ListWalk`, which decides which page to fetch and when to start
again."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from .._core import (
    FRESH,
    Decision,
    FreshnessEngine,
    ListResult,
    ListWalk,
    Partition,
    RequestFailed,
    StreamEvent,
)
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


class Relister:
    """The re-list a `Relist` decision asks for, in the background: one walk at a time
    (a change during it outdates its pages and it walks again), then the engine hears
    which URIs the list holds."""

    def __init__(
        self,
        engine: FreshnessEngine,
        telemetry: Telemetry,
        feed_hints: Callable[[tuple[StreamEvent, ...]], None],
        carry_out: Callable[[list[Decision]], None],
        where: Callable[[], tuple[Source, Partition]],
    ) -> None:
        self._engine = engine
        self._telemetry = telemetry
        self._feed_hints = feed_hints
        self._carry_out = carry_out
        self._where = where
        self.running = False

    def start(self, tg: TaskGroup) -> None:
        # Marked at once, not when the task first runs: `running` is true from the
        # moment a re-list is decided.
        if not self.running:
            self.running = True
            tg.start_soon(self._relist)

    async def _relist(self) -> None:
        source, principal = self._where()
        try:
            result = await walk_list(
                self._engine, source, self._telemetry, self._feed_hints, principal
            )
        finally:
            self.running = False
        if result.state == FRESH:
            _, principal = self._where()
            self._carry_out(
                self._engine.list_complete((r.uri for r in result.resources), principal)
            )
