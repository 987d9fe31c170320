"""The background re-list a `Relist` decision asks for (`walk_list` is the walk)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from .._core import FRESH, Decision, FreshnessEngine, Partition, StreamEvent
from .._sources._source import Source
from ._listing import walk_list
from ._telemetry import Telemetry


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
        self._done: anyio.Event | None = None
        """Made by the first caller of `finished` during a walk; set when it ends."""

    async def finished(self) -> None:
        """Until the re-list under way (if any) has ended."""
        if self.running:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()

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
            done, self._done = self._done, None
            if done is not None:
                done.set()
        if result.state == FRESH:
            _, principal = self._where()
            self._carry_out(
                self._engine.list_complete((r.uri for r in result.resources), principal)
            )
