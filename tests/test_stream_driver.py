"""`StreamDriver`'s run loop is woken when something it sleeps on changed (invariant 15
says it sleeps; this says it does not oversleep): a decision carried out outside the
loop that moves the supervisor's next deadline earlier, or that makes listening
unsupported, wakes it. A fake source and a real event loop; every wait polls under a
deadline, none measures time.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

import anyio
import pytest

from freshcache import MemoryStore
from freshcache._core import (
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    StreamEvent,
    StreamLost,
)
from freshcache._core._backoff import BackoffSettings, ReconnectBudget
from freshcache._core._streams import ListenSupervisor
from freshcache._middleware._listening import StreamDriver
from freshcache._middleware._telemetry import Telemetry

pytestmark = pytest.mark.anyio

U = "guide://shipping/approval"


class _Source:
    """Each listen is acknowledged for what it asked, then ends as ``then`` says."""

    def __init__(self, then: Callable[[str], StreamEvent]) -> None:
        self.then = then
        self.listens = 0
        self.release = anyio.Event()

    async def listen(self, uris: frozenset[str], list_changed: bool) -> AsyncGenerator[Any, None]:
        self.listens += 1
        sid = f"listen-{self.listens}"
        yield ListenStarted(sid, uris, list_changed)
        yield ListenAcknowledged(sid, uris, list_changed)
        if self.listens > 1:
            await anyio.sleep_forever()
        await self.release.wait()
        yield self.then(sid)


def _driver(source: _Source) -> StreamDriver:
    engine = FreshnessEngine(store=MemoryStore())
    engine.select([U])
    budget = ReconnectBudget(BackoffSettings(base=0.01), jitter=lambda: 0.0)
    return StreamDriver(
        source=source,  # type: ignore[arg-type]
        engine=engine,
        supervisor=ListenSupervisor(budget, ack_timeout=30.0),
        telemetry=Telemetry(),
        carry_out=lambda decisions: None,
        enabled=True,
    )


async def _until(condition: Any) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.01)


async def _discovered() -> None:
    return None


async def test_a_loss_after_the_acknowledgment_wakes_the_loop_for_the_retry() -> None:
    # Acknowledged: nothing is due, the loop sleeps with no deadline. The loss sets a
    # retry deadline from outside the loop (`obey`); the loop must be up by then.
    source = _Source(lambda sid: StreamLost(sid, "the test ended it"))
    driver = _driver(source)
    async with anyio.create_task_group() as tg:
        tg.start_soon(driver.run, tg, _discovered)
        await _until(lambda: driver.supervisor.state == "live")
        await _until(lambda: driver._sleeping_until is None and driver.loop_turns > 0)
        source.release.set()
        await _until(lambda: source.listens == 2 and driver.supervisor.state == "live")
        tg.cancel_scope.cancel()


async def test_listening_found_unsupported_after_the_acknowledgment_ends_the_loop() -> None:
    # The server answers the acknowledged listen with "no listen": the supervisor is
    # final, nothing is due, and the loop must not sleep on as a dead task.
    source = _Source(lambda sid: ListenUnsupported("-32601 after the acknowledgment"))
    driver = _driver(source)
    ran = anyio.Event()

    async def run(tg: Any) -> None:
        await driver.run(tg, _discovered)
        ran.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, tg)
        await _until(lambda: driver.supervisor.state == "live")
        await _until(lambda: driver._sleeping_until is None and driver.loop_turns > 0)
        source.release.set()
        await _until(lambda: driver.supervisor.unsupported)
        with anyio.fail_after(10):
            await ran.wait()
        tg.cancel_scope.cancel()
