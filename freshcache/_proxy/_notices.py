"""When a host must be told (sans-IO): invariant 18.

The proxy hears of changes through each upstream cache's `FreshCache.changes` feed and
decides here whether its hosts must hear of them. For each thing a host may hold (a
resource URI, a catalog) it remembers what hosts were last given or told:

- a change heard (``invalidated``: the upstream said it changed) is told at once; the
  host's next request joins the proxy's re-read and gets the new text or an error;
- a lost stream (``stream_lost``) is not a change yet: the cache re-reads after the
  reconnect, and the outcome decides: the same version is quiet, another version is
  told; no fresh outcome at all a while later (the proxy's timeout: `unproven`) is told
  too. A fresh outcome that has since expired (its ``ttlMs`` passed) was a proof all
  the same. So an outage the host never saw is told exactly when it changed something
  or left it unproven;
- an acknowledgment's re-read (``invalidated`` caused by ``acknowledged``: a new
  stream re-proves what was read before it) is not a change either: nothing was heard
  to change, so the outcome decides as after a lost stream. Telling hosts at the ack
  would tell them of a change that never happened, and a host reading then would get
  the text it already had;
- a host whose last answer was an error is told when the thing is fresh again.
- a consumer that fell behind (`ChangesDropped`) tells everything (`everything`).

What hosts never held is not told (nothing of theirs can be old).
"""

from __future__ import annotations

from collections.abc import Hashable

_TOLD = ("told", None)
"""Hosts were told of a change: whatever settles next is what their next request gets."""


_REPROOF = frozenset({"stream_lost", "expired", "uncovered", "not_cached"})
"""Reasons that are not a change heard: a stream lost, a window passed."""


class Notices:
    """What hosts were last given or told, per key (``(upstream, uri)``, ``(upstream, kind)``)."""

    def __init__(self) -> None:
        self._held: dict[Hashable, tuple[str, str | None]] = {}
        self._proving: set[Hashable] = set()
        """Keys whose stream was lost and that have had no fresh outcome since."""

    def given(self, key: Hashable, version: str | None, state: str = "fresh") -> None:
        """A host was handed ``version`` of ``key`` (or, not fresh, an error naming ``state``)."""
        self._held[key] = (state, version)

    def watch(self, key: Hashable) -> None:
        """A host subscribed to ``key``: it wants to hear of changes, read or not."""
        self._held.setdefault(key, _TOLD)

    def change(
        self,
        key: Hashable,
        state: str,
        version: str | None,
        reason: str | None,
        reproof: bool = False,
    ) -> bool:
        """``key`` moved to (``state``, ``version``) for ``reason`` (``reproof``: an
        invalidation only re-proving it, `StateChange.reproof`); whether hosts must be
        told now."""
        held = self._held.get(key)
        if held is None:
            return False  # no host holds anything of it
        if reason == "invalidated" and not reproof:
            self._held[key] = _TOLD
            return True
        if reason in _REPROOF or reproof:
            if reason == "stream_lost":
                self._proving.add(key)
            return False  # not a change: the re-read (after the reconnect) decides
        if state == "fresh":
            self._proving.discard(key)  # re-proven (told below if it differs)
        now = (state, version)
        if held == _TOLD:
            self._held[key] = now  # told already: the next request gets this
            return False
        if now == held:
            return False
        self._held[key] = now
        return True

    def unproven(self, key: Hashable) -> bool:
        """The proxy's timeout after a lost stream: whether hosts must be told now (no
        fresh outcome since the loss, and they hold a fresh copy); at most once."""
        if key not in self._proving:
            return False
        self._proving.discard(key)
        held = self._held.get(key)
        if held is None or held == _TOLD or held[0] != "fresh":
            return False
        self._held[key] = _TOLD
        return True

    def everything(self) -> list[Hashable]:
        """Every key hosts hold, now all marked told (a feed fell behind)."""
        keys = list(self._held)
        for key in keys:
            self._held[key] = _TOLD
        return keys


__all__ = ["Notices"]
