"""The heartbeat's own line to one server: `BEAT` as bytes packed once, on a connection
of its own.

An idle worker's CPU is its heartbeat (1.5 beats a second at the default lease), and
through redis-py's client most of a beat is the client's layers (the pool, the retry
wrapper, the encoder: some 800 Python calls a beat), not the round trip. `BeatLine`
writes the script's call on a connection of the channel's client (no socket timeout:
the heartbeat bounds the beat, and redis-py drops a connection whose read was cancelled
or failed; the next beat connects again) and reads its answer with redis-py's parser.
The keys and the worker never change, so that part of the command is packed once; the
selection's JSON is packed again only when the selection changed.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import anyio
from redis.exceptions import ConnectionError, NoScriptError

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from ._store import SharedStore

log = logging.getLogger("freshcache.fleet")


def _bulk(value: str) -> bytes:
    data = value.encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


class BeatLine:
    """`SharedStore.beat` for one worker, cheaper per beat (see the module docstring)."""

    def __init__(self, client: Redis, shared: SharedStore, worker: str) -> None:
        self._client = client
        self._shared = shared
        self._worker = worker
        pool: Any = client.connection_pool
        self._connection: Any = pool.make_connection()
        self._sha = ""
        self._head = b""
        self._tail = _bulk(worker)
        self._uris: frozenset[str] | None = None
        self._selection = b""
        self._sent = b""

    def pack(self, uris: frozenset[str], px: int, now_ms: int, renew: str, lease_px: int) -> bytes:
        """`BEAT`'s call as bytes (`send` writes them)."""
        sha = self._shared._beat.sha
        if sha != self._sha:
            self._sha = sha
            parts = ["EVALSHA", sha, "5", *self._shared.beat_keys(self._worker)]
            self._head = b"*14\r\n" + b"".join(_bulk(part) for part in parts)
        if uris != self._uris:
            self._uris, self._selection = uris, _bulk(json.dumps(sorted(uris)))
        return b"".join(
            (
                self._head,
                _bulk(renew),
                _bulk(str(lease_px)),
                self._selection,
                _bulk(str(px)),
                _bulk(str(now_ms)),
                self._tail,
            )
        )

    async def send(self, command: bytes) -> None:
        self._sent = command
        try:
            await self._connection.send_packed_command(command, check_health=False)
        except ConnectionError:
            await self._again()

    async def answer(
        self, uris: frozenset[str], px: int, now_ms: int, renew: str, lease_px: int
    ) -> tuple[str | None, bool, str]:
        """The answer to the call `send` wrote (the same arguments): the lease holder,
        whether ``renew`` was renewed, the registry's version (`SharedStore.beat`)."""
        try:
            try:
                holder, renewed, version = await self._connection.read_response()
            except ConnectionError:
                await self._again()
                holder, renewed, version = await self._connection.read_response()
        except NoScriptError:
            # The store lost its scripts (a restart): redis-py's path loads it again.
            return await self._shared.beat(
                self._worker, uris, px, now_ms, renew, lease_px, self._client
            )
        return (str(holder) or None), bool(int(renewed)), str(version)

    async def _again(self) -> None:
        """The connection was closed while idle (the store dropped it): redis-py dropped
        it too; the beat once more on a new one, as redis-py's client retries. A beat
        twice is one beat (it sets, it renews only its own holder's lease), and the
        renewal still counts from when the first was sent."""
        await self._connection.send_packed_command(self._sent, check_health=False)

    async def drop(self) -> None:
        """Close the connection, shielded and bounded: a call whose answer was not read
        leaves it unread, and the next call would read it (the next `send` connects)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(0.5):
            try:
                await self._connection.disconnect(nowait=True)
            except Exception:  # closed either way
                log.debug("fleet beat line close failed", exc_info=True)

    async def aclose(self) -> None:
        await self._connection.disconnect()
