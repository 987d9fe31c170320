"""How a table step is carried out on a `ReferenceServer` (every world, and the stdio
server process, steer it through these two).

Kept apart from the runner so that the stdio reference server, started once per stdio
case, imports only the reference server and the step vocabulary, not the cache.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from freshcache.testing import ReferenceServer, push_body_raw

from ._steps import (
    ALIASES,
    NextRead,
    Notify,
    ServerChange,
    ServerSets,
    catalog_items,
    text_for,
    unread_uri,
)


class Setup(Protocol):
    """What a row's starting situation says of the server (`freshcache.acceptance.Setup`
    has it; named here so this module needs nothing of the runner)."""

    @property
    def listen(self) -> bool: ...
    @property
    def list_changed(self) -> bool: ...
    @property
    def ack_omits(self) -> Collection[str]: ...
    @property
    def page_size(self) -> int: ...
    @property
    def later_pages_ttl_ms(self) -> int | None: ...
    @property
    def acks_held(self) -> bool: ...
    @property
    def ttl_ms(self) -> int: ...
    @property
    def scope(self) -> str: ...
    @property
    def catalog_page_size(self) -> int: ...
    @property
    def catalog_later_ttl_ms(self) -> int | None: ...
    @property
    def catalog_later_private(self) -> bool: ...
    @property
    def catalog_public(self) -> bool: ...
    @property
    def catalog_ttl_ms(self) -> int: ...
    @property
    def list_endless(self) -> bool: ...
    @property
    def catalog_endless(self) -> bool: ...


def configure_reference(server: ReferenceServer, setup: Setup) -> None:
    """Put a `ReferenceServer` in a row's starting situation (every world starts here)."""
    server.listen_supported = setup.listen
    server.list_changed_supported = setup.list_changed
    server.omit_from_ack = set(setup.ack_omits)
    server.page_size = setup.page_size
    server.later_pages_ttl_ms = setup.later_pages_ttl_ms
    server.endless_list = setup.list_endless
    if setup.acks_held:
        server.hold_acks()
    for alias in ("selected", "other", "extra"):
        uri = ALIASES[alias]
        server.set(uri, text_for(uri, "v1"), ttl_ms=setup.ttl_ms, cache_scope=setup.scope)
    catalogs = server.catalogs
    for kind in ("tools", "prompts", "resource_templates"):
        catalogs.set(kind, catalog_items(kind, "v1"))
    catalogs.epoch = 0
    catalogs.page_size = setup.catalog_page_size
    catalogs.later_pages_ttl_ms = setup.catalog_later_ttl_ms
    catalogs.ttl_ms = setup.catalog_ttl_ms
    catalogs.endless = setup.catalog_endless
    catalogs.scope = "public" if setup.catalog_public else "private"
    catalogs.later_pages_scope = "private" if setup.catalog_later_private else None
    catalogs.list_changed_supported = setup.list_changed


def apply_to_reference(
    server: ReferenceServer,
    step: ServerSets | Notify | NextRead | ServerChange,
    principal: str | None = None,
) -> None:
    """Carry out one server-side step on a `ReferenceServer` (``principal``: the cache's)."""
    match step:
        case ServerSets(uri=uri, version=version, push="every_stream" | "unknown_subscription"):
            server.set(uri, text_for(uri, version))
            push_body_raw(server, uri, foreign=step.push == "unknown_subscription")
        case ServerSets(uri=uri, version=version, push="before_ack"):
            server.set(uri, text_for(uri, version))
            server.early_bodies.append(uri)
        case ServerSets(uri=uri, version=version, notify=notify):
            server.set(uri, text_for(uri, version), notify=notify)
        case Notify(kind="updated", uri=uri, count=count):
            for _ in range(count):
                server.notify_updated(uri, raw=True)
        case Notify(kind="list_changed"):
            server.notify_list_changed()
        case Notify(kind="updated_before_ack", uri=uri):
            server.early_notifications.append(uri)
        case Notify(kind="foreign", uri=uri):
            server.push_raw("foreign_update", uri)
        case Notify(kind="garbage"):
            server.push_raw("garbage", "{not json")
        case NextRead(uri=uri, fault=fault, sticky=True):
            server.fail_always(uri, fault)
        case NextRead(uri=uri, fault=fault):
            assert fault is not None
            server.fail_next(uri, fault)
        case ServerChange(what="down"):
            server.down = True
            server.drop_streams()
        case ServerChange(what="up"):
            server.down = False
        case ServerChange(what="drop_stream"):
            server.drop_streams()
        case ServerChange(what="close_stream"):
            server.close_streams()
        case ServerChange(what="expire_session"):
            server.end_sessions()
        case ServerChange(what="hold_reads"):
            server.hold_reads()
        case ServerChange(what="release_reads"):
            server.release_reads()
        case ServerChange(what="remove", uri=uri):
            server.remove(uri)
        case ServerChange(what="hide", uri=uri):
            server.hide(uri)
        case ServerChange(what="deny", uri=uri, principal=who):
            server.denied_principals.setdefault(uri, set()).add(who or principal)
        case ServerChange(what="deny_remediable" | "deny_final", uri=uri):
            server.denied_principals.setdefault(uri, set()).add(principal)
            server.denial_envelopes[uri] = step.what == "deny_remediable"
        case ServerChange(what="allow", uri=uri, principal=who):
            server.denied_principals.get(uri, set()).discard(who or principal)
        case ServerChange(what="invalidate_cursors"):
            server.cursor_epoch += 1
        case ServerChange(what="share_publicly", uri=uri):
            server.resources[uri].cache_scope = "public"
        case ServerChange(what="hold_unsubscribes"):
            server.hold_unsubscribes()
        case ServerChange(what="release_unsubscribes"):
            server.release_unsubscribes()
        case ServerChange(what="list_hint"):
            server.list_hints += 1
        case ServerChange(what="listen_version_refused"):
            server.listen_refusals += 1
        case ServerChange(what="fall_silent"):
            # The server forgets its streams without ending them (a process that died
            # behind a proxy); the wire keeps them open and mute.
            for sid in list(server.subscribers):
                server.unsubscribe(sid)
        case ServerChange(what="hold_acks"):
            server.hold_acks()
        case ServerChange(what="release_acks"):
            server.release_acks()
        case Notify(kind="catalog_changed", uri=kind):
            server.notify_catalog_changed(kind)
        case ServerChange(what="catalog_set" | "catalog_set_notify", uri=kind, version=version):
            server.set_catalog(
                kind, catalog_items(kind, version), notify=step.what == "catalog_set_notify"
            )
        case ServerChange(what="catalog_fault", uri=kind, version=fault):
            if fault:
                server.catalogs.faults[kind] = fault  # type: ignore[assignment]
            else:
                server.catalogs.faults.pop(kind, None)
        case ServerChange(what="tool_refused_once", uri=name):
            server.tools_unknown_once.add(name)
        case ServerChange(what="tool_error_once", uri=name):
            server.tools_error_once.add(name)
        case ServerChange(what="tool_fault", uri=name, version=fault):
            server.tool_faults[name] = fault
        case ServerChange(what="tool_schema_changed", uri=name):
            # The tool now requires an argument: its inputSchema changed, nothing notified.
            items = [
                {**item, "inputSchema": {"type": "object", "required": ["q"]}}
                if item.get("name") == name
                else dict(item)
                for item in server.catalogs.items["tools"]
            ]
            server.set_catalog("tools", items, notify=False)
        case Notify(kind="updated_unread", count=count):
            for n in range(count):
                server.notify_updated(unread_uri(n), raw=True)
        case _:
            raise AssertionError(f"unhandled step {step!r}")
