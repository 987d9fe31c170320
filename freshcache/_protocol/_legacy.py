"""MCP 2025-11-25, the older revision freshcache falls back to: its rules, sans-IO.

Spec pages (2025-11-25): basic/lifecycle (``initialize``, the version answer,
``notifications/initialized``), basic/transports (``Mcp-Session-Id``, a 404 ends the
session, the GET SSE stream), server/resources (``resources/subscribe`` per URI,
``capabilities.resources.subscribe`` / ``listChanged``). DESIGN §6.

`LegacySession` is the state one 2025 conversation keeps: the negotiated version,
the HTTP session id, what the server offers, and which URIs a successful
``resources/subscribe`` covers on the current channel. `freshcache._protocol._client`
(`Revision2025`, `ClientProtocol`) drives it; transports never read these rules.

What a subscribe covers is not decided here: `LegacySession.ledger` (the core's
`SubscribeLedger`) records every subscribe/unsubscribe in the order decided and counts
a URI covered only once the last of them was answered with success, in order; the
transports send them through `freshcache._sources._subscribing.InOrder`, one at a time per URI.

Why a URI counts as covered only while the channel lives: 2025 has no acknowledgment
and no ``Last-Event-ID``-proof of what a reconnect missed, so when the GET stream (or
the stdio process) goes, every subscription is treated as gone: re-subscribe on the
next channel and re-read (invariant 4), whatever the server may still remember.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core._subscribe_order import SUBSCRIBE, UNSUBSCRIBE, SubscribeLedger
from .._errors import UnsupportedVersionError
from .._sources._source import ServerInfo
from ._wire import LEGACY_VERSION, LEGACY_VERSIONS, PROTOCOL_VERSION


@dataclass(slots=True)
class LegacySession:
    """The 2025-11-25 state of one conversation (module docstring)."""

    version: str = LEGACY_VERSION
    """The version the ``initialize`` answer named (one of `LEGACY_VERSIONS`)."""
    session_id: str | None = None
    """HTTP ``Mcp-Session-Id``, once the server assigned one."""
    initialized: bool = False
    """``initialize`` was answered on the current session or process."""
    subscribe: bool = False
    """``capabilities.resources.subscribe``: without it no URI is ever covered."""
    list_changed: bool = False
    catalogs_changing: frozenset[str] = frozenset()
    """Catalogs whose ``list_changed`` the session's channel carries (capabilities
    ``tools.listChanged``, ``prompts.listChanged``)."""
    ledger: SubscribeLedger = field(default_factory=SubscribeLedger)
    """Subscribe/unsubscribe requests on the current channel, in the order recorded:
    what they cover is the engine core's rule (`freshcache._core._subscribe_order`)."""

    @property
    def subscribed(self) -> frozenset[str]:
        """URIs a successful ``resources/subscribe`` covers on the current channel, all
        requests for them answered in the order sent."""
        return self.ledger.covered

    def accept(self, server: str, result: Mapping[str, Any]) -> ServerInfo:
        """Take an ``initialize`` result: the version, capabilities and who answered.

        Raises `UnsupportedVersionError` when the server names a version freshcache does
        not speak (lifecycle: the client SHOULD disconnect); the message names both
        revisions tried."""
        version = result.get("protocolVersion")
        if not isinstance(version, str) or version not in LEGACY_VERSIONS:
            raise UnsupportedVersionError(
                f"{server} speaks neither MCP {PROTOCOL_VERSION} (server/discover failed) nor "
                f"{' / '.join(LEGACY_VERSIONS)} (initialize answered {version!r}). "
                "Upgrade freshcache or the server.",
                supported=[version] if isinstance(version, str) else [],
                requested=LEGACY_VERSION,
            )
        self.version = version
        self.initialized = True
        caps = result.get("capabilities")
        resources = caps.get("resources") if isinstance(caps, dict) else None
        res: dict[str, Any] = resources if isinstance(resources, dict) else {}
        self.subscribe = res.get("subscribe") is True
        self.list_changed = res.get("listChanged") is True
        self.catalogs_changing = frozenset(  # the session's channel carries these
            kind
            for kind in ("tools", "prompts")
            if isinstance(caps, dict)
            and isinstance(caps.get(kind), dict)
            and caps[kind].get("listChanged") is True
        )
        about = result.get("serverInfo")
        info: dict[str, Any] = about if isinstance(about, dict) else {}
        if not isinstance(resources, dict):
            detail = "the server advertises no resources capability"
        elif not self.subscribe:
            detail = (
                "the server offers no resources/subscribe: selected resources are read "
                "before each use"
            )
        else:
            detail = ""
        return ServerInfo(
            reachable=True,
            supported_versions=(version,),
            protocol_version=version,
            subscribe=self.subscribe,
            list_changed=self.list_changed,
            listen=self.subscribe or self.list_changed or bool(self.catalogs_changing),
            name=info.get("name") if isinstance(info.get("name"), str) else None,
            version=info.get("version") if isinstance(info.get("version"), str) else None,
            detail=detail,
            raw=dict(result),
        )

    def ended(self) -> None:
        """The channel (GET stream, process) or the session is gone: nothing is covered."""
        self.ledger.ended()

    def expired(self) -> None:
        """The server forgot the session (HTTP 404): initialize again before anything."""
        self.session_id = None
        self.initialized = False
        self.ledger.ended()

    def to_subscribe(self, uris: Iterable[str]) -> list[str]:
        """URIs among ``uris`` that still need a ``resources/subscribe`` (none when the
        server offers no subscriptions: they stay uncovered, read before use); recorded
        as about to be sent, after any request for them still unanswered."""
        if not self.subscribe:
            return []
        needed = sorted(uri for uri in set(uris) if not self.ledger.wants(uri))
        self.ledger.record(needed, SUBSCRIBE)
        return needed

    def to_unsubscribe(self, still_wanted: Iterable[str]) -> list[str]:
        """Subscribed (or subscribing) URIs no open subscription wants any more; not
        covered from now on, recorded as about to be sent (an unsubscribe that fails
        changes nothing for freshness)."""
        gone = sorted(self.ledger.wanted - set(still_wanted))
        self.ledger.record(gone, UNSUBSCRIBE)
        return gone


__all__ = ["LegacySession"]
