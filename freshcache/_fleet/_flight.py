"""The fleet's one fill/share loop, for whatever is cached (resource text, a catalog).

A worker that needs a thing the fleet may share looks in the store (`PEEK`, under the
thing's keys): a current copy is taken if the engine lets it serve (else the worker
reads it itself); with none, the worker holding the single-flight lock of that
generation reads (or walks) the server and fills the store, fenced; the others wait
for its fill, up to `Fleet.fill_lock`, then read themselves. A waiting worker looks
again first after about as long as the fills it waited for lately took (`FillWait`),
then backs off from 2 ms: nothing is served meanwhile, and on 2 cores the store round
trips of many waiting workers took CPU from the workers a change had not reached yet.
`SharedReads` and `SharedCatalogs` each say only how to peek, take, fill and read
directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

import anyio

from ._store import Peeked

if TYPE_CHECKING:
    from ._parts import ReadsWorker

T = TypeVar("T")
C = TypeVar("C")


class FillWait:
    """How long a worker waits before it looks for another worker's fill again.

    The first look comes after ``first()``: 0.8 of a moving average of how long the
    fills this worker waited for took (a server read, usually the same each time), so
    one look mostly finds the entry; later looks back off from 2 ms. Waiting longer
    only delays this worker's re-read: nothing is served meanwhile."""

    FLOOR = 0.002
    CEILING = 0.25

    def __init__(self) -> None:
        self.average = self.FLOOR

    def first(self) -> float:
        return max(self.FLOOR, 0.8 * self.average)

    def took(self, seconds: float) -> None:
        """A fill was found ``seconds`` after the first look that saw it locked."""
        sample = min(self.CEILING, max(self.FLOOR, seconds))
        self.average += 0.2 * (sample - self.average)


class Flight(Generic[C, T]):
    """What one thing cached needs of the loop: how to peek for it, take a copy (the
    engine decides), fill it while holding the lock, and read it directly."""

    async def peek(self) -> tuple[Peeked, C | None] | None:
        """The fence and the current copy if any; ``None``: the store failed."""
        raise NotImplementedError

    def take(self, fence: Peeked, copy: C) -> T | None:
        """The copy as this caller's answer, or ``None``: the engine refuses it."""
        raise NotImplementedError

    async def refused(self, fence: Peeked) -> T:
        """Read it directly after the engine refused the store's copy."""
        raise NotImplementedError

    async def fill(self, fence: Peeked) -> T:
        """This worker holds the lock: read it from the server and fill the store."""
        raise NotImplementedError

    async def direct(self) -> T:
        """Read it from the server without the store."""
        raise NotImplementedError

    def shared(self) -> bool:
        """Whether it may still come from the fleet (checked while waiting)."""
        return True


async def share(
    worker: ReadsWorker,
    flight: Flight[C, T],
    wait: FillWait,
    waiting_since: float | None = None,
) -> T:
    """The loop (see the module docstring). ``waiting_since``: when another worker's
    publication made this one due (its publisher reads it for the fleet at once)."""
    deadline = anyio.current_time() + worker.config.fill_lock
    delay = FillWait.FLOOR
    while True:
        peeked = await flight.peek()
        if peeked is None:
            return await flight.direct()
        fence, copy = peeked
        if copy is not None:
            taken = flight.take(fence, copy)
            if taken is None:
                worker.counters.refused_copies += 1
                return await flight.refused(fence)
            if waiting_since is not None:
                wait.took(anyio.current_time() - waiting_since)
            return taken
        if fence.locked:
            return await flight.fill(fence)
        now = anyio.current_time()
        if now >= deadline or not flight.shared():
            return await flight.direct()
        # Another worker reads this generation for the fleet: wait for its fill.
        worker.counters.fill_waits += 1
        if waiting_since is None:
            waiting_since = now
            await anyio.sleep(min(wait.first(), deadline - now))
        else:
            await anyio.sleep(delay)
            delay = min(0.05, delay * 1.5)


__all__ = ["FillWait", "Flight", "share"]
