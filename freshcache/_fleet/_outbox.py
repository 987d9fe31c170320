"""Hints one worker heard on its own answers, on their way to the whole fleet.

A change hint on the SSE answer of a read or a list (invariant 9) reaches only the
worker whose request carried it; the outbox publishes it (`INVALIDATE`) so every
worker drops its copy. Until it is published, that URI is read from the server
directly: the shared entry may still be the old one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from .._core import Invalidation

if TYPE_CHECKING:
    from ._parts import OutboxWorker

log = logging.getLogger("freshcache.fleet")


class HintOutbox:
    """Queue and publish this worker's own hints (see the module docstring)."""

    def __init__(self, worker: OutboxWorker) -> None:
        self.worker = worker
        self._pending: dict[str, int] = {}
        self._send, self._receive = anyio.create_memory_object_stream[str](10_000)

    def pending(self, uri: str) -> bool:
        return uri in self._pending

    def heard(self, event: Invalidation) -> None:
        """The engine's invalidation hook (stream events are published by the streams)."""
        if self.worker.channel.applying_remote or event.subscription_id is not None:
            return
        if event.cause != "resources/updated":
            return
        self._pending[event.uri] = self._pending.get(event.uri, 0) + 1
        try:
            self._send.send_nowait(event.uri)
        except anyio.WouldBlock:
            self._sent(event.uri)

    def _sent(self, uri: str) -> None:
        left = self._pending.get(uri, 0) - 1
        if left > 0:
            self._pending[uri] = left
        else:
            self._pending.pop(uri, None)

    async def run(self) -> None:
        async for uri in self._receive:
            try:
                with anyio.fail_after(2 * self.worker.config.op_timeout):
                    await self.worker.publish([uri], "hint")
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.warning("fleet worker %s lost a hint for %s: %r", self.worker.id, uri, exc)
            finally:
                self._sent(uri)

    def close(self) -> None:
        self._send.close()
        self._receive.close()
