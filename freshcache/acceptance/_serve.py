"""``freshcache serve``: a real MCP server (2026-07-28 and 2025-11-25 at once, or only one
of them) to try freshcache on.

With no folder it serves the seed resources (``guide://shipping/approval`` ...), the
ones the README's snippets read. With a folder, every regular file under it (hidden files
and folders left out) is a resource named by its ``file://`` URI (the absolute path,
percent-encoded: ``my notes.md`` is ``my%20notes.md``), with a MIME type guessed from
its name; an edit sends ``notifications/resources/updated`` for the file, a new or a
deleted file also ``notifications/resources/list_changed``. A folder deleted is served
empty until one is made in its place, which is then served and watched.

Nothing outside the folder is served and nothing blocks the watcher: a symlink whose
target lies outside the folder, a FIFO, a socket or a device is skipped with one line
(said once), and every file is opened without blocking and checked to be a regular file
before a byte is read. A regular file with more than one hard link is skipped the same
way, since its other names may lie outside the folder (no link count says where),
unless the user allows it (``hard_links``: ``--allow-hard-links``). A file over
``max_bytes`` is skipped with a line naming ``--max-file-bytes``, without being read.

The wire is the reference server's (`ReferenceHttpServer` / `StdioReferenceServer`
around `ReferenceProtocol`): whatever revisions it speaks, ``serve`` speaks. Changes
are seen with ``watchfiles`` when it is installed (``pip install '.[serve]'``), else
by looking at every file's `Stamp` (size, modification time, inode and its change time)
once a second; a file modified around the previous look is read again and compared by
content (`RACY_NS`), and one that cannot be read for a moment is not taken for deleted
(`READ_RETRIES`).
"""

from __future__ import annotations

import base64
import errno
import hashlib
import mimetypes
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISBLK, S_ISCHR, S_ISDIR, S_ISFIFO, S_ISREG, S_ISSOCK
from typing import TextIO

import anyio

from freshcache import ConfigurationError
from freshcache.testing import ReferenceServer

SEED = {
    "guide://shipping/approval": "Shipping approval v1: orders over $500 need a manager.",
    "guide://shipping/returns": "Returns v1: 30 days.",
    "guide://shipping/rates": "Rates v1: $5 flat within the country.",
    "guide://shipping/holidays": "Holidays v1: no shipping on public holidays.",
}
"""What ``freshcache serve`` without a folder serves."""

POLL_INTERVAL = 1.0
"""Seconds between looks at the folder when polling."""


def seed_reference() -> ReferenceServer:
    """A reference server holding the `SEED` resources."""
    server = ReferenceServer()
    for uri, text in SEED.items():
        server.set(uri, text)
    return server


MAX_FILE_BYTES = 1024 * 1024
"""The largest file ``serve`` serves by default (``--max-file-bytes`` raises it): an
answer must fit the client's own frame limit too (freshcache: ``max_frame_bytes``,
4 MiB; a blob's Base64 is a third bigger than the file)."""


Stamp = tuple[int, int, int, int]
"""What tells a file changed: (modification time in ns, size, inode, inode change time
in ns). The inode and its change time catch what the first two miss: a same-size edit
whose modification time was put back (``cp -p``, ``rsync -t``, ``os.utime``), a file
replaced by another one (``mv new old``)."""

RACY_NS = 2_000_000_000
"""How close (ns) to the start of the previous look a file's modification time must be
for an unchanged stamp not to be trusted (git's "racily clean" rule): an edit in the
same timestamp tick as the read before it leaves every stat field as it was, so such a
file is read again and compared by content. Two seconds cover the coarsest clocks in
use (FAT's two-second modification times) and the kernel's clock lagging the wall
clock by a tick."""

READ_RETRIES = 3
"""Looks in a row a served file may fail to be read (``EACCES``, ``EMFILE`` ...) before it
counts as deleted; until then its last text stays served and it is read again."""

_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
"""``stat`` errors that mean the path is not there (a dangling link too), not trouble."""

Identity = tuple[int, int]
"""Which folder a path names: (device, inode); another one after a delete and a mkdir."""


@dataclass(frozen=True, slots=True)
class Change:
    """One file that appeared, changed or went away since the last look."""

    what: str
    """``"new"``, ``"updated"`` or ``"deleted"``."""
    uri: str
    text: str | None = None
    blob: str | None = None
    mime_type: str = "text/plain"


@dataclass
class Folder:
    """Keeps a reference server's resources equal to the files under ``root``."""

    root: Path
    server: ReferenceServer
    say: Callable[[str], None] = lambda line: None
    max_bytes: int = MAX_FILE_BYTES
    """Files larger than this are skipped, unread (`MAX_FILE_BYTES`)."""
    hard_links: bool = False
    """Serve a regular file with more than one hard link (by default skipped)."""
    stamps: dict[Path, Stamp] = field(default_factory=dict)
    digests: dict[Path, bytes] = field(default_factory=dict)
    """The SHA-256 of each served file's contents when last read."""
    failures: dict[Path, int] = field(default_factory=dict)
    """Served files that could not be read at the last looks, and how many in a row."""
    looked_at: int | None = None
    """When the last look started (wall clock, ns); ``None`` before the first."""
    skipped: dict[Path, tuple[Stamp, str]] = field(default_factory=dict)
    """Paths not served, with the stamp they had and why (each said once)."""
    identity: Identity | None = None
    """The folder at ``root`` when last looked at; ``None`` while there is none."""

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.identity = _identity(self.root)

    @staticmethod
    def stamp(stat: os.stat_result) -> Stamp:
        """The `Stamp` of a file's ``stat``."""
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino, stat.st_ctime_ns)

    def look(self) -> list[Change]:
        """What changed on disk since the last look (reads only the files that did, and
        those too recently modified for their stamp to be trusted: `RACY_NS`)."""
        started = time.time_ns()
        racy_since = None if self.looked_at is None else self.looked_at - RACY_NS
        now: dict[Path, Stamp] = {}
        digests: dict[Path, bytes] = {}
        failures: dict[Path, int] = {}
        skipped: dict[Path, tuple[Stamp, str]] = {}
        changes: list[Change] = []

        def keep(path: Path) -> None:
            """``path`` could not be looked at now: a served file stays as it was (its
            old stamp, so the next look reads it again) for `READ_RETRIES` looks."""
            before = self.stamps.get(path)
            failed = self.failures.get(path, 0) + 1
            if before is not None and failed < READ_RETRIES:
                now[path], failures[path] = before, failed
                if path in self.digests:
                    digests[path] = self.digests[path]

        for path in _files(self.root):
            try:
                stat = path.stat()
            except OSError as exc:
                if exc.errno not in _GONE:
                    keep(path)
                continue  # went away while we looked (or a dangling link): not served
            stamp = self.stamp(stat)
            before_skip = self.skipped.get(path)
            if before_skip is not None and before_skip[0] == stamp:
                skipped[path] = before_skip  # unchanged since it was skipped
                continue
            before = self.stamps.get(path)
            racy = racy_since is not None and stat.st_mtime_ns >= racy_since
            if before == stamp and not racy:
                now[path] = stamp
                if path in self.digests:
                    digests[path] = self.digests[path]
                continue
            try:
                if not S_ISREG(stat.st_mode):  # not even opened
                    raise Skipped(f"not a regular file ({_kind(stat.st_mode)})")
                data = _read(path, self.root, self.max_bytes, self.hard_links)
            except Skipped as why:
                skipped[path] = (stamp, str(why))
                if before_skip is None or before_skip[1] != str(why):
                    self.say(f"skipped {path}: {why}")
                continue
            if data is None:
                keep(path)  # unreadable now: try again next time
                continue
            now[path] = stamp
            digests[path] = digest = hashlib.sha256(data).digest()
            if before == stamp and digest == self.digests.get(path):
                continue  # read again only because it was racy: the same contents
            changes.append(_change(path, "new" if before is None else "updated", data))
        for path in self.stamps.keys() - now.keys():
            changes.append(Change("deleted", path.as_uri()))
        self.stamps = now
        self.digests = digests
        self.failures = failures
        self.skipped = skipped
        self.looked_at = started
        return changes

    def apply(self, changes: list[Change], *, notify: bool = True) -> None:
        """Put changes into the server; with ``notify`` tell the listening clients."""
        server = self.server
        for change in changes:
            if change.what == "deleted":
                if notify:
                    server.notify_updated(change.uri)
                server.remove(change.uri, notify=notify)
            else:
                server.set(
                    change.uri,
                    change.text or "",
                    notify=notify,
                    mime_type=change.mime_type,
                    blob=change.blob,
                )
            if notify:
                self.say(f"{change.what} {change.uri}")

    async def catch_up(self) -> None:
        """Look and apply what changed, saying so when the folder went away or came back
        (its files then are all deleted, or all new)."""
        identity = _identity(self.root)
        if identity is None and self.identity is not None:
            self.say(f"{self.root} is gone: no files served until a folder is there again")
        elif identity is not None and self.identity is None:
            self.say(f"{self.root} is back")
        self.identity = identity
        # The look never blocks (`_open_regular`); abandoning it on cancel keeps Ctrl-C
        # prompt even on a slow disk.
        self.apply(await anyio.to_thread.run_sync(self.look, abandon_on_cancel=True))

    async def follow(self, *, poll: bool = False) -> None:
        """Apply every change until cancelled. A folder deleted (or replaced) keeps being
        served, empty while it is gone, and is looked for every second until it is back:
        a watch of a deleted folder hears nothing of the one made in its place."""
        watch = None if poll else _watchfiles()
        while True:
            if watch is None or self.identity is None:
                await anyio.sleep(POLL_INTERVAL)
                await self.catch_up()
                continue
            watching, started = self.identity, False
            # The watch yields at least every POLL_INTERVAL (an empty set: nothing
            # happened): the first time, it is running, so one look covers what changed
            # before it started; each time, a replaced folder is noticed.
            async for changes in watch(self.root):
                if changes or not started:
                    await self.catch_up()
                started = True
                if self.identity != watching or _identity(self.root) != watching:
                    break


def _files(root: Path) -> list[Path]:
    found: list[Path] = []
    # os.walk does not descend into symlinked folders (followlinks=False): a link to a
    # folder outside root is never walked; one inside is walked under its real name.
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(Path(folder, n) for n in sorted(names) if not n.startswith("."))
    return found


class Skipped(Exception):
    """A path under the folder that is not served, and why (said once per path)."""


def _open_regular(path: Path, root: Path, max_bytes: int, hard_links: bool = False) -> bytes:
    """The bytes of ``path`` if it is a regular file inside ``root`` and at most
    ``max_bytes`` long, with one hard link unless ``hard_links``; `Skipped` with the
    reason otherwise, `OSError` when it cannot be
    read now (or was swapped while it was opened: the next look checks it again).

    Never blocks: the file is opened with ``O_NONBLOCK`` (a FIFO without a writer opens
    at once) and checked with ``fstat`` before a byte is read, so a path swapped for a
    FIFO after a ``stat`` is caught too. Never leaves ``root``: the path checked inside
    it (its ``realpath``) is the one opened, with ``O_NOFOLLOW``, so a last part swapped
    for a symlink after the check fails to open instead of following it; the file
    opened must be the one ``lstat`` finds there (device and inode); and on Linux, where
    the open file descriptor really is (``/proc/self/fd``) must be inside ``root``,
    which catches a folder on the way swapped for a symlink out."""
    real = Path(os.path.realpath(path))
    if not _inside(real, root):
        raise Skipped(f"a symlink to {real}, outside {root}")
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(real, flags)
    try:
        stat = os.fstat(fd)
        if not S_ISREG(stat.st_mode):
            raise Skipped(f"not a regular file ({_kind(stat.st_mode)})")
        if stat.st_nlink > 1 and not hard_links:
            raise Skipped(
                f"a file with {stat.st_nlink} hard links, which may lie outside {root} "
                "(freshcache serve --allow-hard-links serves it)"
            )
        checked = os.lstat(real)
        if (stat.st_dev, stat.st_ino) != (checked.st_dev, checked.st_ino):
            raise OSError(f"{path} changed while it was opened")
        where = _where(fd)
        if where is not None and not _inside(where, root):
            raise OSError(f"{path} led out of {root} ({where}) while it was opened")
        if stat.st_size > max_bytes:
            raise Skipped(
                f"{stat.st_size} bytes, over the {max_bytes}-byte limit "
                "(freshcache serve --max-file-bytes N raises it)"
            )
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 16):
            size += len(chunk)
            if size > max_bytes:  # it grew while being read
                raise Skipped(
                    f"over the {max_bytes}-byte limit "
                    "(freshcache serve --max-file-bytes N raises it)"
                )
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _where(fd: int) -> Path | None:
    """Where the open ``fd`` really is (Linux: ``/proc/self/fd``); ``None`` where that
    cannot be asked. What is not a path there (``pipe:[...]``) is inside no folder."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


def _kind(mode: int) -> str:
    for test, name in (
        (S_ISFIFO, "a FIFO"),
        (S_ISSOCK, "a socket"),
        (S_ISCHR, "a character device"),
        (S_ISBLK, "a block device"),
        (S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a file"


def _read(path: Path, root: Path, max_bytes: int, hard_links: bool = False) -> bytes | None:
    """``path``'s contents now (`Skipped`: never served); ``None`` when it cannot be read
    at the moment (try again at the next look)."""
    try:
        return _open_regular(path, root, max_bytes, hard_links)
    except Skipped:
        raise
    except OSError:
        return None


def _change(path: Path, what: str, data: bytes) -> Change:
    """The change that serves ``data`` as ``path``'s contents."""
    mime = mimetypes.guess_type(path.name)[0]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        blob = base64.b64encode(data).decode("ascii")
        return Change(what, path.as_uri(), blob=blob, mime_type=mime or "application/octet-stream")
    return Change(what, path.as_uri(), text=text, mime_type=mime or "text/plain")


def _identity(root: Path) -> Identity | None:
    try:
        stat = root.stat()
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino) if S_ISDIR(stat.st_mode) else None


def _watchfiles() -> Callable[[Path], AsyncIterator[Collection[object]]] | None:
    """watchfiles' ``awatch``, yielding at least every `POLL_INTERVAL` (``None``: not
    installed)."""
    try:
        from watchfiles import awatch
    except ImportError:
        return None
    timeout_ms = int(POLL_INTERVAL * 1000)

    def watch(root: Path) -> AsyncIterator[Collection[object]]:
        return awatch(root, rust_timeout=timeout_ms, yield_on_timeout=True)

    return watch


def folder_reference(
    root: Path,
    say: Callable[[str], None],
    max_bytes: int = MAX_FILE_BYTES,
    hard_links: bool = False,
) -> Folder:
    """A reference server holding the files under ``root`` (`ConfigurationError` if
    it is not a folder)."""
    if not root.is_dir():
        what = "does not exist" if not root.exists() else "is not a folder"
        raise ConfigurationError(f"{root} {what}: give a folder whose files to serve")
    folder = Folder(root, ReferenceServer(), say, max_bytes, hard_links)
    folder.apply(folder.look(), notify=False)
    return folder


def check_port(port: int) -> None:
    """Fail with one line, not after a retry loop, when the port cannot be had."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc} "
                "(another server there? --port 0 picks a free one)"
            ) from None


async def _until_stopped() -> int:
    """The signal (SIGINT or SIGTERM) that asked the server to stop."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            return int(signum)
    raise AssertionError("a signal receiver never ends")  # pragma: no cover


def _what(server: ReferenceServer, folder: Folder | None) -> str:
    if folder is None:
        return "seed resources"
    count = len(server.resources)
    return f"{count} file{'' if count == 1 else 's'} under {folder.root}"


def _printer(stream: TextIO) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(f"freshcache serve: {line}", file=stream, flush=True)

    return say


async def serve_http(
    root: Path | None,
    port: int,
    *,
    poll: bool = False,
    revision: str = "both",
    max_bytes: int = MAX_FILE_BYTES,
    hard_links: bool = False,
) -> int:
    """Serve over Streamable HTTP on 127.0.0.1 until SIGINT or SIGTERM; returns that
    signal's number."""
    from ._http_server import ReferenceHttpServer

    say = _printer(sys.stdout)
    folder = None if root is None else folder_reference(root, say, max_bytes, hard_links)
    server = seed_reference() if folder is None else folder.server
    if port:
        check_port(port)
    http = ReferenceHttpServer(
        server,
        keepalive_interval=5.0,
        revision="2025-11-25"
        if revision == "2025-11-25"
        else "both"
        if revision == "both"
        else "2026-07-28",
    )
    http.port = port
    async with http, anyio.create_task_group() as tg:
        what = _what(server, folder)
        say(f"{http.url} ({what}; Ctrl-C stops)")
        if folder is not None:
            tg.start_soon(lambda: folder.follow(poll=poll))
        signum = await _until_stopped()
        tg.cancel_scope.cancel()
    say("stopped")
    return signum


async def serve_stdio(
    root: Path | None,
    *,
    poll: bool = False,
    revision: str = "both",
    max_bytes: int = MAX_FILE_BYTES,
    hard_links: bool = False,
) -> int:
    """Serve on stdin/stdout until stdin ends (the process exits 0) or SIGINT/SIGTERM
    (returns that signal's number); notes on stderr."""
    from ._stdio_server import StdioReferenceServer

    say = _printer(sys.stderr)
    folder = None if root is None else folder_reference(root, say, max_bytes, hard_links)
    server = seed_reference() if folder is None else folder.server
    stdio = StdioReferenceServer(server, None, revision)
    async with anyio.create_task_group() as tg:
        what = _what(server, folder)
        say(f"stdio ({what})")
        tg.start_soon(lambda: stdio.run(None, control=False))
        if folder is not None:
            tg.start_soon(lambda: folder.follow(poll=poll))
        signum = await _until_stopped()
        tg.cancel_scope.cancel()
    return signum
