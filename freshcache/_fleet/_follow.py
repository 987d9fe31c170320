"""A follower's "stream": the fleet channel, vouched for by the listener's announcements.

A worker that does not hold the lease opens no ``subscriptions/listen`` of its own.
Its stream is acknowledged when the listener announces a live stream (``live``) that
asked for all of the follower's URIs, covering what the listener's acknowledgment
covered (URIs, and the catalogs whose ``list_changed`` it honoured: the listener
publishes every ``*/list_changed`` it hears); it is lost when the listener says
``down``, a different listener goes live, the lease changes hands or lapses, or the
channel fails closed (``lost``). Whoever notices a listener's loss fences off what it
covered: an entry read while it covered u proves nothing after the loss (invariant 4,
fleet-wide). An announcement found in
the store rather than heard on the channel may be left by a listener that stopped
while the store was away (its ``down`` never written, its lease not yet run out): it
vouches only once a renewal of that lease is seen.
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


_NOTHING: tuple[dict[str, Any] | None, int | None] = (None, None)
_NO_LEASE: tuple[str | None, int] = (None, -2)


@dataclass(eq=False, slots=True)
class _Follower:
    subscription_id: str
    uris: frozenset[str]
    notices: MemoryObjectSendStream[Notice]
    acknowledged: bool = False
    missed: bool = False
    """A notice found its buffer full: it may have missed a ``lost`` or a ``down``."""


class FollowerStreams:
    """This worker's open follower streams (usually one; two during a selection swap)."""

    def __init__(self, worker: FollowWorker) -> None:
        self.worker = worker
        self._open: set[_Follower] = set()

    def notify(self, kind: str, detail: Any) -> None:
        for follower in list(self._open):
            try:
                follower.notices.send_nowait((kind, detail))
            except anyio.WouldBlock:
                # Its reader is stuck: it vouches for nothing more, and ends as soon
                # as it reads again; the other followers still hear this notice.
                follower.acknowledged = False
                follower.missed = True

    def acknowledged_id(self) -> str | None:
        """The subscription id of an acknowledged follower stream, if one is open."""
        return next((f.subscription_id for f in self._open if f.acknowledged), None)

    async def follow(
        self, sid: str, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        worker = self.worker
        send, notices = anyio.create_memory_object_stream[Notice](1000)
        follower = _Follower(sid, uris, send)
        # Registered before the stream starts, and the channel's breaks counted: a
        # "lost" sent while its start is taken in is not missed.
        self._open.add(follower)
        breaks = worker.channel.breaks
        reason = "the fleet listener went away"
        covered: frozenset[str] = frozenset()
        catalogs: frozenset[str] = frozenset()
        store_failed = False
        try:
            yield ListenStarted(sid, uris, list_changed)
            live: dict[str, Any] | None = None
            witness: int | None = None
            try:
                with anyio.fail_after(2 * worker.config.op_timeout):
                    px = int(worker.config.selection_ttl * 1000)
                    await worker.shared.register(worker.id, uris, px, int(time.time() * 1000))
                    live, witness = await self._stored_announcement()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                reason = f"the fleet store failed: {exc!r}"
                store_failed = True
            term: str | None = None
            look_again = worker.config.lease / 8.0
            async with notices:
                while not store_failed:
                    if follower.missed or worker.channel.breaks != breaks:
                        reason = "the fleet channel broke"
                        break
                    if (
                        term is None
                        and live is not None
                        and witness is None
                        and worker.channel.usable
                        and live.get("holder") == worker.lease.leader
                        and uris <= set(live["requested"])
                    ):
                        term = live["term"]
                        covered = uris & frozenset(live["covered"])
                        lists = list_changed and bool(live["list_changed"])
                        # The catalogs the listener's acknowledgment named (none from a
                        # listener that names none): the engine covers only those.
                        catalogs = frozenset(live.get("catalogs", ())) if lists else frozenset()
                        follower.acknowledged = True
                        yield ListenAcknowledged(sid, covered, lists, catalogs)
                    notice: Notice = ("look", None)
                    try:
                        if term is None and witness is not None:
                            with anyio.move_on_after(look_again):
                                notice = await notices.receive()
                        else:
                            notice = await notices.receive()
                    except anyio.EndOfStream:
                        break
                    kind, detail = notice
                    if follower.missed:
                        continue  # ends above
                    if kind == "look" and live is not None and witness is not None:
                        live, witness = await self._renewed(live, witness)
                    elif kind == "live":
                        if term is None:
                            live, witness = detail, None  # announced while we listen
                        elif (
                            detail["term"] != term
                            or not uris <= set(detail["requested"])
                            or not catalogs <= set(detail.get("catalogs", ()))
                        ):
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
                            worker.reads.took_over(worker.id)  # its own listen is due
                            reason = "taking over the listener lease"
                            break
                        if term is None and live is not None and detail != live.get("holder"):
                            live, witness = None, None  # left by a listener that is gone
                        if term is None and detail is not None and live is None:
                            worker.reads.took_over(str(detail))  # its announcement is due
                            live, witness = await self._ask(self._stored_announcement, _NOTHING)
            # Its notices are closed: no notice may reach it while it ends (a send
            # to them would raise in the notifier and crash the worker).
            self._open.discard(follower)
            follower.acknowledged = False
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

    async def _stored_announcement(self) -> tuple[dict[str, Any] | None, int | None]:
        """The listener's announcement as the store holds it, and the lease's time to
        live then: it may be left from before an outage by a listener that could not
        say ``down`` (and has stopped), so it vouches only once a renewal is seen."""
        live = await self.worker.shared.live()
        if live is None:
            return None, None
        holder, pttl = await self.worker.shared.lease_state()
        if holder is None or holder != live.get("holder"):
            return None, None
        return live, pttl

    async def _renewed(
        self, live: dict[str, Any], witness: int
    ) -> tuple[dict[str, Any] | None, int | None]:
        """Look again: a lease whose time to live grew was renewed since (its holder
        still leads: ``None``, it vouches); a different holder: the announcement is old."""
        holder, pttl = await self._ask(self.worker.shared.lease_state, _NO_LEASE)
        if holder is None or holder != live.get("holder"):
            return None, None
        return live, (None if pttl > witness else pttl)

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
