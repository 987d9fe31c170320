"""`Negotiation`: requests wait for a discovery under way, and run one again only when
the last got no answer from the server itself (`freshcache._sources._negotiation`)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from freshcache._core import RequestFailed
from freshcache._sources._negotiation import Negotiation

pytestmark = pytest.mark.anyio

NO_ANSWER = RequestFailed("timeout", "server/discover: no answer")


class Discoveries:
    """A source's ``start``: each run takes the next outcome (``None``: answered)."""

    def __init__(self, *outcomes: RequestFailed | None) -> None:
        self.outcomes = list(outcomes)
        self.runs = 0
        self.negotiation = Negotiation(self.start)

    async def start(self) -> None:
        with self.negotiation.running() as negotiation:
            self.runs += 1
            await anyio.lowlevel.checkpoint()
            negotiation.settled(self.outcomes.pop(0))


async def test_an_answered_discovery_lets_every_request_go() -> None:
    d = Discoveries(None)
    await d.start()
    assert await d.negotiation.before("resources/read", 1.0) is None
    assert d.runs == 1


async def test_no_answer_runs_the_discovery_again_before_the_next_request() -> None:
    d = Discoveries(NO_ANSWER, NO_ANSWER, None)
    await d.start()
    refused = await d.negotiation.before("resources/read", 1.0)
    assert refused is not None and refused.kind == "timeout" and not refused.lost
    assert refused.detail.startswith("resources/read: not sent, no revision agreed")
    assert await d.negotiation.before("resources/read", 1.0) is None
    assert d.runs == 3
    assert await d.negotiation.before("resources/read", 1.0) is None and d.runs == 3


async def test_a_discovery_cut_off_is_run_again_by_the_request_that_waited_for_it() -> None:
    d = Discoveries(None)  # the second run is answered
    outcomes: list[RequestFailed | None] = []
    caller = anyio.CancelScope()

    async def first_discovery() -> None:
        with caller, d.negotiation.running():
            d.runs += 1
            await anyio.sleep_forever()

    async def request() -> None:
        outcomes.append(await d.negotiation.before("resources/read", 30.0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(first_discovery)
        await anyio.wait_all_tasks_blocked()  # the discovery is under way
        tg.start_soon(request)
        await anyio.wait_all_tasks_blocked()  # the request waits for it
        caller.cancel()  # the discovery's caller leaves (its deadline)
    assert outcomes == [None] and d.runs == 2


async def test_requests_waiting_on_a_discovery_without_answer_do_not_each_run_one() -> None:
    release = anyio.Event()
    d = Discoveries(NO_ANSWER)
    outcomes: list[RequestFailed | None] = []

    async def discovery() -> None:
        with d.negotiation.running() as negotiation:
            d.runs += 1
            await release.wait()
            negotiation.settled(NO_ANSWER)

    async def request() -> None:
        outcomes.append(await d.negotiation.before("resources/read", 30.0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(discovery)
        await anyio.wait_all_tasks_blocked()  # the discovery is under way
        for _ in range(5):
            tg.start_soon(request)
        await anyio.wait_all_tasks_blocked()  # every request waits for it
        release.set()
    assert d.runs == 1 and len(outcomes) == 5 and all(o is not None for o in outcomes)


async def test_a_discovery_that_raised_is_the_servers_word() -> None:
    negotiation = Negotiation(lambda: anyio.lowlevel.checkpoint())
    with pytest.raises(ValueError, match="no revision"), negotiation.running():
        raise ValueError("no revision in common")
    assert await negotiation.before("resources/read", 1.0) is None


async def test_discovery_and_initialize_themselves_never_wait() -> None:
    d = Discoveries(NO_ANSWER)
    await d.start()
    assert await d.negotiation.before("server/discover", 1.0) is None
    assert await d.negotiation.before("initialize", 1.0) is None
    assert d.runs == 1
