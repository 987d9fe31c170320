"""A follower's "stream": the fleet channel, vouched for by the listener's announcements.

A worker that does not hold the lease opens no ``subscriptions/listen`` of its own.
Its stream is acknowledged when the listener announces a live stream (``live``) that
asked for all of the follower's URIs, covering what the listener's acknowledgment
covered; it is lost when the listener says ``down``, a different listener goes live,
the lease changes hands or lapses, or the channel fails closed (``lost``). Whoever
notices a listener's loss fences off what it covered: an entry read while it covered
u proves nothing after the loss (invariant 4, fleet-wide).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from .._core import ListenAcknowledged, ListenStarted, StreamEvent, StreamLost

if TYPE_CHECKING:
    from ._parts import FollowWorker

T = TypeVar("T")
Notice = tuple[str, Any]
"""What the worker tells an open follower stream: (``live`` | ``down`` | ``lost`` |
``tick``, details)."""


@dataclass(eq=False, slots=True)
class _Follower:
    subscription_id: str
    uris: frozenset[str]
    notices: MemoryObjectSendStream[Notice]
    acknowledged: bool = False


class FollowerStreams:
    """This worker's open follower streams (usually one; two during a selection swap)."""

    def __init__(self, worker: FollowWorker) -> None:
        self.worker = worker
        self._open: set[_Follower] = set()

    def notify(self, kind: str, detail: Any) -> None:
        for follower in list(self._open):
            follower.notices.send_nowait((kind, detail))

    def acknowledged_id(self) -> str | None:
        """The subscription id of an acknowledged follower stream, if one is open."""
        return next((f.subscription_id for f in self._open if f.acknowledged), None)

    async def follow(
        self, sid: str, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        worker = self.worker
        yield ListenStarted(sid, uris, list_changed)
        send, notices = anyio.create_memory_object_stream[Notice](1000)
        follower = _Follower(sid, uris, send)
        self._open.add(follower)
        reason = "the fleet listener went away"
        covered: frozenset[str] = frozenset()
        store_failed = False
        try:
            live: dict[str, Any] | None = None
            try:
                with anyio.fail_after(2 * worker.config.op_timeout):
                    px = int(worker.config.selection_ttl * 1000)
                    await worker.shared.register(worker.id, uris, px, int(time.time() * 1000))
                    live = await worker.shared.live()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                reason = f"the fleet store failed: {exc!r}"
                store_failed = True
            term: str | None = None
            async with notices:
                while not store_failed:
                    if (
                        term is None
                        and live is not None
                        and live.get("holder") == worker.lease.leader
                        and uris <= set(live["requested"])
                    ):
                        term = live["term"]
                        covered = uris & frozenset(live["covered"])
                        follower.acknowledged = True
                        yield ListenAcknowledged(
                            sid, covered, list_changed and bool(live["list_changed"])
                        )
                    try:
                        kind, detail = await notices.receive()
                    except anyio.EndOfStream:
                        break
                    if kind == "live":
                        if term is None:
                            live = detail
                        elif detail["term"] != term or not uris <= set(detail["requested"]):
                            reason = "the fleet listener changed"
                            break
                    elif kind in ("down", "lost"):
                        reason = str(detail.get("reason") if isinstance(detail, dict) else detail)
                        break
                    elif kind == "tick":
                        if term is not None and (live is None or detail != live.get("holder")):
                            reason = "the listener lease changed hands"
                            break
                        if detail is None and worker.channel.usable and await self._take_over():
                            reason = "taking over the listener lease"
                            break
                        if term is None and detail is not None and live is None:
                            live = await self._live_now()
            # Its notices are closed: no notice may reach it while it ends (a send
            # to them would raise in the notifier and crash the worker).
            self._open.discard(follower)
            follower.acknowledged = False
            self._open.discard(follower)  # its notices are closed: tell it nothing more
            if covered and worker.channel.usable:
                worker.reads.expect_proof()
                # Whoever notices a listener's loss fences off what it covered.
                await worker.attempt(worker.reads.fence_lost(sorted(covered), term or ""))
            yield StreamLost(sid, reason)
        finally:
            follower.acknowledged = False
            self._open.discard(follower)
            send.close()
            notices.close()

    async def _live_now(self) -> dict[str, Any] | None:
        return await self._ask(self.worker.shared.live, None)

    async def _take_over(self) -> bool:
        return await self._ask(self.worker.lease.try_lead, False)

    async def _ask(self, question: Callable[[], Awaitable[T]], otherwise: T) -> T:
        """One quick question to the store; ``otherwise`` when it fails or is too slow."""
        try:
            with anyio.fail_after(self.worker.config.op_timeout):
                return await question()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            return otherwise
