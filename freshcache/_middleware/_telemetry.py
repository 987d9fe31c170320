"""OpenTelemetry for freshcache: spans, span events and metrics (issue 6).

Only ``opentelemetry-api`` is required; without an SDK everything is a no-op. The
tracer and meter come from the provider arguments or, when those are ``None``, from
the global providers *at call time* (the API's proxy objects follow a provider that
is installed later), never at import.

Names follow the OpenTelemetry semantic conventions for MCP (Development status):
client spans are named ``{mcp.method.name}`` (no URI in the name: high cardinality)
and carry ``mcp.method.name``, ``mcp.resource.uri``, ``mcp.protocol.version``,
``jsonrpc.request.id``, ``error.type``, ``network.transport``, ``server.address`` and
``server.port``; the duration histogram is ``mcp.client.operation.duration``. A tool
call's span is ``tools/call {gen_ai.tool.name}`` with ``gen_ai.operation.name =
execute_tool`` and ``error.type = tool_error`` for an ``isError`` answer. No metric
carries an unbounded value (a URI, a request id). What the conventions do not cover —
freshness — lives under ``freshcache.*``.

W3C trace context reaches the server in each request's ``params._meta``
(``traceparent``, ``tracestate``), as MCP 2026-07-28 reserves those keys (`_wire.build_request`
puts them there).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.metrics import _internal as _metrics_api
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace import propagation as trace_propagation

from .._core import Invalidation, ReadResult, RequestFailed

log = logging.getLogger("freshcache.telemetry")
"""Debug lines for what the spans record (``freshcache -vv`` shows them): requests,
invalidations, fresh again, re-listens. Never on the hit path."""

SCOPE = "freshcache"

# Semantic-convention attribute names (MCP, JSON-RPC, network, error).
MCP_METHOD_NAME = "mcp.method.name"
MCP_RESOURCE_URI = "mcp.resource.uri"
MCP_PROTOCOL_VERSION = "mcp.protocol.version"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
ERROR_TYPE = "error.type"
NETWORK_TRANSPORT = "network.transport"
NETWORK_PROTOCOL_NAME = "network.protocol.name"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
RPC_RESPONSE_STATUS_CODE = "rpc.response.status_code"
MCP_CLIENT_OPERATION_DURATION = "mcp.client.operation.duration"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
EXECUTE_TOOL = "execute_tool"
TOOL_ERROR = "tool_error"
"""``error.type`` of a ``tools/call`` answered with ``isError``."""

# freshcache's own names.
READ_SPAN = "freshcache.read"
STATE = "freshcache.state"
REASON = "freshcache.reason"
VERSION = "freshcache.version"
SERVER_READ = "freshcache.server_read"
AGE = "freshcache.age_s"
CAUSE = "freshcache.cause"
SUBSCRIPTION_ID = "freshcache.subscription_id"
TRUSTED = "freshcache.trusted"
HITS = "freshcache.hits"
"""How many plain fresh hits a ``freshcache.read`` span stands for (``trace_hits``)."""

HIT_SPAN_INTERVAL = 1.0
"""Seconds from a traced hit until the span that records it is made, at most."""
MAX_PENDING_HITS = 1024
"""Parent span and result pairs whose traced hits wait for their span, at most."""


def annotate_request(
    request_id: str | int,
    *,
    transport: str,
    address: str | None = None,
    port: int | None = None,
    protocol: str | None = None,
) -> None:
    """Sources call this when they send a request: it decorates the current span."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute(JSONRPC_REQUEST_ID, str(request_id))
    span.set_attribute(NETWORK_TRANSPORT, transport)
    if protocol is not None:
        span.set_attribute(NETWORK_PROTOCOL_NAME, protocol)
    if address is not None:
        span.set_attribute(SERVER_ADDRESS, address)
    if port is not None:
        span.set_attribute(SERVER_PORT, port)


@dataclass(slots=True)
class _Counts:
    """Plain counters the observable instruments report; cheap to bump on hot paths."""

    hits: int = 0
    reads: dict[tuple[str, str, bool], int] = field(default_factory=dict)


class Telemetry:
    """Spans and metrics of one `FreshCache`."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        trace_hits: bool = False,
        protocol_version: str = "2026-07-28",
    ) -> None:
        self.trace_hits = trace_hits
        """Also record plain fresh hits on spans, one per parent span, URI and version
        (`traced_hit`; off by default: the hit path is hot)."""
        self.metering = meter_provider is not None or _global_meter_provider_set()
        """Whether anyone reads the metrics: fresh hits are counted only then."""
        self.protocol_version = protocol_version
        self._live = tracer_provider is not None or meter_provider is not None
        self._tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.counts = _Counts()
        self._entries: Any = None
        self._duration = meter.create_histogram(
            MCP_CLIENT_OPERATION_DURATION,
            unit="s",
            description="Duration of an MCP request as the client saw it",
        )
        self._invalidations = meter.create_counter(
            "freshcache.invalidations", unit="{invalidation}", description="Invalidations by cause"
        )
        self._server_reads = meter.create_counter(
            "freshcache.server_reads", unit="{read}", description="resources/read sent, by cause"
        )
        self._relistens = meter.create_counter(
            "freshcache.relistens", unit="{stream}", description="subscriptions/listen by outcome"
        )
        self._to_fresh = meter.create_histogram(
            "freshcache.invalidation_to_fresh",
            unit="s",
            description="Time from an invalidation of a URI until it was fresh again",
        )
        meter.create_observable_counter(
            "freshcache.reads",
            callbacks=[self._observe_reads],
            unit="{read}",
            description="Reads handed out, by state, reason and whether the server was read",
        )
        self._store_callbacks: list[Any] = []
        meter.create_observable_gauge(
            "freshcache.store.entries", callbacks=[self._observe_entries], unit="{entry}"
        )
        meter.create_observable_gauge(
            "freshcache.store.bytes", callbacks=[self._observe_bytes], unit="By"
        )
        self._invalidated_at: dict[str, float] = {}
        self._pending_hits: dict[tuple[int, int], list[Any]] = {}
        """Traced hits whose span is not made yet, by parent span and result: [count,
        first and last hit's wall-clock time, parent span, result] (see `traced_hit`)."""
        self._hit_timer: asyncio.TimerHandle | None = None

    def live(self) -> bool:
        """Whether anything records spans or metrics: a provider was given, or an SDK
        provider is installed globally (asked at call time, until one shows up).

        With neither, every span and instrument of the API is a no-op that still costs
        a context attach, a generator and a few calls per server read; the re-read
        path takes the quiet way instead (`request`, `invalidated`, `fresh_again`).
        A provider installed later is seen at the next call, as the API's proxies do.
        Debug logging of ``freshcache.telemetry`` counts as recording too.
        """
        if self._live:
            return True
        if (
            _GLOBALS_READABLE
            and trace._TRACER_PROVIDER is None
            and _metrics_api._METER_PROVIDER is None
            and not log.isEnabledFor(logging.DEBUG)
        ):
            return False  # (what the three questions below answer, read at once)
        if (
            _global_tracer_provider_set()
            or _global_meter_provider_set()
            or log.isEnabledFor(logging.DEBUG)  # `-vv`: the debug lines come from here
        ):
            self._live = True
        return self._live

    # -- store gauges ----------------------------------------------------------

    def watch_store(self, entries: Any, bytes_held: Any) -> None:
        """Report the store's size through the gauges (callables returning ints)."""
        self._store_callbacks = [entries, bytes_held]

    def _observe_entries(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._store_callbacks:
            yield Observation(self._store_callbacks[0]())

    def _observe_bytes(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._store_callbacks:
            yield Observation(self._store_callbacks[1]())

    def _observe_reads(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self.counts
        if counts.hits:
            yield Observation(counts.hits, {STATE: "fresh", REASON: "", SERVER_READ: False})
        for (state, reason, server_read), n in counts.reads.items():
            yield Observation(n, {STATE: state, REASON: reason, SERVER_READ: server_read})

    # -- spans -------------------------------------------------------------------

    def request(self, method: str, *, uri: str | None = None) -> AbstractContextManager[Span]:
        """A CLIENT span around one MCP request, with the duration metric."""
        if not self.live():
            return _QUIET
        return self._request(method, uri)

    @contextmanager
    def _request(self, method: str, uri: str | None) -> Iterator[Span]:
        attributes: dict[str, Any] = {
            MCP_METHOD_NAME: method,
            MCP_PROTOCOL_VERSION: self.protocol_version,
        }
        if uri is not None:
            attributes[MCP_RESOURCE_URI] = uri
        log.debug("request %s%s", method, "" if uri is None else f" {uri}")
        started = time.perf_counter()
        error: str | None = None
        with self._tracer.start_as_current_span(
            method,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                error = type(exc).__qualname__
                span.set_attribute(ERROR_TYPE, error)
                span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
                raise
            finally:
                if error is None:
                    error = _error_of(span)
                duration_attrs = {MCP_METHOD_NAME: method}
                if error is not None:
                    duration_attrs[ERROR_TYPE] = error
                self._duration.record(time.perf_counter() - started, duration_attrs)

    def tool_span(self, name: str) -> AbstractContextManager[Span]:
        """The CLIENT span of one ``FreshCache.call_tool``: ``tools/call {gen_ai.tool.name}``
        with the duration metric (MCP semantic conventions: a tool call's name is its
        target); the requests it sends annotate it."""
        if not self.live():
            return _QUIET
        return self._tool_span(name)

    @contextmanager
    def _tool_span(self, name: str) -> Iterator[Span]:
        attributes: dict[str, Any] = {
            MCP_METHOD_NAME: "tools/call",
            MCP_PROTOCOL_VERSION: self.protocol_version,
            GEN_AI_TOOL_NAME: name,
            GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
        }
        log.debug("request tools/call %s", name)
        started = time.perf_counter()
        with self._tracer.start_as_current_span(
            f"tools/call {name}", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            try:
                yield span
            finally:
                duration_attrs = {MCP_METHOD_NAME: "tools/call", GEN_AI_TOOL_NAME: name}
                error = _error_of(span)
                if error is not None:
                    duration_attrs[ERROR_TYPE] = error
                self._duration.record(time.perf_counter() - started, duration_attrs)

    def tool_result(self, span: Span, state: str, reason: str | None, is_error: bool) -> None:
        """What a tool call came to, on its span: ``error.type`` is ``tool_error`` for an
        ``isError`` answer, else the call's state (and reason) when it was not answered."""
        if not span.is_recording():
            return
        span.set_attribute("freshcache.tool_call.state", state)
        if state == "answered" and not is_error:
            return
        error = TOOL_ERROR if state == "answered" else (reason or state)
        span.set_attribute(ERROR_TYPE, error)
        span.set_status(Status(StatusCode.ERROR, error))

    def request_failed(self, span: Span, failure: RequestFailed) -> None:
        """Mark a request span as failed with freshcache's failure kind as ``error.type``."""
        log.debug("request failed: %s (%s)", failure.kind, failure.detail)
        span.set_attribute(ERROR_TYPE, failure.kind)
        if failure.code is not None:
            span.set_attribute(RPC_RESPONSE_STATUS_CODE, str(failure.code))
        span.set_status(Status(StatusCode.ERROR, failure.detail[:200] or failure.kind))

    def read_span(self, uri: str) -> AbstractContextManager[Span]:
        """An INTERNAL span around a read that was not a plain fresh hit."""
        if not self.live():
            return _QUIET
        return self._read_span(uri)

    @contextmanager
    def _read_span(self, uri: str) -> Iterator[Span]:
        with self._tracer.start_as_current_span(
            READ_SPAN, attributes={MCP_RESOURCE_URI: uri}
        ) as span:
            yield span

    def read_result(self, span: Span | None, result: ReadResult, now: float) -> None:
        """Record what a read handed out: on its span and in the reads counter."""
        key = (result.state, result.reason or "", result.server_read)
        self.counts.reads[key] = self.counts.reads.get(key, 0) + 1
        if span is None or not span.is_recording():
            return
        span.set_attribute(STATE, result.state)
        span.set_attribute(SERVER_READ, result.server_read)
        if result.reason is not None:
            span.set_attribute(REASON, result.reason)
        if result.version is not None:
            span.set_attribute(VERSION, result.version)
        if result.fetched_at is not None:
            span.set_attribute(
                AGE, max(0.0, now - result.fetched_at) if result.age is None else result.age
            )

    def traced_hit(self, result: ReadResult, now: float) -> None:
        """Note a plain fresh hit for its span (only with ``trace_hits``).

        A span per hit cost 80-130x the hit (issue 38), so the hits of one parent span
        and one result (a URI at one version) share a ``freshcache.read`` span, with
        ``freshcache.hits`` saying how many it stands for, from the first (its start,
        and its ``freshcache.age_s``) to the last (its end), on the cache's wall clock.
        `flush_hits` makes the spans within `HIT_SPAN_INTERVAL` of the first hit
        noted, at once when `MAX_PENDING_HITS` pairs wait, and when the cache closes.
        """
        parent = _current_span()
        batch = self._pending_hits.get((id(parent), id(result)))
        if batch is None:
            self._first_hit(parent, result, now)
        else:
            batch[0] += 1
            batch[2] = now

    def _first_hit(self, parent: Span, result: ReadResult, now: float) -> None:
        if len(self._pending_hits) >= MAX_PENDING_HITS:
            self.flush_hits()  # bounded (invariant 10)
        pending = self._pending_hits
        if not pending:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # another event loop (anyio's trio backend): at close
                pass
            else:
                self._hit_timer = loop.call_later(HIT_SPAN_INTERVAL, self.flush_hits)
        # The parent and the result are kept, so their ids name no other object meanwhile.
        pending[(id(parent), id(result))] = [1, now, now, parent, result]

    def flush_hits(self) -> None:
        """Make the spans the noted hits owe: one per parent span and result."""
        if self._hit_timer is not None:
            self._hit_timer.cancel()
            self._hit_timer = None
        pending, self._pending_hits = self._pending_hits, {}
        for count, first, last, parent, result in pending.values():
            attributes: dict[str, Any] = {
                MCP_RESOURCE_URI: result.uri,
                STATE: result.state,
                SERVER_READ: False,
                HITS: count,
            }
            if result.version is not None:
                attributes[VERSION] = result.version
            if result.fetched_at is not None:
                attributes[AGE] = max(0.0, first - result.fetched_at)
            # An explicit context: the timer runs in the first hit's context, not each one's.
            self._tracer.start_span(
                READ_SPAN,
                context=_ROOT if parent is _NO_SPAN else trace.set_span_in_context(parent, _ROOT),
                attributes=attributes,
                start_time=int(first * 1e9),
            ).end(end_time=int(last * 1e9))

    # -- events on the listen span and metrics ---------------------------------------

    def invalidated(self, event: Invalidation, now: float) -> None:
        if not self.live():  # (debug logging counts as live: the line below is kept)
            return
        log.debug(
            "invalidated %s: %s%s", event.uri, event.cause, "" if event.trusted else " (untrusted)"
        )
        self._invalidations.add(1, {CAUSE: event.cause, TRUSTED: event.trusted})
        if event.uri not in self._invalidated_at:
            if len(self._invalidated_at) >= _MAX_TIMED_INVALIDATIONS:
                # Bounded (invariant 10): forget the oldest pending measurement.
                del self._invalidated_at[next(iter(self._invalidated_at))]
            self._invalidated_at[event.uri] = now
        span = trace.get_current_span()
        if span.is_recording():
            attrs: dict[str, Any] = {
                MCP_RESOURCE_URI: event.uri,
                CAUSE: event.cause,
                TRUSTED: event.trusted,
            }
            if event.subscription_id is not None:
                attrs[SUBSCRIPTION_ID] = str(event.subscription_id)
            span.add_event("freshcache.invalidated", attrs)

    def fresh_again(self, uri: str, now: float) -> None:
        if not self.live():
            return
        since = self._invalidated_at.pop(uri, None)
        if since is not None:
            log.debug("fresh again: %s, %.1f ms after its invalidation", uri, 1000 * (now - since))
            # No URI as a metric attribute: unbounded cardinality (it is on the spans).
            self._to_fresh.record(max(0.0, now - since))

    def server_read(self, cause: str) -> None:
        log.debug("server read (%s)", cause)
        if not self.live():
            return
        self._server_reads.add(1, {CAUSE: cause})

    def relisten(self, outcome: str) -> None:
        log.debug("re-listen: %s", outcome)
        self._relistens.add(1, {"freshcache.outcome": outcome})

    @contextmanager
    def listen_span(self, uris: Iterable[str], attempt: int) -> Iterator[Span]:
        with self._tracer.start_as_current_span(
            "subscriptions/listen",
            kind=SpanKind.CLIENT,
            attributes={
                MCP_METHOD_NAME: "subscriptions/listen",
                MCP_PROTOCOL_VERSION: self.protocol_version,
                "freshcache.listen.attempt": attempt,
                "freshcache.listen.uris": sorted(uris),
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            started = time.perf_counter()
            try:
                yield span
            finally:
                self._duration.record(
                    time.perf_counter() - started, {MCP_METHOD_NAME: "subscriptions/listen"}
                )

    @staticmethod
    def event(span: Span, name: str, **attributes: Any) -> None:
        if span.is_recording():
            span.add_event(name, {k: v for k, v in attributes.items() if v is not None})


def _error_of(span: Span) -> str | None:
    attributes = getattr(span, "attributes", None)
    if attributes is None:
        return None
    value = attributes.get(ERROR_TYPE)
    return str(value) if value is not None else None


def _span_reader() -> Callable[[], Span]:
    """`trace.get_current_span`, cheaper: it is asked on every traced hit.

    The API's default runtime context keeps the context in a `ContextVar`; read from it
    in two C calls, the span is the one the API's call returns (five Python calls).
    With another runtime context (``OTEL_PYTHON_CONTEXT``) or API version, the API's call.
    """
    var = getattr(getattr(otel_context, "_RUNTIME_CONTEXT", None), "_current_context", None)
    key = getattr(trace_propagation, "_SPAN_KEY", None)
    if not isinstance(var, ContextVar) or not isinstance(key, str):
        return trace.get_current_span

    def current() -> Span:
        span: Span | None = var.get().get(key)
        return _NO_SPAN if span is None else span

    return current


_NO_SPAN = trace.INVALID_SPAN
_ROOT = Context()
"""The context of a span made with no parent (an empty one: never written to)."""
_current_span = _span_reader()

_MAX_TIMED_INVALIDATIONS = 4096
"""URIs whose invalidation-to-fresh time is being measured at once, at most."""


class _QuietSpan:
    """What `Telemetry.request` and `read_span` hand out when nothing records: the
    API's non-recording span, with no context attached (nothing could read it)."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return trace.INVALID_SPAN

    def __exit__(self, *exc_info: object) -> None:
        return None


_QUIET = _QuietSpan()


def _global_tracer_provider_set() -> bool:
    """Whether a tracer provider was installed globally (not the API's proxy).

    Asked on every server read while nothing records, so it reads the API's module
    global (`trace.get_tracer_provider` looks the environment up on every call); an
    environment-configured provider is loaded into it by the first `get_tracer`,
    which `Telemetry` makes at construction. Without that global (another API
    version), the public call answers.
    """
    provider = getattr(trace, "_TRACER_PROVIDER", _ASK)
    if provider is None:
        return False
    if provider is _ASK:
        provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


_ASK = object()

_GLOBALS_READABLE = hasattr(trace, "_TRACER_PROVIDER") and hasattr(_metrics_api, "_METER_PROVIDER")
"""Whether this API version keeps its global providers where `live` reads them first
(both ``None``: nothing installed); else it asks the public calls only."""


def _global_meter_provider_set() -> bool:
    """Whether an SDK meter provider was installed globally (not the API's proxy);
    read like `_global_tracer_provider_set`."""
    provider = getattr(_metrics_api, "_METER_PROVIDER", _ASK)
    if provider is None:
        return False
    if provider is _ASK:
        provider = metrics.get_meter_provider()
    return not isinstance(provider, metrics.NoOpMeterProvider) and (
        type(provider).__name__ != "_ProxyMeterProvider"
    )
