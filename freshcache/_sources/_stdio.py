"""`StdioSource`: freshcache over an MCP server run as a subprocess.

Spec: basic/transports/stdio (framing, shutdown, restart), basic/patterns/subscriptions
(one channel, many subscriptions, demultiplexed by ``subscriptionId``) and
basic/patterns/cancellation (``notifications/cancelled`` ends a listen on stdio).

Three layers, innermost first:

- `LineBuffer` (sans-IO): bytes in, complete lines out. A line longer than
  ``max_line_bytes`` is skipped as it streams by and reported once as an
  `OverlongLine`; what is left at end of input is a cut line.
- `Demultiplexer` (sans-IO): frames the server's lines and hands each message to the
  source's `freshcache._protocol._client.ClientProtocol` (the object HTTP drives too), which
  says where it goes. Responses go to the request with that id; subscription messages
  go to the subscription named by ``_meta["io.modelcontextprotocol/subscriptionId"]``
  (other subscriptions' messages may come first, and an update before its
  subscription's acknowledgment is passed on as it is: the engine counts it untrusted
  and lets it only invalidate). Lines it cannot trust (not JSON, not JSON-RPC, a
  request written by the server, a hint with an unknown subscription id) never raise;
  they are counted, logged, and reported to one open subscription so the engine sees
  them (a change hint may still invalidate).
- `StdioSource` and its `_Supervisor`: the process. One *service task* per source
  owns a task group in which the current process is served: one reader task feeds
  stdout to the demultiplexer, one drains stderr into logging (logger
  ``freshcache.stdio``; never parsed). When the process exits unexpectedly, every
  request in flight fails as ``unreachable``, every open subscription ends with
  `StreamLost` (`ClientProtocol.channel_ended`), and the service task starts a new
  process after a backoff under a budget (`BackoffSettings`, the same rules as
  re-listening). `FreshCache` then re-listens (the server keeps no
  subscription state across processes) and re-reads every selected URI. A process
  counts as reached once it has written one protocol message: a request that times
  out before that fails as ``unreachable``, not ``timeout`` (a server that is down
  is a command whose processes exit before they answer).

**Change hints.** stdio has one ordered channel, so a ``resources/updated`` or
``resources/list_changed`` the server wrote before a response was written while that
request was in flight. Every hint, whatever subscription id it names (its own, an
unknown one, none), is held once by the source until one consumer takes it: the
listen generator it was routed to (its own subscription, else the first open one)
yields it, or the next `read_resource` / `list_resources` reply carries it in
``hints``, whichever returns first; the others skip it. Both consumers hand what they
got to the engine before they next wait (`FreshCache` feeds reply hints before
judging the reply), so every reply whose request was in flight when the hint arrived
is judged after the engine saw the hint (invariant 9), and the engine sees each hint
once. At most ``max_backlog`` hints wait untaken (beyond that the oldest is dropped
and counted; with a listen open its inbox overflows first and ends the stream).

**Parity with HTTP** (invariant 11): ``requestState`` rounds (`ReadRounds`) and
``-32022`` renegotiation are the same code as on HTTP: `freshcache._protocol._client`.

Why a service task rather than a task group entered in ``start()``: the `Source`
contract has ``start()`` called by one task and ``aclose()`` by another, and an anyio
task group must be left by the task that entered it. The service task is the one
piece started outside structured concurrency; everything else lives in its group,
and ``aclose()`` cancels it and waits for it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import shlex
import signal
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from .._core import (
    CATALOG_METHODS,
    CatalogKind,
    CatalogListChanged,
    ChangeHint,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    Partition,
    ReadReply,
    ReconnectBudget,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from .._core._backlog import overflowed
from .._core._backoff import BackoffSettings
from .._core._counters import Tally
from .._core._subscribe_order import UNSUBSCRIBE
from .._errors import ConfigurationError, ProtocolError
from .._middleware._telemetry import annotate_request
from .._protocol._client import (
    Answer,
    ClientProtocol,
    ForSubscription,
    IdKey,
    Ignored,
    ListenAgain,
    Renegotiate,
    RequestId,
    Unclaimed,
    Untrusted,
    cancellation,
    decode,
    discovery_unanswered,
    id_key,
)
from .._protocol._reissue import lost_answer, may_reissue
from .._protocol._tools import ToolReply, tool_answer
from .._protocol._wire import (
    ClientIdentity,
    DenialRules,
    ErrorResponse,
    Message,
    Response,
    catalog_reply,
    list_reply,
)
from ._background import BackgroundTask, Inbox
from ._negotiation import Negotiation
from ._source import ServerInfo
from ._speaking import SpeaksClientProtocol
from ._subscribing import Call, InOrder

log = logging.getLogger("freshcache.stdio")

HANDSHAKE_TIMEOUT = 60.0
"""Seconds a (re)started 2025-11-25 process may take to answer ``initialize``."""

_SIGKILL = getattr(signal, "SIGKILL", signal.SIGTERM)  # Windows has no SIGKILL
_STDERR_LINE_LIMIT = 64 * 1024
_FINAL_EVENTS = (StreamClosed, StreamLost, ListenUnsupported)


# --------------------------------------------------------------------------- framing


@dataclass(frozen=True, slots=True)
class OverlongLine:
    """A line longer than the limit; its bytes were skipped, not kept."""

    size: int


class LineBuffer:
    """Splits a byte stream into newline-terminated lines (sans-IO).

    Feeding the same bytes split at any boundaries yields the same lines. A line
    longer than ``max_line_bytes`` is never held in memory: once it passes the limit
    its bytes are skipped up to the next newline and it is reported once as an
    `OverlongLine` with its full size.
    """

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._skipped: int | None = None  # bytes of an over-long line skipped so far

    def feed(self, data: bytes) -> list[bytes | OverlongLine]:
        """Take more bytes; return the lines they complete (without the newline)."""
        out: list[bytes | OverlongLine] = []
        start = 0
        limit = self.max_line_bytes
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            size = end - start
            if self._skipped is not None:
                out.append(OverlongLine(self._skipped + size))
                self._skipped = None
            elif len(self._buffer) + size > limit:
                out.append(OverlongLine(len(self._buffer) + size))
                self._buffer.clear()
            elif self._buffer:
                self._buffer += data[start:end]
                out.append(bytes(self._buffer))
                self._buffer.clear()
            else:
                out.append(data[start:end])
            start = end + 1
        rest = len(data) - start
        if rest:
            if self._skipped is not None:
                self._skipped += rest
            elif len(self._buffer) + rest > limit:
                self._skipped = len(self._buffer) + rest
                self._buffer.clear()
            else:
                self._buffer += data[start:]
        return out

    def feed_eof(self) -> bytes | OverlongLine | None:
        """The input ended: what was left of an unterminated (cut) line, if anything."""
        if self._skipped is not None:
            cut: bytes | OverlongLine | None = OverlongLine(self._skipped)
        elif self._buffer:
            cut = bytes(self._buffer)
        else:
            cut = None
        self._buffer.clear()
        self._skipped = None
        return cut

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line held (or skipped) so far."""
        return self._skipped if self._skipped is not None else len(self._buffer)


# --------------------------------------------------------------------------- routing


Delivery = Answer | ForSubscription | Unclaimed | ListenAgain
"""The response to one of our requests (`Answer`), a stream event for one open
subscription (`ForSubscription`; ``final`` ends it), a change hint no open subscription
can carry (`Unclaimed`: it still counts, on the next reply, see `StdioSource`), or
``-32022`` answering a listen (`ListenAgain`: the protocol's re-sent listen goes out)."""


@dataclass(slots=True)
class StdioCounters(Tally):
    """Running totals of what came off the server's stdout (all processes)."""

    lines: int = 0
    """Complete lines read (every newline, blank and over-long lines included)."""
    messages: int = 0
    """Lines that were JSON-RPC messages."""
    malformed: int = 0
    """Lines that were not JSON, or not JSON-RPC."""
    overlong: int = 0
    """Lines longer than ``max_line_bytes`` (skipped)."""
    cut_lines: int = 0
    """Unterminated lines left when a process died."""
    server_requests: int = 0
    """Requests written by the server (not allowed on 2026-07-28 stdio)."""
    unknown_responses: int = 0
    """Responses whose id matches nothing in flight (late answers after a timeout ...)."""
    unknown_subscriptions: int = 0
    """Subscription messages with an unknown or missing subscription id."""
    before_ack: int = 0
    """Subscription messages that came before their acknowledgment."""
    overflows: int = 0
    """Subscriptions ended because their consumer fell ``max_backlog`` messages behind."""
    hints_dropped: int = 0
    """Change hints no consumer took before ``max_backlog`` more were waiting."""
    starts: int = 0
    """Processes started."""
    unexpected_exits: int = 0
    """Processes that went away without being asked to."""


class Demultiplexer:
    """Routes the server's stdout lines (sans-IO; one instance per process).

    Register what is in flight with `expect_response` and `open_subscription`; feed
    bytes; act on the returned deliveries in order. What a message means is the
    `ClientProtocol`'s to say; this layer frames lines, counts, and picks the
    subscription that hears about what no subscription claims.
    """

    def __init__(
        self,
        max_line_bytes: int,
        counters: StdioCounters | None = None,
        protocol: ClientProtocol | None = None,
    ) -> None:
        self.lines = LineBuffer(max_line_bytes)
        self.counters = counters if counters is not None else StdioCounters()
        self.protocol = protocol if protocol is not None else ClientProtocol("stdio")

    # --- bookkeeping

    def expect_response(self, request_id: RequestId) -> None:
        self.protocol.expect(request_id)

    def forget_request(self, request_id: RequestId) -> None:
        self.protocol.forget(request_id)

    def open_subscription(self, subscription_id: RequestId) -> None:
        self.protocol.open_subscription(subscription_id)

    def close_subscription(self, subscription_id: RequestId) -> None:
        self.protocol.close_subscription(subscription_id)

    @property
    def in_flight(self) -> int:
        return self.protocol.in_flight

    @property
    def open_subscriptions(self) -> list[RequestId]:
        return self.protocol.open_subscriptions

    # --- input

    def feed(self, data: bytes) -> list[Delivery]:
        """Route the lines ``data`` completes."""
        out: list[Delivery] = []
        for line in self.lines.feed(data):
            self.counters.lines += 1
            if isinstance(line, OverlongLine):
                self.counters.overlong += 1
                log.info(
                    "skipped a %d-byte line from the server (limit %d bytes)",
                    line.size,
                    self.lines.max_line_bytes,
                )
                self._untrusted(
                    out, UntrustedMessage(f"over-long line of {line.size} bytes skipped")
                )
                continue
            self._route_line(line, out)
        return out

    def feed_eof(self) -> int:
        """The server's stdout ended; returns the size of a cut last line (0: none)."""
        cut = self.lines.feed_eof()
        if cut is None:
            return 0
        self.counters.cut_lines += 1
        size = cut.size if isinstance(cut, OverlongLine) else len(cut)
        log.debug("the server's output ended in the middle of a %d-byte line", size)
        return size

    def _route_line(self, line: bytes, out: list[Delivery]) -> None:
        if not line.strip():
            return  # a blank line carries nothing
        self.route(decode(line), out)  # the one parser (`freshcache._protocol._client.decode`)

    def route(self, message: Message, out: list[Delivery]) -> None:
        """Route one decoded message (the line layer's output)."""
        counters = self.counters
        match self.protocol.receive(message):
            case ForSubscription(before_ack=early) as got:
                counters.messages += 1
                counters.before_ack += early
                out.append(got)
            case Answer() | ListenAgain() as got:
                counters.messages += 1
                out.append(got)
            case Unclaimed(event=event) as got:
                # A hint for a subscription we do not have: it may still invalidate
                # (invariant 9), so it goes to the engine, with the id it carried.
                counters.messages += 1
                counters.unknown_subscriptions += 1
                log.info("change hint for unknown subscription %r", event.subscription_id)
                target = self._catch_all()
                out.append(got if target is None else ForSubscription(target, event))
            case Untrusted(event=event, why=why):
                if why == "malformed":
                    counters.malformed += 1
                else:
                    counters.messages += 1
                    if why == "server_request":
                        counters.server_requests += 1
                    else:
                        counters.unknown_subscriptions += 1
                log.info("untrusted message from the server: %s", event.detail)
                self._untrusted(out, event)
            case Ignored(why=why):
                counters.messages += 1
                if why == "unknown_response":
                    counters.unknown_responses += 1
                    log.debug("ignored a response for a request no longer in flight: %r", message)
                elif why == "unknown_subscription":
                    counters.unknown_subscriptions += 1

    def _catch_all(self) -> RequestId | None:
        """The subscription that hears about messages no subscription claims."""
        return self.protocol.catch_all()

    def _untrusted(self, out: list[Delivery], event: UntrustedMessage) -> None:
        target = self._catch_all()
        if target is not None:
            out.append(ForSubscription(target, event))


# --------------------------------------------------------------------------- the process


class _Gone(Exception):
    """The process cannot be written to any more."""


@dataclass(slots=True)
class _Waiter:
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Response | ErrorResponse | RequestFailed | None = None
    sent: bool = False
    """The request's first byte may have been written: from then on the server may act
    on it (only a process gone before any write leaves it unsent)."""

    def mark_sent(self) -> None:
        self.sent = True

    def outcome(
        self, method: str, no_answer: Callable[[], RequestFailed]
    ) -> Response | ErrorResponse | RequestFailed:
        """The answer, or why none came: a lost answer once the request was sent."""
        outcome = self.result if self.result is not None else no_answer()
        if self.sent and isinstance(outcome, RequestFailed):
            return lost_answer(method, outcome)  # `freshcache._protocol._reissue`
        return outcome


@dataclass(eq=False, slots=True)
class _Hint:
    """One change hint, handed to the engine once, by whichever consumer takes it first."""

    event: ChangeHint
    number: int
    taken: bool = False


class _Connection:
    """One running server process and what is in flight on it."""

    def __init__(
        self,
        process: anyio.abc.Process,
        max_line_bytes: int,
        counters: StdioCounters,
        protocol: ClientProtocol,
    ) -> None:
        self.process = process
        self.pid = process.pid
        self.protocol = protocol
        self.demux = Demultiplexer(max_line_bytes, counters, protocol)
        self.waiters: dict[IdKey, _Waiter] = {}
        self.inboxes: dict[IdKey, Inbox[StreamEvent | _Hint]] = {}
        self.write_lock = anyio.Lock()
        self.alive = True
        self.healthy = False
        self.lines_at_start = counters.lines
        self.stderr_tail: deque[str] = deque(maxlen=3)
        self.detail = ""
        self.stderr_done = anyio.Event()
        self.tg: anyio.abc.TaskGroup | None = None
        self.handshake: anyio.Event | None = None
        """2025-11-25: set once ``initialize`` was answered here (each process needs its own)."""
        self.legacy_info: ServerInfo | RequestFailed | ProtocolError | None = None

    async def send(
        self, message: Mapping[str, Any], writing: Callable[[], None] | None = None
    ) -> None:
        """Write one line. ``writing`` is called right before its first byte goes out:
        from then on the server may read it, even if this write is cut off midway."""
        if not self.alive or self.process.stdin is None:
            raise _Gone(self.detail or "the server process is gone")
        data = (
            json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
        )
        async with self.write_lock:
            if not self.alive:  # gone while this write waited for the lock: nothing written
                raise _Gone(self.detail or "the server process is gone")
            if writing is not None:
                writing()
            try:
                await self.process.stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise _Gone(f"writing to the server process failed: {exc!r}") from exc

    async def send_quietly(self, message: Mapping[str, Any]) -> None:
        """`send`, when a failure is the connection's end to report (never raises)."""
        with contextlib.suppress(_Gone):
            await self.send(message)

    async def cancel(self, request_id: RequestId, reason: str) -> None:
        """Best effort ``notifications/cancelled``; never raises, never blocks for long."""
        if not self.alive:
            return
        message = cancellation(request_id, reason)
        with anyio.move_on_after(1.0, shield=True), contextlib.suppress(_Gone):
            await self.send(message)


# --------------------------------------------------------------------------- the source


@dataclass(frozen=True, slots=True)
class StdioSettings:
    """A `StdioSource`'s command and limits, checked once (see `StdioSource`)."""

    command: list[str]
    env: dict[str, str] | None
    cwd: str | os.PathLike[str] | None
    timeout: float
    max_line_bytes: int
    max_backlog: int
    shutdown_timeout: float
    name: str
    """The server's stable name in cache keys: ``stdio:`` and the command line."""
    label: str
    """The name shortened for log lines."""

    @classmethod
    def checked(
        cls,
        command: Sequence[str],
        env: Mapping[str, str] | None,
        cwd: str | os.PathLike[str] | None,
        timeout: float,
        max_line_bytes: int,
        max_backlog: int,
        shutdown_timeout: float,
        name: str | None,
    ) -> StdioSettings:
        if isinstance(command, (str, bytes)):
            raise ConfigurationError(
                "command takes an argument list like ['python', '-m', 'server'], got the "
                f"string {command!r}; split it, e.g. with shlex.split"
            )
        argv = list(command)
        if not argv or not all(isinstance(a, str) and a for a in argv):
            raise ConfigurationError(
                f"command must be a non-empty list of non-empty strings, got {command!r}"
            )
        for label, value in (("timeout", timeout), ("shutdown_timeout", shutdown_timeout)):
            if not isinstance(value, (int, float)) or math.isnan(value) or value <= 0:
                raise ConfigurationError(
                    f"StdioSource {label} must be a number of seconds > 0, got {value!r}"
                )
        if not isinstance(max_line_bytes, int) or max_line_bytes < 1024:
            raise ConfigurationError(
                f"StdioSource max_line_bytes must be an int >= 1024, got {max_line_bytes!r}"
            )
        if not isinstance(max_backlog, int) or max_backlog < 1:
            raise ConfigurationError(
                f"StdioSource max_backlog must be an int >= 1, got {max_backlog!r}"
            )
        return cls(
            command=argv,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            timeout=float(timeout),
            max_line_bytes=max_line_bytes,
            max_backlog=max_backlog,
            shutdown_timeout=float(shutdown_timeout),
            name=name or "stdio:" + shlex.join(argv),
            label=_shorten(name or shlex.join(argv), 60),
        )


@dataclass(frozen=True, slots=True)
class StdioStats:
    """A snapshot of a `StdioSource`, for status output and tests."""

    pid: int | None
    """The running server process, or ``None`` between processes."""
    lines_from_current: int
    """Complete lines read from the current process."""
    backlog: int
    """Subscription messages read but not yet taken by their consumers."""
    in_flight: int
    open_subscriptions: int
    counters: StdioCounters


def _stats_of(conn: _Connection | None, counters: StdioCounters) -> StdioStats:
    live = conn is not None and conn.alive
    return StdioStats(
        pid=conn.pid if live and conn is not None else None,
        lines_from_current=counters.lines - conn.lines_at_start if live and conn is not None else 0,
        backlog=sum(len(i.items) for i in conn.inboxes.values()) if conn is not None else 0,
        in_flight=len(conn.waiters) if conn is not None else 0,
        open_subscriptions=len(conn.inboxes) if conn is not None else 0,
        counters=counters,
    )


class StdioSource(SpeaksClientProtocol):
    """A `Source` that runs an MCP server as a subprocess and talks to it over stdio.

    ::

        StdioSource(["python", "-m", "my_server"])

    ``env`` replaces the child's environment (default: the caller's whole
    environment); ``timeout`` bounds each request (a listen waits for its
    acknowledgment under the cache's ``ack_timeout`` instead); ``restart`` paces
    restarts after an unexpected exit (default `BackoffSettings`); ``identity`` is
    what freshcache says about itself in every request's ``_meta`` (not to be confused
    with the `identity` property, the server's name in cache keys).
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 30.0,
        max_line_bytes: int = 32 * 1024 * 1024,
        max_backlog: int = 10_000,
        restart: BackoffSettings | None = None,
        shutdown_timeout: float = 2.0,
        denial: DenialRules | None = None,
        identity: ClientIdentity | None = None,
        name: str | None = None,
    ) -> None:
        self.settings = settings = StdioSettings.checked(
            command, env, cwd, timeout, max_line_bytes, max_backlog, shutdown_timeout, name
        )
        """The command and its limits, checked; the process supervisor reads them here."""
        self.command = settings.command
        self.env = settings.env
        self.cwd = settings.cwd
        self.timeout = settings.timeout
        self.max_line_bytes = settings.max_line_bytes
        self.max_backlog = settings.max_backlog
        self._in_order = InOrder()
        self.shutdown_timeout = settings.shutdown_timeout
        self.denial = denial if denial is not None else DenialRules()
        self.client = identity if identity is not None else ClientIdentity()
        self.counters = StdioCounters()
        self._name = settings.name
        self._label = settings.label
        self._ids = itertools.count(1)
        self.protocol = ClientProtocol(self._name, identity=self.client, denial=self.denial)
        """The MCP rules; this class only moves messages in and out of it."""
        self._process = _Supervisor(
            settings, self.counters, self.protocol, self._hold, ReconnectBudget(restart)
        )
        """The server process and its restarts."""
        self._negotiation = Negotiation(self.start)
        """Which revision to speak: requests wait while `start` decides it."""
        self._hints: dict[int, _Hint] = {}
        """Change hints no consumer has taken yet, oldest first (module docstring)."""
        self._hint_numbers = itertools.count()

    # ------------------------------------------------------------------ Source

    @property
    def identity(self) -> str:
        """The server's stable name in cache keys: ``stdio:`` and the command line."""
        return self._name

    @property
    def protocol_version(self) -> str:
        """The version sent in ``_meta``; changed by ``-32022`` negotiation."""
        return self.protocol.version

    @property
    def pid(self) -> int | None:
        """The running server process id, or ``None`` between processes."""
        conn = self._process.conn
        return conn.pid if conn is not None and conn.alive else None

    def stats(self) -> StdioStats:
        """What the source is doing right now (no I/O)."""
        return _stats_of(self._process.conn, self.counters)

    async def start(self) -> ServerInfo:
        """Start the server process (if it is not running) and probe it with ``server/discover``.

        Never raises because the server cannot be started or reached: that is
        ``reachable=False`` with the reason in ``detail``. Raises
        `UnsupportedVersionError` when the server answers that it does not speak
        2026-07-28 at all.
        """
        with self._negotiation.running() as negotiation:
            answer = await self._call("server/discover", {}, self.timeout)
            # (-32022 never gets here: `_call` renegotiates or raises.)
            if not self.protocol.discover_declined(answer):
                outcome = answer.result if isinstance(answer, Response) else answer
                negotiation.settled(discovery_unanswered(outcome))
                return self.protocol.server_info(outcome)
            # 2025-11-25 (an error, or a result naming no revision): initialize on this
            # process (and on every restarted one: `_call`).
            declined = (
                f"{answer.message} ({answer.code})"
                if isinstance(answer, ErrorResponse)
                else f"result {getattr(answer, 'result', answer)!r}"
            )
            self.protocol.initialize()
            negotiation.settled()  # 2025 from now on (this process initialized next)
            conn = await self._process.connection(self.timeout, wait_for_restart=False)
            if conn is None:
                return ServerInfo(reachable=False, detail=self._process.down_detail())
            ready = await self._initialize(conn, self.timeout)
            if isinstance(ready, RequestFailed):
                return ServerInfo(
                    reachable=ready.kind not in ("unreachable", "timeout"),
                    detail=f"server/discover declined ({declined}); "
                    f"initialize: {ready.kind}: {ready.detail}",
                )
            return ready

    async def _initialize(self, conn: _Connection, limit: float) -> ServerInfo | RequestFailed:
        """``conn`` answered ``initialize`` (2025-11-25), waiting at most ``limit`` seconds.

        The handshake itself runs in the connection's task group, bounded by
        `HANDSHAKE_TIMEOUT`, not by the caller's deadline: a restarted interpreter may
        take longer to answer than one read may wait, and every later request, and the
        subscribes, need it. Raises `ProtocolError` when the process refused it."""
        if conn.handshake is None:
            conn.handshake = anyio.Event()
            if conn.tg is not None:
                conn.tg.start_soon(_handshake, conn, self.protocol, self._exchange)
            else:
                await _handshake(conn, self.protocol, self._exchange)
        with anyio.move_on_after(limit):
            await conn.handshake.wait()
        outcome = conn.legacy_info
        if isinstance(outcome, ProtocolError):
            raise outcome
        if outcome is None:
            return _no_answer(conn, "initialize", limit)
        return outcome

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        """One ``resources/read`` (``requestState`` rounds included). stdio has one
        authorization context per process: ``principal`` only partitions the cache,
        it is not sent. The reply carries the change hints no one took yet."""
        rounds = self.protocol.read_rounds(uri)
        while True:
            answer = await self._call("resources/read", rounds.params, self.timeout)
            outcome = self._outcome("resources/read", answer)
            reply = outcome if isinstance(outcome, RequestFailed) else rounds.take(outcome)
            if reply is not None:
                hints = self._take_hints()
                return replace(reply, hints=reply.hints + hints) if hints else reply

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        """One page of ``resources/list`` (with the change hints no one took yet)."""
        return await self._page("resources/list", cursor, list_reply)

    async def list_catalog(
        self, kind: CatalogKind, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        """One page of a catalog (``tools/list``, ...), with the hints no one took yet."""
        parse = partial(catalog_reply, kind, hintless=self.protocol.legacy is not None)
        return await self._page(CATALOG_METHODS[kind], cursor, parse)

    async def _page(
        self, method: str, cursor: str | None, parse: Callable[[Any], ListReply | RequestFailed]
    ) -> ListReply | RequestFailed:
        params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        outcome = self._outcome(method, await self._call(method, params, self.timeout))
        page = outcome if isinstance(outcome, RequestFailed) else parse(outcome)
        hints = self._take_hints()
        return replace(page, hints=page.hints + hints) if hints else page

    def _outcome(
        self, method: str, answer: Response | ErrorResponse | RequestFailed
    ) -> dict[str, Any] | RequestFailed:
        if isinstance(answer, RequestFailed):
            return answer
        outcome = self.protocol.answer(method, answer, retried=True)
        assert not isinstance(outcome, Renegotiate)  # `_call` renegotiated already
        return outcome

    def _take_hints(self) -> tuple[StreamEvent, ...]:
        """Every hint no consumer took yet, for the reply being returned; taken now."""
        held = tuple(self._hints.values())
        self._hints.clear()
        for hint in held:
            hint.taken = True
        return tuple(hint.event for hint in held)

    def _hold(self, event: ChangeHint) -> _Hint:
        if len(self._hints) >= self.max_backlog:
            del self._hints[next(iter(self._hints))]
            self.counters.hints_dropped += 1
            log.warning("more than %d change hints not taken; dropped one", self.max_backlog)
        hint = _Hint(event, next(self._hint_numbers))
        self._hints[hint.number] = hint
        return hint

    async def listen(
        self, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """One ``subscriptions/listen`` on the shared channel (see `Source.listen`);
        closing the iterator early sends ``notifications/cancelled`` naming its id."""
        self._process.ensure_service()
        sid = f"listen-{next(self._ids)}"
        unsettled = await self._negotiation.before("subscriptions/listen", self.timeout)
        conn = None
        if unsettled is None:
            conn = await self._process.connection(self.timeout, wait_for_restart=True)
        yield ListenStarted(sid, uris, list_changed)
        if conn is None:
            yield StreamLost(sid, unsettled.detail if unsettled else self._process.down_detail())
            return
        key = id_key(sid)
        inbox = Inbox[StreamEvent | _Hint](self.max_backlog)
        conn.inboxes[key] = inbox
        legacy = self.protocol.legacy is not None
        if not conn.alive:  # it died while ListenStarted was being taken in
            inbox.put(StreamLost(sid, conn.detail or self._process.down_detail()), final=True)
        ended = False
        try:
            if legacy:
                await self._subscribe(conn, sid, uris, list_changed, inbox)
            else:
                request = self.protocol.listen(sid, uris, list_changed)
                # If writing fails, the connection's end has put StreamLost in the inbox.
                with contextlib.suppress(_Gone):
                    await conn.send(request.message)
            while True:
                item = await inbox.get()
                if isinstance(item, _Hint):
                    if item.taken:
                        continue  # a reply carried it already
                    item.taken = True
                    self._hints.pop(item.number, None)
                    event: StreamEvent = item.event
                else:
                    event = item
                ended = isinstance(event, _FINAL_EVENTS)
                yield event
                if ended:
                    return
        finally:
            conn.inboxes.pop(key, None)
            if legacy:
                await self._unsubscribe(conn, sid)
            elif not ended and conn.alive:
                conn.demux.close_subscription(sid)
                await conn.cancel(sid, "the client closed the subscription")

    async def _subscribe(
        self,
        conn: _Connection,
        sid: str,
        uris: frozenset[str],
        list_changed: bool,
        inbox: Inbox[StreamEvent | _Hint],
    ) -> None:
        """2025-11-25: a virtual subscription; ``resources/subscribe`` what it still needs,
        then its acknowledgment (what subscribed, on this process)."""
        # Open first, so what the process says before the subscribes is claimed (and
        # counted as before the acknowledgment); like a listen, wait for a (re)started
        # process to answer initialize.
        self.protocol.open_subscription(sid, uris, list_changed)
        with contextlib.suppress(ProtocolError):  # then the subscribes fail: uncovered
            await self._initialize(conn, HANDSHAKE_TIMEOUT)
        session = self.protocol.legacy
        needed = self.protocol.legacy_listen(sid, uris, list_changed)
        assert session is not None  # (in the order recorded: freshcache._sources._subscribing)
        await self._in_order.subscribe(
            session, uris, needed, self._legacy_call("resources/subscribe"), self.timeout
        )
        ack = self.protocol.acknowledge(sid)
        if ack is not None and conn.alive and not inbox.put(ack):
            inbox.put(overflowed(sid, inbox.limit), final=True)

    async def _unsubscribe(self, conn: _Connection, sid: str) -> None:
        gone = self.protocol.legacy_close(sid)
        session = self.protocol.legacy
        if session is None:
            return
        if conn.alive:
            call = self._legacy_call("resources/unsubscribe")
            with anyio.move_on_after(self.timeout, shield=True):
                for uri in gone:
                    await self._in_order.send(session, uri, UNSUBSCRIBE, call, self.timeout)
        self._in_order.abandon(session, gone, UNSUBSCRIBE)  # not sent, or cut off

    def _legacy_call(self, method: str) -> Call:
        async def call(uri: str) -> bool | None:
            answer = await self._call(method, {"uri": uri}, self.timeout)
            if isinstance(answer, RequestFailed):
                return None if answer.kind in ("timeout", "unreachable") else False
            return isinstance(answer, Response)

        return call

    async def aclose(self) -> None:
        """Stop the server: close its stdin, wait, then SIGTERM, then SIGKILL (each
        step bounded by ``shutdown_timeout``), and stop the service task."""
        await self._process.stop()

    async def forward(
        self, method: str, params: Mapping[str, Any], principal: Partition
    ) -> ToolReply | RequestFailed:
        """`Source.forward` (``tools/call`` too): one request, never re-issued."""
        answer = await self._call(method, dict(params), self.timeout)
        return tool_answer(self._outcome(method, answer), self._take_hints())

    # ------------------------------------------------------------------ escape hatch

    async def send_request(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> Response | ErrorResponse | RequestFailed:
        """Any other request on the channel, with ``_meta``: its answer or `RequestFailed`."""
        return await self._call(
            method, dict(params or {}), self.timeout if timeout is None else timeout
        )

    # ------------------------------------------------------------------ requests

    async def _call(
        self, method: str, params: dict[str, Any], timeout: float
    ) -> Response | ErrorResponse | RequestFailed:
        self._process.ensure_service()
        deadline = anyio.current_time() + timeout
        if (unsettled := await self._negotiation.before(method, timeout)) is not None:
            return unsettled  # (2025 wants initialize first: never guess the revision)
        conn = await self._process.connection(timeout, wait_for_restart=False)
        if conn is None:
            return RequestFailed("unreachable", self._process.down_detail())
        if self.protocol.legacy is not None and not isinstance(conn.legacy_info, ServerInfo):
            ready = await self._initialize(conn, max(0.0, deadline - anyio.current_time()))
            if isinstance(ready, RequestFailed):
                return ready
        if not conn.healthy and not may_reissue(method):  # `_no_answer`: it may exit unread
            # so a `ping` first (any answer will do): a call it never read is not lost.
            alive = await self._exchange(conn, "ping", {}, deadline, timeout)
            if isinstance(alive, RequestFailed):
                return replace(alive, lost=False)  # the call itself was never written
        renegotiated = False
        while True:
            answer = await self._exchange(conn, method, params, deadline, timeout)
            # -32022: the protocol's rule, as on HTTP (raises when no version is common).
            if self.protocol.renegotiation(method, answer, retried=renegotiated) is None:
                return answer
            renegotiated = True

    async def _exchange(
        self,
        conn: _Connection,
        method: str,
        params: dict[str, Any],
        deadline: float,
        timeout: float,
    ) -> Response | ErrorResponse | RequestFailed:
        """One request and its answer on ``conn``, by ``deadline``."""
        rid = next(self._ids)
        key = id_key(rid)
        waiter = _Waiter()
        conn.waiters[key] = waiter
        annotate_request(rid, transport="pipe")  # the current span, if one is recording
        request = self.protocol.request(rid, method, params)
        try:
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                try:
                    # sent from its first byte on (`_Waiter.sent`), even if cut off midway
                    await conn.send(request.message, waiter.mark_sent)
                except _Gone as exc:
                    if waiter.result is None:
                        waiter.result = RequestFailed("unreachable", conn.detail or str(exc))
                else:
                    await waiter.done.wait()
            return waiter.outcome(method, lambda: _no_answer(conn, method, timeout))
        finally:
            if not isinstance(waiter.result, (Response, ErrorResponse)):
                conn.waiters.pop(key, None)
                conn.demux.forget_request(rid)
                if conn.alive and waiter.result is None and conn.tg is not None:
                    # Timed out or abandoned: tell the server (spec cancellation: SHOULD),
                    # in the background: a server not reading its stdin would hold the
                    # caller past its deadline.
                    conn.tg.start_soon(conn.cancel, rid, "the client stopped waiting")


class _Supervisor:
    """Keeps one server process of a `StdioSource` running (module docstring): the
    service task, starting, reading, restarting with backoff, stopping."""

    def __init__(
        self,
        settings: StdioSettings,
        counters: StdioCounters,
        protocol: ClientProtocol,
        hold: Callable[[ChangeHint], _Hint],
        budget: ReconnectBudget,
    ) -> None:
        self.settings = settings
        self.counters = counters
        self.protocol = protocol
        self._hold = hold
        self._budget = budget
        self.conn: _Connection | None = None
        self._pending = False
        """A start attempt is under way, or a lost process's restart is being decided."""
        self._spawn_failed = False
        self._next_attempt_at: float | None = None
        self._why_down = "the server process has not been started yet"
        self._changed = anyio.Event()
        self._service = BackgroundTask(f"StdioSource {self.settings.label}", self._serve)
        self._closing = False

    async def stop(self) -> None:
        first = not self._closing
        self._closing = True
        with anyio.CancelScope(shield=True):
            conn = self.conn
            if first and conn is not None:
                self._why_down = "the source was closed"
                await self._stop_process(conn, close_stdin=True)
            await self._service.stop(timeout=self.settings.shutdown_timeout * 3)
        self._notify_changed()

    async def connection(self, limit: float, *, wait_for_restart: bool) -> _Connection | None:
        """The live connection, or ``None`` when the server is not running.

        Waits (up to ``limit`` seconds) for a start attempt under way; with
        ``wait_for_restart`` also for a restart due within ``limit``. A command that
        cannot be started at all is reported at once.
        """
        deadline = anyio.current_time() + limit
        while True:
            conn = self.conn
            if conn is not None and conn.alive:
                return conn
            if self._closing:
                return None
            if not self._pending:
                due = self._next_attempt_at
                if not wait_for_restart or self._spawn_failed or due is None or due > deadline:
                    return None
            changed = self._changed
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())) as waited:
                await changed.wait()
            if waited.cancelled_caught:
                conn = self.conn
                return conn if conn is not None and conn.alive else None

    def down_detail(self) -> str:
        detail = self._why_down
        due = self._next_attempt_at
        if self._closing:
            return detail
        if due is not None:
            wait = max(0.0, due - anyio.current_time())
            spent = " (restart budget spent)" if self._budget.exhausted else ""
            detail += f"; next start in {wait:.2f}s{spent}"
        return detail

    def _notify_changed(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    def ensure_service(self) -> None:
        if self._service.started or self._closing:
            return
        self._pending = True  # the service starts the first process at once
        self._service.start()

    async def _serve(self) -> None:
        """The service task: keep one server process running until `aclose`."""
        try:
            while not self._closing:
                self._pending = True
                conn = await self._spawn()
                if conn is None:
                    delay = self._budget.delay_after_failure()
                else:
                    self._pending = False
                    self._notify_changed()
                    await self._run(conn)
                    if self._closing:
                        break
                    self.counters.unexpected_exits += 1
                    delay = (
                        self._budget.delay_after_end(anyio.current_time())
                        if conn.healthy
                        else self._budget.delay_after_failure()
                    )
                self._next_attempt_at = anyio.current_time() + delay
                self._pending = False
                log.warning(
                    "stdio server %s: %s; starting it again in %.2fs",
                    self.settings.label,
                    self._why_down,
                    delay,
                )
                self._notify_changed()
                await anyio.sleep(delay)
        finally:
            # Whatever ended the service (aclose, the event loop closing, a bug), no
            # process will be started any more.
            if not self._closing:
                self._closing = True
                self._why_down = "the stdio source stopped"
            self._pending = False
            conn = self.conn
            if conn is not None and conn.alive:
                with anyio.CancelScope(shield=True):
                    await self._stop_process(conn, close_stdin=True)
                    self._lost(conn)
                    with anyio.move_on_after(self.settings.shutdown_timeout):
                        await conn.process.aclose()
            self._notify_changed()

    async def _spawn(self) -> _Connection | None:
        settings = self.settings
        command = settings.command
        try:
            process = await anyio.open_process(
                command, env=settings.env, cwd=settings.cwd, start_new_session=True
            )
        except FileNotFoundError as exc:
            reason = (
                f"{command[0]!r} was not found ({exc.strerror}); check the command and PATH"
                if exc.filename in (None, command[0])
                else str(exc)
            )
            return self._spawn_failure(f"cannot start the stdio server: {reason}")
        except PermissionError as exc:
            return self._spawn_failure(
                f"cannot start the stdio server: {command[0]!r} is not executable ({exc.strerror})"
            )
        except OSError as exc:
            return self._spawn_failure(f"cannot start the stdio server {command!r}: {exc}")
        self._spawn_failed = False
        self.counters.starts += 1
        conn = _Connection(process, settings.max_line_bytes, self.counters, self.protocol)
        self.conn = conn
        self._next_attempt_at = None
        log.info("started stdio server %s (pid %d)", settings.label, conn.pid)
        return conn

    def _spawn_failure(self, detail: str) -> _Connection | None:
        self._spawn_failed = True
        self._why_down = detail
        log.error("%s", detail)
        return None

    async def _run(self, conn: _Connection) -> None:
        """Serve ``conn`` until its process is gone, then fail over what was in flight."""
        try:
            async with anyio.create_task_group() as tg:
                conn.tg = tg
                tg.start_soon(self._drain_stderr, conn)
                tg.start_soon(self._watch_exit, conn, tg.cancel_scope)
                await self._read_stdout(conn)
                # stdout ended: the process is leaving. Give it a moment, then make sure.
                with anyio.move_on_after(self.settings.shutdown_timeout):
                    await conn.process.wait()
                if conn.process.returncode is None:
                    await self._stop_process(conn, close_stdin=True)
                # Its last stderr lines explain the exit: let them be read first.
                with anyio.move_on_after(0.2):
                    await conn.stderr_done.wait()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                self._lost(conn)
                with anyio.move_on_after(self.settings.shutdown_timeout):
                    await conn.process.aclose()

    async def _read_stdout(self, conn: _Connection) -> None:
        stdout = conn.process.stdout
        assert stdout is not None
        while True:
            try:
                chunk = await stdout.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                break
            self._deliver(conn, conn.demux.feed(chunk))
            # Receiving buffered data does not yield; let consumers drain between chunks.
            await anyio.lowlevel.checkpoint()
        cut = conn.demux.feed_eof()
        if cut:
            conn.detail = f"(its last line was cut off after {cut} bytes)"

    def _deliver(self, conn: _Connection, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            if not conn.healthy and (
                isinstance(delivery, (Answer, Unclaimed, ListenAgain))
                or not isinstance(delivery.event, UntrustedMessage)
            ):
                # The process speaks the protocol: a later exit is a death, not a failed start.
                conn.healthy = True
                self._budget.acknowledged(anyio.current_time())
            match delivery:
                case Answer(request_id=rid, message=message):
                    waiter = conn.waiters.pop(id_key(rid), None)
                    if waiter is not None:
                        waiter.result = message
                        waiter.done.set()
                case Unclaimed(event=event):
                    self._hold(event)
                case ListenAgain(subscription_id=sid, outgoing=outgoing, reason=reason):
                    # -32022 on a listen: the same listen again, in the new version (as
                    # on HTTP); if the write fails, the connection's end loses it.
                    if conn.tg is not None:
                        conn.tg.start_soon(conn.send_quietly, outgoing.message)
                        continue
                    # Nothing can send it: a listen that silently never went out would
                    # leave the subscription open with nothing listening. It is lost.
                    conn.demux.close_subscription(sid)
                    lost = conn.inboxes.get(id_key(sid))
                    if lost is not None:
                        lost.put(
                            StreamLost(sid, f"{reason}; the listen could not be sent again"),
                            final=True,
                        )
                case ForSubscription(subscription_id=sid, event=event, final=final):
                    item: StreamEvent | _Hint = event
                    if isinstance(
                        event, (ResourceUpdated, ResourceListChanged, CatalogListChanged)
                    ):
                        item = self._hold(event)
                    inbox = conn.inboxes.get(id_key(sid))
                    if inbox is None:
                        continue
                    if inbox.put(item, final=final):
                        continue
                    # The consumer fell too far behind: end the subscription as a loss
                    # (safe: a loss invalidates and re-listens), and tell the server.
                    self.counters.overflows += 1
                    conn.demux.close_subscription(sid)
                    inbox.put(overflowed(sid, inbox.limit), final=True)
                    log.warning(
                        "subscription %r fell %d messages behind; ended it", sid, inbox.limit
                    )
                    if conn.tg is not None:
                        conn.tg.start_soon(conn.cancel, sid, "the client could not keep up")

    async def _drain_stderr(self, conn: _Connection) -> None:
        stderr = conn.process.stderr
        if stderr is None:
            conn.stderr_done.set()
            return
        lines = LineBuffer(_STDERR_LINE_LIMIT)
        pid = conn.pid
        while True:
            try:
                chunk = await stderr.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                break
            for line in lines.feed(chunk):
                self._log_stderr(conn, pid, line)
        rest = lines.feed_eof()
        if rest is not None:
            self._log_stderr(conn, pid, rest)
        conn.stderr_done.set()

    def _log_stderr(self, conn: _Connection, pid: int, line: bytes | OverlongLine) -> None:
        if isinstance(line, OverlongLine):
            text = f"<{line.size}-byte line>"
        else:
            text = line.decode("utf-8", errors="replace").rstrip()
            if not text:
                return
        conn.stderr_tail.append(text[:500])
        log.info("[%s pid %d] %s", self.settings.label, pid, text)

    async def _watch_exit(self, conn: _Connection, scope: anyio.CancelScope) -> None:
        await conn.process.wait()
        # stdout normally ends with the process; a grandchild holding it open must
        # not keep the connection alive.
        await anyio.sleep(max(1.0, self.settings.shutdown_timeout))
        scope.cancel()

    def _lost(self, conn: _Connection) -> None:
        if not conn.alive:
            return
        conn.alive = False
        if self.conn is conn:
            self.conn = None
        code = conn.process.returncode
        # 2025: a process that exited 0 after a whole last line ended its session on purpose.
        clean = code == 0 and not conn.detail and not self._closing
        if self._closing:
            detail = "the source was closed"
        else:
            if code is None:
                detail = f"the server process {conn.pid} closed its output"
            elif code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = str(-code)
                detail = f"the server process {conn.pid} was killed by {name}"
            else:
                detail = f"the server process {conn.pid} exited with code {code}"
            if conn.detail:
                detail += f" {conn.detail}"
            if conn.stderr_tail:
                detail += f"; its last stderr line: {conn.stderr_tail[-1]!r}"
        conn.detail = detail
        self._why_down = detail
        if not self._closing:
            self._pending = True  # the service decides when to start the next process
        for waiter in conn.waiters.values():
            if waiter.result is None:
                waiter.result = RequestFailed("unreachable", detail)
                waiter.done.set()
        conn.waiters.clear()
        for ended in self.protocol.channel_ended(detail, graceful=clean):
            inbox = conn.inboxes.get(id_key(ended.subscription_id))
            if inbox is not None:
                inbox.put(ended.event, final=True)
        self._notify_changed()

    async def _stop_process(self, conn: _Connection, *, close_stdin: bool) -> None:
        """stdio shutdown: close stdin, wait, SIGTERM, wait, SIGKILL (spec: transports/stdio)."""
        process = conn.process
        with anyio.CancelScope(shield=True):
            if close_stdin and process.stdin is not None:
                # Not under the write lock: a writer stuck on a full pipe must not
                # keep the process from being stopped.
                with contextlib.suppress(
                    OSError, anyio.BrokenResourceError, anyio.ClosedResourceError
                ):
                    await process.stdin.aclose()
            for step in (None, signal.SIGTERM, _SIGKILL):
                if process.returncode is not None:
                    return
                if step is not None:
                    try:
                        process.send_signal(step)
                    except ProcessLookupError:
                        return
                    log.warning(
                        "stdio server %s (pid %d) did not exit; sent %s",
                        self.settings.label,
                        conn.pid,
                        step.name,
                    )
                with anyio.move_on_after(self.settings.shutdown_timeout):
                    await process.wait()


async def _handshake(
    conn: _Connection,
    protocol: ClientProtocol,
    exchange: Callable[
        [_Connection, str, dict[str, Any], float, float],
        Awaitable[Response | ErrorResponse | RequestFailed],
    ],
) -> None:
    """``initialize`` on ``conn`` (2025-11-25), bounded by `HANDSHAKE_TIMEOUT`: its
    outcome in ``conn.legacy_info``, then ``conn.handshake`` set."""
    done = conn.handshake
    assert done is not None
    params = protocol.initialize()
    started = anyio.current_time()
    answer = await exchange(
        conn, "initialize", params, started + HANDSHAKE_TIMEOUT, HANDSHAKE_TIMEOUT
    )
    if isinstance(answer, RequestFailed):
        conn.legacy_info = answer
    else:
        try:  # the protocol's outcome of initialize, the same as on HTTP
            conn.legacy_info = protocol.initialize_answer(answer)
        except ProtocolError as exc:
            conn.legacy_info = exc
        if isinstance(conn.legacy_info, ServerInfo):
            with contextlib.suppress(_Gone):
                await conn.send(protocol.initialized_notification())
    if isinstance(conn.legacy_info, RequestFailed):
        conn.handshake = None  # the next request tries again
    done.set()


def _no_answer(conn: _Connection, method: str, waited: float) -> RequestFailed:
    """``method`` got no answer within ``waited`` seconds: a ``timeout``, unless the
    process has said nothing at all yet. Such a process is not reached: it may be an
    interpreter still starting, or one about to exit (a server that is down)."""
    detail = f"{method} got no answer within {waited:g}s"
    if conn.healthy:
        return RequestFailed("timeout", detail)
    return RequestFailed(
        "unreachable",
        f"{detail}: the server process {conn.pid} has not answered anything since it started",
    )


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


__all__ = [
    "Demultiplexer",
    "LineBuffer",
    "OverlongLine",
    "StdioCounters",
    "StdioSettings",
    "StdioSource",
    "StdioStats",
]
