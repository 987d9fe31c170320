"""In-memory OpenTelemetry SDK pieces for the telemetry tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Recorder:
    """A tracer provider and a meter provider that keep everything in memory."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    spans_exporter: InMemorySpanExporter
    metrics_reader: InMemoryMetricReader

    @classmethod
    def make(cls) -> Recorder:
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        reader = InMemoryMetricReader()
        return cls(tracer_provider, MeterProvider(metric_readers=[reader]), exporter, reader)

    def kwargs(self) -> dict[str, Any]:
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.spans_exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """metric name -> [(attributes, value)] (value: sum, or histogram count)."""
        data = self.metrics_reader.get_metrics_data()
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = getattr(point, "count", None)
                        out.setdefault(metric.name, []).append(
                            (dict(point.attributes or {}), value)
                        )
        return out

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
