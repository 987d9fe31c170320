"""The store's epoch, witnessed by what a restart cannot restore: its script cache.

Every entry, lock and fence carries the epoch it was written under (`_store`). A
counter or a random value in a key would come back with the store's data: a Valkey
restarted from its RDB (saved by default), its AOF or an older snapshot restores the
epoch, the generations and the entries of that moment, and a change invalidated after
it would be forgotten. So the `PEEK` a worker runs holds the epoch's random part in its
own text (``local witness = '...'``), and that script is loaded (``SCRIPT LOAD``) only
by the worker that starts the epoch, just before it sets it (`MINT`). No persistence
restores the script cache: after a restart the worker's ``EVALSHA`` answers
``NOSCRIPT`` and it starts a new epoch in place of the one it knew (atomically: the
other workers adopt it), so nothing stored before the restart is current and no fill
read before it lands. ``SCRIPT FLUSH`` has the same effect (fail closed). No ``INFO``
and nothing ``@dangerous`` is needed: the restricted ACL user of docs/fleet.md runs it.
"""

from __future__ import annotations

import secrets
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError


def register(redis: Redis, source: str, *, sharded: bool = False) -> AsyncScript:
    """One of the fleet's server-side scripts, named by redis-py (its SHA1) and loaded
    on first use; on a shard channel its ``PUBLISH`` is ``SPUBLISH``."""
    return redis.register_script(source.replace("'PUBLISH'", "'SPUBLISH'") if sharded else source)


# A new epoch, witnessed: KEYS: epoch; ARGV: the witness found dead ('' when none), the
# new witness (its `PEEK` already loaded), '1' on a cluster. The epoch is replaced only
# if it is unset, is the dead one, or names another node: else it is another worker's
# new epoch, adopted. Returns the epoch now and 1 if this replaced an existing one.
MINT = """
local node = ''
if ARGV[3] == '1' then
  local id = redis.pcall('CLUSTER', 'MYID')
  if type(id) ~= 'string' then
    return redis.error_reply('freshcache MINT: CLUSTER MYID failed, no epoch can name its primary')
  end
  node = id .. '/'
end
local cur = redis.call('GET', KEYS[1]) or ''
if cur == '' or string.match(cur, '[^/]*$') == ARGV[1] or string.sub(cur, 1, #node) ~= node then
  redis.call('SET', KEYS[1], node .. ARGV[2])
  return {node .. ARGV[2], cur ~= '' and 1 or 0}
end
return {cur, 0}
"""


def _witness_of(epoch: str) -> str:
    """An epoch's random part (on a cluster it is ``node/random``)."""
    return epoch.rsplit("/", 1)[-1]


class WitnessedPeek:
    """`PEEK` under the epoch this worker knows, witnessed (see the module docstring).
    The script answers ``{epoch, 'epoch'}`` when the store's epoch is another one (this
    worker adopts it) and ``{epoch, 'node'}`` when it names another cluster node (a new
    one starts); its normal answer's eighth item says whether this worker just started
    an epoch in place of an existing one."""

    def __init__(self, redis: Redis, source: str, epoch_key: str, *, cluster: bool) -> None:
        self.redis = redis
        self._source = source
        self._epoch_key = epoch_key
        self._cluster = cluster
        self._mint = register(redis, MINT)
        self._witness: str | None = None
        """The epoch's random part this worker's `PEEK` vouches for."""
        self._peek: tuple[str, AsyncScript | None] = ("", None)
        """(witness, its `PEEK`): run with ``EVALSHA`` only, never loaded by redis-py's
        fallback (``NOSCRIPT`` is the restart's witness)."""
        self._started = False
        """This worker's last `MINT` replaced an epoch: the next answer says so."""

    def script(self, witness: str) -> AsyncScript:
        """The `PEEK` that vouches for ``witness``."""
        known, script = self._peek
        if known != witness or script is None:
            script = register(self.redis, f"local witness = '{witness}'\n{self._source}")
            self._peek = (witness, script)
        return script

    async def __call__(self, *, keys: list[str], args: list[Any]) -> list[Any]:
        for _ in range(4):
            witness = self._witness
            if witness is None:
                current = await self.redis.get(self._epoch_key)
                if not current:
                    await self._new_epoch("")
                    continue
                witness = self._witness = _witness_of(str(current))
            sha = self.script(witness).sha
            try:
                out = list(await self.redis.evalsha(sha, len(keys), *keys, *args))
            except NoScriptError:
                await self._new_epoch(witness)  # the store lost it: it restarted
                continue
            if len(out) == 2:  # not the epoch this worker knows
                current, why = str(out[0]), str(out[1])
                if why == "node" or not current:
                    await self._new_epoch(_witness_of(current))
                else:
                    self._witness = _witness_of(current)
                continue
            if self._started:
                self._started = False
                out[7] = 1
            return out
        raise RuntimeError("freshcache PEEK: the store keeps no epoch it can witness")

    async def _new_epoch(self, dead: str) -> None:
        """Start an epoch in place of ``dead`` (or adopt another worker's new one): its
        `PEEK` is loaded first, so no worker ever finds it unwitnessed."""
        witness = secrets.token_hex(8)
        await self.redis.script_load(self.script(witness).script)
        epoch, started = await self._mint(
            keys=[self._epoch_key], args=[dead, witness, "1" if self._cluster else ""]
        )
        self._witness = _witness_of(str(epoch))
        self._started = self._started or bool(int(started))


__all__ = ["MINT", "WitnessedPeek", "register"]
