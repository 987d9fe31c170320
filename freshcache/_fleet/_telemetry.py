"""The fleet's metrics and span events: fan-out latency, lease changes, fenced-off writes.

Metrics come from the cache's meter provider. Span events go on the span current where
they happen (a read's span for a fenced-off fill) or else on this worker's listen span
(`subscriptions/listen`, the span the cache opens around each stream): the channel,
the lease and the registry run in background tasks that have no span of their own.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span

FANOUT = "freshcache.fleet.fanout_latency"
LEASE_CHANGES = "freshcache.fleet.lease_changes"
FENCED_WRITES = "freshcache.fleet.fenced_writes"
READS = "freshcache.fleet.reads"
"""A fleet worker's reads, by where the text came from (``source``: ``store``, ``server``)."""


class FleetTelemetry:
    def __init__(self, worker_id: str, meter_provider: metrics.MeterProvider | None) -> None:
        self.worker_id = worker_id
        self.listen_span: Span = trace.INVALID_SPAN
        """The span of the stream this worker has open (set by `FleetWorker.listen`)."""
        meter = metrics.get_meter("freshcache", meter_provider=meter_provider)
        self._kinds: dict[str, dict[str, str]] = {}
        """The fan-out metric's attributes, one per message kind."""
        self._fanout = meter.create_histogram(
            FANOUT,
            unit="s",
            description="From a change's publication to this worker dropping its copy",
        )
        self._lease = meter.create_counter(
            LEASE_CHANGES, unit="{change}", description="Listener lease changes seen"
        )
        self._fenced = meter.create_counter(
            FENCED_WRITES,
            unit="{write}",
            description="Fills refused because the URI changed while they were read",
        )

        self._reads = meter.create_counter(
            READS,
            unit="{read}",
            description="Reads through the fleet, by source: the shared store or the server",
        )
        self._sources = {name: {"source": name} for name in ("store", "server")}

    def answered(self, source: str) -> None:
        """A read through the fleet was answered from ``source`` (``store``, ``server``)."""
        self._reads.add(1, self._sources[source])

    def _recording_span(self) -> Span | None:
        span = trace.get_current_span()
        if not span.is_recording():
            span = self.listen_span
        return span if span.is_recording() else None

    def event(self, name: str, **attributes: Any) -> None:
        span = self._recording_span()
        if span is not None:
            attributes["freshcache.fleet.worker"] = self.worker_id
            span.add_event(name, {k: v for k, v in attributes.items() if v is not None})

    def fanned_out(self, uri: str, kind: str, latency: float) -> None:
        """Once per channel message: its attributes are built only for a span that
        records (the metric's are made once per kind)."""
        attributes = self._kinds.get(kind)
        if attributes is None:
            attributes = self._kinds[kind] = {"kind": kind}
        self._fanout.record(latency, attributes)
        span = self._recording_span()
        if span is not None:
            span.add_event(
                "freshcache.fleet.fanout",
                {
                    "mcp.resource.uri": uri,
                    "kind": kind,
                    "latency_s": latency,
                    "freshcache.fleet.worker": self.worker_id,
                },
            )

    def lease_changed(self, holder: str | None, mine: bool) -> None:
        self._lease.add(1, {"holder": "self" if mine else ("none" if holder is None else "other")})
        self.event("freshcache.fleet.lease", holder=holder or "", mine=mine)

    def fenced_off(self, uri: str, generation: str) -> None:
        self._fenced.add(1)
        self.event(
            "freshcache.fleet.fenced_write", **{"mcp.resource.uri": uri, "generation": generation}
        )
