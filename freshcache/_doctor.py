"""``freshcache doctor``: what freshness can this server give, in plain words.

For each server: can it be reached, does it answer MCP at all, which revision, which
capabilities and what they mean for freshness, the ``ttlMs``/``cacheScope`` it sends,
what its acknowledgment honours and, with ``--trigger``, how long from the trigger's
start until the notification arrives.

Exit status (the worst over every server named): 0 when the server spoke MCP and
every check passed, 1 for a finding (unreachable, a tested resource not found or
denied, no acknowledgment, no update after the trigger, a failed trigger), 2 when the
URL does not answer MCP.

On 2025-11-25 there is no ``subscriptions/listen``: what doctor checks there is a
``resources/subscribe`` per tested resource on a live notification channel, and it
says so in those words.

A server without the ``resources`` capability (a tools-only server) is a normal
server: doctor lists no resources there, and reports its tools and prompts (how many,
``listChanged``, whether the listen's acknowledgment covers their changes).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import anyio

from ._core import (
    CatalogKind,
    ListenAcknowledged,
    ListenUnsupported,
    ListReply,
    ReadReply,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamLost,
)
from ._errors import ProtocolError
from ._protocol._wire import LEGACY_VERSIONS, PROTOCOL_VERSION
from ._sources._source import ServerInfo, Source

EXIT_OK, EXIT_FINDING, EXIT_NOT_MCP = 0, 1, 2

Say = Callable[[str], None]


def _fmt(ttl_ms: float | None) -> str:
    return "(absent)" if ttl_ms is None else f"{ttl_ms:.0f}"


async def doctor(args: argparse.Namespace, make_source: Callable[[list[str]], Any]) -> int:
    """Check every server named; the worst exit status wins."""
    targets: list[list[str]] = (
        [["--", *args.command_line]]
        if args.command_line is not None
        else [[url] for url in args.target] or [[]]
    )
    worst = EXIT_OK
    for number, target in enumerate(targets):
        if number:
            print()
        source = make_source(target)
        try:
            code = await _check(source, args, print)
        except ProtocolError as exc:
            print(f"mcp         no: {exc}")
            code = EXIT_NOT_MCP
        finally:
            with anyio.CancelScope(shield=True):
                await source.aclose()
        worst = max(worst, code)
    return worst


async def _check(source: Any, args: argparse.Namespace, say: Say) -> int:
    info: ServerInfo = await source.start()
    say(f"server      {source.identity}")
    if not info.reachable:
        say(f"reachable   no: {info.detail}")
        return EXIT_FINDING
    if info.failure == "denied":
        say(f"reachable   yes, but access is denied: {info.detail}")
        say("advice      give credentials (HttpSource(auth=...)); doctor sends none")
        return EXIT_FINDING
    if info.failure is not None or not (info.supported_versions or info.raw):
        say("reachable   yes")
        say(f"mcp         no: {info.detail}")
        if info.failure == "error":
            say(
                "advice      it answers JSON-RPC but not server/discover: not a 2026-07-28 "
                "server (an older revision, or not MCP)"
            )
        else:
            say(
                "advice      this URL does not answer MCP: check it (MCP servers usually "
                "answer on a path such as /mcp)"
            )
        return EXIT_NOT_MCP
    name = f"{info.name or ''} {info.version or ''}".strip()
    say(f"reachable   yes{f' ({name})' if name else ''}")
    advice: list[str] = []
    findings: list[str] = []
    _revision(info, say, advice)
    capabilities = info.raw.get("capabilities")
    offered = capabilities if isinstance(capabilities, dict) else {}
    uris: list[str] = []
    if "resources" in offered or not info.raw:
        _capabilities(info, say, advice)
        uris = await _list_and_read(source, list(args.uri or []), say, advice, findings)
    else:
        say("resources   none offered (a server of tools or prompts only: nothing to read)")
    changing = await _catalogs(source, offered, say)
    legacy = speaks_2025(info)
    if info.listen is False and not changing:
        say("listen      not offered")
    elif uris or info.list_changed or changing:
        await _listen(
            source, frozenset(uris), args, say, advice, findings, legacy=legacy, catalogs=changing
        )
    for line in advice:
        say(f"advice      {line}")
    for line in findings:
        say(f"finding     {line}")
    if not advice and not findings:
        say(
            "advice      none: selected resources are kept fresh by notification"
            if uris or info.listen
            else "advice      none"
        )
    return EXIT_FINDING if findings else EXIT_OK


def speaks_2025(info: ServerInfo) -> bool:
    """Whether the session speaks a 2025 revision (its listen is the channel plus
    ``resources/subscribe``). No revision in common (``None``) is not one."""
    return info.protocol_version in LEGACY_VERSIONS


def _revision(info: ServerInfo, say: Say, advice: list[str]) -> None:
    offered = ", ".join(info.supported_versions) or "(not said)"
    version = info.protocol_version
    if version == PROTOCOL_VERSION:
        say(f"revision    {version} (the server offers {offered})")
        return
    say(f"revision    {version or 'none in common'} (the server offers {offered})")
    if version is None:
        advice.append(f"no revision in common with freshcache ({PROTOCOL_VERSION})")
    else:
        advice.append(
            f"{version} is an older revision: no ttlMs or cacheScope, so a resource no live "
            "subscription covers is read from the server before every use"
        )


def _capabilities(info: ServerInfo, say: Say, advice: list[str]) -> None:
    if info.subscribe:
        say("subscribe   yes: a selected resource stays fresh until a change is notified")
    else:
        say("subscribe   no: no change notifications per resource")
        advice.append(
            "without resources.subscribe every selected resource is read from the server "
            "before every use (Policy(uncovered='ttl') trusts its ttlMs instead)"
        )
    if info.list_changed:
        say("listChanged yes: the resource list is re-read when the server says it changed")
    else:
        say("listChanged no: a resource list is trusted for its ttlMs only")


_CATALOGS: tuple[tuple[str, CatalogKind], ...] = (("tools", "tools"), ("prompts", "prompts"))


async def _catalogs(source: Any, offered: dict[str, Any], say: Say) -> frozenset[str]:
    """The tools and prompts the server offers: how many, and ``listChanged``; returns
    the catalogs whose changes the server says it notifies."""
    changing: set[str] = set()
    for capability, kind in _CATALOGS:
        declared = offered.get(capability)
        if not isinstance(declared, dict):
            continue
        notified = declared.get("listChanged") is True
        changing.update([kind] if notified else [])
        count = await _count(source, kind)
        say(f"{capability:<11} {count}; listChanged {'yes' if notified else 'no'}")
    return frozenset(changing)


async def _count(source: Source, kind: CatalogKind) -> str:
    """How many items catalog ``kind`` lists (its first pages), or why it could not say."""
    lister = source.list_catalog  # a declared capability: None where the source lacks it
    if lister is None:
        return "listing not supported by this source"
    total, cursor = 0, None
    for _ in range(20):  # a paginator that never ends cannot hang doctor
        try:
            page = await lister(kind, cursor, None)
        except ProtocolError as exc:
            return f"list failed: {exc}"
        if not isinstance(page, ListReply):
            return f"list failed: {page.kind} ({page.detail})"
        total += len(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return f"{total} listed"
    return f"{total}+ listed (more pages)"


async def _list_and_read(
    source: Any, uris: list[str], say: Say, advice: list[str], findings: list[str]
) -> list[str]:
    """The first list page and a few reads (the ``--uri`` ones, else the first three
    listed): what ``ttlMs``/``cacheScope`` they carry; one not found or denied is a
    finding (a model relying on it would get no text)."""
    page = await source.list_resources(None, None)
    if isinstance(page, ListReply):
        say(
            f"list        {len(page.resources)} resource{'' if len(page.resources) == 1 else 's'}"
            " on the first page; "
            f"ttlMs={_fmt(page.ttl_ms)} cacheScope={page.cache_scope or '(absent)'}"
            f"{'; more pages' if page.next_cursor is not None else ''}"
        )
        if page.ttl_ms is None:
            advice.append(
                "resources/list carries no ttlMs: every list is re-fetched (spec: absent = 0)"
            )
        uris = uris or [r.uri for r in page.resources[:3]]
    else:
        say(f"list        failed: {page.kind} ({page.detail})")
    for uri in uris:
        reply = await source.read_resource(uri, None)
        if isinstance(reply, ReadReply):
            say(
                f"read        {uri}: ttlMs={_fmt(reply.ttl_ms)} "
                f"cacheScope={reply.cache_scope or '(absent)'}"
            )
            if not reply.ttl_ms:
                advice.append(
                    f"{uri} has ttlMs 0 or none: without a subscription it is read on every use"
                )
        else:
            say(f"read        {uri}: {reply.kind} ({reply.detail})")
            if reply.kind in ("not_found", "denied"):
                what = "does not exist" if reply.kind == "not_found" else "is denied to doctor"
                findings.append(
                    f"{uri} {what} ({reply.kind}): check the URI (freshcache list URL "
                    "prints what the server lists)"
                    if reply.kind == "not_found"
                    else f"{uri} {what} ({reply.kind}): doctor sends no credentials"
                )
    return uris


async def _listen(
    source: Any,
    uris: frozenset[str],
    args: argparse.Namespace,
    say: Say,
    advice: list[str],
    findings: list[str],
    *,
    legacy: bool = False,
    catalogs: frozenset[str] = frozenset(),
) -> None:
    """Open a subscription and wait for its acknowledgment (2026-07-28), or for the
    ``resources/subscribe`` of each tested URI on a live channel (2025-11-25); say
    whether it covers the changes of ``catalogs``."""
    started = time.perf_counter()
    async with aclosing(source.listen(uris, True)) as events:
        acked: ListenAcknowledged | None = None
        with anyio.move_on_after(args.timeout):
            async for event in events:
                if isinstance(event, ListenAcknowledged):
                    acked = event
                    break
                if isinstance(event, ListenUnsupported):
                    say(f"listen      not supported: {event.detail}")
                    advice.append(
                        "this server has no subscriptions/listen: selected resources are "
                        "read from the server before every use"
                    )
                    return
                if isinstance(event, (StreamLost, StreamClosed)):
                    what = "the channel ended" if legacy else "ended"
                    say(f"listen      {what} before an acknowledgment: {_event_detail(event)}")
                    findings.append("the listen stream ended before it was acknowledged")
                    return
        if acked is None:
            what = "no subscription took effect" if legacy else "no acknowledgment"
            say(f"listen      {what} within {args.timeout:g} s")
            findings.append(
                f"{what} within {args.timeout:g} s: selected resources count as "
                "uncovered and are read before every use"
            )
            return
        took = f"{1000 * (time.perf_counter() - started):.0f} ms"
        if legacy:
            # 2025-11-25 has no listen: what was checked is a resources/subscribe per
            # URI, each counted once the notification channel (GET stream, stdout) is live.
            say(
                f"subscribe   on the live notification channel in {took}: "
                f"resources/subscribe accepted for {sorted(acked.resource_uris)}"
            )
        else:
            say(
                f"listen      acknowledged in {took}: "
                f"resourcesListChanged={acked.list_changed}, "
                f"resourceSubscriptions={sorted(acked.resource_uris)}"
            )
        for kind in sorted(catalogs):
            covered = kind in acked.catalogs
            say(
                f"{kind:<11} changes {'covered by' if covered else 'not covered by'} the "
                f"{'notification channel' if legacy else 'listen'}"
            )
            if not covered:
                advice.append(f"{kind} changes are not notified: {kind} live on their ttlMs alone")
        _judge_ack(acked, uris, advice, legacy=legacy)
        if args.trigger:
            await _trigger(events, args, say, findings)


def _judge_ack(
    acked: ListenAcknowledged, uris: frozenset[str], advice: list[str], *, legacy: bool = False
) -> None:
    """Advice from what the acknowledgment (2025-11-25: the subscribes) covered."""
    if uris and not acked.resource_uris:
        advice.append(
            (
                "this server refused every resources/subscribe"
                if legacy
                else "this server never acknowledges resource subscriptions"
            )
            + ": selected resources will be read before every use"
        )
    else:
        left_out = sorted(uris - acked.resource_uris)
        if left_out:
            what = (
                "resources/subscribe was refused for" if legacy else "the acknowledgment leaves out"
            )
            advice.append(
                f"{what} "
                + ", ".join(left_out)
                + ": those are read from the server before every use"
            )
    if not acked.list_changed:
        advice.append("list changes are not notified: lists live on their ttlMs alone")


async def _trigger(events: Any, args: argparse.Namespace, say: Say, findings: list[str]) -> None:
    """Run the trigger and time, from its start, the first change notification; a
    trigger that exits with a failure ends the wait at once (nothing it did can be
    relied on to come)."""
    exit_code: list[int] = []
    trigger_done = anyio.Event()
    waiting = anyio.CancelScope(deadline=anyio.current_time() + args.timeout)

    async def run_trigger() -> None:
        done = await anyio.run_process(args.trigger, check=False)  # a str runs in a shell
        exit_code.append(done.returncode)
        trigger_done.set()
        if done.returncode != 0:
            waiting.cancel()

    arrived: str | None = None
    ended = False
    elapsed = 0.0
    async with anyio.create_task_group() as tg:
        started = time.perf_counter()
        tg.start_soon(run_trigger)
        with waiting:
            async for event in events:
                if isinstance(event, ResourceUpdated):
                    arrived = f"update      {event.uri}"
                elif isinstance(event, ResourceListChanged):
                    arrived = "update      a list change"
                elif isinstance(event, (StreamLost, StreamClosed)):
                    ended = True
                    findings.append(
                        f"the listen stream ended while waiting: {_event_detail(event)}"
                    )
                else:
                    continue
                elapsed = 1000 * (time.perf_counter() - started)
                break
        with anyio.move_on_after(args.timeout):
            await trigger_done.wait()
        tg.cancel_scope.cancel()
    failed = bool(exit_code) and exit_code[0] != 0
    if not exit_code:
        say(f"trigger     still running {args.timeout:g} s after the update wait: stopped")
    elif failed:
        say(f"trigger     exited with {exit_code[0]}")
        findings.append(f"the trigger command failed (exit {exit_code[0]})")
    if arrived is not None:
        say(f"{arrived} arrived {elapsed:.0f} ms after the trigger started")
    elif failed:
        say("update      not waited for: the trigger failed")
    elif not ended:
        say(f"update      none within {args.timeout:g} s of the trigger's start")
        findings.append(
            f"no update arrived within {args.timeout:g} s of the trigger's start: did it "
            "change a resource the acknowledgment covers?"
        )


def _event_detail(event: StreamLost | StreamClosed) -> str:
    return getattr(event, "detail", "") or type(event).__name__
