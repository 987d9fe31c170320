"""How strict the cache is: the `Policy` object (DESIGN §2, spec server/utilities/caching).

The default is strict: text is fresh only inside the server's ``ttlMs`` window and only
after a server read sent after the latest invalidation; selected URIs no live
subscription covers are read before every use; nothing stale is ever served.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from .._errors import ConfigurationError

UncoveredMode = Literal["read_before_use", "ttl"]


@dataclass(frozen=True, slots=True)
class Policy:
    """Freshness rules. Frozen; build a new one with `dataclasses.replace`."""

    max_ttl: float = 24 * 3600.0
    """Upper bound, in seconds, on the server's ``ttlMs`` (so a buggy server cannot pin
    text for ever)."""

    uncovered: UncoveredMode = "read_before_use"
    """Selected URIs that no live, acknowledged subscription covers (invariant 5):
    ``"read_before_use"`` reads them from the server before each use whatever their
    TTL; ``"ttl"`` relaxes that to the TTL alone."""

    subscription_backed: bool = False
    """Opt-in: a selected URI covered by a live acknowledged subscription stays fresh
    past its TTL until a notification, a stream loss or a re-listen invalidates it."""

    stale_on_error: tuple[str, ...] = ()
    """URI patterns (``fnmatch`` syntax) for which a failed re-read (timeout,
    unreachable, server error) may hand out the old copy flagged ``stale``. The spec
    allows it; freshcache never does it unless asked."""

    stale_catalogs_on_error: bool = False
    """Opt-in: when a catalog (tools, prompts, templates) cannot be re-listed (timeout,
    unreachable, server error), hand out the last one this principal had, labelled
    ``stale`` with its ``age``. Never the default: the same rule as resource text."""

    share_public: bool = False
    """Opt-in: entries the server marks ``cacheScope: "public"`` are shared by all
    principals. ``private`` entries are never shared (invariant 6)."""

    hintless_ttl: float = 0.0
    """Opt-in, at the caller's risk: seconds a read of an *unselected* URI stays fresh
    when its server's revision has no caching hints (2025-11-25: no ``ttlMs``). The
    default 0 reads it from the server every time. Nothing tells freshcache of a change
    to an unselected URI (it is not subscribed), so within this window a change goes
    unseen: use it only for resources you know change rarely."""

    pushed_bodies: bool = False
    """Opt-in: ask the server to put a changed resource's new contents inside its
    ``notifications/resources/updated`` (``embedResources`` on the listen, a proposal:
    SEP-3119), and let such a pushed body make the URI fresh without a server read,
    only when it came on the acknowledged stream that covers the URI (it is then the
    newest change heard of). Anything less trusted only invalidates. Not with a fleet
    (workers there re-read, fenced by the store)."""

    max_rereads: int = 8
    """How many times one read is repeated when invalidations keep overtaking it (and
    one list walk started again, and one waiter woken to a result already outdated)."""

    max_list_pages: int = 1000
    """Pages one list walk (``resources/list``, ``tools/list``, ``prompts/list``,
    ``resources/templates/list``) may take, counted over every time it starts again.
    Past it the walk stops and hands out ``awaiting_fresh_source`` (``server_error``):
    a server whose cursor never ends cannot keep a walk going for ever."""

    max_list_bytes: int = 32 * 1024 * 1024
    """Bytes one list walk may take (its pages' rough size, as the store counts them);
    past it the walk stops the same way as past `max_list_pages`."""

    _stale_re: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.max_ttl >= 0:
            raise ConfigurationError(f"Policy.max_ttl must be >= 0 seconds, got {self.max_ttl!r}")
        if self.uncovered not in ("read_before_use", "ttl"):
            raise ConfigurationError(
                f"Policy.uncovered must be 'read_before_use' or 'ttl', got {self.uncovered!r}"
            )
        if isinstance(self.stale_on_error, str):
            raise ConfigurationError(
                "Policy.stale_on_error takes a tuple of patterns, got the string "
                f"{self.stale_on_error!r}; write ({self.stale_on_error!r},)"
            )
        if not (isinstance(self.hintless_ttl, (int, float)) and self.hintless_ttl >= 0):
            raise ConfigurationError(
                f"Policy.hintless_ttl must be a number of seconds >= 0, got {self.hintless_ttl!r}"
            )
        if self.max_rereads < 1:
            raise ConfigurationError(f"Policy.max_rereads must be >= 1, got {self.max_rereads!r}")
        bounds = (("max_list_pages", self.max_list_pages), ("max_list_bytes", self.max_list_bytes))
        for name, value in bounds:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"Policy.{name} must be an integer >= 1, got {value!r}")
        patterns: Iterable[str] = self.stale_on_error
        if patterns:
            joined = "|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)
            object.__setattr__(self, "_stale_re", re.compile(joined))

    def allows_stale(self, uri: str) -> bool:
        """Whether the caller opted in to serve-stale-on-error for ``uri``."""
        return self._stale_re is not None and self._stale_re.match(uri) is not None

    def ttl_seconds(self, ttl_ms: float | None) -> float:
        """The spec's freshness window: absent or negative ``ttlMs`` is 0; clamp at `max_ttl`."""
        if ttl_ms is None or not ttl_ms > 0:
            return 0.0
        return min(ttl_ms / 1000.0, self.max_ttl)
